//! What a row reads from its cells' plan dimensions: the UDP rate, the
//! environment (`variant`), one dimension's value.

use fabperf_results::dims::text as dim_str;
use serde_json::Value;

/// A UDP target rate as the plan spells rates: `500M`, `2.5G`, `max` (the
/// row's `rate`, which every label of a row then shows as it is).
pub(super) fn rate_label(dims: &Value) -> Option<String> {
    let v = dims.get("rate")?;
    if let Some(b) = v.as_f64().filter(|b| *b > 0.0) {
        for (unit, f) in [("G", 1e9), ("M", 1e6), ("K", 1e3)] {
            if b >= f {
                let x = b / f;
                return Some(if x.fract() == 0.0 {
                    format!("{x:.0}{unit}")
                } else {
                    format!("{}{unit}", format!("{x:.3}").trim_end_matches('0'))
                });
            }
        }
        return Some(format!("{b}"));
    }
    dim_str(dims, "rate")
}

pub(super) fn dim_u64(dims: &Value, k: &str) -> Option<u64> {
    dims.get(k)?.as_u64()
}

/// The dimensions that set a cell's environment rather than its test:
/// HTTP connections, the tuning profile, the policy-rule count (the row's
/// `variant`, shown as it is by the chart groups and the sweep column).
pub(super) fn variant_label(dims: &Value) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(c) = dim_u64(dims, "connections") {
        parts.push(format!("c{c}"));
    }
    if let Some(p) = dim_str(dims, "profile") {
        parts.push(format!("profile {p}"));
    }
    if let Some(n) = dim_u64(dims, "policies") {
        let ct = if dims.get("policy_conntrack") == Some(&Value::Bool(true)) {
            " +conntrack"
        } else {
            ""
        };
        parts.push(format!("{n} rules{ct}"));
    }
    (!parts.is_empty()).then(|| parts.join(" "))
}

/// Does `dims` hold `key` at `val` (compared as the plan wrote it)?
pub(super) fn dim_is(dims: &Value, key: &str, val: &str) -> bool {
    dim_str(dims, key).is_some_and(|v| v == val)
}

/// `dims` without `key`.
pub(super) fn dims_without(dims: &Value, key: &str) -> Value {
    let mut d = dims.clone();
    if let Some(o) = d.as_object_mut() {
        o.remove(key);
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        let r = |v: Value| rate_label(&serde_json::json!({ "rate": v }));
        assert_eq!(r(serde_json::json!(500_000_000)).as_deref(), Some("500M"));
        assert_eq!(
            r(serde_json::json!(2_500_000_000u64)).as_deref(),
            Some("2.5G")
        );
        assert_eq!(r(serde_json::json!("max")).as_deref(), Some("max"));
        assert_eq!(r(serde_json::json!("500M")).as_deref(), Some("500M"));
        assert_eq!(rate_label(&serde_json::json!({})), None);
    }
}
