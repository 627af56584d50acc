//! The inventory of a node: what `fabperf detect --json` prints (schema `fabperf.detect/1`).
//!
//! Field names are a contract with other tools (`fabperf k8s` reads these files): add fields
//! freely, never rename or remove one. Unknown values are `null`, never guessed.

use crate::memlock::MemlockStatus;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Value of the `schema` field.
pub const SCHEMA: &str = "fabperf.detect/1";

/// Everything `fabperf detect` knows about one node.
///
/// Deserializing fills absent fields with defaults (empty/null), so a file holding only the
/// contract fields (see docs/detect.md) loads too.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Inventory {
    /// Always [`SCHEMA`].
    pub schema: String,
    /// From `/proc/sys/kernel/hostname` (`"unknown"` if unreadable).
    pub hostname: String,
    /// Where it was read: `{"mode": "live", "root": "/"}` or `{"mode": "snapshot", "root": DIR}`.
    pub source: Source,
    /// False when the host has no RDMA device (no driver, no `/sys/class/infiniband`).
    pub rdma_available: bool,
    /// Why RDMA is unavailable, in plain words (null when available).
    pub rdma_note: Option<String>,
    /// RDMA subsystem network-namespace mode: `shared`, `exclusive`, or null when unreadable.
    pub rdma_netns_mode: Option<String>,
    /// RDMA devices (`/sys/class/infiniband/*`), sorted by name.
    pub rdma_devices: Vec<RdmaDevice>,
    /// Network interfaces (`/sys/class/net/*`), sorted by name.
    pub netdevs: Vec<Netdev>,
    /// The interface that carries the node address (what kubelet advertises), or null.
    pub node_ip: Option<NodeIp>,
    /// IPv4 routes of the main table that matter (default routes), in kernel order.
    pub default_routes: Vec<RouteInfo>,
    /// `net.ipv4.conf.{all,IF}.{rp_filter,arp_ignore,arp_announce}`.
    pub sysctl: Sysctls,
    /// The reading process's locked-memory limit and CAP_IPC_LOCK (null when unreadable).
    pub memlock: Option<MemlockStatus>,
    /// The kernel's clocksource (what every timestamp is read from), null when unreadable.
    pub clocksource: Option<ClockSource>,
    /// NUMA nodes and their CPUs (`/sys/devices/system/node/node<N>/cpulist`); empty where
    /// the kernel exposes none.
    pub numa_nodes: Vec<NumaNode>,
    /// CPUs the reading process may run on (`Cpus_allowed_list` of `/proc/self/status`: its
    /// affinity, which a cgroup cpuset narrows), in the kernel's list format; null when
    /// unreadable.
    pub cpus_allowed: Option<String>,
    /// GPUs (PCI vendor 0x10de, class 0x0300 VGA or 0x0302 3D controller), in PCI address
    /// order (`index` is the position, as `nvidia-smi` numbers them).
    pub gpus: Vec<Gpu>,
    /// Every GPU × hardware RDMA device pair and its PCIe relationship (`nvidia-smi topo -m`
    /// terms); empty without GPUs.
    pub gpu_nic: Vec<GpuNic>,
    /// The PCI bridges above GPUs and RDMA devices (root ports, switch ports) with their ACS
    /// control; empty without GPUs.
    pub pci_bridges: Vec<PciInfo>,
    /// What GPUDirect RDMA needs (peermem, dma-buf); null without GPUs.
    pub gpudirect: Option<GpuDirect>,
    /// The rule that numbered the rails of the RDMA devices (`pci-order`, `gpu-order`, `map`),
    /// null when no rule was given.
    pub rail_rule: Option<String>,
    /// Inputs that exist but could not be read (permission denied, not a regular file, too
    /// large, a symlink loop): the inventory is incomplete there, whatever else it says.
    pub unreadable: Vec<Unreadable>,
    /// Inputs that could not be read or parsed (the affected values are null).
    pub warnings: Vec<String>,
}

/// A NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NumaNode {
    pub node: u32,
    /// Its CPUs in the kernel's list format (`0-15,32-47`).
    pub cpulist: String,
}

/// An input the inventory could not see.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Unreadable {
    /// Host path (`/sys/class/infiniband`); [`Inventory::path`] gives it as read.
    pub path: String,
    /// True for a directory that could not be listed (a whole section is missing).
    pub directory: bool,
    /// Why: `permission denied`, `not a regular file (a FIFO); refused`, ...
    pub reason: String,
}

/// Where the kernel's clocksource is read (`current_clocksource`, `available_clocksource`).
pub const CLOCKSOURCE_DIR: &str = "/sys/devices/system/clocksource/clocksource0";

