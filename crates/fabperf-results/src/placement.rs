//! Where one end of a test ran: the link it used, that link's rate, the NUMA node of the NIC,
//! the CPUs its data threads were allowed on and the node its buffers landed on.

use serde::{Deserialize, Serialize};

/// One end's placement (`placement_local` / `placement_remote` in a record).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// How the CPUs were chosen: `auto` (the NIC's NUMA node), `list` (given) or `none`
    /// (not pinned).
    pub cpu: String,
    /// CPUs the data threads were pinned to, in the kernel's list format (`0-3,8`); absent
    /// when they were not pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_list: Option<String>,
    /// NUMA node of the NIC (its PCI function); absent when unknown, for virtual links and
    /// where the kernel reports none (-1 on single-node machines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub numa_node: Option<u32>,
    /// NUMA node holding the test's buffers, as the kernel reports it for their pages
    /// (`get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR)`); absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buffer_numa_node: Option<u32>,
    /// The netdev the test used (the interface holding the socket's local address, or the
    /// RDMA port's netdev).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface: Option<String>,
    /// The RDMA device and port, e.g. `mlx5_0 port 1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rdma_port: Option<String>,
    /// The rate of the link, Gbit/s: the RDMA port's `rate`, or the netdev's `speed`, capped
    /// by its `tc` shaping; absent on virtual links that are not shaped and when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_rate_gbps: Option<f64>,
    /// Where `port_rate_gbps` comes from: `rdma port rate`, `netdev speed` or `tc cap`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_rate_source: Option<String>,
    /// The link is virtual (loopback, veth, bridge, or a software RDMA device on one): its
    /// nominal speed is a label, not a limit, so it gives no port rate.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub virtual_link: bool,
    /// The buffers are in GPU memory (RDMA tests with `--mem cuda`): which GPU, how it was
    /// registered and its PCIe relationship to the NIC; absent for host memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<Box<GpuMemory>>,
}

/// One end's buffers in GPU memory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuMemory {
    /// The GPU's position in PCI address order (`fabperf detect`'s and `nvidia-smi`'s GPU
    /// numbers).
    pub index: u32,
    /// Its PCI address (`0000:1a:00.0`).
    pub bus_id: String,
    /// Its name as the CUDA driver gives it (`NVIDIA H100 80GB HBM3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// CUDA's ordinal for it in that process (CUDA's order, which `CUDA_VISIBLE_DEVICES`
    /// changes; perftest's `--use_cuda` takes this number).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_device: Option<i32>,
    /// How the NIC registered it: `dma-buf` (`ibv_reg_dmabuf_mr`) or `peermem` (`ibv_reg_mr`
    /// through nvidia_peermem).
    pub registration: String,
    /// PCIe relationship of the GPU and the test's RDMA device (`PIX`, `PXB`, `PHB`, `NODE`,
    /// `SYS`); absent when unknown (a software RDMA device has none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub relation: Option<String>,
    /// Why the registration differs from the first choice (dma-buf unavailable, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl GpuMemory {
    /// `GPU0 0000:1a:00.0 (dma-buf, PIX)`.
    pub fn describe(&self) -> String {
        let mut s = format!("GPU{} {} ({}", self.index, self.bus_id, self.registration);
        if let Some(r) = &self.relation {
            s.push_str(&format!(", {r}"));
        }
        s.push(')');
        s
    }
}

impl Placement {
    /// Apply `f` to every text field.
    pub fn map_text(&mut self, f: &impl Fn(&str) -> String) {
        self.cpu = f(&self.cpu);
        for o in [
            &mut self.cpu_list,
            &mut self.interface,
            &mut self.rdma_port,
            &mut self.port_rate_source,
        ]
        .into_iter()
        .flatten()
        {
            *o = f(o);
        }
        if let Some(g) = &mut self.gpu {
            g.bus_id = f(&g.bus_id);
            g.registration = f(&g.registration);
            for o in [&mut g.name, &mut g.relation, &mut g.note]
                .into_iter()
                .flatten()
            {
                *o = f(o);
            }
        }
    }
}
