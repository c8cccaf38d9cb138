//! `contracts._wire`: the fast path of the failure-cluster record's contract check, in Rust.
//!
//! It answers exactly what `contracts.failure_cluster._read_view` (the reference, in Python)
//! answers: the record's view, idempotency key and event id when the record is in the form
//! spectral writes and passes every check of the full decode, else `None`, which sends the
//! record to the full decode (pydantic), which words the refusal. Returning `None` where the
//! reference accepts costs only time; accepting where the reference returns `None` would let a
//! record past the contract, so every check here is at least as strict as the reference's, and
//! tests/unit/contracts/test_native_wire.py holds the two together (generated records, mutated
//! records, every bound on both sides of its limit).
//!
//! The limits are not written here: `Checker` takes them from the Python constants when it is
//! built (contracts/failure_cluster.py), so a bound has one definition.
//!
//! Steps, as the reference takes them: the size and the absence of any `\u` escape (so no
//! U+0000 and no lone surrogate); the text parsed into typed structs (serde_json: valid UTF-8,
//! no unknown member, no duplicate member, every member the form requires, integers only);
//! the bounds; the record key is the cluster id; every UUID in its one spelling (lowercase,
//! hyphenated); every timestamp in the written form `YYYY-MM-DDTHH:MM:SS.ffffffZ`, its year in
//! bounds and its date a real one; first observation not after the last; the idempotency key is
//! `cluster_id:snapshot_hash`; the payload written back with sorted members, the cluster id and
//! the hash left out (the bytes msgspec's sorted encoder writes), hashes (xxh3-128) to the
//! snapshot hash. The view's evidence is that text's first member's value.

// pyo3 0.22's #[pymethods] expands to a conversion clippy calls useless.
#![allow(clippy::useless_conversion)]

use std::borrow::Cow;
use std::fmt::Write as _;

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use serde::{Deserialize, Deserializer};

// A member whose every valid value is free of escapes (UUIDs, timestamps, the event type, the
// severity, the digest, the idempotency key: characters an escape cannot stand for) is borrowed
// as `&str`, which refuses an escaped text: such a record is refused by the reference too. Free
// texts are `Cow`, decoded when they hold escapes.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Record<'a> {
    event_id: &'a str,
    event_type: &'a str,
    schema_version: u64,
    #[serde(borrow)]
    source: Cow<'a, str>,
    #[serde(borrow)]
    target: Cow<'a, str>,
    occurred_at: &'a str,
    idempotency_key: &'a str,
    #[serde(borrow)]
    payload: Payload<'a>,
    #[serde(default)]
    correlation_id: Option<&'a str>,
    #[serde(default)]
    causation_id: Option<&'a str>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Payload<'a> {
    #[serde(default)]
    cluster_id: &'a str,
    #[serde(default)]
    snapshot_hash: &'a str,
    rule_id: &'a str,
    workspace_id: &'a str,
    severity: &'a str,
    failure_count: u64,
    first_observed_at: &'a str,
    last_observed_at: &'a str,
    #[serde(borrow)]
    evidence_bundle: Vec<Ref<'a>>,
    /// Outer `None`: the member is absent (refused: the written form has it, null or a text).
    #[serde(default, borrow, deserialize_with = "present")]
    suggested_rule_stub: Option<Option<Cow<'a, str>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Ref<'a> {
    #[serde(borrow)]
    failure_id: Cow<'a, str>,
    observed_at: &'a str,
    #[serde(borrow)]
    summary: Cow<'a, str>,
}

/// A member that is present (null included): `Some(value)`; an absent one takes the default.
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// The bounds of the contract, read from the Python constants once.
struct Limits {
    event_type: String,
    severities: Vec<String>,
    max_record_bytes: usize,
    max_safe_integer: u64,
    max_evidence_items: usize,
    max_summary_chars: usize,
    max_rule_stub_chars: usize,
    max_failure_id_chars: usize,
    min_year: u32,
    max_year: u32,
}

/// A written timestamp's fields.
#[derive(Clone, Copy)]
struct Instant {
    year: u32,
    month: u8,
    day: u8,
    hour: u8,
    minute: u8,
    second: u8,
    micro: u32,
}

/// The checked record, before any Python object is made.
struct Checked<'a> {
    record: Record<'a>,
    first: Instant,
    last: Instant,
    evidence: (usize, usize),
    hashed: Vec<u8>,
}

fn is_wire_uuid(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(index, &byte)| match index {
            8 | 13 | 18 | 23 => byte == b'-',
            _ => byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte),
        })
}

fn digits(bytes: &[u8]) -> Option<u32> {
    bytes.iter().try_fold(0u32, |value, &byte| {
        byte.is_ascii_digit()
            .then(|| value * 10 + u32::from(byte - b'0'))
    })
}

