//! What every measurement carries besides its figures, on both ends: the link it used and
//! that link's rate, where its data threads and buffers ran (NUMA placement, `--cpu`), and
//! the counters that moved during the measured interval, turned into findings.
//!
//! Each end builds an [`EndSetup`] before the test: the link (the netdev holding the socket's
//! local address, or the RDMA device and port chosen) from a detect inventory, the counters to
//! read on it, and the CPUs for its data threads ([`CpuSpec`]). The data threads pin
//! themselves ([`EndSetup::pin`]) before they allocate their buffers, so first-touch places
//! the buffers on the node of those CPUs, and the node the kernel actually used is read back
//! from the pages ([`buffer_node`]). The host meter ([`EndSetup::meter`]) snapshots the
//! counters with the host's CPU time at the start and the end of the measured interval, and
//! [`EndSetup::report`] is what the end tells its peer ([`HostReport`]). The client puts both
//! ends' reports into its records with [`apply`].
//!
//! Buffers are placed by first touch from a pinned thread rather than by `mbind` /
//! `set_mempolicy`: it needs no memory-policy system call or privilege, works under any
//! cgroup memory policy the node allows, and is what the kernel does by default for the pages
//! a thread touches first; the record then reports where the pages really are, so a node that
//! was full (the kernel falls back to another one) shows as `buffer-off-node` instead of
//! passing unnoticed.

use crate::cpu::{HostMeter, HostReport};
use fabperf_detect::counters::{self, CounterSnapshot, CounterSpec};
use fabperf_detect::link::TestLink;
use fabperf_detect::placement;
use fabperf_detect::root::Root;
use fabperf_detect::{DetectOptions, Inventory};
use fabperf_results::{Counters, Note, Placement, Record, Side, Transport, Warning};
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::sync::Arc;

/// `--cpu`: where the data threads of each end run.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum CpuSpec {
    /// CPUs of the NIC's NUMA node that this end may use, without the CPUs serving the NIC's
    /// interrupts when others remain (`fabperf_detect::placement::choose`).
    #[default]
    Auto,
    /// Not pinned.
    None,
    /// These CPUs, on both ends.
    List(Vec<u32>),
}

impl CpuSpec {
    pub fn is_auto(&self) -> bool {
        *self == CpuSpec::Auto
    }

    /// `auto`, `none` or `list`.
    pub fn mode(&self) -> &'static str {
        match self {
            CpuSpec::Auto => "auto",
            CpuSpec::None => "none",
            CpuSpec::List(_) => "list",
        }
    }
}

impl std::str::FromStr for CpuSpec {
    type Err = String;

    /// `auto`, `none`, or a CPU list (`0-3,8`).
    fn from_str(s: &str) -> Result<CpuSpec, String> {
        match s.trim() {
            "auto" => Ok(CpuSpec::Auto),
            "none" => Ok(CpuSpec::None),
            t => {
                let cpus = placement::parse_cpu_list(t).map_err(|e| {
                    format!("--cpu takes auto, none or a CPU list such as 0-3,8: {e}")
                })?;
                if cpus.is_empty() {
                    return Err(
                        "--cpu: the CPU list is empty (give auto, none or CPUs such as 0-3)".into(),
                    );
                }
                if let Some(c) = cpus
                    .iter()
                    .find(|c| **c as usize >= rustix::thread::CpuSet::MAX_CPU)
                {
                    return Err(format!(
                        "--cpu: CPU {c} is above the {} CPUs an affinity mask holds",
                        rustix::thread::CpuSet::MAX_CPU
                    ));
                }
                Ok(CpuSpec::List(cpus))
            }
        }
    }
}

impl std::fmt::Display for CpuSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CpuSpec::List(c) => f.write_str(&placement::format_cpu_list(c)),
            other => f.write_str(other.mode()),
        }
    }
}

