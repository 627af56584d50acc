//! `fabperf rdma-bw` and `fabperf rdma-lat`: RDMA verbs tests (perftest
//! methods and columns) against a `fabperf server` agent.

use crate::cmd::common::{
    checked, emit, test_secs, usage, warmup_secs, ClientOpts, OutputOpts, TableStyle,
};
use anyhow::Context;
use fabperf_rdma::{all_sizes, BwParams, GpuReg, LatParams, MemSpec, Op, PollPriority, MAX_SIZE};
use fabperf_results::{Record, Table};
use fabperf_units as units;
use std::process::ExitCode;

/// A message size (the units grammar), 1 B .. 1 GiB.
fn msg_size() -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    units::size_in(1, MAX_SIZE)
}

/// `--mtu`: one of the IB MTUs, as a size (`4096` or `4K`).
fn mtu_arg(s: &str) -> Result<u32, String> {
    let v = units::parse_size(s)?;
    match v {
        256 | 512 | 1024 | 2048 | 4096 => Ok(v as u32),
        _ => Err(format!(
            "{s} is not an IB MTU; use 256, 512, 1024, 2048 or 4096"
        )),
    }
}

/// `--inline`: bytes, at most 4 KiB (no device allows more).
fn inline_arg(s: &str) -> Result<u32, String> {
    units::size_in(0, 4096)(s).map(|v| v as u32)
}

fn parse_op(s: &str) -> Result<Op, String> {
    s.parse()
}

/// Device and addressing options shared by both commands.
#[derive(clap::Args, Debug, Clone)]
pub struct DevOpts {
    /// RDMA device on this end (default: $FABPERF_RDMA_DEVICE, else the first
    /// ACTIVE port, preferring the NIC that carries the address used to reach HOST).
    #[arg(long, value_name = "NAME")]
    pub device: Option<String>,
    /// Port of the device (default: its first ACTIVE port).
    #[arg(long, value_name = "N")]
    pub ib_port: Option<u8>,
    /// GID index on this end (default by rule: RoCE v2 + IPv4 + not link-local).
    #[arg(long, value_name = "N")]
    pub gid_index: Option<u32>,
    /// RDMA device the agent uses (default: the agent's --rdma-device, else the device
    /// carrying the address the test reaches it on).
    #[arg(long, value_name = "NAME")]
    pub remote_device: Option<String>,
    /// Port of the agent's device (default: its first ACTIVE port).
    #[arg(long, value_name = "N")]
    pub remote_ib_port: Option<u8>,
    /// Path MTU in bytes (default: the smaller active MTU of both ends).
    #[arg(long, value_name = "BYTES", value_parser = mtu_arg)]
    pub mtu: Option<u32>,
    /// Connect the queue pairs through librdmacm (the agent listens on its
    /// control port number in the RDMA CM's port space) instead of
    /// exchanging QP numbers and GIDs over the control channel.
    #[arg(long)]
    pub rdma_cm: bool,
    /// Scheduling of both ends' polling loops: idle (SCHED_IDLE: spin only
    /// while no other task wants the CPU), normal (like perftest), or auto:
    /// idle on a software RDMA device (rxe, siw: the kernel's protocol work
    /// needs the same CPUs), normal on a NIC.
    #[arg(long, value_name = "WHEN", default_value = "auto", value_parser = parse_poll)]
    pub poll_priority: PollPriority,
    /// Service level of the queue pairs, both ends (InfiniBand SL; on RoCE
    /// the NIC maps it to a priority).
    #[arg(long, value_name = "0-15", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=15))]
    pub sl: u8,
    /// Traffic class in the GRH, both ends (RoCE: DSCP = TCLASS >> 2, e.g.
    /// 106 for DSCP 26 with ECN capable; a lossless RoCE fabric runs its
    /// RDMA class on a non-zero DSCP).
    #[arg(long, value_name = "0-255", default_value_t = 0)]
    pub tclass: u8,
    /// Where the buffers live, both ends: host, or GPU memory — cuda (the GPU nearest each
    /// end's NIC), cuda:N (GPU N in PCI address order, as `fabperf detect` numbers them) or
    /// cuda:<PCI address>. Needs the NVIDIA driver (libcuda.so.1, loaded at run time) and
    /// GPUDirect RDMA (dma-buf or nvidia_peermem).
    #[arg(long, value_name = "WHERE", default_value = "host", value_parser = parse_mem)]
    pub mem: MemSpec,
    /// Where the agent's buffers live, if not as --mem (e.g. --mem cuda --remote-mem host:
    /// GPU memory on this end only).
    #[arg(long, value_name = "WHERE", value_parser = parse_mem)]
    pub remote_mem: Option<MemSpec>,
    /// How GPU memory is registered with the NIC, both ends: auto (dma-buf, else
    /// nvidia_peermem), dmabuf (like perftest --use_cuda_dmabuf) or peermem (like plain
    /// --use_cuda).
    #[arg(long, value_name = "HOW", default_value = "auto", value_parser = parse_gpu_reg)]
    pub gpu_reg: GpuReg,
}