#[allow(clippy::manual_is_multiple_of)] // is_multiple_of needs Rust 1.87 (rust-version)
fn days_in_month(year: u32, month: u8) -> u8 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ`, a real date and time, the year within the bounds.
fn written_instant(text: &str, limits: &Limits) -> Option<Instant> {
    let b = text.as_bytes();
    if b.len() != 27
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'.'
        || b[26] != b'Z'
    {
        return None;
    }
    let year = digits(&b[0..4])?;
    let month = u8::try_from(digits(&b[5..7])?).ok()?;
    let day = u8::try_from(digits(&b[8..10])?).ok()?;
    let hour = u8::try_from(digits(&b[11..13])?).ok()?;
    let minute = u8::try_from(digits(&b[14..16])?).ok()?;
    let second = u8::try_from(digits(&b[17..19])?).ok()?;
    let micro = digits(&b[20..26])?;
    let valid = (limits.min_year..=limits.max_year).contains(&year)
        && (1..=12).contains(&month)
        && day >= 1
        && day <= days_in_month(year, month)
        && hour < 24
        && minute < 60
        && second < 60;
    valid.then_some(Instant {
        year,
        month,
        day,
        hour,
        minute,
        second,
        micro,
    })
}

fn chars_within(text: &str, least: usize, most: usize) -> bool {
    // A text holds at most as many characters as bytes, and a non-empty one at least one.
    if least <= 1 && (least..=most).contains(&text.len()) {
        return true;
    }
    (least..=most).contains(&text.chars().count())
}

/// A JSON string as msgspec writes it: `"` and `\` escaped, the control characters as their
/// short escapes or `\u00XX`, everything else as it is.
fn write_string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    for (index, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..index]);
        if escape.is_empty() {
            let _ = write!(VecWriter(out), "\\u{byte:04x}");
        } else {
            out.extend_from_slice(escape);
        }
        start = index + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// The payload with sorted members, `cluster_id` and `snapshot_hash` left out; and where the
/// evidence bundle's value lies in it.
fn hashed_text(payload: &Payload<'_>, capacity: usize) -> (Vec<u8>, (usize, usize)) {
    let mut out = Vec::with_capacity(capacity);
    out.extend_from_slice(b"{\"evidence_bundle\":");
    let start = out.len();
    out.push(b'[');
    for (index, item) in payload.evidence_bundle.iter().enumerate() {
        if index > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"failure_id\":");
        write_string(&mut out, &item.failure_id);
        out.extend_from_slice(b",\"observed_at\":");
        write_string(&mut out, item.observed_at);
        out.extend_from_slice(b",\"summary\":");
        write_string(&mut out, &item.summary);
        out.push(b'}');
    }
    out.push(b']');
    let end = out.len();
    let _ = write!(
        VecWriter(&mut out),
        ",\"failure_count\":{}",
        payload.failure_count
    );
    out.extend_from_slice(b",\"first_observed_at\":");
    write_string(&mut out, payload.first_observed_at);
    out.extend_from_slice(b",\"last_observed_at\":");
    write_string(&mut out, payload.last_observed_at);
    out.extend_from_slice(b",\"rule_id\":");
    write_string(&mut out, payload.rule_id);
    out.extend_from_slice(b",\"severity\":");
    write_string(&mut out, payload.severity);
    out.extend_from_slice(b",\"suggested_rule_stub\":");
    match &payload.suggested_rule_stub {
        Some(Some(stub)) => write_string(&mut out, stub),
        _ => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"workspace_id\":");
    write_string(&mut out, payload.workspace_id);
    out.push(b'}');
    (out, (start, end))
}

struct VecWriter<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for VecWriter<'_> {
    fn write_str(&mut self, text: &str) -> std::fmt::Result {
        self.0.extend_from_slice(text.as_bytes());
        Ok(())
    }
}

