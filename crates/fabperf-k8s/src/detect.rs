//! The subset of `fabperf detect --json` (schema `fabperf.detect/1`) that the
//! Kubernetes renderer consumes. Defined here on purpose, independent of the
//! detect crate: both sides honour the documented JSON contract, nothing more.

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::path::Path;

pub const DETECT_SCHEMA: &str = "fabperf.detect/1";

#[derive(Debug, Clone, Deserialize)]
pub struct DetectReport {
    pub schema: String,
    pub hostname: String,
    pub rdma_available: bool,
    #[serde(default)]
    pub rdma_note: Option<String>,
    #[serde(default)]
    pub rdma_devices: Vec<RdmaDevice>,
    #[serde(default)]
    pub netdevs: Vec<Netdev>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RdmaDevice {
    pub name: String,
    #[serde(default)]
    pub driver: Option<String>,
    #[serde(default)]
    pub software: bool,
    #[serde(default)]
    pub pci: Option<Pci>,
    #[serde(default)]
    pub ports: Vec<RdmaPort>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Pci {
    pub vendor_id: String,
    pub device_id: String,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub is_vf: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RdmaPort {
    pub port: u32,
    pub link_layer: String,
    pub state: String,
    #[serde(default)]
    pub rate_gbps: Option<f64>,
    #[serde(default)]
    pub netdevs: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Netdev {
    pub name: String,
    pub kind: String,
    /// `null` when detect could not read it (partial sysfs).
    #[serde(default)]
    pub mtu: Option<u32>,
    #[serde(default)]
    pub speed_mbps: Option<u64>,
    #[serde(default)]
    pub operstate: Option<String>,
    #[serde(default)]
    pub ipv4: Vec<String>,
    #[serde(default)]
    pub ipoib_mode: Option<String>,
    #[serde(default)]
    pub rdma_device: Option<String>,
    #[serde(default)]
    pub rdma_port: Option<u32>,
}

impl DetectReport {
    /// Parse a detect report and check its schema tag.
    pub fn parse(text: &str, origin: &str) -> Result<Self> {
        let r: DetectReport = serde_json::from_str(text).with_context(|| {
            format!("{origin}: not a `fabperf detect --json` report (schema {DETECT_SCHEMA})")
        })?;
        if r.schema != DETECT_SCHEMA {
            bail!(
                "{origin}: schema is {:?}, expected {DETECT_SCHEMA:?}; regenerate it with `fabperf detect --json > FILE` from a matching fabperf",
                r.schema
            );
        }
        Ok(r)
    }

    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read detect file {}", path.display()))?;
        Self::parse(&text, &path.display().to_string())
    }

    pub fn netdev(&self, name: &str) -> Option<&Netdev> {
        self.netdevs.iter().find(|n| n.name == name)
    }

    pub fn rdma_device(&self, name: &str) -> Option<&RdmaDevice> {
        self.rdma_devices.iter().find(|d| d.name == name)
    }

    /// The RDMA device and port behind a netdev: from the netdev's own
    /// `rdma_device` field, else from a port that lists the netdev.
    pub fn rdma_behind(&self, netdev: &str) -> Option<(&RdmaDevice, Option<&RdmaPort>)> {
        if let Some(nd) = self.netdev(netdev) {
            if let Some(dev) = nd.rdma_device.as_deref().and_then(|d| self.rdma_device(d)) {
                let port = dev.ports.iter().find(|p| {
                    Some(p.port) == nd.rdma_port || p.netdevs.iter().any(|n| n == netdev)
                });
                return Some((dev, port));
            }
        }
        for dev in &self.rdma_devices {
            if let Some(p) = dev
                .ports
                .iter()
                .find(|p| p.netdevs.iter().any(|n| n == netdev))
            {
                return Some((dev, Some(p)));
            }
        }
        None
    }

    /// IPoIB netdevs with an RDMA device behind them.
    pub fn ipoib_candidates(&self) -> Vec<&Netdev> {
        self.netdevs
            .iter()
            .filter(|n| n.kind == "ipoib" && self.rdma_behind(&n.name).is_some())
            .collect()
    }

    /// Ethernet netdevs whose RDMA port has an Ethernet link layer (RoCE).
    pub fn roce_candidates(&self) -> Vec<&Netdev> {
        self.netdevs
            .iter()
            .filter(|n| {
                n.kind == "ethernet"
                    && matches!(self.rdma_behind(&n.name), Some((_, Some(p))) if p.link_layer == "Ethernet")
            })
            .collect()
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
