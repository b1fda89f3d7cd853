//! JSON as the benchmark tools write it: Python's `json` module writes bare `Infinity`, `-Infinity`
//! and `NaN` (SGLang's unlimited request rate is `Infinity`), which strict JSON parsers reject. They
//! are rewritten, outside strings, to the strings "inf", "-inf" and "nan" before parsing; readers
//! accept those where a number is expected ([`num`]). A file is one JSON document (pretty-printed or
//! not) or JSON Lines, one document a line.

use crate::error::{Error, Result};
use serde_json::Value;

/// Parse one JSON document, accepting Python's bare non-finite numbers.
pub fn parse_json_lenient(text: &str) -> std::result::Result<Value, serde_json::Error> {
    let mut out = String::with_capacity(text.len() + 16);
    let mut in_str = false;
    let mut escaped = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if in_str {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if c == '"' {
            in_str = true;
        } else if let Some((word, repl)) = [("-Infinity", "\"-inf\""), ("Infinity", "\"inf\""), ("NaN", "\"nan\"")]
            .iter()
            .find(|(w, _)| rest.starts_with(w))
        {
            out.push_str(repl);
            rest = &rest[word.len()..];
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    reject_duplicate_keys(&out)?;
    serde_json::from_str(&out)
}

/// An error at the first object key that appears twice in one object: serde_json would keep the last
/// one silently, and a file that says two things is refused rather than read as one of them.
pub fn reject_duplicate_keys(text: &str) -> std::result::Result<(), serde_json::Error> {
    serde_json::from_str::<NoDuplicates>(text).map(|_| ())
}

/// Walks a document and fails on a repeated key (a Deserialize that keeps nothing).
struct NoDuplicates;

impl<'de> serde::Deserialize<'de> for NoDuplicates {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        d.deserialize_any(NoDuplicatesVisitor)
    }
}

struct NoDuplicatesVisitor;

impl<'de> serde::de::Visitor<'de> for NoDuplicatesVisitor {
    type Value = NoDuplicates;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> std::result::Result<NoDuplicates, A::Error> {
        let mut seen = std::collections::HashSet::new();
        while let Some(k) = m.next_key::<String>()? {
            if !seen.insert(k.clone()) {
                return Err(serde::de::Error::custom(format!("key `{k}` appears twice in one object")));
            }
            m.next_value::<NoDuplicates>()?;
        }
        Ok(NoDuplicates)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut s: A) -> std::result::Result<NoDuplicates, A::Error> {
        while s.next_element::<NoDuplicates>()?.is_some() {}
        Ok(NoDuplicates)
    }
    fn visit_bool<E>(self, _: bool) -> std::result::Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_i64<E>(self, _: i64) -> std::result::Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_u64<E>(self, _: u64) -> std::result::Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_f64<E>(self, _: f64) -> std::result::Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_str<E>(self, _: &str) -> std::result::Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
    fn visit_unit<E>(self) -> std::result::Result<NoDuplicates, E> {
        Ok(NoDuplicates)
    }
}

/// The documents of a file with the line each starts on: the whole text if it parses as one document,
/// else one per non-empty line.
pub fn parse_documents(src: &str, text: &str) -> Result<Vec<(usize, Value)>> {
    if text.trim().is_empty() {
        return Err(Error::input(src, None, None, "the file is empty"));
    }
    let whole_err = match parse_json_lenient(text) {
        Ok(v) => return Ok(vec![(1, v)]),
        Err(e) => e,
    };
    let mut docs = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match parse_json_lenient(line) {
            Ok(v) => docs.push((i + 1, v)),
            Err(e) => {
                // Neither one document nor JSON Lines: report the error of the reading that got further.
                let (line_no, err) = if docs.is_empty() && whole_err.line() > 1 {
                    (whole_err.line(), whole_err.to_string())
                } else {
                    (i + 1, e.to_string())
                };
                return Err(Error::input(src, Some(line_no), None, format!("malformed JSON: {err}")));
            }
        }
    }
    Ok(docs)
}

/// A number where the tools may write one: a JSON number, or the strings "inf"/"Infinity"/"nan".
pub fn num(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => match s.to_ascii_lowercase().as_str() {
            "inf" | "infinity" | "+inf" => Some(f64::INFINITY),
            "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
            "nan" => Some(f64::NAN),
            t => t.parse().ok(),
        },
        _ => None,
    }
}

/// 2^53: above it a JSON number no longer holds every whole number.
pub const MAX_EXACT: u64 = 1 << 53;

/// `x` as a count if it is a whole number in 0..=max.
pub fn whole(x: f64, max: u64) -> Option<u64> {
    (x.is_finite() && x >= 0.0 && x.fract() == 0.0 && x <= max as f64).then_some(x as u64)
}

/// The error for a value that is not a count in 0..=max.
pub fn count_error(x: f64, max: u64) -> String {
    format!("must be a whole number from 0 to {max}, got {}", crate::error::fmt_num(x))
}

