//! GPU memory for the verbs tests (`--mem cuda[:GPU]`): which GPU each end uses, how its memory
//! is registered with the NIC, and what the records say about it.
//!
//! * The GPU: the one named (`cuda:3` = GPU 3 in PCI address order, as `fabperf detect` and
//!   `nvidia-smi` number them; `cuda:0000:1a:00.0` by PCI address), else the one nearest the
//!   test's RDMA device by the PCIe relationship `fabperf detect` computes from sysfs (PIX before
//!   PXB, PHB, NODE, SYS; the lower GPU number on a tie), among the GPUs the CUDA driver can
//!   open in this process (a pod sees only the GPUs allocated to it, `CUDA_VISIBLE_DEVICES`
//!   narrows them too). The CUDA driver is then asked for that PCI address, so CUDA's own
//!   device order never matters.
//! * Registration: `auto` exports the memory as a dma-buf (`cuMemGetHandleForAddressRange`) and
//!   registers it with `ibv_reg_dmabuf_mr`, and falls back to `ibv_reg_mr` on the device pointer
//!   through nvidia_peermem when dma-buf is unavailable (the reason goes into the record);
//!   `dmabuf` and `peermem` force one (perftest's `--use_cuda_dmabuf` and plain `--use_cuda`).

use crate::error::RdmaError;
use crate::sys::cuda;
use fabperf_detect::Inventory;
use fabperf_results::GpuMemory;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// Which GPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuSel {
    /// The one nearest the RDMA device.
    Nearest,
    /// GPU N in PCI address order.
    Index(u32),
    /// By PCI address (`0000:1a:00.0`, lowercase).
    Bus(String),
}

/// Where an end's buffers live: `host`, `cuda`, `cuda:N` or `cuda:<PCI address>`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum MemSpec {
    #[default]
    Host,
    Cuda(GpuSel),
}

impl MemSpec {
    pub fn is_host(&self) -> bool {
        matches!(self, MemSpec::Host)
    }

    pub fn is_cuda(&self) -> bool {
        !self.is_host()
    }
}

/// A PCI address in sysfs form: `1a:00.0` gets domain 0000, hex is lowercased.
fn normalize_bus(s: &str) -> Option<String> {
    let s = s.to_ascii_lowercase();
    let full = if s.len() == 7 { format!("0000:{s}") } else { s };
    fabperf_detect::parse::is_pci_address(&full).then_some(full)
}

impl std::str::FromStr for MemSpec {
    type Err = String;
    fn from_str(s: &str) -> Result<MemSpec, String> {
        let bad = || {
            format!(
                "memory {s:?}: use host, cuda (the GPU nearest the NIC), cuda:N (GPU N in PCI \
                 address order, as `fabperf detect` numbers them) or cuda:<PCI address> \
                 (cuda:0000:1a:00.0)"
            )
        };
        match s {
            "host" => return Ok(MemSpec::Host),
            "cuda" => return Ok(MemSpec::Cuda(GpuSel::Nearest)),
            _ => {}
        }
        let rest = s.strip_prefix("cuda:").ok_or_else(bad)?;
        if let Ok(n) = rest.parse::<u32>() {
            return Ok(MemSpec::Cuda(GpuSel::Index(n)));
        }
        normalize_bus(rest)
            .map(|b| MemSpec::Cuda(GpuSel::Bus(b)))
            .ok_or_else(bad)
    }
}

impl std::fmt::Display for MemSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MemSpec::Host => write!(f, "host"),
            MemSpec::Cuda(GpuSel::Nearest) => write!(f, "cuda"),
            MemSpec::Cuda(GpuSel::Index(n)) => write!(f, "cuda:{n}"),
            MemSpec::Cuda(GpuSel::Bus(b)) => write!(f, "cuda:{b}"),
        }
    }
}

impl Serialize for MemSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for MemSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<MemSpec, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// How GPU memory is registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuReg {
    /// dma-buf, else peermem.
    #[default]
    Auto,
    Dmabuf,
    Peermem,
}

