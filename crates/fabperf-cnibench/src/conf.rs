//! The network configuration to run: a CNI conflist (`plugins: [...]`), a
//! single plugin config (`type: ...`), or a Multus NetworkAttachmentDefinition
//! (YAML or JSON) whose `spec.config` holds either — as the CNI spec (v1.0)
//! and k8s.cni.cncf.io/v1 define them.

use anyhow::{bail, Context, Result};
use serde_json::{Map, Value};
use std::path::Path;

/// Largest configuration file read.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A plugin chain ready to execute.
#[derive(Debug, Clone, PartialEq)]
pub struct Chain {
    /// Where it came from (file name, NAD name).
    pub source: String,
    pub name: String,
    pub cni_version: String,
    /// Each plugin's config object, without `name`/`cniVersion` (added per call).
    pub plugins: Vec<Map<String, Value>>,
}

impl Chain {
    /// Plugin types in order, e.g. `["bridge", "tuning"]`.
    pub fn types(&self) -> Vec<&str> {
        self.plugins
            .iter()
            .map(|p| p["type"].as_str().unwrap_or(""))
            .collect()
    }

    /// Every binary the chain executes: each plugin and the IPAM plugins they delegate to.
    pub fn binaries(&self) -> Vec<&str> {
        let mut out = Vec::new();
        for p in &self.plugins {
            for t in [
                p.get("type").and_then(Value::as_str),
                p.get("ipam")
                    .and_then(|i| i.get("type"))
                    .and_then(Value::as_str),
            ]
            .into_iter()
            .flatten()
            {
                if !out.contains(&t) {
                    out.push(t);
                }
            }
        }
        out
    }

    /// `name (bridge+host-local, tuning)`: the plugins and their IPAM.
    pub fn label(&self) -> String {
        let parts: Vec<String> = self
            .plugins
            .iter()
            .map(|p| {
                let t = p["type"].as_str().unwrap_or("");
                match p
                    .get("ipam")
                    .and_then(|i| i.get("type"))
                    .and_then(Value::as_str)
                {
                    Some(i) => format!("{t}+{i}"),
                    None => t.to_string(),
                }
            })
            .collect();
        format!("{} ({})", self.name, parts.join(", "))
    }
}

/// A plugin type names a binary in the CNI path: a plain file name.
fn valid_type(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 64
        && t != "."
        && t != ".."
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

/// Network names as the CNI spec allows them (`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`).
fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 253
        && n.as_bytes()[0].is_ascii_alphanumeric()
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
}

fn check_plugin(origin: &str, i: usize, v: &Value) -> Result<Map<String, Value>> {
    let Some(obj) = v.as_object() else {
        bail!("{origin}: plugins[{i}] is not an object");
    };
    let Some(t) = obj.get("type").and_then(Value::as_str) else {
        bail!("{origin}: plugins[{i}] has no \"type\" (the plugin binary to run)");
    };
    if !valid_type(t) {
        bail!(
            "{origin}: plugins[{i}].type {t:?} is not a plugin name (letters, digits, '-', '_', '.'; no paths)"
        );
    }
    if let Some(ipam) = obj.get("ipam") {
        match ipam.get("type").and_then(Value::as_str) {
            Some(it) if valid_type(it) => {}
            Some(it) => bail!("{origin}: plugins[{i}].ipam.type {it:?} is not a plugin name"),
            None if ipam.as_object().is_some_and(|m| m.is_empty()) => {}
            None => bail!("{origin}: plugins[{i}].ipam has no \"type\""),
        }
    }
    let mut obj = obj.clone();
    obj.remove("name");
    obj.remove("cniVersion");
    Ok(obj)
}

/// Parse a network configuration (conflist or single config) from JSON text.
pub fn parse_network(text: &str, origin: &str) -> Result<Chain> {
    let v: Value = serde_json::from_str(text)
        .with_context(|| format!("{origin}: not a CNI network configuration (JSON)"))?;
    network_from_value(&v, origin)
}