/// [`CLOCKSOURCE_DIR`].
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ClockSource {
    /// `current_clocksource`: `tsc`, `kvm-clock`, `arch_sys_counter`, `hpet`, ...
    pub current: String,
    /// `available_clocksource`, in the kernel's order.
    pub available: Vec<String>,
}

impl ClockSource {
    /// See [`clocksource_is_slow`].
    pub fn is_slow(&self) -> bool {
        clocksource_is_slow(&self.current)
    }
}

/// True for the clocksources without a vDSO fast path (`hpet`, `acpi_pm`, `jiffies`, `pit`):
/// every clock read is a system call with a trapped device access, ~0.5-1 µs instead of
/// ~20-60 ns. The one list fabperf uses (doctor's `clocksource-slow`, records' clock warning).
pub fn clocksource_is_slow(name: &str) -> bool {
    matches!(
        name,
        "hpet" | "acpi_pm" | "jiffies" | "refined-jiffies" | "pit"
    )
}

/// Where an inventory was read from.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Source {
    /// `live` or `snapshot`.
    pub mode: String,
    /// `/` or the snapshot directory.
    pub root: String,
    /// Where addresses and routes came from: `netlink`, or the snapshot's iproute2 JSON files.
    pub addresses: String,
}

/// One RDMA device.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RdmaDevice {
    /// Device name, e.g. `mlx5_0`, `rocep59s0f0`, `rxe0`.
    pub name: String,
    /// Kernel driver (`mlx5_core`, `rdma_rxe`, `siw`, ...), null if unknown.
    pub driver: Option<String>,
    /// True for software devices (rxe, siw) that have no PCI function.
    pub software: bool,
    /// Product family: `ConnectX-5`, `BlueField-3`, `Soft-RoCE (rxe)`, ... (null if unknown).
    pub model: Option<String>,
    /// `node_guid` as printed by the kernel (`0c42:a103:0065:3f5c`).
    pub node_guid: Option<String>,
    pub sys_image_guid: Option<String>,
    pub fw_ver: Option<String>,
    pub hca_type: Option<String>,
    pub board_id: Option<String>,
    /// `node_type` text, e.g. `1: CA` or `4: RNIC` (iWARP).
    pub node_type: Option<String>,
    /// NUMA node of the PCI function (null when unknown or -1).
    pub numa_node: Option<i32>,
    /// For rxe/siw: the netdev it is layered on.
    pub parent_netdev: Option<String>,
    /// The PCI function (null for software devices).
    pub pci: Option<PciInfo>,
    pub ports: Vec<RdmaPort>,
    /// The rail (leaf switch of a rail-optimized fabric) this device is cabled to, by the
    /// inventory's `rail_rule`; null when no rule says.
    pub rail: Option<u32>,
}

/// One GPU.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Gpu {
    /// Position in PCI address order (the order `nvidia-smi` and NVML use).
    pub index: u32,
    /// The PCI function, its PCIe link, its place in the PCI hierarchy, its IOMMU group.
    pub pci: PciInfo,
    /// Product name from the PCI device ID (null when not in fabperf's table).
    pub model: Option<String>,
    /// The RDMA devices with the closest PCIe relationship to this GPU (several when tied).
    pub nearest_rdma: Vec<String>,
    /// That relationship: `PIX`, `PXB`, `PHB`, `NODE` or `SYS` (null without RDMA devices).
    pub nearest: Option<String>,
}

/// The PCIe relationship of one GPU and one RDMA device.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuNic {
    pub gpu_index: u32,
    /// The GPU's PCI address.
    pub gpu: String,
    pub rdma_device: String,
    /// `PIX` (one PCIe switch), `PXB` (several switches, no host bridge), `PHB` (through the
    /// host bridge), `NODE` (across host bridges of one NUMA node), `SYS` (across NUMA nodes);
    /// null when the hierarchy or the NUMA nodes are unknown.
    pub relation: Option<String>,
    /// The switch ports peer-to-peer traffic between the two crosses (PIX/PXB only), from
    /// the one where their paths meet down to each device.
    pub bridges: Vec<String>,
}

