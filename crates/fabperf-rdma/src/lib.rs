//! fabperf's RDMA verbs engine: perftest-class bandwidth (`rdma-bw`) and
//! latency (`rdma-lat`) over RC queue pairs, served by the fabperf agent on
//! its one control port.
//!
//! Built on `sideway`, which loads libibverbs at run time: fabperf runs on
//! machines without rdma-core and says "no RDMA stack here". All `unsafe`
//! code is in the crate-private `sys` module, under a safe API that cannot
//! cause undefined behaviour; the verbs layer (`verbs`, `cm`, `engine`) is
//! crate-private too. The public API: [`run_bw`], [`run_lat`], [`kinds`]
//! (the agent side), [`probe`], the parameters, [`msg`] (the wire
//! messages), [`select`] (device/GID rules) and [`prio`].
//!
//! Layout: `verbs/` is the safe layer over sideway (`device` discovery, the
//! `endpoint`, buffer `memory`), `engine/` the measuring loops (`bandwidth`,
//! `latency`) and the `liveness` protocol around them, `client` and `agent`
//! the two ends of a test, `device_tests/` every test on a real device
//! (`#[ignore]`d; the soft-RoCE guest runs them).
//!
//! Method (same as perftest, timed with `CLOCK_MONOTONIC` via `Instant`):
//! - bandwidth: the client posts `--tx-depth` requests per QP, one signaled
//!   completion every `--cq-mod`; average = bytes / (last completion - first
//!   post) in iteration mode (after `--warmup-iterations`), or the bytes
//!   completed inside the measured window after `--warmup` in duration
//!   mode; peak (iteration mode, as perftest) = size x the best message
//!   rate over any span from a post to a later completion.
//! - latency: ping-pong on one QP; write polls the last byte of the peer's
//!   write, send waits for the receive completion, read waits for its own
//!   completion. Half round trip for write/send, full round trip for read.
//!   Every sample goes into an HdrHistogram.

mod agent;
mod client;
mod cm;
#[cfg(test)]
mod device_tests;
mod engine;
pub mod error;
pub mod gpu;
pub mod msg;
mod peak;
pub mod prio;
pub mod select;
mod sys;
mod verbs;

pub use agent::{kinds, AgentRdmaOpts};
pub use client::{prepare_bw, prepare_lat, run_bw, run_lat, BwPrepared, LatPrepared};
pub use error::{RdmaError, RdmaUnavailable};
pub use gpu::{GpuReg, GpuSel, MemSpec};
pub use prio::PollPriority;
pub use verbs::Op;

use fabperf_proto::explain::CpuSpec;
use serde::{Deserialize, Serialize};

/// Largest message size accepted (perftest's `-a` goes to 8 MiB).
pub const MAX_SIZE: u64 = 1 << 30;

/// `2, 4, ... 8 MiB` (perftest's `--all`).
pub fn all_sizes() -> Vec<u64> {
    (1..=23).map(|s| 1u64 << s).collect()
}

/// perftest's default completion moderation (`-Q`).
pub const DEFAULT_CQ_MOD: u32 = 100;
/// Above this message size perftest signals every request by default.
pub const CQ_MOD_SIZE_LIMIT: u64 = 8192;