impl Serialize for CpuSpec {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for CpuSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<CpuSpec, D::Error> {
        let s = String::deserialize(d)?;
        if s.len() > 4096 {
            return Err(serde::de::Error::custom(
                "cpu: a CPU list longer than 4096 bytes",
            ));
        }
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// The NUMA node of the page holding `addr` (a page the process has touched), as the kernel
/// placed it: `get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR)`. `None` where the kernel has no NUMA
/// support or the address is not mapped.
pub fn buffer_node(buf: &[u8]) -> Option<u32> {
    if buf.is_empty() {
        return None;
    }
    page_node(buf.as_ptr() as usize)
}

/// The NUMA node of the page holding `addr` (see [`buffer_node`]); the address is only
/// looked up by the kernel, never dereferenced, so any value is safe to pass (an unmapped
/// one gives `None`).
pub fn page_node(addr: usize) -> Option<u32> {
    const MPOL_F_NODE: libc::c_ulong = 1;
    const MPOL_F_ADDR: libc::c_ulong = 2;
    let mut node: libc::c_int = -1;
    // SAFETY: get_mempolicy writes one int to `node` (a valid, writable local); with a null
    // nodemask and maxnode 0 it writes nothing else, and `addr` is only looked up in the
    // process's page tables by the kernel (EFAULT when unmapped), never dereferenced here.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_get_mempolicy,
            &mut node as *mut libc::c_int,
            std::ptr::null_mut::<libc::c_ulong>(),
            0 as libc::c_ulong,
            addr as *const libc::c_void,
            MPOL_F_NODE | MPOL_F_ADDR,
        )
    };
    (rc == 0).then(|| u32::try_from(node).ok()).flatten()
}

/// Write one byte per page of `buf`, so its pages are allocated now, by this thread (on its
/// node), and not by whoever touches them first later.
pub fn first_touch(buf: &mut [u8]) {
    let page = rustix::param::page_size();
    let mut i = 0;
    while i < buf.len() {
        // SAFETY: `i` < `buf.len()`; a volatile write so the store is not optimized away.
        unsafe { std::ptr::write_volatile(buf.as_mut_ptr().add(i), buf[i]) };
        i += page;
    }
}

/// The local address the kernel would use to reach `addr` (a route lookup: a UDP socket is
/// connected, nothing is sent), so a client can set its end up before it connects.
pub fn local_ip_towards(addr: std::net::SocketAddr) -> Option<IpAddr> {
    let any: std::net::SocketAddr = if addr.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let s = std::net::UdpSocket::bind(any).ok()?;
    s.connect(addr).ok()?;
    Some(s.local_addr().ok()?.ip())
}

/// This end's link, counters and CPUs for one test.
#[derive(Debug, Clone)]
pub struct EndSetup {
    pub side: Side,
    pub link: TestLink,
    pub cpu: CpuSpec,
    /// The CPUs its data threads are pinned to (`None`: not pinned).
    pub cpus: Option<Vec<u32>>,
    counters: Arc<CounterSpec>,
    /// Warnings found while setting up (NUMA mismatch, ...).
    notes: Vec<Note>,
}

/// Threads pinned by [`EndSetup::pin`] get their previous affinity back when this drops (a
/// thread that serves more than one test, or a caller's own thread, is left as it was).
pub struct Pinned {
    previous: Option<rustix::thread::CpuSet>,
    /// Why pinning failed.
    pub error: Option<String>,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(p) = &self.previous {
            let _ = rustix::thread::sched_setaffinity(None, p);
        }
    }
}

fn detect_live() -> Option<Inventory> {
    fabperf_detect::detect(None, &DetectOptions::default()).ok()
}

impl EndSetup {
    /// The setup for a socket test whose local address (on this end) is `local` (`None`:
    /// unknown, the link is not known either).
    pub fn for_socket(
        side: Side,
        local: Option<IpAddr>,
        cpu: &CpuSpec,
    ) -> Result<EndSetup, String> {
        let inv = detect_live();
        let Some(local) = local else {
            return Self::build(side, inv.as_ref(), TestLink::default(), true, cpu);
        };
        let link = inv
            .as_ref()
            .map(|i| fabperf_detect::link::for_ip(i, local))
            .unwrap_or_default();
        Self::build(side, inv.as_ref(), link, true, cpu)
    }

    /// The setup for an RDMA test on device `dev`, port `port`.
    pub fn for_rdma(side: Side, dev: &str, port: u32, cpu: &CpuSpec) -> Result<EndSetup, String> {
        let inv = detect_live();
        let link = inv
            .as_ref()
            .map(|i| fabperf_detect::link::for_rdma(i, dev, port))
            .unwrap_or_else(|| TestLink {
                rdma: Some((dev.to_string(), port)),
                ..TestLink::default()
            });
        Self::build(side, inv.as_ref(), link, false, cpu)
    }

