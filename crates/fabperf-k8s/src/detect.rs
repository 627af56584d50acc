//! `fabperf detect --json` files (schema `fabperf.detect/1`) as the Kubernetes renderer reads
//! them. The model is fabperf-detect's own [`Inventory`]: one definition for the writer and
//! every reader, so a field the detector writes is a field the renderer can use.

use anyhow::{bail, Context, Result};
pub use fabperf_detect::{Inventory, Netdev, PciInfo as Pci, RdmaDevice, RdmaPort};
use std::path::Path;

pub const DETECT_SCHEMA: &str = fabperf_detect::SCHEMA;

/// A node's detect report: the detect [`Inventory`] with the renderer's loading rules (the
/// `schema`, `hostname` and `rdma_available` keys must be present). Derefs to the inventory,
/// whose [`Inventory::rdma_behind`], [`Inventory::ipoib_candidates`] and
/// [`Inventory::roce_candidates`] pick interfaces.
#[derive(Debug, Clone, PartialEq)]
pub struct DetectReport(pub Inventory);

impl std::ops::Deref for DetectReport {
    type Target = Inventory;
    fn deref(&self) -> &Inventory {
        &self.0
    }
}

impl DetectReport {
    /// Parse a detect report and check its schema tag.
    pub fn parse(text: &str, origin: &str) -> Result<Self> {
        let not_detect =
            || format!("{origin}: not a `fabperf detect --json` report (schema {DETECT_SCHEMA})");
        let v: serde_json::Value = serde_json::from_str(text).with_context(not_detect)?;
        for key in ["schema", "hostname", "rdma_available"] {
            if v.get(key).is_none() {
                return Err(anyhow::anyhow!("missing field `{key}`")).with_context(not_detect);
            }
        }
        let inv: Inventory = serde_json::from_value(v).with_context(not_detect)?;
        if inv.schema != DETECT_SCHEMA {
            bail!(
                "{origin}: schema is {:?}, expected {DETECT_SCHEMA:?}; regenerate it with `fabperf detect --json > FILE` from a matching fabperf",
                inv.schema
            );
        }
        Ok(DetectReport(inv))
    }

    /// Load a detect file (a regular file of at most a few MiB; a FIFO is refused).
    pub fn load(path: &Path) -> Result<Self> {
        let text = fabperf_detect::read_json_file(path)
            .with_context(|| format!("cannot read detect file {}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }
}

/// Link type name used by k8s-rdma-shared-dev-plugin selectors.
pub fn plugin_link_type(link_layer: &str) -> Option<&'static str> {
    match link_layer {
        "Ethernet" => Some("ether"),
        "InfiniBand" => Some("infiniband"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"{
      "schema": "fabperf.detect/1", "hostname": "n1", "rdma_available": true, "rdma_note": null,
      "rdma_devices": [
        {"name": "mlx5_0", "driver": "mlx5_core", "software": false, "node_guid": "0c42:a103:0065:3f5c",
         "pci": {"address": "0000:3b:00.0", "vendor_id": "15b3", "device_id": "1017", "model": "ConnectX-5", "is_vf": false},
         "ports": [{"port": 1, "link_layer": "Ethernet", "state": "ACTIVE", "rate_gbps": 100.0, "netdevs": ["ens1f0np0"]}]},
        {"name": "mlx5_1", "driver": "mlx5_core", "software": false, "node_guid": "0c42:a103:0065:3f5d",
         "pci": {"address": "0000:5e:00.0", "vendor_id": "15b3", "device_id": "101b", "model": "ConnectX-6", "is_vf": false},
         "ports": [{"port": 1, "link_layer": "InfiniBand", "state": "ACTIVE", "rate_gbps": 100.0, "netdevs": []}]}
      ],
      "netdevs": [
        {"name": "ens1f0np0", "kind": "ethernet", "mtu": 9000, "speed_mbps": 100000, "operstate": "up",
         "ipv4": ["192.168.6.11/24"], "ipv6": [], "ipoib_mode": null, "rdma_device": null, "rdma_port": null},
        {"name": "ib0", "kind": "ipoib", "mtu": 2044, "speed_mbps": 100000, "operstate": "up",
         "ipv4": [], "ipv6": [], "ipoib_mode": "datagram", "rdma_device": "mlx5_1", "rdma_port": 1}
      ],
      "node_ip": null
    }"#;

    #[test]
    fn finds_netdevs_behind_devices_both_ways() {
        let r = DetectReport::parse(SAMPLE, "sample").unwrap();
        let (dev, port) = r.rdma_behind("ens1f0np0").unwrap();
        assert_eq!(dev.name, "mlx5_0");
        assert_eq!(port.unwrap().link_layer, "Ethernet");
        let (dev, _) = r.rdma_behind("ib0").unwrap();
        assert_eq!(dev.name, "mlx5_1");
        assert_eq!(r.roce_candidates().len(), 1);
        assert_eq!(r.ipoib_candidates()[0].name, "ib0");
    }

    #[test]
    fn unreadable_mtu_is_unknown_not_an_error() {
        // detect writes null when /sys/class/net/IF/mtu could not be read.
        let partial = SAMPLE.replace("\"mtu\": 2044", "\"mtu\": null");
        let r = DetectReport::parse(&partial, "partial.json").unwrap();
        assert_eq!(r.netdev("ib0").unwrap().mtu, None);
        assert_eq!(r.netdev("ens1f0np0").unwrap().mtu, Some(9000));
    }

    /// Every fixture node, as `fabperf detect --json` writes it, loads whole: each of the
    /// detector's keys reaches the renderer (the two sides share one model).
    #[test]
    fn detect_output_of_every_fixture_loads_whole() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fabperf-detect/tests/fixtures");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if !p.join("sys").is_dir() {
                continue;
            }
            let inv = fabperf_detect::detect_root(&p, &Default::default()).unwrap();
            let json = inv.to_json_pretty();
            let r = DetectReport::parse(&json, &p.display().to_string()).unwrap();
            assert_eq!(r.0, inv, "{}", p.display());
            n += 1;
        }
        assert!(n >= 5, "fixtures found: {n}");
    }

    #[test]
    fn missing_contract_keys_and_fifos_are_refused() {
        let no_host = SAMPLE.replace("\"hostname\": \"n1\",", "");
        let e = format!("{:#}", DetectReport::parse(&no_host, "h.json").unwrap_err());
        assert!(e.contains("hostname") && e.contains("h.json"), "{e}");
        let d = std::env::temp_dir().join(format!("fabperf-k8s-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&d);
        let ok = std::process::Command::new("mkfifo")
            .arg(&d)
            .status()
            .map(|s| s.success());
        if ok.unwrap_or(false) {
            let e = format!("{:#}", DetectReport::load(&d).unwrap_err());
            assert!(e.contains("not a regular file"), "{e}");
            std::fs::remove_file(&d).unwrap();
        }
    }

    #[test]
    fn rejects_wrong_schema() {
        let bad = SAMPLE.replace("fabperf.detect/1", "fabperf.detect/9");
        let e = DetectReport::parse(&bad, "x.json").unwrap_err().to_string();
        assert!(
            e.contains("x.json") && e.contains("fabperf.detect/1"),
            "{e}"
        );
        assert!(DetectReport::parse("{", "y.json").is_err());
    }
}