/// Bandwidth test parameters (defaults = the CLI defaults = perftest's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BwParams {
    pub op: Op,
    pub sizes: Vec<u64>,
    pub qps: u32,
    pub tx_depth: u32,
    /// Signal one completion every `cq_mod` requests; `None`: perftest's
    /// rule (100, but every request for messages above 8 KiB).
    pub cq_mod: Option<u32>,
    /// Send up to this many bytes inline (0: never).
    pub inline: u32,
    pub bidir: bool,
    /// Measured seconds (duration mode); `None`: iteration mode.
    pub duration: Option<f64>,
    /// Iterations per QP in iteration mode.
    pub iterations: u64,
    /// Seconds excluded before measuring (duration mode; default 1 s there).
    pub warmup: Option<f64>,
    /// Iterations per QP run (and completed) before the measured ones
    /// (iteration mode).
    pub warmup_iterations: u64,
    /// Service level of the QPs (both ends).
    pub sl: u8,
    /// GRH traffic class of the QPs (both ends; RoCE: DSCP = tclass >> 2).
    pub tclass: u8,
    /// Client-side device selection (the agent picks its own).
    pub device: Option<String>,
    pub ib_port: Option<u8>,
    pub gid_index: Option<u32>,
    /// The agent's RDMA device for this test (`--remote-device`); `None`: the agent's own
    /// choice (its `--rdma-device`, else the device carrying the address the test came in
    /// on). A runner names it for each rail of a node. Sent only when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_device: Option<String>,
    /// The port of that device (`--remote-ib-port`). Sent only when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_ib_port: Option<u8>,
    /// Force the path MTU (bytes).
    pub mtu: Option<u32>,
    /// Connect the QPs through librdmacm instead of the out-of-band exchange.
    pub rdma_cm: bool,
    /// Scheduling of both ends' polling loops (each end resolves `auto`
    /// for its own device).
    pub poll_priority: PollPriority,
    /// Where each end's measuring thread runs and its buffers are placed
    /// (`--cpu`): `auto` (the NIC's NUMA node), `none`, or a CPU list for
    /// both ends. Sent only when not `auto`.
    #[serde(skip_serializing_if = "CpuSpec::is_auto")]
    pub cpu: CpuSpec,
    /// Where the client's buffers live (`--mem`): host memory, or GPU memory (`cuda`, the
    /// GPU nearest the NIC; `cuda:N`; `cuda:<PCI address>`).
    #[serde(skip_serializing_if = "MemSpec::is_host")]
    pub mem: MemSpec,
    /// Where the agent's buffers live (`--remote-mem`); `None`: as `mem` (each end picks its
    /// own GPU when `mem` says `cuda`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_mem: Option<MemSpec>,
    /// How GPU memory is registered, both ends (`--gpu-reg`).
    #[serde(skip_serializing_if = "GpuReg::is_auto")]
    pub gpu_reg: GpuReg,
}

impl Default for BwParams {
    fn default() -> Self {
        BwParams {
            op: Op::Write,
            sizes: vec![65536],
            qps: 1,
            tx_depth: 128,
            cq_mod: None,
            inline: 0,
            bidir: false,
            duration: None,
            iterations: 5000,
            warmup: None,
            warmup_iterations: 0,
            sl: 0,
            tclass: 0,
            device: None,
            ib_port: None,
            gid_index: None,
            remote_device: None,
            remote_ib_port: None,
            mtu: None,
            rdma_cm: false,
            poll_priority: PollPriority::Auto,
            cpu: CpuSpec::Auto,
            mem: MemSpec::Host,
            remote_mem: None,
            gpu_reg: GpuReg::Auto,
        }
    }
}

/// Latency test parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LatParams {
    pub op: Op,
    pub sizes: Vec<u64>,
    pub iterations: u64,
    pub duration: Option<f64>,
    pub warmup: Option<f64>,
    /// Ping-pongs before the recorded ones (iteration mode).
    pub warmup_iterations: u64,
    /// Service level of the QP (both ends).
    pub sl: u8,
    /// GRH traffic class of the QP (both ends; RoCE: DSCP = tclass >> 2).
    pub tclass: u8,
    /// Inline limit; `None`: as much as the device takes up to 236 bytes
    /// (perftest's latency default).
    pub inline: Option<u32>,
    pub device: Option<String>,
    pub ib_port: Option<u8>,
    pub gid_index: Option<u32>,
    /// The agent's RDMA device for this test (`--remote-device`); `None`: the agent's own
    /// choice (its `--rdma-device`, else the device carrying the address the test came in
    /// on). A runner names it for each rail of a node. Sent only when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_device: Option<String>,
    /// The port of that device (`--remote-ib-port`). Sent only when given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_ib_port: Option<u8>,
    pub mtu: Option<u32>,
    /// Connect the QPs through librdmacm instead of the out-of-band exchange.
    pub rdma_cm: bool,
    /// Scheduling of both ends' polling loops (see `BwParams`).
    pub poll_priority: PollPriority,
    /// Where each end's measuring thread runs and its buffers are placed
    /// (`--cpu`): `auto` (the NIC's NUMA node), `none`, or a CPU list for
    /// both ends. Sent only when not `auto`.
    #[serde(skip_serializing_if = "CpuSpec::is_auto")]
    pub cpu: CpuSpec,
    /// Where the client's buffers live (`--mem`): host memory, or GPU memory (`cuda`, the
    /// GPU nearest the NIC; `cuda:N`; `cuda:<PCI address>`).
    #[serde(skip_serializing_if = "MemSpec::is_host")]
    pub mem: MemSpec,
    /// Where the agent's buffers live (`--remote-mem`); `None`: as `mem` (each end picks its
    /// own GPU when `mem` says `cuda`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_mem: Option<MemSpec>,
    /// How GPU memory is registered, both ends (`--gpu-reg`).
    #[serde(skip_serializing_if = "GpuReg::is_auto")]
    pub gpu_reg: GpuReg,
}

