//! `tcp-bw`: N TCP streams per direction, one thread per stream.
//!
//! Flow: the client sends `Start`; the agent validates, registers a data
//! cookie and accepts. The client opens one data connection per stream and
//! direction (to the agent's same port, `FBPD` + cookie + a 4-byte stream
//! header). When the agent has them all it sends `Ready`: the test is set
//! up. The client then sends `Go` with a start delay (0 for a test on its
//! own; the common start of concurrent flows otherwise, see
//! [`fabperf_proto::Start`]) and both ends start their threads at that
//! instant. A sender sends for omit + duration, then shuts its side down; a
//! receiver reads until end of stream. The bandwidth is the receiver's
//! view: bytes received after its warm-up boundary over the time from that
//! boundary to its last byte, and that interval in Unix time (with the
//! bytes received over time when the client asks for them). Each side then
//! reports its streams (client first), and the client builds the records.

//!
//! Layout: this file holds the messages, the client and the agent side;
//! `tcp_bw/streams.rs` the data path of one end, `tcp_bw/records.rs` the
//! records built from both ends' reports.

mod records;
mod streams;

use records::build_records;
use streams::{run_streams, EndReport};

use crate::cpu::{set_host_cpu, set_thread_cpu, HostReport};
use crate::error::SockError;
use crate::net;
use crate::params::{Direction, TcpBwParams};
use fabperf_proto::cpu::{HostMeter, ThreadCpu};
use fabperf_proto::explain::{self, EndSetup};
use fabperf_proto::{
    connect_test, open_data, ClientConfig, Control, Msg, ServeCtx, ServeError, Start, TestKind,
};
use fabperf_results::{
    Interval, Progress, ProgressRecorder, Record, Side, Transport, WallClock, Warning,
};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Data flows client -> agent on this connection.
const C2A: u8 = 0;
/// Data flows agent -> client.
const A2C: u8 = 1;

/// What one end measured on one connection.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct StreamReport {
    pub idx: u32,
    /// `C2A` or `A2C`.
    pub dir: u8,
    pub sender: bool,
    pub total_bytes: u64,
    /// Bytes inside the measured interval.
    pub bytes: u64,
    pub messages: u64,
    /// System calls that moved bytes in the measured interval (sends or
    /// receives).
    #[serde(default)]
    pub calls: u64,
    /// Measured interval, seconds.
    pub secs: f64,
    /// Thread CPU seconds during the measured interval (`None`: unknown).
    pub cpu_s: Option<f64>,
    /// Retransmitted segments during the measured interval (senders).
    pub retrans: Option<u64>,
    /// NUMA node of the thread's user buffer (`--copy`, `--zerocopy`; the default path
    /// has none: sendfile from a file, receive discarded in the kernel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buf_node: Option<u32>,
    /// Why the thread could not be pinned (`--cpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pin_error: Option<String>,
    /// Receivers: the measured interval in Unix seconds (this end's clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_s: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to_s: Option<f64>,
    /// Senders: when this end started sending (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_from_s: Option<f64>,
    /// Receivers, when the client asked for it: the bytes received over time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
enum BwMsg {
    Ready,
    /// Client: start `in_s` seconds after this message; record the bytes
    /// received over time when `progress`.
    Go {
        in_s: f64,
        #[serde(default)]
        progress: bool,
    },
    Report {
        streams: Vec<StreamReport>,
        /// This end's host CPU over the measured interval, or why not.
        #[serde(default)]
        host: Box<HostReport>,
    },
}

#[derive(Debug, Serialize, Deserialize)]
struct AcceptInfo {
    cookie: String,
}

/// A data connection with its role.
struct Conn {
    idx: u32,
    dir: u8,
    sender: bool,
    stream: TcpStream,
}

struct Plan {
    size: usize,
    omit: Duration,
    duration: Duration,
    zerocopy: bool,
    copy: bool,
    /// Pace each sender to this many bytes per second (SO_MAX_PACING_RATE).
    pacing: Option<u64>,
    /// Receivers record the bytes received over time.
    progress: bool,
    /// The common start of concurrent flows (given with `progress`): every
    /// stream of every flow measures from omit after it to duration later,
    /// whenever its thread got to run, so the flows' intervals line up
    /// (`streams.rs`).
    together: Option<Instant>,
    /// A peer that moves no byte for this long is dead.
    timeout: Duration,
}

