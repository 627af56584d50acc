//! `fabperf detect --capture DIR`: a support bundle of this host that `--root DIR` reads back.
//!
//! DIR holds exactly the sysfs/procfs files the detector read, at their real paths, with the
//! kernel's symlinks (`sys/class/net/eth0`, `sys/bus/pci/devices/...`, `.../device`) recreated
//! as relative links into those real paths; `ip-addr.json` / `ip-route.json` with what
//! `ip -j addr show` / `ip -j route show table main` print; `fabperf-userspace.json` with what the
//! host's libibverbs exports (`ibv_reg_dmabuf_mr`); `fabperf-tc.json` with the qdiscs and
//! classes (what `tc` would show, as [`crate::tc::TcObject`]s); `detect.json` and `doctor.json` as
//! seen live; and `fabperf-capture.json` describing the capture. `tar czf node.tgz -C DIR .`
//! makes it mailable.

use crate::ipstate::IpState;
use crate::root::mirror_recording;
use crate::{doctor, DetectError, DetectOptions, Inventory};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Why a capture failed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("--capture {0}: directory exists and is not empty; give a new or empty directory")]
    NotEmpty(String),
    #[error("--capture {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error(transparent)]
    Detect(#[from] DetectError),
}

/// What a capture wrote.
#[derive(Debug, Clone, Serialize)]
pub struct CaptureReport {
    pub dir: PathBuf,
    /// sysfs/procfs files copied.
    pub files: usize,
    /// Paths that disappeared between reading and copying (a netdev went away, ...).
    pub vanished: Vec<String>,
    /// How `ip-addr.json` / `ip-route.json` were produced.
    pub ip_source: String,
    /// The live inventory (also written as `detect.json`).
    #[serde(skip)]
    pub inventory: Inventory,
}

#[derive(Serialize)]
struct Manifest<'a> {
    schema: &'static str,
    fabperf_version: &'static str,
    captured_unix_secs: u64,
    hostname: &'a str,
    kernel: Option<String>,
    ip_source: &'a str,
    files: usize,
    vanished: &'a [String],
    read_back: String,
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CaptureError + '_ {
    move |e| CaptureError::Io {
        path: path.display().to_string(),
        source: e,
    }
}

fn run_ip(args: &[&str]) -> Option<Vec<u8>> {
    let out = Command::new("ip").args(args).output().ok()?;
    if !out.status.success() || out.stdout.is_empty() {
        return None;
    }
    // Keep it only if it is the JSON iproute2 promises.
    serde_json::from_slice::<serde_json::Value>(&out.stdout).ok()?;
    Some(out.stdout)
}

/// Capture this host into `dir` (created; must be new or empty).
pub fn capture(dir: &Path, opts: &DetectOptions) -> Result<CaptureReport, CaptureError> {
    if dir.exists() {
        let mut rd = std::fs::read_dir(dir).map_err(io_err(dir))?;
        if rd.next().is_some() {
            return Err(CaptureError::NotEmpty(dir.display().to_string()));
        }
    }
    // Detect first: a bad --node-ip must not leave an empty directory behind.
    let (inventory, root, ip_state) = crate::detect_live_recording(opts)?;
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let kernel = root.read("/proc/sys/kernel/osrelease");
    let rec = root.recording();
    let (files, vanished) = mirror_recording(&rec, dir).map_err(io_err(dir))?;

    let (addr_json, route_json, ip_source) = match (
        run_ip(&["-j", "addr", "show"]),
        run_ip(&["-j", "route", "show", "table", "main"]),
    ) {
        (Some(a), Some(r)) => (
            a,
            r,
            "ip -j addr show / ip -j route show table main".to_string(),
        ),
        _ => {
            let st: &IpState = &ip_state;
            (
                st.to_addr_json(&st.links).into_bytes(),
                st.to_route_json().into_bytes(),
                "netlink, written in iproute2's JSON format (the `ip` command was unavailable)"
                    .to_string(),
            )
        }
    };
    let w = |name: &str, data: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, data).map_err(io_err(&p))
    };
    w("ip-addr.json", &addr_json)?;
    w("ip-route.json", &route_json)?;
    w(
        "fabperf-tc.json",
        crate::tc::to_tc_json(&ip_state.tc).as_bytes(),
    )?;
    // What a snapshot cannot hold as a file: whether this host's libibverbs can register
    // dma-bufs (read back by `--root` for the GPUDirect prerequisites).
    w(
        "fabperf-userspace.json",
        serde_json::to_string_pretty(&crate::gpu::probe_userspace())
            .expect("userspace record serializes")
            .as_bytes(),
    )?;
    w("detect.json", inventory.to_json_pretty().as_bytes())?;
    let report = doctor::diagnose(&inventory);
    w("doctor.json", report.to_json_pretty().as_bytes())?;
    let manifest = Manifest {
        schema: "fabperf.capture/1",
        fabperf_version: env!("CARGO_PKG_VERSION"),
        captured_unix_secs: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        hostname: &inventory.hostname,
        kernel,
        ip_source: &ip_source,
        files,
        vanished: &vanished,
        read_back: format!(
            "fabperf detect --root {} ; fabperf doctor --root {}",
            dir.display(),
            dir.display()
        ),
    };
    w(
        "fabperf-capture.json",
        serde_json::to_string_pretty(&manifest)
            .expect("manifest serializes")
            .as_bytes(),
    )?;
    Ok(CaptureReport {
        dir: dir.to_path_buf(),
        files,
        vanished,
        ip_source,
        inventory,
    })
}