    /// From an inventory (`None`: detection failed, nothing is known about the link), the
    /// link, whether the host's UDP/TCP counters matter, and `--cpu`. An error only for a CPU
    /// list that names CPUs this end may not use.
    pub fn build(
        side: Side,
        inv: Option<&Inventory>,
        link: TestLink,
        host_counters: bool,
        cpu: &CpuSpec,
    ) -> Result<EndSetup, String> {
        Self::build_in(&Root::live(), side, inv, link, host_counters, cpu)
    }

    /// [`build`](Self::build) reading the NUMA nodes and interrupts under `root`.
    pub fn build_in(
        root: &Root,
        side: Side,
        inv: Option<&Inventory>,
        link: TestLink,
        host_counters: bool,
        cpu: &CpuSpec,
    ) -> Result<EndSetup, String> {
        let allowed = inv
            .and_then(|i| i.cpus_allowed.as_deref())
            .and_then(|a| placement::parse_cpu_list(a).ok())
            .filter(|a| !a.is_empty());
        let mut notes = Vec::new();
        let cpus = match cpu {
            CpuSpec::None => None,
            CpuSpec::List(list) => {
                if let Some(allowed) = &allowed {
                    let bad: Vec<u32> = list
                        .iter()
                        .copied()
                        .filter(|c| !allowed.contains(c))
                        .collect();
                    if !bad.is_empty() {
                        return Err(format!(
                            "--cpu {}: CPU {} is not among the CPUs the {side} may use ({})",
                            placement::format_cpu_list(list),
                            placement::format_cpu_list(&bad),
                            placement::format_cpu_list(allowed)
                        ));
                    }
                }
                Some(list.clone())
            }
            CpuSpec::Auto => allowed.as_ref().and_then(|allowed| {
                let node_cpus = link
                    .numa_node
                    .and_then(|n| placement::node_cpus(root, n).ok());
                let irq = link
                    .pci
                    .as_deref()
                    .map(|p| placement::irq_cpus(root, p))
                    .unwrap_or_default();
                let c = placement::choose(allowed, node_cpus.as_deref(), &irq);
                if c.mismatch {
                    if let (Some(node), Some(nc)) = (link.numa_node, &node_cpus) {
                        notes.push(
                            Warning::NumaCpusetMismatch {
                                side,
                                nic: link
                                    .rdma
                                    .as_ref()
                                    .map(|(d, _)| d.clone())
                                    .or_else(|| link.netdev.clone())
                                    .unwrap_or_else(|| "the NIC".into()),
                                node,
                                node_cpus: placement::format_cpu_list(nc),
                                allowed: placement::format_cpu_list(allowed),
                            }
                            .note(),
                        );
                    }
                }
                let cpus: Vec<u32> = c
                    .cpus
                    .into_iter()
                    .filter(|c| (*c as usize) < rustix::thread::CpuSet::MAX_CPU)
                    .collect();
                (!cpus.is_empty()).then_some(cpus)
            }),
        };
        let counters = CounterSpec {
            rdma: link.rdma.clone(),
            netdev: link.netdev.clone(),
            host: host_counters,
        };
        Ok(EndSetup {
            side,
            link,
            cpu: cpu.clone(),
            cpus,
            counters: Arc::new(counters),
            notes,
        })
    }

    /// Pin the calling thread to this end's CPUs (nothing with `--cpu none`). Call it on a
    /// data thread before it allocates its buffers; keep the guard for the thread's test.
    pub fn pin(&self) -> Pinned {
        let Some(cpus) = &self.cpus else {
            return Pinned {
                previous: None,
                error: None,
            };
        };
        let previous = rustix::thread::sched_getaffinity(None).ok();
        let mut set = rustix::thread::CpuSet::new();
        for c in cpus {
            set.set(*c as usize);
        }
        match rustix::thread::sched_setaffinity(None, &set) {
            Ok(()) => Pinned {
                previous,
                error: None,
            },
            Err(e) => Pinned {
                previous: None,
                error: Some(format!(
                    "sched_setaffinity({}): {e}",
                    placement::format_cpu_list(cpus)
                )),
            },
        }
    }

    /// A host meter that also snapshots this end's counters at its start and end.
    pub fn meter(&self) -> HostMeter {
        HostMeter::start_with(Some(self.counters.clone()))
    }