fn parse_mem(s: &str) -> Result<MemSpec, String> {
    s.parse()
}

fn parse_gpu_reg(s: &str) -> Result<GpuReg, String> {
    s.parse()
}

fn parse_poll(s: &str) -> Result<PollPriority, String> {
    s.parse()
}

impl DevOpts {
    fn device(&self) -> Option<String> {
        self.device.clone().or_else(|| {
            std::env::var("FABPERF_RDMA_DEVICE")
                .ok()
                .filter(|s| !s.is_empty())
        })
    }
}

/// RDMA bandwidth (like ib_write_bw / ib_read_bw / ib_send_bw).
#[derive(clap::Args, Debug)]
pub struct BwArgs {
    #[command(flatten)]
    pub client: ClientOpts,
    /// RDMA operation: write, read or send.
    #[arg(long, default_value = "write", value_parser = parse_op)]
    pub op: Op,
    /// Message size in bytes (64K, 1M accepted).
    #[arg(short = 'l', long, value_parser = msg_size(), value_name = "SIZE",
          conflicts_with_all = ["sizes", "all_sizes"], allow_negative_numbers = true)]
    pub size: Option<u64>,
    /// Comma-separated message sizes, e.g. 2,64,64K.
    #[arg(long, value_delimiter = ',', value_parser = msg_size(), value_name = "SIZES",
          conflicts_with = "all_sizes")]
    pub sizes: Option<Vec<u64>>,
    /// Every power of two from 2 B to 8 MiB (perftest -a).
    #[arg(long)]
    pub all_sizes: bool,
    /// Queue pairs (streams).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub qps: u32,
    /// Outstanding requests per QP.
    #[arg(long, default_value_t = 128, value_parser = clap::value_parser!(u32).range(1..=16384))]
    pub tx_depth: u32,
    /// Signal one completion every N requests [default: 100, but every
    /// request above 8 KiB, as perftest]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub cq_mod: Option<u32>,
    /// Send messages up to N bytes inline (if the device allows).
    #[arg(long, default_value = "0", value_name = "SIZE", value_parser = inline_arg)]
    pub inline: u32,
    /// Both directions at once (the agent sends too).
    #[arg(long)]
    pub bidir: bool,
    /// Measure for SECS seconds (after --warmup) instead of a fixed count.
    #[arg(short = 't', long, value_name = "SECS", conflicts_with = "iterations",
          value_parser = test_secs(), allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// Messages per QP (default 5000, like ib_write_bw).
    #[arg(short = 'n', long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..),
          allow_negative_numbers = true)]
    pub iterations: Option<u64>,
    /// Seconds of traffic excluded before measuring (default 1 with --duration, else 0).
    #[arg(long, value_name = "SECS", value_parser = warmup_secs(), allow_negative_numbers = true)]
    pub warmup: Option<f64>,
    /// Messages per QP sent and completed before the measured --iterations.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        conflicts_with = "duration"
    )]
    pub warmup_iterations: u64,
    #[command(flatten)]
    pub dev: DevOpts,
    /// Report MiB/s instead of Gbit/s in the table.
    #[arg(long)]
    pub mib: bool,
    #[command(flatten)]
    pub out: OutputOpts,
}

