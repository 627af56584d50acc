//! `fabperf`: a thin clap layer over the fabperf libraries.

mod cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "fabperf",
    version,
    about = "What each network path of a cluster node really delivers: RDMA verbs, IPoIB, CNI, host",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the agent that clients test against (socket and RDMA tests on one port).
    Server(cmd::server::Args),
    /// TCP bandwidth: N streams, forward, reverse or bidirectional.
    TcpBw(cmd::sock::TcpBwArgs),
    /// TCP request/response latency (ping-pong).
    TcpLat(cmd::sock::TcpLatArgs),
    /// UDP bandwidth at a target rate, with loss, reordering and jitter.
    UdpBw(cmd::sock::UdpBwArgs),
    /// UDP request/response latency with loss-tolerant timeouts.
    UdpLat(cmd::sock::UdpLatArgs),
    /// HTTP/1.1 load (wrk-class): requests/s and latency against an agent's HTTP server.
    HttpLoad(cmd::http::HttpLoadArgs),
    /// Path MTU: the largest packet that crosses each path unfragmented, the overlay's overhead named.
    Mtu(cmd::mtu::MtuArgs),
    /// RDMA verbs bandwidth (write, read, send), perftest-class.
    RdmaBw(cmd::rdma::BwArgs),
    /// RDMA verbs latency (write, send, read), perftest-class.
    RdmaLat(cmd::rdma::LatArgs),
    /// Run a plan: test matrices and all-pairs / incast / bisection patterns, resumable, into a store.
    Run(cmd::run::RunArgs),
    /// List the runs in a results store.
    Runs(cmd::run::RunsArgs),
    /// Write a store's measurements as JSON Lines, CSV or OpenMetrics (or push them to a Pushgateway).
    Export(cmd::run::ExportArgs),
    /// The N×N matrix of a run's mesh tests and the suspect links and nodes.
    MeshSummary(cmd::run::MeshSummaryArgs),
    /// A run's figures against the baseline path, verdicts, HTML charts and pass/fail gates.
    Report(cmd::report::ReportArgs),
    /// Run the quick default set of tests (against an in-process agent unless --peer).
    Suite(cmd::suite::Args),
    /// Inventory of this node's fabric: RDMA devices, ports, GIDs, netdevs, PCIe, node IP.
    Detect(cmd::detect::DetectArgs),
    /// Findings about this node's fabric, each with evidence and the fix.
    Doctor(cmd::detect::DoctorArgs),
    /// Kubernetes provisioning: manifests, device-plugin config, CNI values.
    #[command(subcommand)]
    K8s(cmd::k8s::K8sCmd),
    /// Pod network launch time: a CNI plugin chain's ADD/DEL in fresh network namespaces.
    CniBench(cmd::cnibench::Args),
    /// Tuning profiles: check them; restore what a killed agent left tuned.
    #[command(subcommand)]
    Tune(cmd::tune::TuneCmd),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let res = match cli.cmd {
        Cmd::Server(a) => cmd::server::run(a),
        Cmd::TcpBw(a) => cmd::sock::run_tcp_bw(a),
        Cmd::TcpLat(a) => cmd::sock::run_tcp_lat(a),
        Cmd::UdpBw(a) => cmd::sock::run_udp_bw(a),
        Cmd::UdpLat(a) => cmd::sock::run_udp_lat(a),
        Cmd::HttpLoad(a) => cmd::http::run_http_load(a),
        Cmd::Mtu(a) => cmd::mtu::run(a),
        Cmd::RdmaBw(a) => cmd::rdma::run_bw(a),
        Cmd::RdmaLat(a) => cmd::rdma::run_lat(a),
        Cmd::Run(a) => cmd::run::run(a),
        Cmd::Runs(a) => cmd::run::runs(a),
        Cmd::Export(a) => cmd::run::export(a),
        Cmd::MeshSummary(a) => cmd::run::mesh_summary(a),
        Cmd::Report(a) => cmd::report::run(a),
        Cmd::Suite(a) => cmd::suite::run(a),
        Cmd::Detect(a) => cmd::detect::run_detect(a),
        Cmd::Doctor(a) => cmd::detect::run_doctor(a),
        Cmd::K8s(c) => cmd::k8s::run(c),
        Cmd::CniBench(a) => cmd::cnibench::run(a),
        Cmd::Tune(c) => cmd::tune::run(c),
    };
    match res {
        Ok(code) => code,
        Err(e) => {
            // Errors may quote what a peer sent: escaped, on one line.
            let text = fabperf_proto::text::escape(&format!("{e:#}"));
            if e.downcast_ref::<cmd::common::UsageError>().is_some() {
                eprintln!("error: {text}\n\nFor more information, try '--help'.");
                ExitCode::from(2)
            } else {
                eprintln!("fabperf: error: {text}");
                ExitCode::FAILURE
            }
        }
    }
}
