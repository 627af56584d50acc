//! A cell's dimensions (the plan's sweep and environment keys: `size`,
//! `streams`, `rate`, `profile`, `policies`, …, stored as one JSON object
//! per cell) as text: one rule for how a dimension's value is spelt, used by
//! the run log's cell lines, the mesh summary, the report and its metrics.

use fabperf_units::{format_size, Multiplier, SizeStyle};
use serde_json::Value;

/// A dimension's value as the plan wrote it: a string as it is, anything
/// else (a number, a bool, null, a list) as JSON: `bbr`, `65536`, `true`.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The value of the dimension `key` as the plan wrote it
/// ([`value_text`]); `None` when the cell has no such dimension or it is
/// null.
pub fn text(dims: &Value, key: &str) -> Option<String> {
    match dims.get(key)? {
        Value::Null => None,
        v => Some(value_text(v)),
    }
}

/// How [`label`] writes the `size` dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeIn {
    /// As stored, in bytes: `size=65536`.
    Bytes,
    /// As sizes are typed: `size=64K`, `size=8M`, `size=1472`
    /// ([`format_size`], short, up to M).
    Short,
}

/// Every dimension of a cell as `key=value` words in key order, one space
/// apart (`profile=wide size=64K streams=2`); empty when there are none.
pub fn label(dims: &Value, size: SizeIn) -> String {
    let Some(o) = dims.as_object() else {
        return String::new();
    };
    o.iter()
        .map(|(k, v)| match (k.as_str(), v.as_u64(), size) {
            ("size", Some(b), SizeIn::Short) => {
                format!("size={}", format_size(b, SizeStyle::Short, Multiplier::M))
            }
            _ => format!("{k}={}", value_text(v)),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_are_spelt_as_the_plan_wrote_them() {
        let d = json!({"profile": "wide", "size": 65536, "rate": 2.5e9, "conntrack": true,
                       "gone": null, "list": [1, 2]});
        assert_eq!(text(&d, "profile").as_deref(), Some("wide"));
        assert_eq!(text(&d, "size").as_deref(), Some("65536"));
        assert_eq!(text(&d, "rate").as_deref(), Some("2500000000.0"));
        assert_eq!(text(&d, "conntrack").as_deref(), Some("true"));
        assert_eq!(text(&d, "list").as_deref(), Some("[1,2]"));
        assert_eq!(text(&d, "gone"), None);
        assert_eq!(text(&d, "absent"), None);
        assert_eq!(text(&json!(null), "size"), None);
        assert_eq!(value_text(&Value::Null), "null");
    }

    /// The mesh summary's dimensions (fabperf-run `summary.rs`,
    /// `dims_label`) and a run log's cell line (fabperf-run `exec.rs`,
    /// `cell_label`): the texts their own code gives, copied here.
    #[test]
    fn labels_of_the_mesh_summary_and_the_run_log() {
        let d = json!({"streams": 2, "size": 65536, "profile": "wide-buffers", "rate": "max",
                       "mtu": null});
        assert_eq!(
            label(&d, SizeIn::Bytes),
            "mtu=null profile=wide-buffers rate=max size=65536 streams=2"
        );
        assert_eq!(
            label(&d, SizeIn::Short),
            "mtu=null profile=wide-buffers rate=max size=64K streams=2"
        );
        for (size, bytes, short) in [
            (json!(1472), "size=1472", "size=1472"),
            (json!(8 << 20), "size=8388608", "size=8M"),
            (json!(1u64 << 30), "size=1073741824", "size=1024M"),
            (json!("64K"), "size=64K", "size=64K"),
            (json!(1.5), "size=1.5", "size=1.5"),
        ] {
            let d = json!({ "size": size });
            assert_eq!(label(&d, SizeIn::Bytes), bytes);
            assert_eq!(label(&d, SizeIn::Short), short);
        }
        assert_eq!(label(&json!({}), SizeIn::Short), "");
        assert_eq!(label(&json!(null), SizeIn::Bytes), "");
        assert_eq!(label(&json!([1]), SizeIn::Bytes), "");
    }
}