/// How a sender hands bytes to the kernel.
enum Source {
    /// send(2) from a user buffer (optionally MSG_ZEROCOPY).
    Buffer(Vec<u8>, libc::c_int),
    /// sendfile(2) from an in-memory file holding one message.
    File(std::fs::File),
}

fn prepare(stream: &TcpStream, window: Option<u64>, timeout: Duration) -> std::io::Result<()> {
    let fd = stream.as_fd();
    if let Some(w) = window {
        net::set_buffer(fd, true, w)?;
        net::set_buffer(fd, false, w)?;
    }
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    Ok(())
}

fn plan_of(p: &TcpBwParams, timeout: Duration) -> Plan {
    Plan {
        size: p.size as usize,
        omit: Duration::from_secs_f64(p.omit_s),
        duration: Duration::from_secs_f64(p.duration_s),
        zerocopy: p.zerocopy,
        copy: p.copy,
        pacing: p.rate_bps.map(|r| (r / 8).max(1)),
        progress: false,
        together: None,
        timeout,
    }
}

/// Client side of `tcp-bw`: set up, then start at once.
pub fn run_tcp_bw(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &TcpBwParams,
) -> Result<Vec<Record>, SockError> {
    prepare_tcp_bw(addr, cfg, p)?.run(Start::now())
}

/// A `tcp-bw` test set up to its start: connected, authenticated, every
/// data connection open, the agent ready.
pub struct TcpBwPrepared {
    addr: SocketAddr,
    p: TcpBwParams,
    ctl: Control,
    conns: Vec<Conn>,
    setup: EndSetup,
    local: Option<SocketAddr>,
    /// A peer that moves no byte for this long is dead.
    timeout: Duration,
}

/// Set a `tcp-bw` test up against the agent at `addr`, up to the start.
pub fn prepare_tcp_bw(
    addr: SocketAddr,
    cfg: &ClientConfig,
    p: &TcpBwParams,
) -> Result<TcpBwPrepared, SockError> {
    p.validate().map_err(SockError::BadParams)?;
    let params = serde_json::to_value(p).expect("params serialize");
    let setup = EndSetup::for_socket(Side::Client, explain::local_ip_towards(addr), &p.cpu)
        .map_err(SockError::BadParams)?;
    let (mut ctl, info) = connect_test(addr, cfg, "tcp-bw", params)?;
    let info: AcceptInfo = serde_json::from_value(info)
        .map_err(|e| SockError::Protocol(format!("agent's accept info: {e}")))?;
    let mut conns = Vec::new();
    let mut plan_dirs = Vec::new();
    if p.direction.client_sends() {
        plan_dirs.push(C2A);
    }
    if p.direction.agent_sends() {
        plan_dirs.push(A2C);
    }
    let mut local = None;
    for &dir in &plan_dirs {
        for idx in 0..p.streams {
            let mut s = open_data(&mut ctl, &info.cookie, cfg.timeout)?;
            prepare(&s, p.window, cfg.timeout)
                .map_err(|e| SockError::data("setting data socket options", e))?;
            let mut hdr = [0u8; 8];
            hdr[..4].copy_from_slice(&idx.to_be_bytes());
            hdr[4] = dir;
            s.write_all(&hdr)
                .map_err(|e| SockError::data("sending stream header", e))?;
            local = local.or_else(|| s.local_addr().ok());
            conns.push(Conn {
                idx,
                dir,
                sender: dir == C2A,
                stream: s,
            });
        }
    }
    match ctl.recv_test::<BwMsg>("the agent's ready")? {
        BwMsg::Ready => {}
        other => {
            return Err(SockError::Protocol(format!(
                "expected ready, got {other:?}"
            )))
        }
    }
    Ok(TcpBwPrepared {
        addr,
        p: p.clone(),
        ctl,
        conns,
        setup,
        local,
        timeout: cfg.timeout,
    })
}

