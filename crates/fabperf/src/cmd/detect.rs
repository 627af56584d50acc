//! `fabperf detect` and `fabperf doctor`: a thin layer over fabperf-detect.

use fabperf_detect::capture::{capture, CaptureError};
use fabperf_detect::{assign_rails, detect, doctor, render, DetectOptions, Inventory, RailRule};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// Exit status for bad usage or unreadable input.
const EXIT_BAD_INPUT: u8 = 2;

#[derive(clap::Args)]
pub struct DetectArgs {
    /// Read a snapshot directory (from --capture, or a hand-written fixture) instead of the live
    /// host: DIR/sys/..., DIR/proc/..., DIR/ip-addr.json, DIR/ip-route.json.
    #[arg(long, value_name = "DIR", conflicts_with = "capture")]
    pub root: Option<PathBuf>,
    /// The node address kubelet is given with --node-ip (default: the address of the
    /// default-route interface, which is what kubelet picks when --node-ip is unset).
    #[arg(long, value_name = "IP")]
    pub node_ip: Option<IpAddr>,
    /// Print the inventory as JSON (schema fabperf.detect/1).
    #[arg(long)]
    pub json: bool,
    /// Write a snapshot of this host into DIR (new or empty): the sysfs/procfs files read, the
    /// output of `ip -j addr show` / `ip -j route show table main`, detect.json and doctor.json.
    /// Read it back with --root DIR; `tar czf node.tgz -C DIR .` makes a support bundle.
    #[arg(long, value_name = "DIR", value_parser = super::common::new_dir_arg)]
    pub capture: Option<PathBuf>,
    /// Number the rails of the RDMA devices: pci-order (hardware NICs by PCI address),
    /// gpu-order (rail i = the NIC nearest GPU i, below its PCIe switch), or an explicit
    /// DEVICE=RAIL,... list (RDMA device or netdev names, e.g. mlx5_0=0,mlx5_3=1).
    #[arg(long, value_name = "RULE", value_parser = parse_rails, conflicts_with = "capture")]
    pub rails: Option<RailRule>,
}

fn parse_rails(s: &str) -> Result<RailRule, String> {
    s.parse()
}

#[derive(clap::Args)]
pub struct DoctorArgs {
    /// Diagnose a snapshot directory instead of the live host (see `fabperf detect --capture`).
    #[arg(long, value_name = "DIR", conflicts_with = "inventory")]
    pub root: Option<PathBuf>,
    /// Diagnose a `fabperf detect --json` file (e.g. from another node) instead of this host.
    #[arg(long, value_name = "FILE")]
    pub inventory: Option<PathBuf>,
    /// The node address kubelet is given with --node-ip (default: the default-route address).
    #[arg(long, value_name = "IP", conflicts_with = "inventory")]
    pub node_ip: Option<IpAddr>,
    /// Compare the path MTUs measured by `fabperf mtu --json` (this node's and the
    /// agents' interfaces) with the configured ones: `mtu-mismatch` findings.
    #[arg(long, value_name = "FILE")]
    pub mtu_results: Option<PathBuf>,
    /// Print the findings as JSON (schema fabperf.doctor/1).
    #[arg(long)]
    pub json: bool,
}

fn bad_input(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("fabperf: error: {msg}");
    ExitCode::from(EXIT_BAD_INPUT)
}

pub fn run_detect(a: DetectArgs) -> anyhow::Result<ExitCode> {
    let opts = DetectOptions { node_ip: a.node_ip };
    if let Some(dir) = &a.capture {
        let rep = match capture(dir, &opts) {
            Ok(r) => r,
            Err(e @ (CaptureError::NotEmpty(_) | CaptureError::Detect(_))) => {
                return Ok(bad_input(e))
            }
            Err(e) => return Err(e.into()),
        };
        if a.json {
            println!("{}", rep.inventory.to_json_pretty());
        } else {
            print!("{}", render::inventory_text(&rep.inventory));
            println!();
            println!(
                "Captured {} sysfs/procfs files into {} (addresses: {})",
                rep.files,
                rep.dir.display(),
                rep.ip_source
            );
            if !rep.vanished.is_empty() {
                println!(
                    "  {} paths vanished while copying: {}",
                    rep.vanished.len(),
                    rep.vanished.join(", ")
                );
            }
            println!(
                "Read it back: fabperf detect --root {d} ; fabperf doctor --root {d}",
                d = rep.dir.display()
            );
            println!(
                "Support bundle: tar czf {}.tgz -C {} .",
                rep.inventory.hostname,
                rep.dir.display()
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut inv = match detect(a.root.as_deref(), &opts) {
        Ok(i) => i,
        Err(e) => return Ok(bad_input(e)),
    };
    if let Some(rule) = &a.rails {
        if let Err(e) = assign_rails(&mut inv, rule) {
            return Ok(bad_input(e));
        }
    }
    if a.json {
        println!("{}", inv.to_json_pretty());
    } else {
        print!("{}", render::inventory_text(&inv));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run_doctor(a: DoctorArgs) -> anyhow::Result<ExitCode> {
    let inv = if let Some(file) = &a.inventory {
        match Inventory::from_json_file(file) {
            Ok(i) => i,
            Err(e) => return Ok(bad_input(e)),
        }
    } else {
        let opts = DetectOptions { node_ip: a.node_ip };
        match detect(a.root.as_deref(), &opts) {
            Ok(i) => i,
            Err(e) => return Ok(bad_input(e)),
        }
    };
    let mut report = doctor::diagnose(&inv);
    if let Some(file) = &a.mtu_results {
        match fabperf_mtu::doctor::read_results(file) {
            Ok(m) => report.extend(fabperf_mtu::doctor::findings(&m, &inv, file)),
            Err(e) => return Ok(bad_input(e)),
        }
    }
    if a.json {
        println!("{}", report.to_json_pretty());
    } else {
        print!("{}", render::doctor_text(&report));
    }
    Ok(if report.has_error() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
