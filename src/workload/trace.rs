//! Reading request traces to replay: a CSV or JSONL of arrival time, input tokens and output tokens.
//! Columns are found by header name, so the public formats load as they are (FACTS.md):
//! - capsim's own: `arrival_s`, `input_tokens`, `output_tokens`;
//! - Azure LLM inference traces 2023/2024: `TIMESTAMP` (date-time), `ContextTokens`, `GeneratedTokens`;
//! - BurstGPT: `Timestamp` (s), `Request tokens`, `Response tokens` (0 marks a failure: skipped);
//! - Mooncake JSONL: `timestamp` (ms), `input_length`, `output_length`, `hash_ids` (512-token blocks).
//!
//! A `session_id` (or `session`, `conversation_id`, `chat_id`) column makes requests of one session
//! share content: each extends the session's previous request (its prompt and reply), as a chat turn
//! re-sends its history.
//!
//! Arrival times are shifted so the first request arrives at 0 and sorted (Azure files are not
//! guaranteed sorted); the order of equal times is the file's.

use super::TraceRecord;
use crate::error::{read_file, Error, Result};
use std::path::Path;

/// What was read, and what was skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub records: Vec<TraceRecord>,
    pub skipped_failures: usize,
    pub format: &'static str,
}

const TIME_KEYS: &[(&str, f64)] = &[
    ("arrival_s", 1.0),
    ("timestamp_s", 1.0),
    ("arrival_time", 1.0),
    ("Timestamp", 1.0),
    ("TIMESTAMP", 1.0),
    ("timestamp", 1e-3),
];
/// The seconds per unit of a time key's numbers (1 when the key is not a time key).
fn scale_of(key: &str) -> f64 {
    TIME_KEYS.iter().find(|(k, _)| *k == key).map_or(1.0, |(_, s)| *s)
}
const INPUT_KEYS: &[&str] = &["input_tokens", "ContextTokens", "Request tokens", "input_length", "prompt_tokens"];
const OUTPUT_KEYS: &[&str] =
    &["output_tokens", "GeneratedTokens", "Response tokens", "output_length", "completion_tokens"];

pub fn read_trace(path: &Path) -> Result<Trace> {
    let text = read_file(path)?;
    let src = path.display().to_string();
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
    if ext == "jsonl" || ext == "json" {
        parse_jsonl(&src, &text)
    } else {
        parse_csv(&src, &text)
    }
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// Seconds from a number, or from "YYYY-MM-DD HH:MM:SS[.fffffff][+00:00]" (Azure traces).
fn parse_time(s: &str, scale: f64) -> Option<f64> {
    let s = s.trim();
    if let Ok(v) = s.parse::<f64>() {
        return Some(v * scale);
    }
    let s = s.trim_end_matches('Z');
    let s = s.strip_suffix("+00:00").unwrap_or(s);
    let (date, time) = s.split_once([' ', 'T'])?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, mo, da) = (d.next()??, d.next()??, d.next()??);
    let mut t = time.split(':');
    let h: f64 = t.next()?.parse().ok()?;
    let mi: f64 = t.next()?.parse().ok()?;
    let sec: f64 = t.next()?.parse().ok()?;
    // A calendar date and a clock time, or nothing: 2023-13-45 99:99:99 is not a time, and a year far
    // outside the traces' era would wrap the day count.
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_days = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    let valid = (1970..=2200).contains(&y)
        && (1..=12).contains(&mo)
        && (1..=month_days[(mo.clamp(1, 12) - 1) as usize]).contains(&da)
        && (0.0..24.0).contains(&h)
        && (0.0..60.0).contains(&mi)
        && (0.0..61.0).contains(&sec)
        && t.next().is_none()
        && d.next().is_none();
    if !valid {
        return None;
    }
    Some(days_from_civil(y, mo, da) as f64 * 86400.0 + h * 3600.0 + mi * 60.0 + sec)
}