impl TcpBwPrepared {
    /// Start at `start` (the agent starts its side at the same instant),
    /// measure, and build the records.
    pub fn run(self, start: Start) -> Result<Vec<Record>, SockError> {
        let TcpBwPrepared {
            addr,
            p,
            mut ctl,
            conns,
            setup,
            local,
            timeout,
        } = self;
        let in_s = match fabperf_proto::start::check_delay(start.delay_s()) {
            Ok(d) => d,
            Err(e) => {
                ctl.send_error(fabperf_proto::ErrorCode::BadRequest, &e);
                return Err(SockError::BadParams(e));
            }
        };
        ctl.send_test(&BwMsg::Go {
            in_s,
            progress: start.progress,
        })?;
        start.wait();
        let started_at = fabperf_results::now_rfc3339();
        let plan = Plan {
            progress: start.progress,
            together: start.progress.then_some(start.at),
            ..plan_of(&p, timeout)
        };
        let mine = match run_streams(&conns, &plan, &setup) {
            Ok(r) => r,
            Err(e) => {
                ctl.send_error(
                    fabperf_proto::ErrorCode::TestFailed,
                    &format!("client: {e}"),
                );
                return Err(e);
            }
        };
        ctl.send_test(&BwMsg::Report {
            streams: mine.streams.clone(),
            host: Box::new(mine.host.clone()),
        })?;
        let theirs = match ctl.recv_test::<BwMsg>("the agent's stream report")? {
            BwMsg::Report { streams, host } => EndReport {
                streams,
                host: *host,
            },
            other => {
                return Err(SockError::Protocol(format!(
                    "expected report, got {other:?}"
                )))
            }
        };
        let _ = ctl.send(&Msg::Bye);
        let mut recs = build_records(&p, &mine, &theirs, &started_at, local, addr)?;
        explain::apply(
            &mut recs,
            &mine.host,
            &theirs.host,
            &explain::TestKindInfo {
                full_rate_bandwidth: p.rate_bps.is_none(),
                one: "one stream".into(),
                more_streams_hint:
                    "more streams (-P 4) and larger messages (-l 1M) show what the link carries"
                        .into(),
            },
        );
        Ok(recs)
    }
}

/// Agent side of `tcp-bw`.
pub struct TcpBw;

