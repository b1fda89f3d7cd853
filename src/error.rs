//! Errors at the library's boundaries. Every error that comes from user input names where it came from
//! (file, line or key) and which field was wrong, so the CLI can print it as is and exit non-zero.

use std::fmt;

/// Where a bad value was found: a file (or "<builtin>" / "--flag"), optionally a line, and a field or key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub source: String,
    pub line: Option<usize>,
    pub field: Option<String>,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.source)?;
        if let Some(line) = self.line {
            write!(f, ", line {line}")?;
        }
        if let Some(field) = &self.field {
            write!(f, ", field `{field}`")?;
        }
        Ok(())
    }
}

#[derive(Debug)]
pub enum Error {
    /// Malformed or out-of-range input, with its location.
    Input { at: Location, msg: String },
    /// A file could not be read or written.
    Io { path: String, err: std::io::Error },
    /// A name that no catalog knows (GPU, model, profile).
    Unknown { kind: &'static str, name: String, known: Vec<String> },
    /// A request that is well-formed but cannot be answered (e.g. a model that does not fit the GPU).
    Infeasible(String),
    /// The run completed, but no request was measured: its results (printed) hold no latencies.
    NothingMeasured(String),
    /// The question was asked well and has no answer (no load meets the SLO); the output is printed.
    NoAnswer(String),
}

impl Error {
    /// The process exit code the CLI maps this error to: 3 for a run that measured nothing (its
    /// output is printed), 2 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::NothingMeasured(_) | Error::NoAnswer(_) => 3,
            _ => 2,
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn input(source: impl Into<String>, line: Option<usize>, field: Option<&str>, msg: impl Into<String>) -> Self {
        Error::Input { at: Location { source: source.into(), line, field: field.map(str::to_string) }, msg: msg.into() }
    }
    /// A CSV row the reader could not take, at `line` of `source` (the caller's count: the csv
    /// crate's own message names a record index and a line of its own, off by the header, so two
    /// line numbers reached the user). A row of the wrong width says both widths; a value that does
    /// not deserialize names its column from `headers`.
    pub fn csv_row(source: &str, line: usize, headers: Option<&csv::StringRecord>, err: &csv::Error) -> Self {
        let (field, msg) = match err.kind() {
            csv::ErrorKind::UnequalLengths { expected_len, len, .. } => {
                (None, format!("malformed row: {len} fields where the header has {expected_len}"))
            }
            csv::ErrorKind::Deserialize { err, .. } => (
                err.field().and_then(|i| headers.and_then(|h| h.get(i as usize))).map(str::to_string),
                format!("malformed row: {}", err.kind()),
            ),
            csv::ErrorKind::Utf8 { err, .. } => (None, format!("malformed row: not UTF-8 ({err})")),
            _ => (None, format!("malformed row: {err}")),
        };
        Error::input(source, Some(line), field.as_deref(), msg)
    }
    pub fn flag(flag: &str, msg: impl Into<String>) -> Self {
        Error::input("command line", None, Some(flag), msg)
    }
    /// This error with its field named below `prefix`: a value read from a nested object by a
    /// reader that sees only that object (`decode.max_batch_size` as `points.<p>.decode.max_batch_size`).
    pub fn under(self, prefix: &str) -> Self {
        match self {
            Error::Input { mut at, msg } => {
                at.field = Some(match at.field {
                    Some(f) => format!("{prefix}.{f}"),
                    None => prefix.to_string(),
                });
                Error::Input { at, msg }
            }
            other => other,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Input { at, msg } => write!(f, "{at}: {msg}"),
            Error::Io { path, err } => write!(f, "{path}: {err}"),
            Error::Unknown { kind, name, known } => {
                write!(f, "unknown {kind} `{name}`; known: {}", known.join(", "))
            }
            Error::Infeasible(msg) => write!(f, "{msg}"),
            Error::NothingMeasured(msg) | Error::NoAnswer(msg) => write!(f, "{msg}"),
        }
    }
}

impl std::error::Error for Error {}

/// Read a file with the path in the error.
/// A text file's contents, without the UTF-8 byte-order mark some editors and Windows tools write
/// first (U+FEFF carries no content; JSON, TOML and CSV readers would take it for a first character).
pub fn read_file(path: &std::path::Path) -> Result<String> {
    let text = std::fs::read_to_string(path).map_err(|err| Error::Io { path: path.display().to_string(), err })?;
    Ok(match text.strip_prefix('\u{feff}') {
        Some(rest) => rest.to_string(),
        None => text,
    })
}

/// Check that a float is finite and within [lo, hi]; the error names the field.
pub fn check_range(source: &str, field: &str, v: f64, lo: f64, hi: f64) -> Result<f64> {
    if !v.is_finite() {
        return Err(Error::input(source, None, Some(field), format!("must be a finite number, got {v}")));
    }
    if v < lo || v > hi {
        return Err(Error::input(
            source,
            None,
            Some(field),
            format!("must be in [{}, {}], got {}", fmt_num(lo), fmt_num(hi), fmt_num(v)),
        ));
    }
    Ok(v)
}

/// Turn a toml parse error into an Input error with the line of the span.
pub fn toml_error(source: &str, text: &str, err: toml::de::Error) -> Error {
    let line = err.span().map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
    Error::input(source, line, None, err.message().to_string())
}

/// A number as a message shows it: plain where that is short, scientific for the huge and the tiny
/// (a user's 1e300 stays 1e300, not three hundred digits).
pub fn fmt_num(x: f64) -> String {
    if x != 0.0 && x.is_finite() && (x.abs() >= 1e9 || x.abs() < 1e-4) {
        format!("{x:e}")
    } else {
        format!("{x}")
    }
}
