//! fabperf-detect: know the fabric of a node and say what is wrong with it.
//!
//! * [`detect_live`] / [`detect_root`] build an [`Inventory`] (RDMA devices, ports, GIDs,
//!   netdevs, PCIe, node IP, sysctls, memlock) from the live host or from a snapshot directory
//!   in the `--root` layout (`DIR/sys/...`, `DIR/proc/...`, `DIR/ip-addr.json`,
//!   `DIR/ip-route.json`).
//! * [`doctor::diagnose`] turns an inventory into [`doctor::Finding`]s with evidence and fixes.
//! * [`capture::capture`] writes a snapshot of this host that `detect_root` reads back.
//! * [`memlock`] is the reusable RLIMIT_MEMLOCK / CAP_IPC_LOCK check for RDMA code;
//!   [`rdma_device_is_software`] and [`clocksource_is_slow`] are the other rules shared with it.
//! * [`gpu`] finds the GPUs, their PCIe relationship to every RDMA device (PIX/PXB/PHB/NODE/SYS,
//!   from the sysfs hierarchy), the rails ([`assign_rails`]) and the GPUDirect RDMA
//!   prerequisites; [`pcie`] decodes configuration space (MaxReadReq, ACS).
//! * [`tc`] computes a link's egress cap from its qdiscs and classes.
//! * [`counters`] snapshots RDMA port/hardware counters, netdev statistics and
//!   `/proc/net/{snmp,netstat}` and returns what changed between two snapshots.
//!
//! Other crates load a `fabperf detect --json` file with [`Inventory::from_json_file`].
//!
//! Layout: one file per subject; the two large ones are folders of rules — `doctor/` holds the
//! checks by subject (addressing, rdma, host) and `gpu/` the rails, the GPU text and the GPU rules.

pub mod capture;
mod collect;
pub mod counters;
pub mod doctor;
pub mod ethtool;
pub mod findings;
pub mod gpu;
pub mod ipstate;
pub mod link;
pub mod memlock;
mod model;
pub mod netlink;
pub mod parse;
pub mod pcie;
pub mod placement;
pub mod render;
pub mod root;
pub mod tc;

pub use collect::{rdma_device_is_software, DetectError, DetectOptions};
pub use gpu::{assign_rails, RailRule, Relation};
pub use memlock::MemlockStatus;
pub use model::*;

use collect::IpInput;
use ipstate::IpState;
use root::Root;
use std::path::Path;

/// Address/route input of the live host (netlink); failures degrade to warnings.
fn live_ip() -> IpInput {
    match IpState::live() {
        Ok(state) => IpInput {
            state,
            source: "netlink".into(),
            warnings: Vec::new(),
        },
        Err(e) => IpInput {
            state: IpState::default(),
            source: "netlink".into(),
            warnings: vec![format!(
                "addresses and routes unavailable: netlink dump failed: {e}"
            )],
        },
    }
}

/// Read one JSON input of a snapshot through the root (contained, capped, regular files only).
/// `Ok(None)` when absent; `Err(warning)` when present but unusable for another reason than
/// the ones the root records as problems.
fn snapshot_json(root: &Root, host_path: &str) -> Result<Option<String>, Option<String>> {
    match root.try_read_limited(host_path, root::MAX_JSON_BYTES) {
        Ok(b) => String::from_utf8(b)
            .map(Some)
            .map_err(|_| Some(format!("{}: not UTF-8 text", root.display(host_path)))),
        Err(root::ReadError::NotFound) => Ok(None),
        Err(e) if e.is_problem() => Err(None),
        Err(e) => Err(Some(format!("{}: {e}", root.display(host_path)))),
    }
}

/// Address/route/tc input of a snapshot: `DIR/ip-addr.json`, `DIR/ip-route.json` and the
/// optional `DIR/fabperf-tc.json`.
fn snapshot_ip(root: &Root) -> IpInput {
    let mut warnings = Vec::new();
    let mut state = IpState::default();
    let addr_p = root.display("/ip-addr.json");
    match snapshot_json(root, "/ip-addr.json") {
        Ok(Some(t)) => match ipstate::parse_addr_json(&t) {
            Ok(a) => state.addrs = a,
            Err(e) => warnings.push(format!(
                "{addr_p}: not `ip -j addr show` output ({e}); addresses unknown"
            )),
        },
        Ok(None) => warnings.push(format!(
            "{addr_p}: no such file; addresses unknown (write it with `ip -j addr show > {addr_p}`)"
        )),
        Err(w) => warnings.extend(w.map(|w| format!("{w}; addresses unknown"))),
    }
    let route_p = root.display("/ip-route.json");
    match snapshot_json(root, "/ip-route.json") {
        Ok(Some(t)) => match ipstate::parse_route_json(&t) {
            Ok(r) => state.routes = r,
            Err(e) => warnings.push(format!(
                "{route_p}: not `ip -j route show table main` output ({e}); routes unknown"
            )),
        },
        Ok(None) => warnings.push(format!(
            "{route_p}: no such file; routes unknown (write it with `ip -j route show table main > {route_p}`)"
        )),
        Err(w) => warnings.extend(w.map(|w| format!("{w}; routes unknown"))),
    }
    // Optional: captures write it; without it egress shaping is unknown.
    let tc_p = root.display("/fabperf-tc.json");
    match snapshot_json(root, "/fabperf-tc.json") {
        Ok(Some(t)) => match tc::parse_tc_json(&t) {
            Ok(objs) => state.tc = objs,
            Err(e) => warnings.push(format!(
                "{tc_p}: not a fabperf tc snapshot ({e}); egress shaping unknown"
            )),
        },
        Ok(None) => {}
        Err(w) => warnings.extend(w.map(|w| format!("{w}; egress shaping unknown"))),
    }
    IpInput {
        state,
        source: "ip-addr.json + ip-route.json".into(),
        warnings,
    }
}

/// Inventory of the live host.
pub fn detect_live(opts: &DetectOptions) -> Result<Inventory, DetectError> {
    collect::build(&Root::live(), live_ip(), opts)
}

/// Inventory of a snapshot directory (a capture or a fixture).
pub fn detect_root(dir: &Path, opts: &DetectOptions) -> Result<Inventory, DetectError> {
    if !dir.is_dir() {
        return Err(DetectError::RootMissing(dir.display().to_string()));
    }
    if !dir.join("sys").is_dir() && !dir.join("proc").is_dir() {
        return Err(DetectError::NotASnapshot(dir.display().to_string()));
    }
    let root = Root::at(dir);
    let ip = snapshot_ip(&root);
    collect::build(&root, ip, opts)
}

/// Inventory of `root` if given, else of the live host.
pub fn detect(root: Option<&Path>, opts: &DetectOptions) -> Result<Inventory, DetectError> {
    match root {
        Some(d) => detect_root(d, opts),
        None => detect_live(opts),
    }
}

pub(crate) fn detect_live_recording(
    opts: &DetectOptions,
) -> Result<(Inventory, Root, IpState), DetectError> {
    let root = Root::live_recording();
    let ip = live_ip();
    let state = ip.state.clone();
    let inv = collect::build(&root, ip, opts)?;
    Ok((inv, root, state))
}