/// GPUDirect RDMA prerequisites as read on the node.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuDirect {
    /// `/proc/sys/kernel/osrelease`.
    pub kernel: Option<String>,
    /// Kernel 5.12 or later (dma-buf import by RDMA drivers); null when unparsable.
    pub kernel_dmabuf: Option<bool>,
    /// `/sys/module/nvidia` exists: the NVIDIA kernel module is loaded.
    pub nvidia_loaded: bool,
    /// `/sys/module/nvidia/version`.
    pub nvidia_version: Option<String>,
    /// `/sys/module/nvidia/taint` (`P` = proprietary license, `O` = out of tree).
    pub nvidia_taint: Option<String>,
    /// The open GPU kernel module (no `P` taint, or `/proc/driver/nvidia/version` says
    /// "Open Kernel Module"); null when unknown.
    pub nvidia_open: Option<bool>,
    /// The peer-memory module loaded: `nvidia_peermem` or the older `nv_peer_mem`.
    pub peermem: Option<String>,
    /// libibverbs exports `ibv_reg_dmabuf_mr` (rdma-core 34+): probed live with dlopen, read
    /// from a capture's `fabperf-userspace.json`; null when unknown.
    pub ibverbs_dmabuf: Option<bool>,
    /// What was probed: `libibverbs.so.1`, or why it could not be loaded (live: dlopen; in a
    /// snapshot: its `fabperf-userspace.json`).
    pub ibverbs_source: Option<String>,
    /// Every dma-buf prerequisite holds (kernel, open module, libibverbs); null when one is
    /// unknown and none fails.
    pub dmabuf: Option<bool>,
}

/// A PCI function and its PCIe link.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct PciInfo {
    /// Domain:bus:device.function, e.g. `0000:3b:00.0`.
    pub address: String,
    /// The sysfs directory the attributes were read from: `/sys/bus/pci/devices/ADDR`, or the
    /// `device` directory itself in a dereferenced snapshot (`cp -rL`); empty in old files.
    pub sysfs: String,
    /// Lowercase hex without `0x`.
    pub vendor_id: String,
    pub device_id: String,
    /// Product family from the vendor/device ID (null when not in fabperf's table).
    pub model: Option<String>,
    /// Virtual function (SR-IOV).
    pub is_vf: bool,
    /// PCI class, lowercase hex without `0x` (e.g. `020700` InfiniBand, `020000` Ethernet).
    pub class: Option<String>,
    pub driver: Option<String>,
    pub numa_node: Option<i32>,
    /// Raw `current_link_speed` text, e.g. `8.0 GT/s PCIe` (null when the file is absent).
    pub current_link_speed: Option<String>,
    pub max_link_speed: Option<String>,
    /// Parsed transfer rate per lane, GT/s.
    pub current_speed_gts: Option<f64>,
    pub max_speed_gts: Option<f64>,
    /// PCIe generation (1..6) of the current / maximum speed.
    pub current_gen: Option<u8>,
    pub max_gen: Option<u8>,
    pub current_width: Option<u32>,
    pub max_width: Option<u32>,
    /// Usable bandwidth of the current link, Gbit/s, as the kernel computes it (encoding only).
    pub ceiling_gbps: Option<f64>,
    /// Usable bandwidth the function is capable of at max speed and width.
    pub max_ceiling_gbps: Option<f64>,
    /// The PCI host bridge above the function (`pci0000:3a`), from its sysfs path (GPUs,
    /// RDMA devices and bridges; null elsewhere and in a dereferenced snapshot).
    pub host_bridge: Option<String>,
    /// The bridges between that host bridge and the function, root port first.
    pub upstream: Vec<String>,
    /// Its configuration space decoded (`config`; GPUs, RDMA devices and bridges): PCIe port
    /// type, Device Control (MaxPayload, MaxReadReq), link, ACS. Null when unreadable.
    pub config: Option<crate::pcie::ConfigInfo>,
    /// IOMMU group (`iommu_group` link) and the group's `type`: `identity` (passthrough),
    /// `DMA` or `DMA-FQ` (translated), `blocked`, ...
    pub iommu_group: Option<u32>,
    pub iommu_type: Option<String>,
}

impl PciInfo {
    /// The sysfs directory of the function: `sysfs` when known, else
    /// `/sys/bus/pci/devices/<address>`.
    pub fn sysfs_or_bus(&self) -> String {
        if self.sysfs.is_empty() {
            format!("/sys/bus/pci/devices/{}", self.address)
        } else {
            self.sysfs.clone()
        }
    }
}

