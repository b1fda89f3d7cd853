//! The capsim command line: parse, call the library, print, map errors to an exit code.

// Command output goes through the CLI's `outln!`, which returns a failed write (a full disk) as an
// error; `println!` would panic.
#![warn(clippy::print_stdout)]

use capsim::cli;
use std::process::ExitCode;

fn main() -> ExitCode {
    // `capsim ... | head` closes the pipe early: end quietly as other Unix tools do (the default
    // SIGPIPE action), instead of Rust's ignored SIGPIPE turning the next print into a panic.
    #[cfg(unix)]
    // SAFETY: called first in main, before any thread exists; restores the default disposition.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    ExitCode::from(cli::exit_code(cli::run()))
}