impl Default for LatParams {
    fn default() -> Self {
        LatParams {
            op: Op::Send,
            sizes: vec![2],
            iterations: 1000,
            duration: None,
            warmup: None,
            warmup_iterations: 0,
            sl: 0,
            tclass: 0,
            inline: None,
            device: None,
            ib_port: None,
            gid_index: None,
            remote_device: None,
            remote_ib_port: None,
            mtu: None,
            rdma_cm: false,
            poll_priority: PollPriority::Auto,
            cpu: CpuSpec::Auto,
            mem: MemSpec::Host,
            remote_mem: None,
            gpu_reg: GpuReg::Auto,
        }
    }
}

/// Largest `--warmup-iterations`.
pub const MAX_WARMUP_ITERATIONS: u64 = 1 << 32;

/// What both tests' parameters share, for one validation.
struct Common<'a> {
    sizes: &'a [u64],
    duration: Option<f64>,
    warmup: Option<f64>,
    iterations: u64,
    warmup_iterations: u64,
    mtu: Option<u32>,
    sl: u8,
    mem: &'a MemSpec,
    agent_mem: &'a MemSpec,
    gpu_reg: GpuReg,
    /// Inline bytes asked for explicitly (0: none).
    inline: u32,
    /// A latency test that polls the peer's write with the CPU.
    polls_memory: bool,
}

fn check_common(c: Common<'_>) -> Result<(), String> {
    let Common {
        sizes,
        duration,
        warmup,
        iterations,
        warmup_iterations,
        mtu,
        sl,
        mem,
        agent_mem,
        gpu_reg,
        inline,
        polls_memory,
    } = c;
    let gpu = mem.is_cuda() || agent_mem.is_cuda();
    if !gpu && !gpu_reg.is_auto() {
        return Err(
            "--gpu-reg applies to GPU memory: add --mem cuda (or --remote-mem cuda)".into(),
        );
    }
    if gpu && inline > 0 {
        return Err(format!(
            "--inline {inline}: an inline send copies the message with the CPU, which cannot \
             read GPU memory; leave --inline at 0 with GPU memory (perftest refuses inline \
             device-memory tests too)"
        ));
    }
    if gpu && polls_memory {
        return Err(
            "rdma-lat --op write polls the last byte of the peer's write with the CPU, which \
             cannot read GPU memory; use --op send or --op read with GPU memory (perftest \
             refuses write latency on device memory too)"
                .into(),
        );
    }
    if sizes.is_empty() {
        return Err("no message size given".into());
    }
    if let Some(s) = sizes.iter().find(|&&s| s == 0 || s > MAX_SIZE) {
        return Err(format!("message size {s} is outside 1 .. {MAX_SIZE} bytes"));
    }
    match duration {
        Some(d) if !(d.is_finite() && d > 0.0) => {
            return Err(format!("duration {d} must be a positive number of seconds"))
        }
        None if iterations == 0 => return Err("iterations must be at least 1".into()),
        _ => {}
    }
    if let Some(w) = warmup {
        if !(w.is_finite() && w >= 0.0) {
            return Err(format!(
                "warm-up {w} must be zero or a positive number of seconds"
            ));
        }
    }
    if let Some(m) = mtu {
        if select::mtu_enum(m).is_none() {
            return Err(format!(
                "--mtu {m} is not an IB MTU; use 256, 512, 1024, 2048 or 4096"
            ));
        }
    }
    if warmup_iterations > 0 && duration.is_some() {
        return Err(
            "--warmup-iterations counts iterations; with --duration use --warmup SECS".into(),
        );
    }
    if warmup_iterations > MAX_WARMUP_ITERATIONS {
        return Err(format!(
            "--warmup-iterations {warmup_iterations} is more than {MAX_WARMUP_ITERATIONS}"
        ));
    }
    if sl > 15 {
        return Err(format!("--sl {sl} must be 0 .. 15"));
    }
    Ok(())
}

/// Longest RDMA device name a request may name (the kernel's IB_DEVICE_NAME_MAX is 64).
pub const MAX_DEVICE_NAME: usize = 63;

