//! The values a plan spells out: names, durations, sizes, rates,
//! addresses, and TOML to JSON for engine parameters.

use super::*;

/// Names of agents and paths: what a Kubernetes node name or a label value
/// may hold, so they are safe in file names, metric labels and terminals.
pub fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.as_bytes()[0].is_ascii_alphanumeric()
}

/// A duration: seconds as a number, or a string with `ms`, `s`, `m`, `h`.
pub fn parse_duration(v: &toml::Value) -> Result<f64, String> {
    let secs = match v {
        toml::Value::Integer(i) => *i as f64,
        toml::Value::Float(f) => *f,
        toml::Value::String(s) => parse_duration_str(s)?,
        other => {
            return Err(format!(
                "a duration is a number of seconds or a string such as \"3s\", \"500ms\", \"2m\"; got {}",
                other.type_str()
            ))
        }
    };
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!(
            "a duration must be a non-negative number of seconds, got {secs}"
        ));
    }
    if secs > 7.0 * 86400.0 {
        return Err(format!("a duration of {secs} s is more than a week"));
    }
    Ok(secs)
}

pub(super) fn parse_duration_str(s: &str) -> Result<f64, String> {
    fabperf_units::parse_duration(s, fabperf_units::TimeUnit::Seconds).map(|d| d.as_secs_f64())
}

pub(super) fn size_value(v: &toml::Value) -> Result<u64, String> {
    match v {
        toml::Value::Integer(i) if *i > 0 => Ok(*i as u64),
        toml::Value::Integer(i) => Err(format!("a size must be positive, got {i}")),
        toml::Value::String(s) => fabperf_units::parse_size(s),
        other => Err(format!(
            "a size is a number of bytes or a string such as \"64K\"; got {}",
            other.type_str()
        )),
    }
}

pub(super) fn rate_value(v: &toml::Value) -> Result<Option<u64>, String> {
    match v {
        toml::Value::Integer(i) if *i > 0 => Ok(Some(*i as u64)),
        toml::Value::Integer(i) => Err(format!("a rate must be positive bits/s, got {i}")),
        toml::Value::String(s) => fabperf_units::parse_rate(s),
        other => Err(format!(
            "a rate is bits/s as a number or a string such as \"10G\" or \"max\"; got {}",
            other.type_str()
        )),
    }
}

/// A request rate (http-load): requests/s as a number or a string such as
/// "20K", or "max" (closed loop).
pub(super) fn request_rate_value(v: &toml::Value) -> Result<Option<f64>, String> {
    match v {
        toml::Value::Integer(i) if *i > 0 => Ok(Some(*i as f64)),
        toml::Value::Float(f) if f.is_finite() && *f > 0.0 => Ok(Some(*f)),
        toml::Value::Integer(_) | toml::Value::Float(_) => Err(format!(
            "a request rate must be a positive number of requests/s, got {v}"
        )),
        toml::Value::String(s) => fabperf_units::parse_per_second(s),
        other => Err(format!(
            "a request rate is requests/s as a number or a string such as \"20K\" or \"max\"; got {}",
            other.type_str()
        )),
    }
}

pub(super) fn toml_to_json(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Integer(i) => json!(i),
        toml::Value::Float(f) => json!(f),
        toml::Value::Boolean(b) => json!(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(a) => Value::Array(a.iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.clone(), toml_to_json(v)))
                .collect(),
        ),
    }
}

pub(super) fn join(s: &BTreeSet<String>) -> String {
    if s.is_empty() {
        "none".into()
    } else {
        s.iter().cloned().collect::<Vec<_>>().join(", ")
    }
}

pub(super) fn has_port(addr: &str) -> bool {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.contains("]:");
    }
    addr.matches(':').count() == 1
}

pub(super) fn join_host_port(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}