/// One port of an RDMA device.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RdmaPort {
    pub port: u32,
    /// `Ethernet` | `InfiniBand` | `Unknown`.
    pub link_layer: String,
    /// `DOWN` | `INIT` | `ARMED` | `ACTIVE` | `ACTIVE_DEFER` | `NOP` | `UNKNOWN`.
    pub state: String,
    /// Physical state text, e.g. `LinkUp`, `Polling`, `Disabled` (null if unreadable).
    pub phys_state: Option<String>,
    /// Raw `rate` text, e.g. `100 Gb/sec (4X EDR)`.
    pub rate: Option<String>,
    pub rate_gbps: Option<f64>,
    pub lanes: Option<u32>,
    /// Lane generation name: `SDR` .. `XDR` (null when the kernel prints none).
    pub lane_speed: Option<String>,
    /// Signalling rate of one lane of that generation, Gb/s (EDR 25, HDR 50, NDR 100, ...).
    pub lane_gbps: Option<f64>,
    /// InfiniBand LID / subnet-manager LID (hex text, IB only).
    pub lid: Option<String>,
    pub sm_lid: Option<String>,
    /// Non-empty GID table entries.
    pub gids: Vec<GidEntry>,
    /// First RoCE v2 GID that encodes an IPv4 address (Ethernet ports).
    pub roce_v2_ipv4_gid_index: Option<u32>,
    /// GID index fabperf uses: RoCE v2 + IPv4 first, then RoCE v2 global IPv6, then RoCE v1;
    /// never an all-zero or link-local entry. For InfiniBand ports: the first valid entry.
    pub preferred_gid_index: Option<u32>,
    /// Netdevs bound to this port (from GID ndevs, the rxe parent or the IPoIB address rule).
    pub netdevs: Vec<String>,
}

/// One GID table entry.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct GidEntry {
    pub index: u32,
    /// As the kernel prints it (`fe80:0000:...`).
    pub gid: String,
    /// `IB/RoCE v1`, `RoCE v2`, or null when unreadable.
    #[serde(rename = "type")]
    pub gid_type: Option<String>,
    /// The netdev of the entry (null on IB ports or when unreadable).
    pub netdev: Option<String>,
    /// The IPv4 address an IPv4-mapped GID encodes.
    pub ipv4: Option<String>,
    /// True for fe80::/10 entries.
    pub link_local: bool,
}

/// One network interface.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct Netdev {
    pub name: String,
    /// `ethernet` | `ipoib` | `loopback` | `other`.
    pub kind: String,
    /// ARPHRD type number from `type` (1 Ethernet, 32 InfiniBand, 772 loopback).
    pub arphrd: Option<u32>,
    pub mtu: Option<u32>,
    /// Mb/s; null when unknown or the link is down.
    pub speed_mbps: Option<u64>,
    pub operstate: Option<String>,
    /// Hardware address as printed by the kernel.
    pub address: Option<String>,
    /// CIDR strings.
    pub ipv4: Vec<String>,
    pub ipv6: Vec<String>,
    /// `datagram` | `connected` for IPoIB, else null.
    pub ipoib_mode: Option<String>,
    /// IPoIB partition key, e.g. `0xffff`.
    pub ipoib_pkey: Option<String>,
    /// RDMA device and port behind this netdev.
    pub rdma_device: Option<String>,
    pub rdma_port: Option<u32>,
    /// Driver of the underlying device (`mlx5_core`, `virtio_net`, `veth`, ...).
    pub driver: Option<String>,
    /// PCI function behind the netdev (walking up from virtio and similar buses), or null.
    pub pci_address: Option<String>,
    /// That PCI function and its PCIe link (null without one; link fields null when the bus
    /// reports none, e.g. legacy PCI in a VM).
    pub pci: Option<PciInfo>,
    /// True when the netdev lives under /sys/devices/virtual (veth, bridge, vxlan, ...).
    pub virtual_device: bool,
    /// `DEVTYPE=` of the netdev's `uevent`: `bridge`, `vxlan`, `vlan`, `bond`, `wlan`, ...;
    /// null for plain Ethernet functions, veths and unknown.
    pub devtype: Option<String>,
    /// Egress rate cap set with `tc` (root `tbf`, `htb` default class ceiling, `netem` rate),
    /// bit/s; null when the interface is not shaped or shaping is unknown (a snapshot without
    /// `fabperf-tc.json`). `speed_mbps` does not show it: a veth always says 10000.
    pub tc_rate_bps: Option<u64>,
    /// The `tc` objects that set [`Netdev::tc_rate_bps`], e.g. `tbf 8001: (root qdisc) rate 1 Gbit/s`.
    pub tc_shaping: Option<String>,
}

impl Netdev {
    /// What the link carries at most, Gbit/s: the smaller of its speed and its `tc` cap.
    pub fn effective_gbps(&self) -> Option<f64> {
        let speed = self.speed_mbps.map(|s| s as f64 / 1000.0);
        let tc = self.tc_rate_bps.map(|r| r as f64 / 1e9);
        match (speed, tc) {
            (Some(s), Some(t)) => Some(s.min(t)),
            (s, t) => s.or(t),
        }
    }
}