/// A device name the agent is asked to use: what the kernel allows in an RDMA device name
/// (letters, digits, `_`, `-`, `.`), at most [`MAX_DEVICE_NAME`] bytes.
fn check_remote_device(name: Option<&str>) -> Result<(), String> {
    let Some(n) = name else { return Ok(()) };
    let ok = !n.is_empty()
        && n.len() <= MAX_DEVICE_NAME
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "--remote-device {:?} is not an RDMA device name (letters, digits, '_', '-', '.', at most {MAX_DEVICE_NAME})",
            n.chars().take(80).collect::<String>()
        ))
    }
}

impl BwParams {
    /// The agent's memory: `remote_mem`, else `mem`.
    pub fn agent_mem(&self) -> &MemSpec {
        self.remote_mem.as_ref().unwrap_or(&self.mem)
    }

    /// Reject parameters that cannot work, with the reason.
    pub fn validate(&self) -> Result<(), String> {
        check_common(Common {
            sizes: &self.sizes,
            duration: self.duration,
            warmup: self.warmup,
            iterations: self.iterations,
            warmup_iterations: self.warmup_iterations,
            mtu: self.mtu,
            sl: self.sl,
            mem: &self.mem,
            agent_mem: self.agent_mem(),
            gpu_reg: self.gpu_reg,
            inline: self.inline,
            polls_memory: false,
        })?;
        check_remote_device(self.remote_device.as_deref())?;
        if self.qps == 0 || self.qps > 4096 {
            return Err(format!("--qps {} must be 1 .. 4096", self.qps));
        }
        if self.tx_depth == 0 || self.tx_depth > 16384 {
            return Err(format!("--tx-depth {} must be 1 .. 16384", self.tx_depth));
        }
        if self.cq_mod == Some(0) {
            return Err("--cq-mod must be at least 1".into());
        }
        if self.inline > 4096 {
            return Err(format!(
                "--inline {} is larger than any device allows",
                self.inline
            ));
        }
        Ok(())
    }

    /// Warm-up actually used.
    pub fn warmup_secs(&self) -> f64 {
        match (self.duration, self.warmup) {
            (_, Some(w)) => w,
            (Some(_), None) => 1.0,
            (None, None) => 0.0,
        }
    }

    /// The completion moderation used for `size`-byte messages: the one
    /// asked for, else perftest's default (every 100th request, every
    /// request above 8 KiB, where a completion per message costs nothing
    /// and keeps the send queue full); never above tx_depth (or nothing
    /// would ever be signaled).
    pub fn effective_cq_mod(&self, size: u64) -> u32 {
        let m = self.cq_mod.unwrap_or(if size > CQ_MOD_SIZE_LIMIT {
            1
        } else {
            DEFAULT_CQ_MOD
        });
        m.min(self.tx_depth).max(1)
    }

    /// The moderation in words, for table titles.
    pub fn cq_mod_label(&self) -> String {
        match self.cq_mod {
            Some(_) => self.effective_cq_mod(0).to_string(),
            None if self.sizes.iter().all(|&s| s > CQ_MOD_SIZE_LIMIT) => "1".into(),
            None if self.sizes.iter().all(|&s| s <= CQ_MOD_SIZE_LIMIT) => {
                self.effective_cq_mod(0).to_string()
            }
            None => format!(
                "{} (1 above {} KiB)",
                self.effective_cq_mod(0),
                CQ_MOD_SIZE_LIMIT / 1024
            ),
        }
    }

    pub fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(1)
    }
}

impl LatParams {
    /// The agent's memory: `remote_mem`, else `mem`.
    pub fn agent_mem(&self) -> &MemSpec {
        self.remote_mem.as_ref().unwrap_or(&self.mem)
    }