    /// Where this end ran: link, port rate, NUMA node of the NIC, CPUs, the node its buffers
    /// landed on (`buffer_node`, from [`buffer_node`]).
    pub fn placement(&self, buffer_node: Option<u32>) -> Placement {
        Placement {
            cpu: self.cpu.mode().to_string(),
            cpu_list: self.cpus.as_deref().map(placement::format_cpu_list),
            numa_node: self.link.numa_node,
            buffer_numa_node: buffer_node,
            interface: self.link.netdev.clone(),
            rdma_port: self
                .link
                .rdma
                .as_ref()
                .map(|(d, p)| format!("{d} port {p}")),
            port_rate_gbps: self.link.rate_gbps,
            port_rate_source: self.link.rate_source.map(str::to_string),
            virtual_link: self.link.virtual_link,
            gpu: None,
        }
    }

    /// What this end tells its peer at the end of a test: the meter's host CPU and counter
    /// deltas, the placement, and this end's warnings (`pin_errors`: from its [`Pinned`]
    /// guards).
    pub fn report(
        &self,
        meter: Option<&HostMeter>,
        buffer_node: Option<u32>,
        pin_errors: &[String],
        no_meter_why: &str,
    ) -> HostReport {
        let r = match meter {
            Some(m) => m.finish_report(),
            None => HostReport::of(Err(no_meter_why.to_string())),
        };
        self.complete(r, buffer_node, pin_errors)
    }

    /// Add the placement and this end's warnings to a meter's report.
    pub fn complete(
        &self,
        mut r: HostReport,
        buffer_node: Option<u32>,
        pin_errors: &[String],
    ) -> HostReport {
        let mut notes = self.notes.clone();
        if let Some(e) = pin_errors.first() {
            notes.push(
                Warning::CpuPinFailed {
                    side: self.side,
                    why: e.clone(),
                }
                .note(),
            );
        }
        if let (Some(b), Some(n)) = (buffer_node, self.link.numa_node) {
            if b != n {
                notes.push(
                    Warning::BufferOffNode {
                        side: self.side,
                        buffer_node: b,
                        nic_node: n,
                    }
                    .note(),
                );
            }
        }
        if !r.counters_missing.is_empty() {
            notes.push(
                Warning::CountersIncomplete {
                    side: self.side,
                    what: r.counters_missing.join("; "),
                }
                .note(),
            );
        }
        r.placement = Some(self.placement(buffer_node));
        r.notes = notes;
        r
    }
}

/// The counters of a snapshot pair, for [`HostReport`].
pub(crate) fn deltas(
    spec: &CounterSpec,
    before: &CounterSnapshot,
) -> (Vec<fabperf_results::CounterDelta>, Vec<String>) {
    let after = counters::snapshot(&Root::live(), spec);
    let mut missing = before.missing.clone();
    for m in &after.missing {
        if !missing.contains(m) {
            missing.push(m.clone());
        }
    }
    (counters::delta(before, &after), missing)
}

pub(crate) fn snapshot(spec: &CounterSpec) -> CounterSnapshot {
    counters::snapshot(&Root::live(), spec)
}

/// What [`apply`] needs to know about the test.
#[derive(Debug, Clone, Default)]
pub struct TestKindInfo {
    /// A bandwidth test where the sender runs as fast as it can (a paced one is not).
    pub full_rate_bandwidth: bool,
    /// What to try when one stream / QP stays below the port rate.
    pub more_streams_hint: String,
    /// `one stream` or `one queue pair`.
    pub one: String,
}

