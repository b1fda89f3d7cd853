//! `capsim._capsim`: the extension module under the Python package `capsim` (python/capsim). It runs
//! the command line's commands through `capsim::cli::embed` (the flags built by the CLI's own clap
//! definitions, the output the CLI would print returned as text), on a thread of its own so that
//! Python keeps its interpreter lock and can draw the progress; every wait releases the lock.
//! Errors come back as JSON objects (kind, message, file, line, field, exit code) that the Python
//! package raises as `capsim.Error` subclasses.

use capsim::cli::embed::{self, Captured, Progress};
use capsim::error::Error;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use serde_json::{json, Map, Value};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// An error as the Python package reads it.
fn error_json(e: &Error) -> String {
    let (kind, source, line, field) = match e {
        Error::Input { at, .. } => ("input", Some(at.source.clone()), at.line, at.field.clone()),
        Error::Io { path, .. } => ("io", Some(path.clone()), None, None),
        Error::Unknown { kind, .. } => ("unknown", None, None, Some(kind.to_string())),
        Error::Infeasible(_) => ("infeasible", None, None, None),
        Error::NothingMeasured(_) => ("nothing_measured", None, None, None),
        Error::NoAnswer(_) => ("no_answer", None, None, None),
    };
    json!({
        "kind": kind, "message": e.to_string(), "file": source, "line": line, "field": field,
        "exit_code": e.exit_code(),
    })
    .to_string()
}

/// A command's flags: a JSON object from Python.
fn keys(keys_json: &str) -> PyResult<Map<String, Value>> {
    match serde_json::from_str(keys_json) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(PyValueError::new_err("the flags must be a JSON object")),
        Err(e) => Err(PyValueError::new_err(format!("the flags are not JSON: {e}"))),
    }
}

/// A command running on its own thread.
#[pyclass(module = "capsim._capsim")]
struct Job {
    progress: Progress,
    done: Arc<(Mutex<bool>, Condvar)>,
    handle: Mutex<Option<JoinHandle<Captured>>>,
}

#[pymethods]
impl Job {
    /// Wait up to `timeout_s` seconds for the command to end, without the interpreter lock; true
    /// when it has ended.
    fn wait(&self, py: Python<'_>, timeout_s: f64) -> bool {
        let done = Arc::clone(&self.done);
        py.detach(move || {
            let (lock, cvar) = &*done;
            let guard = lock.lock().unwrap_or_else(|p| p.into_inner());
            // NaN waits not at all (from_secs_f64 would panic on it).
            let timeout = Duration::from_secs_f64(if timeout_s > 0.0 { timeout_s.min(3600.0) } else { 0.0 });
            let (guard, _) =
                cvar.wait_timeout_while(guard, timeout, |ended| !*ended).unwrap_or_else(|p| p.into_inner());
            *guard
        })
    }

    /// The position and length of the command's progress bar (length None for a count with no
    /// total), or None before it opens one.
    fn progress(&self) -> Option<(u64, Option<u64>)> {
        self.progress.get()
    }

    /// Wait for the end (without the interpreter lock) and return what the command printed and its
    /// error as JSON (None when it succeeded). Once only.
    fn result(&self, py: Python<'_>) -> PyResult<(String, Option<String>)> {
        let handle = self.handle.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(handle) = handle else {
            return Err(PyRuntimeError::new_err("this command's result was already taken"));
        };
        match py.detach(move || handle.join()) {
            Ok(c) => Ok((c.stdout, c.result.err().map(|e| error_json(&e)))),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Err(PyRuntimeError::new_err(format!("capsim panicked (a bug, please report it): {msg}")))
            }
        }
    }
}

/// Start `capsim COMMAND` with the flags of a JSON object (keys as the flags, `input_len` or
/// `input-len`) on a thread of its own.
#[pyfunction]
fn start(command: String, keys_json: &str) -> PyResult<Job> {
    let obj = keys(keys_json)?;
    let progress = Progress::default();
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    let (p, d) = (progress.clone(), Arc::clone(&done));
    let handle = std::thread::Builder::new()
        .name(format!("capsim {command}"))
        // As much stack as a main thread has.
        .stack_size(8 << 20)
        .spawn(move || {
            struct Signal(Arc<(Mutex<bool>, Condvar)>);
            // Signalled on every way out, a panic included.
            impl Drop for Signal {
                fn drop(&mut self) {
                    let (lock, cvar) = &*self.0;
                    *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
                    cvar.notify_all();
                }
            }
            let _signal = Signal(d);
            embed::run_keys(&command, &obj, &p)
        })
        .map_err(|e| PyRuntimeError::new_err(format!("could not start a thread: {e}")))?;
    Ok(Job { progress, done, handle: Mutex::new(Some(handle)) })
}

/// The `capsim` command: run the arguments (the program's name first) as the binary does, printing,
/// and return the exit code. Runs without the interpreter lock.
#[pyfunction]
fn main(py: Python<'_>, argv: Vec<String>) -> u8 {
    py.detach(move || capsim::cli::exit_code(capsim::cli::run_from(argv)))
}

/// The flags of `capsim COMMAND` (JSON: key, flag, kind, defaults, values, required, heading, help).
#[pyfunction]
fn flags(command: &str) -> PyResult<String> {
    embed::flags(command).map(|v| v.to_string()).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The commands with their descriptions (JSON).
#[pyfunction]
fn commands() -> String {
    embed::commands().to_string()
}

/// The keys of the deployment and workload flag groups (JSON).
#[pyfunction]
fn groups() -> String {
    embed::groups().to_string()
}

/// Resolve a deployment's flags (JSON object): (the resolved deployment as JSON, None) or (None, the
/// error as JSON).
#[pyfunction]
fn resolve_deployment(py: Python<'_>, keys_json: &str) -> PyResult<(Option<String>, Option<String>)> {
    let obj = keys(keys_json)?;
    Ok(match py.detach(move || embed::resolve_deployment(&obj)) {
        Ok(v) => (Some(v.to_string()), None),
        Err(e) => (None, Some(error_json(&e))),
    })
}

/// Check a workload's flags (JSON object): None, or the error as JSON.
#[pyfunction]
fn check_workload(py: Python<'_>, keys_json: &str) -> PyResult<Option<String>> {
    let obj = keys(keys_json)?;
    Ok(py.detach(move || embed::check_workload(&obj)).err().map(|e| error_json(&e)))
}

/// capsim's version with the commit it was built from.
#[pyfunction]
fn version() -> String {
    capsim::cli::version()
}

#[pymodule]
fn _capsim(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Job>()?;
    m.add_function(wrap_pyfunction!(start, m)?)?;
    m.add_function(wrap_pyfunction!(main, m)?)?;
    m.add_function(wrap_pyfunction!(flags, m)?)?;
    m.add_function(wrap_pyfunction!(commands, m)?)?;
    m.add_function(wrap_pyfunction!(groups, m)?)?;
    m.add_function(wrap_pyfunction!(resolve_deployment, m)?)?;
    m.add_function(wrap_pyfunction!(check_workload, m)?)?;
    m.add_function(wrap_pyfunction!(version, m)?)?;
    Ok(())
}