fn network_from_value(v: &Value, origin: &str) -> Result<Chain> {
    let Some(obj) = v.as_object() else {
        bail!("{origin}: a CNI network configuration is a JSON object");
    };
    let name = match obj.get("name") {
        Some(Value::String(n)) if valid_name(n) => n.clone(),
        Some(Value::String(n)) => {
            bail!("{origin}: network name {n:?} is not valid (letters, digits, '-', '_', '.')")
        }
        Some(_) => bail!("{origin}: \"name\" must be a string"),
        None => bail!("{origin}: the network has no \"name\""),
    };
    let cni_version = match obj.get("cniVersion") {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 16 => s.clone(),
        Some(_) => bail!("{origin}: \"cniVersion\" must be a version string such as \"1.0.0\""),
        None => bail!("{origin}: the network has no \"cniVersion\""),
    };
    let plugins = match (obj.get("plugins"), obj.get("type")) {
        (Some(Value::Array(list)), None) => {
            if list.is_empty() {
                bail!("{origin}: \"plugins\" is empty; a conflist needs at least one plugin");
            }
            if list.len() > 32 {
                bail!("{origin}: {} plugins in one chain; at most 32", list.len());
            }
            list.iter()
                .enumerate()
                .map(|(i, p)| check_plugin(origin, i, p))
                .collect::<Result<Vec<_>>>()?
        }
        (Some(_), None) => bail!("{origin}: \"plugins\" must be a list of plugin objects"),
        (None, Some(_)) => vec![check_plugin(origin, 0, v)?],
        (Some(_), Some(_)) => {
            bail!("{origin}: both \"plugins\" and \"type\": a conflist or a single plugin config, not both")
        }
        (None, None) => {
            bail!("{origin}: neither \"plugins\" (a conflist) nor \"type\" (one plugin)")
        }
    };
    Ok(Chain {
        source: origin.to_string(),
        name,
        cni_version,
        plugins,
    })
}

/// Read a file: a conflist, a single config, or a NetworkAttachmentDefinition
/// (one or more YAML documents; every NAD in the file is returned).
pub fn load(path: &Path) -> Result<Vec<Chain>> {
    let text = fabperf_results::files::read_text(path, MAX_CONFIG_BYTES, "network config")
        .map_err(anyhow::Error::msg)?;
    parse_any(&text, &path.display().to_string())
}

/// Parse text that is a CNI config (JSON) or YAML with NADs in it.
pub fn parse_any(text: &str, origin: &str) -> Result<Vec<Chain>> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('{') {
        let v: Value =
            serde_json::from_str(text).with_context(|| format!("{origin}: not valid JSON"))?;
        if v.get("kind").and_then(Value::as_str) == Some("NetworkAttachmentDefinition") {
            return Ok(vec![from_nad(&v, origin)?]);
        }
        return Ok(vec![network_from_value(&v, origin)?]);
    }
    let mut out = Vec::new();
    for (i, d) in serde_norway::Deserializer::from_str(text).enumerate() {
        let v: Value = serde::Deserialize::deserialize(d)
            .with_context(|| format!("{origin}: YAML document {} does not parse", i + 1))?;
        if v.is_null() {
            continue;
        }
        if v.get("kind").and_then(Value::as_str) == Some("NetworkAttachmentDefinition") {
            out.push(from_nad(&v, origin)?);
        }
    }
    if out.is_empty() {
        bail!("{origin}: neither a CNI config (JSON) nor YAML with a NetworkAttachmentDefinition");
    }
    Ok(out)
}