/// RDMA latency (like ib_send_lat / ib_write_lat / ib_read_lat).
#[derive(clap::Args, Debug)]
pub struct LatArgs {
    #[command(flatten)]
    pub client: ClientOpts,
    /// RDMA operation: send (completion-driven), write (polls the last byte) or read (round trip).
    #[arg(long, default_value = "send", value_parser = parse_op)]
    pub op: Op,
    /// Message size in bytes.
    #[arg(short = 'l', long, value_parser = msg_size(), value_name = "SIZE",
          conflicts_with_all = ["sizes", "all_sizes"], allow_negative_numbers = true)]
    pub size: Option<u64>,
    /// Comma-separated message sizes.
    #[arg(long, value_delimiter = ',', value_parser = msg_size(), value_name = "SIZES",
          conflicts_with = "all_sizes")]
    pub sizes: Option<Vec<u64>>,
    /// Every power of two from 2 B to 8 MiB.
    #[arg(long)]
    pub all_sizes: bool,
    /// Ping-pongs per size (default 1000, like perftest).
    #[arg(short = 'n', long, value_name = "N", conflicts_with = "duration",
          value_parser = clap::value_parser!(u64).range(1..), allow_negative_numbers = true)]
    pub iterations: Option<u64>,
    /// Ping-pong for SECS seconds instead (percentiles still reported).
    #[arg(short = 't', long, value_name = "SECS", value_parser = test_secs(),
          allow_negative_numbers = true)]
    pub duration: Option<f64>,
    /// Seconds excluded before recording (default 1 with --duration, else 0).
    #[arg(long, value_name = "SECS", value_parser = warmup_secs(), allow_negative_numbers = true)]
    pub warmup: Option<f64>,
    /// Ping-pongs before the recorded --iterations.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 0,
        conflicts_with = "duration"
    )]
    pub warmup_iterations: u64,
    /// Inline limit in bytes (default: up to 236 as the device allows).
    #[arg(long, value_name = "SIZE", value_parser = inline_arg)]
    pub inline: Option<u32>,
    #[command(flatten)]
    pub dev: DevOpts,
    #[command(flatten)]
    pub out: OutputOpts,
}

fn sizes(size: Option<u64>, sizes: &Option<Vec<u64>>, all: bool, default: u64) -> Vec<u64> {
    if all {
        all_sizes()
    } else if let Some(s) = sizes {
        s.clone()
    } else {
        vec![size.unwrap_or(default)]
    }
}

fn header(records: &[Record], what: &str, extra: &str) -> String {
    let Some(r) = records.iter().find(|r| r.stream.is_none()) else {
        return String::new();
    };
    format!(
        "{what}{extra}\n local:  {}\n remote: {}\n link {}, path MTU {}{}\n",
        r.local.as_deref().unwrap_or("?"),
        r.remote.as_deref().unwrap_or("?"),
        r.link_layer.as_deref().unwrap_or("?"),
        r.mtu.map(|m| m.to_string()).unwrap_or_else(|| "?".into()),
        pollers_note(r)
    )
}

/// ", pollers at idle priority (...)" when either end's polling loops ran
/// at SCHED_IDLE, so a reader comparing with perftest knows.
fn pollers_note(r: &Record) -> String {
    let idle = |v: &Option<String>| v.as_deref() == Some(fabperf_rdma::prio::label(true));
    match (idle(&r.poll_priority_local), idle(&r.poll_priority_remote)) {
        (false, false) => String::new(),
        (true, true) => ", pollers at idle priority (SCHED_IDLE) on both ends".into(),
        (true, false) => ", pollers at idle priority (SCHED_IDLE) on this end".into(),
        (false, true) => ", pollers at idle priority (SCHED_IDLE) on the agent's end".into(),
    }
}

fn cpu_table(records: &[Record]) -> String {
    Table::cpu(records).render()
}