/// The node address and the interface carrying it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeIp {
    pub address: String,
    pub interface: String,
    /// `node-ip-flag` or `default-route`.
    pub source: String,
    /// The route that selects it, e.g. `default via 192.0.2.1 dev eth0`.
    pub route: Option<String>,
    /// The subnet of the address on that interface, e.g. `192.0.2.0/24`.
    pub subnet: Option<String>,
}

/// A route of the main table.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RouteInfo {
    /// `default` or a CIDR.
    pub dst: String,
    pub gateway: Option<String>,
    pub dev: Option<String>,
    pub prefsrc: Option<String>,
    pub metric: Option<u32>,
}

/// The IPv4 conf sysctls relevant to multi-homed RDMA/RoCE hosts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct Sysctls {
    pub all: ConfValues,
    /// Per interface (only interfaces whose conf directory exists).
    pub interfaces: BTreeMap<String, ConfValues>,
}

/// `rp_filter`, `arp_ignore`, `arp_announce` of one conf directory (null when unreadable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ConfValues {
    pub rp_filter: Option<u32>,
    pub arp_ignore: Option<u32>,
    pub arp_announce: Option<u32>,
}

/// Errors loading an inventory file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is not a fabperf detect JSON file: {source}")]
    Json {
        path: String,
        source: serde_json::Error,
    },
    #[error("{path} has schema {found:?}; this fabperf reads {SCHEMA:?} (re-run `fabperf detect --json` with this version)")]
    Schema { path: String, found: String },
}

impl Inventory {
    /// Parse the output of `fabperf detect --json`.
    pub fn from_json_str(text: &str, what: &str) -> Result<Inventory, LoadError> {
        let inv: Inventory = serde_json::from_str(text).map_err(|e| LoadError::Json {
            path: what.to_string(),
            source: e,
        })?;
        if inv.schema != SCHEMA {
            return Err(LoadError::Schema {
                path: what.to_string(),
                found: inv.schema,
            });
        }
        Ok(inv)
    }

    /// Load a file written from `fabperf detect --json`: a regular file (a FIFO or device is
    /// refused, not waited on) of at most [`crate::root::MAX_JSON_BYTES`].
    pub fn from_json_file(path: impl AsRef<Path>) -> Result<Inventory, LoadError> {
        let p = path.as_ref();
        let text = read_json_file(p).map_err(|e| LoadError::Io {
            path: p.display().to_string(),
            source: e,
        })?;
        Self::from_json_str(&text, &p.display().to_string())
    }

    /// Pretty JSON (the `--json` output).
    pub fn to_json_pretty(&self) -> String {
        serde_json::to_string_pretty(self).expect("inventory serializes")
    }

    /// The netdev with this name.
    pub fn netdev(&self, name: &str) -> Option<&Netdev> {
        self.netdevs.iter().find(|n| n.name == name)
    }

    /// The RDMA device with this name.
    pub fn rdma_device(&self, name: &str) -> Option<&RdmaDevice> {
        self.rdma_devices.iter().find(|d| d.name == name)
    }

    /// The RDMA device and port behind a netdev: from the netdev's own `rdma_device` field,
    /// else from a port that lists the netdev.
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

    /// Path as read for this inventory (prefixes the snapshot root), for evidence.
    pub fn path(&self, host_path: &str) -> String {
        if self.source.root == "/" {
            host_path.to_string()
        } else {
            format!(
                "{}/{}",
                self.source.root.trim_end_matches('/'),
                host_path.trim_start_matches('/')
            )
        }
    }
}

/// Read a JSON input given by the user: a regular file (opened with `O_NONBLOCK`, so a FIFO
/// is refused rather than waited on) of at most [`crate::root::MAX_JSON_BYTES`].
pub fn read_json_file(p: &Path) -> std::io::Result<String> {
    use std::io::{Error, ErrorKind, Read};
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(p)?;
    let md = f.metadata()?;
    if !md.file_type().is_file() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            "not a regular file (a FIFO, device or directory); refused",
        ));
    }
    let limit = crate::root::MAX_JSON_BYTES;
    if md.len() > limit {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("larger than the {limit}-byte limit; refused"),
        ));
    }
    let mut data = Vec::new();
    f.take(limit + 1).read_to_end(&mut data)?;
    if data.len() as u64 > limit {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("larger than the {limit}-byte limit; refused"),
        ));
    }
    String::from_utf8(data).map_err(|_| Error::new(ErrorKind::InvalidData, "not UTF-8 text"))
}