fn from_nad(v: &Value, origin: &str) -> Result<Chain> {
    let nad = v["metadata"]["name"].as_str().unwrap_or("?");
    let Some(cfg) = v["spec"]["config"].as_str() else {
        bail!("{origin}: NetworkAttachmentDefinition {nad} has no spec.config (a resource-only NAD has nothing to run)");
    };
    let c: Value = serde_json::from_str(cfg).with_context(|| {
        format!("{origin}: NetworkAttachmentDefinition {nad}: spec.config is not JSON")
    })?;
    network_from_value(&c, &format!("{origin} (NAD {nad})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflist_single_and_nad() {
        let c = parse_network(
            r#"{"cniVersion":"1.0.0","name":"n1","plugins":[{"type":"bridge","bridge":"br9","ipam":{"type":"host-local","subnet":"10.9.0.0/24"}},{"type":"tuning","name":"x"}]}"#,
            "a.conflist",
        )
        .unwrap();
        assert_eq!(c.types(), ["bridge", "tuning"]);
        assert_eq!(c.binaries(), ["bridge", "host-local", "tuning"]);
        assert_eq!(c.label(), "n1 (bridge+host-local, tuning)");
        assert!(!c.plugins[1].contains_key("name"));
        let s = parse_network(
            r#"{"cniVersion":"0.4.0","name":"m","type":"macvlan","master":"eth0","ipam":{"type":"static"}}"#,
            "m.conf",
        )
        .unwrap();
        assert_eq!(s.types(), ["macvlan"]);
        let nad = "apiVersion: k8s.cni.cncf.io/v1\nkind: NetworkAttachmentDefinition\nmetadata: {name: roce}\nspec:\n  config: '{\"cniVersion\":\"0.3.1\",\"name\":\"roce\",\"type\":\"macvlan\",\"master\":\"d0\",\"ipam\":{\"type\":\"host-local\",\"subnet\":\"10.1.0.0/24\"}}'\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n";
        let v = parse_any(nad, "nad.yaml").unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].name, "roce");
        assert!(v[0].source.contains("NAD roce"));
    }

    #[test]
    fn malformed_and_malicious_configs() {
        let bad = [
            ("{", "not valid JSON"),
            ("[]", "neither a CNI config"),
            ("{\"name\":\"n\",\"cniVersion\":\"1.0.0\"}", "neither \"plugins\""),
            ("{\"name\":\"n\",\"cniVersion\":\"1.0.0\",\"plugins\":[]}", "is empty"),
            ("{\"name\":\"n\",\"cniVersion\":\"1.0.0\",\"plugins\":{}}", "must be a list"),
            ("{\"name\":\"n\",\"cniVersion\":\"1.0.0\",\"plugins\":[1]}", "not an object"),
            ("{\"name\":\"n\",\"cniVersion\":\"1.0.0\",\"plugins\":[{}]}", "has no \"type\""),
            ("{\"name\":\"n\",\"cniVersion\":\"1.0.0\",\"type\":\"../../bin/sh\"}", "not a plugin name"),
            ("{\"name\":\"n\",\"cniVersion\":\"1.0.0\",\"type\":\"/bin/sh\"}", "not a plugin name"),
            ("{\"name\":\"n\",\"cniVersion\":\"1.0.0\",\"type\":\"bridge\",\"ipam\":{\"type\":\"../x\"}}", "ipam.type"),
            ("{\"name\":\"n\",\"cniVersion\":\"1.0.0\",\"type\":\"bridge\",\"ipam\":{\"subnet\":\"1\"}}", "ipam has no"),
            ("{\"name\":\"n/../x\",\"cniVersion\":\"1.0.0\",\"type\":\"bridge\"}", "network name"),
            ("{\"cniVersion\":\"1.0.0\",\"type\":\"bridge\"}", "has no \"name\""),
            ("{\"name\":\"n\",\"type\":\"bridge\"}", "no \"cniVersion\""),
            ("{\"name\":\"n\",\"cniVersion\":7,\"type\":\"bridge\"}", "version string"),
            ("{\"name\":\"n\",\"cniVersion\":\"1.0.0\",\"type\":\"a\",\"plugins\":[{\"type\":\"b\"}]}", "not both"),
            ("kind: NetworkAttachmentDefinition\nmetadata: {name: r}\nspec: {}\n", "no spec.config"),
            ("kind: NetworkAttachmentDefinition\nmetadata: {name: r}\nspec: {config: '{'}\n", "not JSON"),
            ("a: [\n", "does not parse"),
        ];
        for (text, needle) in bad {
            let e = format!("{:#}", parse_any(text, "x").unwrap_err());
            assert!(e.contains(needle), "{text:?}: {e}");
        }
        let many: Vec<String> = (0..33)
            .map(|_| "{\"type\":\"tuning\"}".to_string())
            .collect();
        let t = format!(
            "{{\"name\":\"n\",\"cniVersion\":\"1.0.0\",\"plugins\":[{}]}}",
            many.join(",")
        );
        assert!(format!("{:#}", parse_any(&t, "x").unwrap_err()).contains("at most 32"));
    }
}