fn check<'a>(data: &'a [u8], key: Option<&[u8]>, limits: &Limits) -> Option<Checked<'a>> {
    if data.len() > limits.max_record_bytes || memchr::memmem::find(data, b"\\u").is_some() {
        return None;
    }
    let record: Record<'a> = serde_json::from_slice(data).ok()?;
    let payload = &record.payload;
    let count_ok = |n: u64| (1..=limits.max_safe_integer).contains(&n);
    let stub_ok = match &payload.suggested_rule_stub {
        None => false,
        Some(None) => true,
        Some(Some(stub)) => chars_within(stub, 0, limits.max_rule_stub_chars),
    };
    let bounds = record.event_type == limits.event_type
        && count_ok(record.schema_version)
        && !record.source.is_empty()
        && !record.target.is_empty()
        && !record.idempotency_key.is_empty()
        && count_ok(payload.failure_count)
        && limits.severities.iter().any(|s| *s == payload.severity)
        && stub_ok
        && payload.evidence_bundle.len() <= limits.max_evidence_items
        && payload.evidence_bundle.iter().all(|item| {
            chars_within(&item.failure_id, 1, limits.max_failure_id_chars)
                && chars_within(&item.summary, 0, limits.max_summary_chars)
        });
    if !bounds || key != Some(payload.cluster_id.as_bytes()) {
        return None;
    }
    let uuids = [
        record.event_id,
        payload.cluster_id,
        payload.rule_id,
        payload.workspace_id,
    ];
    let optional = [record.correlation_id, record.causation_id];
    if !uuids.into_iter().all(is_wire_uuid) || !optional.into_iter().flatten().all(is_wire_uuid) {
        return None;
    }
    let first = written_instant(payload.first_observed_at, limits)?;
    let last = written_instant(payload.last_observed_at, limits)?;
    written_instant(record.occurred_at, limits)?;
    for item in &payload.evidence_bundle {
        written_instant(item.observed_at, limits)?;
    }
    // One layout, one zone: the texts compare as their instants do.
    if payload.first_observed_at > payload.last_observed_at {
        return None;
    }
    let (cluster_id, digest) = (payload.cluster_id, payload.snapshot_hash);
    let key_matches = record
        .idempotency_key
        .strip_prefix(cluster_id)
        .and_then(|rest| rest.strip_prefix(':'))
        == Some(digest);
    if !key_matches {
        return None;
    }
    let (hashed, evidence) = hashed_text(payload, data.len());
    let mut computed = String::with_capacity(32);
    let _ = write!(computed, "{:032x}", xxhash_rust::xxh3::xxh3_128(&hashed));
    if computed != digest {
        return None;
    }
    Some(Checked {
        record,
        first,
        last,
        evidence,
        hashed,
    })
}

/// The fast path, its limits and the view class bound once (contracts/failure_cluster.py).
#[pyclass(frozen, module = "contracts._wire")]
struct Checker {
    limits: Limits,
    view: PyObject,
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (civil to days: the
/// year shifted to start in March, so a leap day ends it).
fn days_from_civil(year: u32, month: u8, day: u8) -> i64 {
    let year = i64::from(year) - i64::from(month <= 2);
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year =
        (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// A written instant as whole microseconds since the Unix epoch (UTC).
fn epoch_micros(at: Instant) -> i64 {
    let seconds = days_from_civil(at.year, at.month, at.day) * 86_400
        + i64::from(at.hour) * 3_600
        + i64::from(at.minute) * 60
        + i64::from(at.second);
    seconds * 1_000_000 + i64::from(at.micro)
}

#[pymethods]
impl Checker {
    #[new]
    #[pyo3(signature = (*, view, event_type, severities, max_record_bytes, max_safe_integer,
        max_evidence_items, max_summary_chars, max_rule_stub_chars, max_failure_id_chars,
        min_year, max_year))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        view: PyObject,
        event_type: String,
        severities: Vec<String>,
        max_record_bytes: usize,
        max_safe_integer: u64,
        max_evidence_items: usize,
        max_summary_chars: usize,
        max_rule_stub_chars: usize,
        max_failure_id_chars: usize,
        min_year: u32,
        max_year: u32,
    ) -> Self {
        let limits = Limits {
            event_type,
            severities,
            max_record_bytes,
            max_safe_integer,
            max_evidence_items,
            max_summary_chars,
            max_rule_stub_chars,
            max_failure_id_chars,
            min_year,
            max_year,
        };
        Self { limits, view }
    }

    /// `(view, idempotency_key, event_id)` of a record that passes every check, else None.
    #[pyo3(signature = (data, key))]
    fn __call__<'py>(
        &self,
        py: Python<'py>,
        data: &[u8],
        key: Option<&[u8]>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let Some(checked) = check(data, key, &self.limits) else {
            return Ok(None);
        };
        let record = &checked.record;
        let payload = &record.payload;
        let stub: PyObject = match &payload.suggested_rule_stub {
            Some(Some(stub)) => stub.as_ref().into_py(py),
            _ => py.None(),
        };
        let (start, end) = checked.evidence;
        let args = PyTuple::new_bound(
            py,
            [
                payload.cluster_id.into_py(py),
                payload.snapshot_hash.into_py(py),
                payload.rule_id.into_py(py),
                payload.workspace_id.into_py(py),
                payload.severity.into_py(py),
                payload.failure_count.into_py(py),
                epoch_micros(checked.first).into_py(py),
                epoch_micros(checked.last).into_py(py),
                stub,
                PyBytes::new_bound(py, &checked.hashed[start..end]).into_py(py),
            ],
        );
        let view = self.view.bind(py).call1(args)?;
        Ok(Some(PyTuple::new_bound(
            py,
            [
                view.into_py(py),
                record.idempotency_key.into_py(py),
                record.event_id.into_py(py),
            ],
        )))
    }
}

#[pymodule]
fn _wire(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Checker>()?;
    // The digest of the sources this build was made from (build.rs).
    module.add("SOURCES", env!("SPECTRAL_WIRE_SOURCES"))?;
    Ok(())
}