/// Put both ends' reports into the records: placements and port rates on every record,
/// counters, findings and the ends' warnings on every record that is not a single stream's,
/// and the port-rate warnings on bandwidth totals.
pub fn apply(records: &mut [Record], mine: &HostReport, theirs: &HostReport, kind: &TestKindInfo) {
    let counters = (mine.counters.is_some() || theirs.counters.is_some()).then(|| Counters {
        local: mine.counters.clone().unwrap_or_default(),
        remote: theirs.counters.clone().unwrap_or_default(),
        local_missing: mine.counters_missing.clone(),
        remote_missing: theirs.counters_missing.clone(),
    });
    for r in records.iter_mut() {
        r.placement_local = mine.placement.clone();
        r.placement_remote = theirs.placement.clone();
        r.set_port_rate();
        if r.is_per_stream() {
            continue;
        }
        r.add_notes(mine.notes.iter().chain(theirs.notes.iter()));
        if let Some(c) = &counters {
            let ctx = fabperf_detect::findings::Context {
                transport: Some(r.transport),
                tclass: r.tclass,
                link_layer: r.link_layer.as_deref(),
                software: r.transport == Transport::Rdma
                    && [&r.placement_local, &r.placement_remote]
                        .into_iter()
                        .flatten()
                        .any(|p| p.virtual_link),
            };
            let f = fabperf_detect::findings::from_counters(&ctx, c);
            r.add_findings(&f);
            r.counters = Some(c.clone());
        }
        if !kind.full_rate_bandwidth || r.direction.as_deref() == Some("bidir") {
            continue;
        }
        if let (Some(pct), Some(port)) = (r.bw_pct_of_port, r.port_rate_gbps) {
            if r.streams == 1 && pct < 90.0 {
                r.warn(Warning::BelowPortRate {
                    pct,
                    port_gbps: port,
                    one: kind.one.clone(),
                    hint: kind.more_streams_hint.clone(),
                });
            }
        }
        if r.port_rate_gbps.is_none() {
            let mut unknown = Vec::new();
            for (side, p) in [
                (Side::Client, &r.placement_local),
                (Side::Agent, &r.placement_remote),
            ] {
                let Some(p) = p else { continue };
                if !p.virtual_link && (p.interface.is_some() || p.rdma_port.is_some()) {
                    let what = p
                        .rdma_port
                        .clone()
                        .or_else(|| p.interface.clone())
                        .unwrap_or_default();
                    unknown.push(Warning::PortRateUnknown {
                        side,
                        why: format!("{what} reports no speed or rate"),
                    });
                }
            }
            for w in unknown {
                r.warn(w);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabperf_detect::NumaNode;

    #[test]
    fn cpu_spec_parses_prints_and_refuses() {
        assert_eq!("auto".parse::<CpuSpec>().unwrap(), CpuSpec::Auto);
        assert_eq!("none".parse::<CpuSpec>().unwrap(), CpuSpec::None);
        assert_eq!(
            "3,0-1".parse::<CpuSpec>().unwrap(),
            CpuSpec::List(vec![0, 1, 3])
        );
        assert_eq!(CpuSpec::List(vec![0, 1, 3]).to_string(), "0-1,3");
        for bad in ["", "all", "1-0", "5000", "0,,1", "-1"] {
            assert!(bad.parse::<CpuSpec>().is_err(), "{bad}");
        }
        let v = serde_json::to_value(CpuSpec::List(vec![2, 3])).unwrap();
        assert_eq!(v, "2-3");
        assert_eq!(
            serde_json::from_value::<CpuSpec>(v).unwrap(),
            CpuSpec::List(vec![2, 3])
        );
        assert!(serde_json::from_value::<CpuSpec>(serde_json::json!("x".repeat(5000))).is_err());
        assert!(serde_json::from_value::<CpuSpec>(serde_json::json!(7)).is_err());
    }

    fn inv(allowed: &str) -> Inventory {
        Inventory {
            cpus_allowed: Some(allowed.into()),
            numa_nodes: vec![NumaNode {
                node: 0,
                cpulist: "0-1".into(),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn lists_outside_the_allowed_set_are_refused() {
        let link = TestLink::default();
        let e = EndSetup::build(
            Side::Agent,
            Some(&inv("0-1")),
            link.clone(),
            true,
            &CpuSpec::List(vec![1, 7]),
        )
        .unwrap_err();
        assert!(
            e.contains("CPU 7 is not among the CPUs the agent may use (0-1)"),
            "{e}"
        );
        let s = EndSetup::build(
            Side::Agent,
            Some(&inv("0-1")),
            link.clone(),
            true,
            &CpuSpec::List(vec![1]),
        )
        .unwrap();
        assert_eq!(s.cpus, Some(vec![1]));
        let s = EndSetup::build(
            Side::Agent,
            Some(&inv("0-1")),
            link.clone(),
            true,
            &CpuSpec::None,
        )
        .unwrap();
        assert_eq!(s.cpus, None);
        // Auto without a NUMA node: every allowed CPU; without an inventory: not pinned.
        let s = EndSetup::build(
            Side::Client,
            Some(&inv("0-1")),
            link.clone(),
            true,
            &CpuSpec::Auto,
        )
        .unwrap();
        assert_eq!(s.cpus, Some(vec![0, 1]));
        let s = EndSetup::build(Side::Client, None, link, true, &CpuSpec::Auto).unwrap();
        assert_eq!(s.cpus, None);
        assert_eq!(s.placement(None).cpu_list, None);
    }

    #[test]
    fn a_nic_on_a_node_without_allowed_cpus_warns() {
        // A two-node fixture: the NIC on node 1 (CPUs 2-3), its interrupt on CPU 2; a process
        // allowed CPUs 0-3 gets 3, one allowed 0-1 gets 0-1 and a warning.
        let d = tempfile::tempdir().unwrap();
        let w = |rel: &str, text: &str| {
            let p = d.path().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        };
        w("sys/devices/system/node/node0/cpulist", "0-1\n");
        w("sys/devices/system/node/node1/cpulist", "2-3\n");
        w("sys/bus/pci/devices/0000:81:00.0/msi_irqs/40", "msix\n");
        w("proc/irq/40/effective_affinity_list", "2\n");
        let root = Root::at(d.path());
        let link = TestLink {
            rdma: Some(("mlx5_0".into(), 1)),
            numa_node: Some(1),
            pci: Some("0000:81:00.0".into()),
            ..TestLink::default()
        };
        let s = EndSetup::build_in(
            &root,
            Side::Agent,
            Some(&inv("0-3")),
            link.clone(),
            false,
            &CpuSpec::Auto,
        )
        .unwrap();
        assert_eq!(s.cpus, Some(vec![3]));
        assert!(s.notes.is_empty());
        let s = EndSetup::build_in(
            &root,
            Side::Agent,
            Some(&inv("0-1")),
            link,
            false,
            &CpuSpec::Auto,
        )
        .unwrap();
        assert_eq!(s.cpus, Some(vec![0, 1]));
        assert_eq!(s.notes.len(), 1);
        assert_eq!(s.notes[0].id, "numa-cpuset-mismatch");
        assert!(
            s.notes[0].message.contains("mlx5_0 (CPUs 2-3)"),
            "{}",
            s.notes[0].message
        );
        let r = s.report(
            None,
            Some(0),
            &["sched_setaffinity: EPERM".into()],
            "no meter",
        );
        let ids: Vec<&str> = r.notes.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(
            ids,
            ["numa-cpuset-mismatch", "cpu-pin-failed", "buffer-off-node"]
        );
        assert_eq!(r.placement.as_ref().unwrap().buffer_numa_node, Some(0));
        assert!(r.host.is_none() && r.host_error.as_deref() == Some("no meter"));
    }

    #[test]
    fn an_unknown_node_neither_narrows_nor_warns() {
        // The live root has no node 9: the node's CPUs are unknown, so no choice by node and
        // no warning either (only a known mismatch warns).
        let link = TestLink {
            netdev: Some("eth9".into()),
            numa_node: Some(9),
            pci: Some("0000:99:00.0".into()),
            ..TestLink::default()
        };
        let s =
            EndSetup::build(Side::Client, Some(&inv("0-1")), link, true, &CpuSpec::Auto).unwrap();
        assert_eq!(s.cpus, Some(vec![0, 1]));
        assert!(s.notes.is_empty());
    }

    #[test]
    fn live_auto_picks_allowed_cpus_and_pins() {
        // Sockets on loopback: no NIC node, so every allowed CPU; pinning and restoring work.
        let s = EndSetup::for_socket(
            Side::Client,
            Some("127.0.0.1".parse().unwrap()),
            &CpuSpec::Auto,
        )
        .unwrap();
        assert_eq!(s.link.netdev.as_deref(), Some("lo"));
        let allowed = rustix::thread::sched_getaffinity(None).unwrap();
        let cpus = s.cpus.clone().expect("auto pins on this host");
        assert!(!cpus.is_empty());
        assert!(cpus.iter().all(|c| allowed.is_set(*c as usize)), "{cpus:?}");
        let before = allowed.count();
        {
            let one = EndSetup::build(
                Side::Client,
                None,
                TestLink::default(),
                false,
                &CpuSpec::List(vec![cpus[0]]),
            )
            .unwrap();
            let g = one.pin();
            assert!(g.error.is_none(), "{:?}", g.error);
            let now = rustix::thread::sched_getaffinity(None).unwrap();
            assert_eq!(now.count(), 1);
            assert!(now.is_set(cpus[0] as usize));
            assert_eq!(rustix::thread::sched_getcpu(), cpus[0] as usize);
        }
        assert_eq!(
            rustix::thread::sched_getaffinity(None).unwrap().count(),
            before,
            "restored"
        );
        let p = s.placement(Some(0));
        assert_eq!(p.cpu, "auto");
        assert_eq!(p.interface.as_deref(), Some("lo"));
        assert!(p.virtual_link && p.port_rate_gbps.is_none());
    }

    #[test]
    fn route_lookup() {
        assert_eq!(
            local_ip_towards("127.0.0.1:5301".parse().unwrap()),
            Some("127.0.0.1".parse().unwrap())
        );
    }

    #[test]
    fn buffers_report_their_node() {
        let mut v = vec![0u8; 1 << 20];
        first_touch(&mut v);
        // A kernel with NUMA support reports node 0 on this single-node machine; one without
        // says nothing.
        match buffer_node(&v) {
            Some(n) => assert_eq!(n, 0),
            None => eprintln!("no NUMA support in this kernel"),
        }
        assert_eq!(buffer_node(&[]), None);
        assert_eq!(page_node(0), None, "unmapped");
    }

    #[test]
    fn reports_land_in_records() {
        let mut rec = Record::new("rdma-bw", Transport::Rdma, 65536, 1);
        rec.set_throughput(1_000_000_000, 1.0, Some(100));
        rec.direction = Some("forward".into());
        let mine = HostReport {
            counters: Some(vec![fabperf_results::CounterDelta {
                source: fabperf_results::CounterSource::RdmaHw,
                subject: "mlx5_0 port 1".into(),
                path: "/sys/class/infiniband/mlx5_0/ports/1/hw_counters".into(),
                deltas: [("out_of_sequence".to_string(), 3)].into_iter().collect(),
                units: Default::default(),
                reset: vec![],
            }]),
            placement: Some(Placement {
                cpu: "auto".into(),
                port_rate_gbps: Some(100.0),
                numa_node: Some(1),
                ..Default::default()
            }),
            ..Default::default()
        };
        let theirs = HostReport {
            counters: Some(vec![]),
            counters_missing: vec!["SIOCETHTOOL eth1: permission denied".into()],
            notes: vec![Warning::CountersIncomplete {
                side: Side::Agent,
                what: "x".into(),
            }
            .note()],
            placement: Some(Placement {
                cpu: "none".into(),
                interface: Some("eth0".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let kind = TestKindInfo {
            full_rate_bandwidth: true,
            more_streams_hint: "try --qps 4".into(),
            one: "one queue pair".into(),
        };
        let mut per_qp = rec.clone();
        per_qp.stream = Some(0);
        per_qp.streams = 1;
        let mut recs = vec![rec, per_qp];
        apply(&mut recs, &mine, &theirs, &kind);
        let r = &recs[0];
        assert_eq!(r.port_rate_gbps, Some(100.0));
        assert!((r.bw_pct_of_port.unwrap() - 8.0).abs() < 1e-9);
        assert!(r.has_warning("below-port-rate") && r.has_warning("counters-incomplete"));
        // The agent's eth0 is physical and has no rate, but the client's port gives one.
        assert!(!r.has_warning("port-rate-unknown"));
        assert!(r.has_finding("roce-packet-loss"));
        assert_eq!(r.counters.as_ref().unwrap().remote_missing.len(), 1);
        assert!(r.check().is_empty(), "{:?}", r.check());
        // The per-QP row: placement and percentage, no counters, findings or end warnings.
        let q = &recs[1];
        assert!(q.bw_pct_of_port.is_some() && q.counters.is_none() && q.findings.is_empty());
        assert!(q.warnings.is_empty());
        // Without any port rate on a physical link: port-rate-unknown.
        let mut lone = Record::new("tcp-bw", Transport::Tcp, 1000, 1);
        lone.set_throughput(1000, 1.0, Some(1));
        let mut recs = vec![lone];
        apply(&mut recs, &HostReport::default(), &theirs, &kind);
        assert!(recs[0].has_warning("port-rate-unknown"));
        assert!(
            recs[0].counters.is_some(),
            "the agent's list says it read them"
        );
    }
}