impl GpuReg {
    pub fn is_auto(&self) -> bool {
        *self == GpuReg::Auto
    }
}

impl std::str::FromStr for GpuReg {
    type Err = String;
    fn from_str(s: &str) -> Result<GpuReg, String> {
        match s {
            "auto" => Ok(GpuReg::Auto),
            "dmabuf" | "dma-buf" => Ok(GpuReg::Dmabuf),
            "peermem" => Ok(GpuReg::Peermem),
            _ => Err(format!(
                "GPU registration {s:?}: use auto (dma-buf, else peermem), dmabuf or peermem"
            )),
        }
    }
}

/// The GPU an end uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuChoice {
    /// Position in PCI address order.
    pub index: u32,
    pub bus_id: String,
    /// PCIe relationship to the RDMA device (`PIX` ...; `None` when unknown).
    pub relation: Option<String>,
}

fn listed(inv: &Inventory) -> String {
    inv.gpus
        .iter()
        .map(|g| format!("GPU{} {}", g.index, g.pci.address))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Choose the GPU for `sel` near RDMA device `nic`, from `inv` (a `fabperf detect` inventory of
/// this node), among the GPUs whose PCI addresses are in `usable` (what the CUDA driver lists;
/// `None`: all).
pub fn choose_gpu(
    inv: &Inventory,
    nic: &str,
    sel: &GpuSel,
    usable: Option<&[String]>,
) -> Result<GpuChoice, String> {
    if inv.gpus.is_empty() {
        return Err(
            "no GPU on this node: no PCI function of vendor 0x10de with class 0x0300/0x0302 in \
             /sys/bus/pci/devices (`fabperf detect` lists them)"
                .into(),
        );
    }
    let can_use = |bus: &str| usable.is_none_or(|u| u.iter().any(|b| b == bus));
    let relation = |bus: &str| {
        inv.gpu_nic
            .iter()
            .find(|l| l.gpu == bus && l.rdma_device == nic)
            .and_then(|l| l.relation.clone())
    };
    let not_usable =
        |g: &fabperf_detect::Gpu| {
            format!(
            "GPU{} {} is not usable by CUDA in this process (CUDA lists {}): in a pod, request it \
             (`nvidia.com/gpu`); elsewhere check CUDA_VISIBLE_DEVICES",
            g.index,
            g.pci.address,
            usable
                .map(|u| if u.is_empty() { "none".to_string() } else { u.join(", ") })
                .unwrap_or_default()
        )
        };
    let pick = |g: &fabperf_detect::Gpu| -> Result<GpuChoice, String> {
        if !can_use(&g.pci.address) {
            return Err(not_usable(g));
        }
        Ok(GpuChoice {
            index: g.index,
            bus_id: g.pci.address.clone(),
            relation: relation(&g.pci.address),
        })
    };
    match sel {
        GpuSel::Index(n) => match inv.gpus.iter().find(|g| g.index == *n) {
            Some(g) => pick(g),
            None => Err(format!(
                "GPU {n}: this node has {} GPU(s): {}",
                inv.gpus.len(),
                listed(inv)
            )),
        },
        GpuSel::Bus(b) => match inv.gpus.iter().find(|g| &g.pci.address == b) {
            Some(g) => pick(g),
            None => Err(format!("no GPU at {b}; this node has {}", listed(inv))),
        },
        GpuSel::Nearest => {
            let best = inv
                .gpus
                .iter()
                .filter(|g| can_use(&g.pci.address))
                .min_by_key(|g| {
                    let rank = relation(&g.pci.address)
                        .as_deref()
                        .and_then(fabperf_detect::Relation::parse)
                        .map(|r| r as u8)
                        .unwrap_or(u8::MAX);
                    (rank, g.index)
                });
            match best {
                Some(g) => pick(g),
                None => Err(format!(
                    "none of this node's GPUs ({}) is usable by CUDA in this process: in a pod, \
                     request one (`nvidia.com/gpu`); elsewhere check CUDA_VISIBLE_DEVICES",
                    listed(inv)
                )),
            }
        }
    }
}

/// Load and initialise the CUDA driver (fails fast, before any RDMA setup, with what is
/// missing).
pub(crate) fn ensure_driver() -> Result<(), RdmaError> {
    cuda::driver_version().map(|_| ()).map_err(RdmaError::Setup)
}

/// What an end's endpoint allocates its buffers in.
pub(crate) enum MemPlan {
    Host,
    Cuda {
        gpu: Arc<cuda::Gpu>,
        reg: GpuReg,
        info: GpuMemory,
    },
}

/// The memory plan of an end whose RDMA device is `nic`.
pub(crate) fn prepare(spec: &MemSpec, reg: GpuReg, nic: &str) -> Result<MemPlan, RdmaError> {
    let MemSpec::Cuda(sel) = spec else {
        return Ok(MemPlan::Host);
    };
    let devices = cuda::devices().map_err(RdmaError::Setup)?;
    let inv = fabperf_detect::detect_live(&fabperf_detect::DetectOptions::default())
        .map_err(|e| RdmaError::Setup(format!("reading the PCI topology: {e}")))?;
    let usable: Vec<String> = devices.iter().map(|d| d.bus_id.clone()).collect();
    let choice = choose_gpu(&inv, nic, sel, Some(&usable)).map_err(RdmaError::Setup)?;
    let dev = devices
        .iter()
        .find(|d| d.bus_id == choice.bus_id)
        .ok_or_else(|| RdmaError::Setup(format!("GPU {} vanished", choice.bus_id)))?;
    let gpu = cuda::Gpu::open(dev).map_err(RdmaError::Setup)?;
    Ok(MemPlan::Cuda {
        info: GpuMemory {
            index: choice.index,
            bus_id: choice.bus_id,
            name: Some(dev.name.clone()).filter(|n| !n.is_empty()),
            cuda_device: Some(dev.ordinal),
            registration: String::new(),
            relation: choice.relation,
            note: None,
        },
        gpu,
        reg,
    })
}

/// The peer-memory module is loaded (`/sys/module/nvidia_peermem` or the older
/// `nv_peer_mem`).
pub(crate) fn peermem_loaded() -> bool {
    ["nvidia_peermem", "nv_peer_mem"]
        .iter()
        .any(|m| std::path::Path::new("/sys/module").join(m).is_dir())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabperf_detect::{detect_root, DetectOptions};
    use std::path::Path;

    fn fixture(name: &str) -> Inventory {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fabperf-detect/tests/fixtures")
            .join(name);
        detect_root(&dir, &DetectOptions::default()).unwrap()
    }

    #[test]
    fn mem_specs_parse_and_print() {
        for (s, want) in [
            ("host", MemSpec::Host),
            ("cuda", MemSpec::Cuda(GpuSel::Nearest)),
            ("cuda:3", MemSpec::Cuda(GpuSel::Index(3))),
            (
                "cuda:0000:1A:00.0",
                MemSpec::Cuda(GpuSel::Bus("0000:1a:00.0".into())),
            ),
            (
                "cuda:1a:00.0",
                MemSpec::Cuda(GpuSel::Bus("0000:1a:00.0".into())),
            ),
        ] {
            assert_eq!(s.parse::<MemSpec>().unwrap(), want, "{s}");
        }
        assert_eq!(MemSpec::Cuda(GpuSel::Index(3)).to_string(), "cuda:3");
        for bad in ["gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1a:00", "CUDA"] {
            let e = bad.parse::<MemSpec>().unwrap_err();
            assert!(e.contains("use host, cuda"), "{bad}: {e}");
        }
        let j = serde_json::to_string(&MemSpec::Cuda(GpuSel::Bus("0000:1a:00.0".into()))).unwrap();
        assert_eq!(j, "\"cuda:0000:1a:00.0\"");
        assert!(serde_json::from_str::<MemSpec>("\"cuda:zz\"").is_err());
        assert_eq!("dma-buf".parse::<GpuReg>(), Ok(GpuReg::Dmabuf));
        assert!("both".parse::<GpuReg>().unwrap_err().contains("auto"));
    }

    #[test]
    fn nearest_gpu_from_the_topology() {
        let inv = fixture("hgx-h100");
        // Each ConnectX-7 has its GPU under the same switch.
        for n in 0..8u32 {
            let c = choose_gpu(&inv, &format!("mlx5_{n}"), &GpuSel::Nearest, None).unwrap();
            assert_eq!(c.index, n);
            assert_eq!(c.relation.as_deref(), Some("PIX"));
        }
        // The frontend NIC: GPU0 and GPU1 are PHB, GPU0 wins the tie.
        let c = choose_gpu(&inv, "mlx5_8", &GpuSel::Nearest, None).unwrap();
        assert_eq!((c.index, c.relation.as_deref()), (0, Some("PHB")));
        // A pod allocated GPU5 only: it is the nearest usable one (SYS from mlx5_0).
        let only5 = vec!["0000:a0:00.0".to_string()];
        let c = choose_gpu(&inv, "mlx5_0", &GpuSel::Nearest, Some(&only5)).unwrap();
        assert_eq!((c.index, c.relation.as_deref()), (5, Some("SYS")));
        // Allocated GPU2 and GPU1: GPU1 is PXB from mlx5_0, GPU2 NODE.
        let two = vec!["0000:3c:00.0".to_string(), "0000:1e:00.0".to_string()];
        let c = choose_gpu(&inv, "mlx5_0", &GpuSel::Nearest, Some(&two)).unwrap();
        assert_eq!((c.index, c.relation.as_deref()), (1, Some("PXB")));
    }

    #[test]
    fn named_gpus_and_errors() {
        let inv = fixture("hgx-h100");
        let c = choose_gpu(&inv, "mlx5_3", &GpuSel::Index(6), None).unwrap();
        assert_eq!(
            (c.bus_id.as_str(), c.relation.as_deref()),
            ("0000:bc:00.0", Some("SYS"))
        );
        let c = choose_gpu(&inv, "mlx5_3", &GpuSel::Bus("0000:40:00.0".into()), None).unwrap();
        assert_eq!((c.index, c.relation.as_deref()), (3, Some("PIX")));
        let e = choose_gpu(&inv, "mlx5_0", &GpuSel::Index(8), None).unwrap_err();
        assert!(
            e.starts_with("GPU 8: this node has 8 GPU(s): GPU0 0000:1a:00.0"),
            "{e}"
        );
        let e = choose_gpu(&inv, "mlx5_0", &GpuSel::Bus("0000:99:00.0".into()), None).unwrap_err();
        assert!(e.contains("no GPU at 0000:99:00.0"), "{e}");
        let none: Vec<String> = Vec::new();
        let e = choose_gpu(&inv, "mlx5_0", &GpuSel::Index(0), Some(&none)).unwrap_err();
        assert!(
            e.contains("not usable by CUDA") && e.contains("CUDA lists none"),
            "{e}"
        );
        let e = choose_gpu(&inv, "mlx5_0", &GpuSel::Nearest, Some(&none)).unwrap_err();
        assert!(e.contains("none of this node's GPUs"), "{e}");
        // No GPU at all, and an RDMA device the topology does not know (rxe).
        let e = choose_gpu(&fixture("rxe-veth"), "rxe0", &GpuSel::Nearest, None).unwrap_err();
        assert!(e.starts_with("no GPU on this node"), "{e}");
        let c = choose_gpu(&inv, "rxe0", &GpuSel::Nearest, None).unwrap();
        assert_eq!((c.index, c.relation), (0, None));
    }
}