/// A token count of one request (a length): a whole number from `min` to capsim's bound on a
/// request's tokens ([`crate::workload::MAX_REQUEST_TOKENS`]); the error names `field`.
pub fn tokens(d: &Doc, field: &str, x: f64, min: u32) -> Result<u32> {
    let max = crate::workload::MAX_REQUEST_TOKENS;
    match whole(x, max as u64) {
        Some(n) if n >= min as u64 => Ok(n as u32),
        _ => Err(d.err(
            field,
            format!("must be a whole number of tokens from {min} to {max}, got {}", crate::error::fmt_num(x)),
        )),
    }
}

/// Field access with errors that name the file, the line and the key.
pub struct Doc<'a> {
    pub src: &'a str,
    pub line: usize,
    pub v: &'a Value,
}

impl<'a> Doc<'a> {
    pub fn err(&self, field: &str, msg: impl Into<String>) -> Error {
        Error::input(self.src, Some(self.line), Some(field), msg)
    }
    /// Follow a dotted path.
    pub fn get(&self, path: &str) -> Option<&'a Value> {
        path.split('.').try_fold(self.v, |v, k| v.get(k)).filter(|v| !v.is_null())
    }
    pub fn opt_num(&self, path: &str) -> Result<Option<f64>> {
        match self.get(path) {
            None => Ok(None),
            Some(v) => num(v).map(Some).ok_or_else(|| self.err(path, format!("not a number: {v}"))),
        }
    }
    pub fn num(&self, path: &str) -> Result<f64> {
        self.opt_num(path)?.ok_or_else(|| self.err(path, "missing"))
    }
    pub fn opt_str(&self, path: &str) -> Option<String> {
        self.get(path).and_then(Value::as_str).map(str::to_string)
    }
    /// A string, refusing another type (`opt_str` reads a non-string as absent).
    pub fn opt_string(&self, path: &str) -> Result<Option<String>> {
        match self.get(path) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(v) => Err(self.err(path, format!("must be a string, got {v}"))),
        }
    }
    pub fn opt_bool(&self, path: &str) -> Result<Option<bool>> {
        match self.get(path) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(self.err(path, format!("must be true or false, got {v}"))),
        }
    }
    /// A non-negative whole count up to 2^53 (the whole numbers a JSON number holds exactly).
    pub fn count(&self, path: &str) -> Result<Option<u64>> {
        self.count_at_most(path, MAX_EXACT)
    }
    /// A non-negative whole count at most `max`: never floored, truncated or saturated, so
    /// `streams = 4294967300` or `request_count = 1e300` is an error naming the key, not 4 or u64::MAX.
    pub fn count_at_most(&self, path: &str, max: u64) -> Result<Option<u64>> {
        match self.opt_num(path)? {
            None => Ok(None),
            Some(x) => whole(x, max).map(Some).ok_or_else(|| self.err(path, count_error(x, max))),
        }
    }
    /// A count of clients (concurrency, streams, a cap), within u32.
    pub fn clients(&self, path: &str) -> Result<Option<u32>> {
        Ok(self.count_at_most(path, u32::MAX as u64)?.map(|n| n as u32))
    }
    /// A count of requests, within capsim's bound on a replay ([`crate::workload::MAX_REQUESTS`]).
    pub fn requests(&self, path: &str) -> Result<Option<u64>> {
        self.count_at_most(path, crate::workload::MAX_REQUESTS)
    }
    /// An array of numbers (None entries where the tool wrote null, as for failed requests).
    pub fn num_array(&self, path: &str) -> Result<Option<Vec<Option<f64>>>> {
        match self.get(path) {
            None => Ok(None),
            Some(Value::Array(xs)) => xs
                .iter()
                .enumerate()
                .map(|(i, x)| match x {
                    Value::Null => Ok(None),
                    x => {
                        num(x).map(Some).ok_or_else(|| self.err(&format!("{path}[{i}]"), format!("not a number: {x}")))
                    }
                })
                .collect::<Result<Vec<_>>>()
                .map(Some),
            Some(v) => Err(self.err(path, format!("must be an array, got {v}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_non_finite_numbers_outside_strings() {
        let v =
            parse_json_lenient(r#"{"request_rate": Infinity, "x": -Infinity, "y": NaN, "s": "Infinity NaN"}"#).unwrap();
        assert_eq!(num(&v["request_rate"]), Some(f64::INFINITY));
        assert_eq!(num(&v["x"]), Some(f64::NEG_INFINITY));
        assert!(num(&v["y"]).unwrap().is_nan());
        assert_eq!(v["s"], "Infinity NaN");
    }

    #[test]
    fn jsonl_and_pretty_printed() {
        let docs = parse_documents("f", "{\"a\": 1}\n\n{\"a\": 2}\n").unwrap();
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[1].0, 3);
        let docs = parse_documents("f", "{\n  \"a\": 1\n}\n").unwrap();
        assert_eq!(docs.len(), 1);
        let err = parse_documents("f", "{\"a\": 1}\n{\"a\": \n").unwrap_err().to_string();
        assert!(err.contains("line 2"), "{err}");
    }
}