    /// The inline limit one end uses: none for reads or from GPU memory, else the one asked
    /// for or 236 bytes (perftest's latency default, as far as the device allows).
    pub fn inline_for(&self, mem: &MemSpec) -> u32 {
        if self.op == Op::Read || mem.is_cuda() {
            0
        } else {
            self.inline.unwrap_or(236)
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        check_common(Common {
            sizes: &self.sizes,
            duration: self.duration,
            warmup: self.warmup,
            iterations: self.iterations,
            warmup_iterations: self.warmup_iterations,
            mtu: self.mtu,
            sl: self.sl,
            mem: &self.mem,
            agent_mem: self.agent_mem(),
            gpu_reg: self.gpu_reg,
            inline: self.inline.unwrap_or(0),
            polls_memory: self.op == Op::Write,
        })?;
        check_remote_device(self.remote_device.as_deref())?;
        if let Some(i) = self.inline {
            if i > 4096 {
                return Err(format!("--inline {i} is larger than any device allows"));
            }
        }
        Ok(())
    }

    pub fn warmup_secs(&self) -> f64 {
        match (self.duration, self.warmup) {
            (_, Some(w)) => w,
            (Some(_), None) => 1.0,
            (None, None) => 0.0,
        }
    }

    pub fn max_size(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(1)
    }
}

/// Bytes per QP slot for a largest message of `max`.
pub(crate) fn slot_for(max: u64) -> usize {
    (max as usize).div_ceil(sys::PAGE) * sys::PAGE
}

/// Is RDMA usable here? `Ok("rxe0 port 1 (RoCE v2, Ethernet, ACTIVE)")`,
/// or which of no verbs library / no device / no ACTIVE port.
pub fn probe() -> Result<String, RdmaUnavailable> {
    let d = verbs::open_device(None, None, None, None, None)?;
    for n in &d.notes {
        eprintln!("fabperf: {n}");
    }
    let kind = match &d.addressing.gid {
        Some(g) if d.addressing.use_grh => g.kind.as_str(),
        _ => "LID",
    };
    Ok(format!(
        "{} port {} ({kind}, {}, ACTIVE)",
        d.name,
        d.port.port,
        d.port.link_layer.as_str()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_perftest() {
        let b = BwParams::default();
        assert_eq!(
            (b.tx_depth, b.cq_mod, b.iterations, b.sizes[0]),
            (128, None, 5000, 65536)
        );
        // perftest: -Q 100, but every completion above 8 KiB.
        assert_eq!(b.effective_cq_mod(8192), 100);
        assert_eq!(b.effective_cq_mod(8193), 1);
        assert_eq!(b.cq_mod_label(), "1");
        let mixed = BwParams {
            sizes: vec![64, 65536],
            ..BwParams::default()
        };
        assert_eq!(mixed.cq_mod_label(), "100 (1 above 8 KiB)");
        let l = LatParams::default();
        assert_eq!(
            (l.iterations, l.sizes[0], l.op),
            (1000, vec![2u64][0], Op::Send)
        );
        assert_eq!(all_sizes().first(), Some(&2));
        assert_eq!(all_sizes().last(), Some(&(8 << 20)));
    }

    #[test]
    fn params_round_trip_with_defaults_filled() {
        let b: BwParams =
            serde_json::from_value(serde_json::json!({"op": "read", "qps": 4})).unwrap();
        assert_eq!(b.op, Op::Read);
        assert_eq!(b.qps, 4);
        assert_eq!(b.tx_depth, 128);
        let s = serde_json::to_value(&b).unwrap();
        assert_eq!(serde_json::from_value::<BwParams>(s).unwrap(), b);
    }

    #[test]
    fn validation_explains() {
        let mut b = BwParams::default();
        assert!(b.validate().is_ok());
        b.sizes = vec![0];
        assert!(b.validate().unwrap_err().contains("outside"));
        b.sizes = vec![64];
        b.qps = 0;
        assert!(b.validate().unwrap_err().contains("--qps"));
        b.qps = 1;
        b.duration = Some(-1.0);
        assert!(b.validate().unwrap_err().contains("duration"));
        b.duration = Some(2.0);
        assert_eq!(b.warmup_secs(), 1.0);
        b.warmup = Some(0.0);
        assert_eq!(b.warmup_secs(), 0.0);
        b.mtu = Some(1500);
        assert!(b.validate().unwrap_err().contains("IB MTU"));
        b.mtu = None;
        b.cq_mod = Some(500);
        assert_eq!(b.effective_cq_mod(64), 128);
        assert_eq!(b.effective_cq_mod(1 << 20), 128);
        assert_eq!(b.cq_mod_label(), "128");
        b.cq_mod = Some(0);
        assert!(b.validate().unwrap_err().contains("--cq-mod"));
        b.cq_mod = None;
        b.sl = 16;
        assert!(b.validate().unwrap_err().contains("--sl 16"));
        b.sl = 15;
        b.tclass = 255;
        assert!(b.validate().is_ok());
        b.warmup_iterations = 10;
        assert!(b.validate().unwrap_err().contains("--warmup SECS"));
        b.duration = None;
        assert!(b.validate().is_ok());
        b.warmup_iterations = MAX_WARMUP_ITERATIONS + 1;
        assert!(b.validate().unwrap_err().contains("more than"));
        let mut l = LatParams {
            iterations: 0,
            ..Default::default()
        };
        assert!(l.validate().unwrap_err().contains("iterations"));
        l.duration = Some(1.0);
        assert!(l.validate().is_ok());
    }

    #[test]
    fn the_agents_device_is_a_device_name() {
        // Not named: nothing new on the wire.
        let j = serde_json::to_value(LatParams::default()).unwrap();
        assert!(j.get("remote_device").is_none() && j.get("remote_ib_port").is_none());
        let mut b = BwParams {
            remote_device: Some("mlx5_3".into()),
            remote_ib_port: Some(1),
            ..BwParams::default()
        };
        assert!(b.validate().is_ok());
        let j = serde_json::to_value(&b).unwrap();
        assert_eq!(j["remote_device"], "mlx5_3");
        assert_eq!(serde_json::from_value::<BwParams>(j).unwrap(), b);
        for bad in ["", "../mlx5_0", "a b", "mlx5_0\n", &"x".repeat(64)] {
            b.remote_device = Some(bad.to_string());
            let e = b.validate().unwrap_err();
            assert!(e.contains("--remote-device"), "{bad:?}: {e}");
            let l = LatParams {
                remote_device: Some(bad.to_string()),
                ..LatParams::default()
            };
            assert!(l.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn gpu_memory_parameters() {
        // Host memory serializes exactly as before (an older agent sees nothing new).
        let j = serde_json::to_value(BwParams::default()).unwrap();
        for k in ["mem", "remote_mem", "gpu_reg"] {
            assert!(j.get(k).is_none(), "{k} in {j}");
        }
        let mut b = BwParams {
            mem: "cuda".parse().unwrap(),
            ..BwParams::default()
        };
        assert!(b.validate().is_ok());
        assert_eq!(b.agent_mem(), &MemSpec::Cuda(GpuSel::Nearest));
        let j = serde_json::to_value(&b).unwrap();
        assert_eq!(j["mem"], "cuda");
        assert_eq!(serde_json::from_value::<BwParams>(j).unwrap(), b);
        // GPU memory on this end only.
        b.remote_mem = Some(MemSpec::Host);
        assert!(b.agent_mem().is_host());
        b.inline = 64;
        assert!(b.validate().unwrap_err().contains("--inline 64"));
        b.inline = 0;
        b.gpu_reg = GpuReg::Peermem;
        assert!(b.validate().is_ok());
        // --gpu-reg without GPU memory anywhere.
        let h = BwParams {
            gpu_reg: GpuReg::Dmabuf,
            ..BwParams::default()
        };
        assert!(h
            .validate()
            .unwrap_err()
            .contains("--gpu-reg applies to GPU memory"));
        // Latency: write polls with the CPU; send and read work; the default inline drops to 0.
        let mut l = LatParams {
            op: Op::Write,
            remote_mem: Some("cuda:2".parse().unwrap()),
            ..LatParams::default()
        };
        assert!(l.validate().unwrap_err().contains("--op send or --op read"));
        l.op = Op::Send;
        assert!(l.validate().is_ok());
        assert_eq!(l.inline_for(&MemSpec::Host), 236);
        assert_eq!(l.inline_for(l.agent_mem()), 0);
        l.inline = Some(16);
        assert!(l.validate().unwrap_err().contains("inline"));
        // The agent refuses a bad memory spec with the reason.
        let e = serde_json::from_value::<LatParams>(serde_json::json!({"mem": "cuda:zz"}))
            .unwrap_err()
            .to_string();
        assert!(e.contains("use host, cuda"), "{e}");
    }

    #[test]
    fn slot_is_whole_pages() {
        assert_eq!(slot_for(2), 4096);
        assert_eq!(slot_for(65536), 65536);
        assert_eq!(slot_for(65537), 69632);
    }

    #[test]
    fn no_rdma_stack_is_reported_plainly() {
        // On a host with RDMA (the soft-RoCE guest sets FABPERF_RDMA_DEVICE)
        // probe succeeds; everywhere else it must say which part is missing.
        match probe() {
            Ok(s) => assert!(s.contains("ACTIVE"), "{s}"),
            Err(e) => {
                let m = e.to_string();
                assert!(
                    std::env::var("FABPERF_RDMA_DEVICE").is_err(),
                    "FABPERF_RDMA_DEVICE is set but probe failed: {m}"
                );
                assert!(
                    m.starts_with("no RDMA stack here")
                        || m.starts_with("no RDMA device")
                        || m.starts_with("no ACTIVE RDMA port"),
                    "unclear: {m}"
                );
            }
        }
    }
}
