//! fabperf-detect: know the fabric of a node and say what is wrong with it.
//!
//! * [`detect_live`] / [`detect_root`] build an [`Inventory`] (RDMA devices, ports, GIDs,
//!   netdevs, PCIe, node IP, sysctls, memlock) from the live host or from a snapshot directory
//!   in the `--root` layout (`DIR/sys/...`, `DIR/proc/...`, `DIR/ip-addr.json`,
//!   `DIR/ip-route.json`).
//! * [`doctor::diagnose`] turns an inventory into [`doctor::Finding`]s with evidence and fixes.
//! * [`capture::capture`] writes a snapshot of this host that `detect_root` reads back.
//! * [`memlock`] is the reusable RLIMIT_MEMLOCK / CAP_IPC_LOCK check for RDMA code.
//!
//! Other crates load a `fabperf detect --json` file with [`Inventory::from_json_file`].

pub mod capture;
mod collect;
pub mod doctor;
pub mod ipstate;
pub mod memlock;
mod model;
pub mod netlink;
pub mod parse;
pub mod render;
pub mod root;
pub mod tc;

pub use collect::{DetectError, DetectOptions};
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

/// Address/route input of a snapshot: `DIR/ip-addr.json` and `DIR/ip-route.json`.
fn snapshot_ip(dir: &Path) -> IpInput {
    let mut warnings = Vec::new();
    let mut state = IpState::default();
    let addr_p = dir.join("ip-addr.json");
    match std::fs::read_to_string(&addr_p) {
        Ok(t) => match ipstate::parse_addr_json(&t) {
            Ok(a) => state.addrs = a,
            Err(e) => warnings.push(format!(
                "{}: not `ip -j addr show` output ({e}); addresses unknown",
                addr_p.display()
            )),
        },
        Err(e) => warnings.push(format!(
            "{}: {e}; addresses unknown (write it with `ip -j addr show > {}`)",
            addr_p.display(),
            addr_p.display()
        )),
    }
    let route_p = dir.join("ip-route.json");
    match std::fs::read_to_string(&route_p) {
        Ok(t) => match ipstate::parse_route_json(&t) {
            Ok(r) => state.routes = r,
            Err(e) => warnings.push(format!(
                "{}: not `ip -j route show table main` output ({e}); routes unknown",
                route_p.display()
            )),
        },
        Err(e) => warnings.push(format!(
            "{}: {e}; routes unknown (write it with `ip -j route show table main > {}`)",
            route_p.display(),
            route_p.display()
        )),
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
    collect::build(&Root::at(dir), snapshot_ip(dir), opts)
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