fn tokens(src: &str, line: usize, field: &str, s: &str) -> Result<u32> {
    let t = s.trim();
    let v: f64 = t.parse().map_err(|_| Error::input(src, Some(line), Some(field), format!("not a number: `{t}`")))?;
    if !v.is_finite() || v < 0.0 || v.fract() != 0.0 {
        return Err(Error::input(
            src,
            Some(line),
            Some(field),
            format!("must be a non-negative whole number of tokens, got `{t}`"),
        ));
    }
    // The bound every workload's lengths have: above it no model's context holds the request, and
    // a prompt plus its output would no longer count in 32 bits.
    if v > super::MAX_REQUEST_TOKENS as f64 {
        return Err(Error::input(
            src,
            Some(line),
            Some(field),
            format!("{t} tokens exceed capsim's bound of {} tokens per request", super::MAX_REQUEST_TOKENS),
        ));
    }
    Ok(v as u32)
}

/// One row as read: time (s, not yet shifted), input, output, hash ids, session.
type RawRow = (f64, u32, u32, Vec<u64>, Option<u64>);

/// Keys of a session (conversation) id: requests of one session extend its previous request.
const SESSION_KEYS: &[&str] = &["session_id", "session", "conversation_id", "chat_id"];

/// A session id as a number (FNV-1a of its text: ids may be names).
fn session_of(text: &str) -> Option<u64> {
    let t = text.trim();
    if t.is_empty() {
        return None;
    }
    Some(t.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01b3)))
}

fn finish(mut raw: Vec<RawRow>, skipped: usize, format: &'static str, src: &str) -> Result<Trace> {
    if raw.is_empty() {
        return Err(Error::input(src, None, None, "the trace holds no usable requests"));
    }
    raw.sort_by(|a, b| a.0.total_cmp(&b.0));
    let t0 = raw[0].0;
    Ok(Trace {
        records: raw
            .into_iter()
            .map(|(t, i, o, hash_ids, session)| TraceRecord {
                arrival_s: t - t0,
                input_tokens: i,
                output_tokens: o,
                hash_ids,
                session,
            })
            .collect(),
        skipped_failures: skipped,
        format,
    })
}

pub fn parse_csv(src: &str, text: &str) -> Result<Trace> {
    let mut rdr = csv::ReaderBuilder::new().trim(csv::Trim::All).from_reader(text.as_bytes());
    let headers = rdr.headers().map_err(|e| Error::input(src, Some(1), None, format!("bad header: {e}")))?.clone();
    // A column named twice would be read from its first occurrence only: refuse instead of choosing.
    for (i, h) in headers.iter().enumerate() {
        if headers.iter().take(i).any(|g| g == h) {
            return Err(Error::input(src, Some(1), Some(h), "column named twice"));
        }
    }
    let find = |keys: &[&'static str]| -> Option<(usize, &'static str)> {
        keys.iter().find_map(|k| headers.iter().position(|h| h == *k).map(|i| (i, *k)))
    };
    let (ti, tkey, tscale) = TIME_KEYS
        .iter()
        .find_map(|(k, sc)| headers.iter().position(|h| h == *k).map(|i| (i, *k, *sc)))
        .ok_or_else(|| {
            Error::input(
                src,
                Some(1),
                Some("arrival_s"),
                "no arrival-time column (arrival_s, TIMESTAMP, Timestamp, timestamp)",
            )
        })?;
    // `timestamp` is milliseconds in CSV as in JSONL (Mooncake's unit); seconds are `arrival_s` or
    // `timestamp_s`. One name, one unit, whatever the file format.
    let (ii, ikey) = find(INPUT_KEYS).ok_or_else(|| {
        Error::input(
            src,
            Some(1),
            Some("input_tokens"),
            "no input-token column (input_tokens, ContextTokens, Request tokens)",
        )
    })?;
    let (oi, okey) = find(OUTPUT_KEYS).ok_or_else(|| {
        Error::input(
            src,
            Some(1),
            Some("output_tokens"),
            "no output-token column (output_tokens, GeneratedTokens, Response tokens)",
        )
    })?;
    let si = headers.iter().position(|h| SESSION_KEYS.contains(&h));
    let format = match tkey {
        "TIMESTAMP" => "azure",
        "Timestamp" => "burstgpt",
        _ => "capsim-csv",
    };
    let mut raw = Vec::new();
    let mut skipped = 0;
    for rec in rdr.records() {
        let rec =
            rec.map_err(|e| Error::csv_row(src, e.position().map_or(0, |p| p.line() as usize), Some(&headers), &e))?;
        let line = rec.position().map_or(0, |p| p.line() as usize);
        let get = |i: usize, k: &str| rec.get(i).ok_or_else(|| Error::input(src, Some(line), Some(k), "missing field"));
        let t = parse_time(get(ti, tkey)?, tscale).ok_or_else(|| {
            Error::input(src, Some(line), Some(tkey), format!("not a time: `{}`", rec.get(ti).unwrap_or("")))
        })?;
        if !t.is_finite() {
            return Err(Error::input(src, Some(line), Some(tkey), "must be finite"));
        }
        let i = tokens(src, line, ikey, get(ii, ikey)?)?;
        let o = tokens(src, line, okey, get(oi, okey)?)?;
        if o == 0 || i == 0 {
            // BurstGPT marks failures with 0 response tokens; a request with no tokens cannot be served.
            skipped += 1;
            continue;
        }
        let session = si.and_then(|k| rec.get(k)).and_then(session_of);
        raw.push((t, i, o, vec![], session));
    }
    finish(raw, skipped, format, src)
}