pub fn run_bw(a: BwArgs) -> anyhow::Result<ExitCode> {
    let p = BwParams {
        op: a.op,
        sizes: sizes(a.size, &a.sizes, a.all_sizes, 65536),
        qps: a.qps,
        tx_depth: a.tx_depth,
        cq_mod: a.cq_mod,
        inline: a.inline,
        bidir: a.bidir,
        duration: a.duration,
        iterations: a.iterations.unwrap_or(5000),
        warmup: a.warmup,
        warmup_iterations: a.warmup_iterations,
        sl: a.dev.sl,
        tclass: a.dev.tclass,
        device: a.dev.device(),
        ib_port: a.dev.ib_port,
        gid_index: a.dev.gid_index,
        remote_device: a.dev.remote_device.clone(),
        remote_ib_port: a.dev.remote_ib_port,
        mtu: a.dev.mtu,
        rdma_cm: a.dev.rdma_cm,
        poll_priority: a.dev.poll_priority,
        cpu: a.client.cpu.clone(),
        mem: a.dev.mem.clone(),
        remote_mem: a.dev.remote_mem.clone(),
        gpu_reg: a.dev.gpu_reg,
    };
    p.validate().map_err(usage)?;
    let addr = a.client.addr()?;
    let cfg = a.client.config()?;
    let records = checked(
        fabperf_rdma::run_bw(addr, &cfg, &p)
            .with_context(|| format!("rdma-bw --op {} against {addr}", p.op.as_str()))?,
    )?;
    if !a.out.json {
        let mode = match p.duration {
            Some(d) => format!("{d} s after {} s warm-up", p.warmup_secs()),
            None => format!("{} iterations", p.iterations),
        };
        print!(
            "{}",
            header(
                &records,
                &format!(
                    "RDMA {} bandwidth{}",
                    p.op.as_str(),
                    if p.bidir { ", bidirectional" } else { "" }
                ),
                &format!(
                    " — {} QP(s), tx-depth {}, cq-mod {}, {mode}{}",
                    p.qps,
                    p.tx_depth,
                    p.cq_mod_label(),
                    if p.rdma_cm {
                        ", connected via rdma_cm"
                    } else {
                        ""
                    }
                ),
            )
        );
        let totals: Vec<Record> = records
            .iter()
            .filter(|r| r.stream.is_none())
            .cloned()
            .collect();
        emit(&totals, &a.out, TableStyle::PerftestBw { mib: a.mib })?;
        let per_qp: Vec<Record> = records
            .iter()
            .filter(|r| r.stream.is_some())
            .cloned()
            .collect();
        if !per_qp.is_empty() {
            println!("per QP:");
            let mut t = Table::new(["#bytes", "QP", "BW average[Gb/sec]", "MsgRate[Mpps]"]);
            for r in &per_qp {
                let f = |v: Option<f64>, d: usize| {
                    v.map(|x| format!("{x:.d$}")).unwrap_or_else(|| "-".into())
                };
                t.row([
                    r.size.to_string(),
                    r.stream.unwrap_or(0).to_string(),
                    f(r.bw_gbps, 2),
                    f(r.msg_rate_mpps, 6),
                ]);
            }
            print!("{}", t.render());
        }
        print!("{}", cpu_table(&records));
        if let Some(path) = &a.out.csv {
            // emit() wrote the totals; add the per-QP rows too.
            if !per_qp.is_empty() {
                let f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(path)
                    .with_context(|| format!("opening CSV file {}", path.display()))?;
                fabperf_results::write_csv(f, &per_qp, false)?;
            }
        }
    } else {
        emit(&records, &a.out, TableStyle::PerftestBw { mib: a.mib })?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run_lat(a: LatArgs) -> anyhow::Result<ExitCode> {
    let p = LatParams {
        op: a.op,
        sizes: sizes(a.size, &a.sizes, a.all_sizes, 2),
        iterations: a.iterations.unwrap_or(1000),
        duration: a.duration,
        warmup: a.warmup,
        warmup_iterations: a.warmup_iterations,
        sl: a.dev.sl,
        tclass: a.dev.tclass,
        inline: a.inline,
        device: a.dev.device(),
        ib_port: a.dev.ib_port,
        gid_index: a.dev.gid_index,
        remote_device: a.dev.remote_device.clone(),
        remote_ib_port: a.dev.remote_ib_port,
        mtu: a.dev.mtu,
        rdma_cm: a.dev.rdma_cm,
        poll_priority: a.dev.poll_priority,
        cpu: a.client.cpu.clone(),
        mem: a.dev.mem.clone(),
        remote_mem: a.dev.remote_mem.clone(),
        gpu_reg: a.dev.gpu_reg,
    };
    p.validate().map_err(usage)?;
    let addr = a.client.addr()?;
    let cfg = a.client.config()?;
    let records = checked(
        fabperf_rdma::run_lat(addr, &cfg, &p)
            .with_context(|| format!("rdma-lat --op {} against {addr}", p.op.as_str()))?,
    )?;
    if !a.out.json {
        let kind = if p.op == Op::Read {
            "full round trip (RTT), like ib_read_lat"
        } else {
            "half round trip (RTT/2), like ib_send_lat/ib_write_lat"
        };
        let mode = match p.duration {
            Some(d) => format!("{d} s after {} s warm-up", p.warmup_secs()),
            None => format!("{} iterations", p.iterations),
        };
        print!(
            "{}",
            header(
                &records,
                &format!("RDMA {} latency, {kind}", p.op.as_str()),
                &format!(
                    " — {mode}{}",
                    if p.rdma_cm {
                        ", connected via rdma_cm"
                    } else {
                        ""
                    }
                ),
            )
        );
    }
    emit(&records, &a.out, TableStyle::PerftestLat)?;
    if !a.out.json {
        print!("{}", cpu_table(&records));
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_says_which_end_polled_at_idle_priority() {
        let mut r = Record::new("rdma-bw", fabperf_results::Transport::Rdma, 65536, 1);
        assert_eq!(pollers_note(&r), "");
        r.poll_priority_local = Some("idle".into());
        r.poll_priority_remote = Some("normal".into());
        assert!(pollers_note(&r).ends_with("on this end"));
        r.poll_priority_remote = Some("idle".into());
        assert!(pollers_note(&r).ends_with("on both ends"));
        r.poll_priority_local = Some("normal".into());
        assert!(pollers_note(&r).ends_with("on the agent's end"));
        assert!(header(&[r], "RDMA write bandwidth", "").contains("path MTU ?, pollers at idle"));
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(msg_size()("64KiB").unwrap(), 65536);
        assert_eq!(msg_size()("2").unwrap(), 2);
        assert_eq!(msg_size()("1m").unwrap(), 1 << 20);
        assert!(msg_size()("x").unwrap_err().contains("not a size"));
        assert!(msg_size()("0").is_err());
        assert_eq!(mtu_arg("4K").unwrap(), 4096);
        assert!(mtu_arg("1500").is_err());
        use clap::Parser;
        #[derive(clap::Parser)]
        struct T {
            #[command(flatten)]
            bw: BwArgs,
        }
        let t = T::try_parse_from(["t", "h", "--sizes", "2,64,64K", "--op", "send"]).unwrap();
        assert_eq!(t.bw.sizes, Some(vec![2, 64, 65536]));
        // Short and long forms mean the same as for the socket tests.
        let t2 =
            T::try_parse_from(["t", "h", "-l", "64KiB", "-t", "2", "--warmup", "500ms"]).unwrap();
        assert_eq!(t2.bw.size, Some(65536));
        assert_eq!(t2.bw.duration, Some(2.0));
        assert_eq!(t2.bw.warmup, Some(0.5));
        let t2 = T::try_parse_from(["t", "h", "-n", "100"]).unwrap();
        assert_eq!(t2.bw.iterations, Some(100));
        assert!(T::try_parse_from(["t", "h", "-n", "100", "-t", "1"]).is_err());
        assert!(T::try_parse_from(["t", "h", "-n", "0"]).is_err());
        assert!(T::try_parse_from(["t", "h", "-t", "-1"]).is_err());
        assert_eq!(t.bw.op, Op::Send);
        assert_eq!(
            (t.bw.dev.sl, t.bw.dev.tclass, t.bw.warmup_iterations),
            (0, 0, 0)
        );
        let t = T::try_parse_from([
            "t",
            "h",
            "--sl",
            "3",
            "--tclass",
            "106",
            "--warmup-iterations",
            "100",
        ])
        .unwrap();
        assert_eq!(
            (t.bw.dev.sl, t.bw.dev.tclass, t.bw.warmup_iterations),
            (3, 106, 100)
        );
        assert!(T::try_parse_from(["t", "h", "--sl", "16"]).is_err());
        assert!(T::try_parse_from(["t", "h", "--tclass", "256"]).is_err());
        assert!(
            T::try_parse_from(["t", "h", "--warmup-iterations", "5", "--duration", "2"]).is_err()
        );
        assert!(T::try_parse_from(["t", "h", "--sizes", "2", "--all-sizes"]).is_err());
        assert!(T::try_parse_from(["t", "h", "--op", "atomic"]).is_err());
        assert_eq!(sizes(None, &None, false, 65536), vec![65536]);
        assert_eq!(sizes(None, &None, true, 65536).len(), 23);
    }
}
