//! The capsim command line: parse, call the library, print, map errors to an exit code.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("capsim: error: {e}");
            ExitCode::from(2)
        }
    }
}