pub fn parse_jsonl(src: &str, text: &str) -> Result<Trace> {
    let mut raw = Vec::new();
    let mut skipped = 0;
    for (n, line) in text.lines().enumerate() {
        let line_no = n + 1;
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| Error::input(src, Some(line_no), None, format!("invalid JSON: {e}")))?;
        let (tkey, scale) = TIME_KEYS.iter().find(|(k, _)| v.get(*k).is_some()).copied().ok_or_else(|| {
            Error::input(src, Some(line_no), Some("timestamp"), "no arrival-time key (timestamp in ms, or arrival_s)")
        })?;
        let num = |k: &str| -> Result<f64> {
            let x = v.get(k).ok_or_else(|| Error::input(src, Some(line_no), Some(k), "missing key"))?;
            match x {
                serde_json::Value::Number(n) => {
                    n.as_f64().ok_or_else(|| Error::input(src, Some(line_no), Some(k), "not a number"))
                }
                // A date string is seconds since the epoch, whatever unit the key's numbers are in:
                // the caller's scale applies to numbers only.
                serde_json::Value::String(s) if s.trim().parse::<f64>().is_err() => parse_time(s, 1.0)
                    .map(|secs| secs / scale_of(k))
                    .ok_or_else(|| Error::input(src, Some(line_no), Some(k), "not a number or a date")),
                serde_json::Value::String(s) => {
                    parse_time(s, 1.0).ok_or_else(|| Error::input(src, Some(line_no), Some(k), "not a number"))
                }
                _ => Err(Error::input(src, Some(line_no), Some(k), "not a number")),
            }
        };
        let t = num(tkey)? * scale;
        // As the CSV reader: "nan" or "inf" parse as numbers, and a time must be finite.
        if !t.is_finite() {
            return Err(Error::input(src, Some(line_no), Some(tkey), "must be finite"));
        }
        let ikey = INPUT_KEYS.iter().find(|k| v.get(**k).is_some()).copied().unwrap_or("input_length");
        let okey = OUTPUT_KEYS.iter().find(|k| v.get(**k).is_some()).copied().unwrap_or("output_length");
        let i = tokens(src, line_no, ikey, &num(ikey)?.to_string())?;
        let o = tokens(src, line_no, okey, &num(okey)?.to_string())?;
        if i == 0 || o == 0 {
            skipped += 1;
            continue;
        }
        // Mooncake's block ids (512 tokens each): equal ids, equal content.
        let hash_ids = match v.get("hash_ids") {
            None | Some(serde_json::Value::Null) => vec![],
            Some(serde_json::Value::Array(a)) => {
                a.iter().map(|x| x.as_u64()).collect::<Option<Vec<u64>>>().ok_or_else(|| {
                    Error::input(src, Some(line_no), Some("hash_ids"), "must be a list of whole numbers")
                })?
            }
            Some(_) => {
                return Err(Error::input(src, Some(line_no), Some("hash_ids"), "must be a list of whole numbers"))
            }
        };
        let session = SESSION_KEYS.iter().find_map(|k| v.get(*k)).and_then(|x| match x {
            serde_json::Value::String(s) => session_of(s),
            serde_json::Value::Number(n) => session_of(&n.to_string()),
            _ => None,
        });
        raw.push((t, i, o, hash_ids, session));
    }
    finish(raw, skipped, "jsonl", src)
}