impl TestKind for TcpBw {
    fn name(&self) -> &'static str {
        "tcp-bw"
    }

    fn serve(&self, ctx: &mut ServeCtx<'_>, params: serde_json::Value) -> Result<(), ServeError> {
        let p: TcpBwParams = fabperf_proto::decode_params("tcp-bw", params)?;
        p.validate().map_err(ServeError::bad_request)?;
        ctx.limits.check_streams(p.streams)?;
        ctx.limit_duration(p.duration_s + p.omit_s)?;
        let nconn = p.connections();
        ctx.limits
            .check_memory(p.size * nconn as u64, "tcp-bw buffers (size x connections)")?;
        let setup = EndSetup::for_socket(Side::Agent, Some(ctx.local().ip()), &p.cpu)
            .map_err(ServeError::bad_request)?;
        let io = ctx.limits.io_timeout;
        let waiter = ctx.data.register(nconn as usize);
        ctx.ctl.send(&Msg::Accept {
            info: serde_json::to_value(AcceptInfo {
                cookie: waiter.cookie_hex(),
            })
            .expect("accept info serializes"),
        })?;
        let mut conns: Vec<Conn> = Vec::with_capacity(nconn as usize);
        for _ in 0..nconn {
            let mut s = waiter.accept_watching(io, ctx.ctl)?;
            ctx.watch(&s);
            prepare(&s, p.window, io)
                .map_err(|e| ServeError::failed(format!("data socket options: {e}")))?;
            let mut hdr = [0u8; 8];
            s.read_exact(&mut hdr)
                .map_err(|e| ServeError::failed(format!("reading stream header: {e}")))?;
            let idx = u32::from_be_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
            let dir = hdr[4];
            let dir_ok = (dir == C2A && p.direction.client_sends())
                || (dir == A2C && p.direction.agent_sends());
            if idx >= p.streams || !dir_ok || conns.iter().any(|c| c.idx == idx && c.dir == dir) {
                return Err(ServeError::bad_request(format!(
                    "unexpected data connection (stream {idx}, direction {dir})"
                )));
            }
            conns.push(Conn {
                idx,
                dir,
                sender: dir == A2C,
                stream: s,
            });
        }
        drop(waiter);
        ctx.ctl.send_test(&BwMsg::Ready)?;
        // Set up: wait for the client's start (concurrent flows start
        // together, when the last of them is set up: up to the I/O
        // timeout), then run from that instant.
        ctx.clock
            .arm(io + Duration::from_secs_f64(p.duration_s + p.omit_s));
        let (in_s, progress) = match ctx.ctl.recv_test::<BwMsg>("the client's start")? {
            BwMsg::Go { in_s, progress } => (
                fabperf_proto::start::check_delay(in_s).map_err(ServeError::bad_request)?,
                progress,
            ),
            other => {
                return Err(ServeError::bad_request(format!(
                    "expected go, got {other:?}"
                )))
            }
        };
        let start = Start::after(in_s, progress);
        let at = start.at;
        // The agent's clock counts from the start.
        ctx.limit_duration(in_s + p.duration_s + p.omit_s)?;
        start.wait();
        let plan = Plan {
            progress,
            together: progress.then_some(at),
            ..plan_of(&p, io)
        };
        let mine = run_streams(&conns, &plan, &setup)?;
        // The client reports when its threads are done; they end at most
        // one timeout after ours.
        match ctx.ctl.recv_test::<BwMsg>("the client's stream report")? {
            BwMsg::Report { .. } => {}
            other => {
                return Err(ServeError::bad_request(format!(
                    "expected report, got {other:?}"
                )))
            }
        }
        ctx.ctl.send_test(&BwMsg::Report {
            streams: mine.streams,
            host: Box::new(mine.host),
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::streams::run_receiver;
    use super::*;
    use std::net::TcpListener;

    fn plan(size: usize, copy: bool) -> Plan {
        Plan {
            size,
            omit: Duration::from_millis(100),
            duration: Duration::from_secs(1),
            zerocopy: false,
            copy,
            pacing: None,
            progress: false,
            together: None,
            timeout: Duration::from_secs(10),
        }
    }

    /// A receiver on one end of a loopback connection whose other end
    /// writes `bytes` in `chunk`-byte writes, pausing `pause` after each,
    /// then closes.
    fn receive(p: &Plan, bytes: usize, chunk: usize, pause: Duration) -> StreamReport {
        receive_then(p, bytes, chunk, pause, Duration::ZERO)
    }

    /// [`receive`], with the writer waiting `linger` before it closes.
    fn receive_then(
        p: &Plan,
        bytes: usize,
        chunk: usize,
        pause: Duration,
        linger: Duration,
    ) -> StreamReport {
        receive_with(p, move |mut s| {
            let buf = vec![7u8; chunk];
            let mut left = bytes;
            while left > 0 {
                let n = left.min(chunk);
                s.write_all(&buf[..n]).unwrap();
                left -= n;
                if !pause.is_zero() {
                    std::thread::sleep(pause);
                }
            }
            std::thread::sleep(linger);
        })
    }

    /// A receiver on one end of a loopback connection whose other end
    /// `write` writes to, then closes.
    fn receive_with(p: &Plan, write: impl FnOnce(TcpStream) + Send + 'static) -> StreamReport {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let tx = std::thread::spawn(move || write(TcpStream::connect(addr).unwrap()));
        let (s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(p.timeout)).unwrap();
        let c = Conn {
            idx: 0,
            dir: C2A,
            sender: false,
            stream: s,
        };
        let r = run_receiver(&c, p, &WallClock::now()).unwrap();
        tx.join().unwrap();
        r
    }

    /// The discarding receiver waits for its low-water mark and takes
    /// everything queued: its receives return more than one message (`-l`)
    /// on average, which a receive of `-l` bytes never can.
    #[test]
    fn discarding_receiver_reads_in_large_gulps() {
        let size = 16 << 10;
        // No omit: a loopback stream of 256 MiB can end inside one.
        let p = Plan {
            omit: Duration::ZERO,
            ..plan(size, false)
        };
        let r = receive(&p, 256 << 20, 256 << 10, Duration::ZERO);
        assert_eq!(r.total_bytes, 256 << 20);
        assert!(r.calls > 0 && r.bytes > 0, "{r:?}");
        let per_call = r.bytes / r.calls;
        assert!(
            per_call > 2 * size as u64,
            "{per_call} bytes per receive with {size}-byte messages: {r:?}"
        );
        // --copy reads `-l` bytes per call, like an application.
        let p = Plan {
            omit: Duration::ZERO,
            ..plan(size, true)
        };
        let r = receive(&p, 64 << 20, 256 << 10, Duration::ZERO);
        assert_eq!(r.total_bytes, 64 << 20);
        assert!(r.bytes / r.calls.max(1) <= size as u64, "{r:?}");
    }

    /// A stream of concurrent flows measures on their common schedule: what
    /// arrives after omit + duration from the common start (a queue
    /// draining after the senders stopped) is read but not counted, and its
    /// interval ends with its last receive inside the schedule.
    #[test]
    fn concurrent_flows_measure_on_their_common_schedule() {
        // 32 KiB every 10 ms for about 0.8 s; the schedule ends at 0.4 s.
        let chunk = 32 << 10;
        let together = Instant::now();
        let p = Plan {
            omit: Duration::from_millis(100),
            duration: Duration::from_millis(300),
            together: Some(together),
            progress: true,
            ..plan(128 << 10, false)
        };
        let clock = WallClock::now();
        let r = receive(&p, 80 * chunk, chunk, Duration::from_millis(10));
        assert_eq!(r.total_bytes, 80 * chunk as u64);
        assert!(r.bytes < r.total_bytes / 2, "{r:?}");
        let (from, to) = (r.from_s.unwrap(), r.to_s.unwrap());
        let t0 = clock.unix(together);
        // Its first counted receive is counted from the receive before it
        // (a few ms before the boundary at 0.1 s, more on a loaded machine).
        assert!(
            from >= t0 + 0.05 && to <= t0 + 0.4 + 1e-3,
            "{from} {to} {t0}"
        );
        assert!((r.secs - 0.3).abs() < 0.08, "{r:?}");
        // ~3.3 MB/s, as written.
        let rate = r.bytes as f64 / r.secs;
        assert!(rate > 2.6e6 && rate < 4.2e6, "{rate:.0} B/s: {r:?}");
        // A stream that stops moving before the schedule's end (stalled,
        // or its sender late to close) is in the test until the end.
        let together = Instant::now();
        let p = Plan {
            together: Some(together),
            ..p
        };
        let clock = WallClock::now();
        let r = receive_then(
            &p,
            20 * chunk,
            chunk,
            Duration::from_millis(10),
            Duration::from_millis(600),
        );
        let to = r.to_s.unwrap() - clock.unix(together);
        assert!(
            to > 0.35 && to <= 0.4 + 1e-3,
            "interval ends {to} s after the start: {r:?}"
        );
        // One stalled across the boundary starts its interval there, at
        // the first wait that found nothing, not at its next byte.
        let together = Instant::now();
        let p = Plan {
            together: Some(together),
            ..p
        };
        let clock = WallClock::now();
        let r = receive_with(&p, move |mut s| {
            let buf = vec![7u8; chunk];
            for pause in [0, 0, 0, 250, 0, 0] {
                s.write_all(&buf).unwrap();
                std::thread::sleep(Duration::from_millis(10 + pause));
            }
        });
        let from = r.from_s.unwrap() - clock.unix(together);
        assert!(
            (0.09..0.2).contains(&from),
            "interval starts {from} s after the start: {r:?}"
        );
        // The same stream on its own measures until its last byte.
        let r = receive(
            &plan(128 << 10, false),
            80 * chunk,
            chunk,
            Duration::from_millis(10),
        );
        assert!(r.bytes > r.total_bytes / 2 && r.secs > 0.5, "{r:?}");
    }

    /// A slow stream (far below the low-water mark per wake-up) is still
    /// read as it arrives: the measured rate matches what the sender wrote
    /// per unit of time, and no read waits for the mark.
    #[test]
    fn discarding_receiver_keeps_up_with_a_slow_stream() {
        // 32 KiB every 10 ms: ~3.3 MB/s, a quarter of the mark per wake-up.
        let chunk = 32 << 10;
        let pause = Duration::from_millis(10);
        let t = Instant::now();
        let r = receive(&plan(128 << 10, false), 100 * chunk, chunk, pause);
        let wall = t.elapsed().as_secs_f64();
        assert_eq!(r.total_bytes, 100 * chunk as u64);
        let sent_rate = (100 * chunk) as f64 / wall;
        let got = r.bytes as f64 / r.secs;
        assert!(
            got > sent_rate * 0.8 && got < sent_rate * 1.25,
            "measured {got:.0} B/s, the writer averaged {sent_rate:.0} B/s: {r:?}"
        );
        // Read about as often as written, never batched up to the mark.
        assert!(r.calls * chunk as u64 >= r.bytes / 2, "{r:?}");
    }
}
