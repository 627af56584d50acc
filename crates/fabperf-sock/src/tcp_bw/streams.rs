//! The data path of one end: a thread per stream, pinned, sending for omit +
//! duration (from memory, or a memfd with zerocopy/sendfile) or reading
//! until end of stream, each reporting what it moved after the warm-up.

use super::*;

pub(super) fn memfd_with(size: usize) -> std::io::Result<std::fs::File> {
    let fd = rustix::fs::memfd_create(c"fabperf-tcp-bw", rustix::fs::MemfdFlags::CLOEXEC)?;
    let mut f = std::fs::File::from(fd);
    let chunk = vec![0x5au8; size.min(1 << 20)];
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk.len());
        f.write_all(&chunk[..n])?;
        left -= n;
    }
    Ok(f)
}

/// Run a sender until omit + duration has passed, or `abort` is set.
pub(super) fn run_sender(
    c: &Conn,
    plan: &Plan,
    abort: &AtomicBool,
    clock: &WallClock,
) -> Result<StreamReport, SockError> {
    let fd = c.stream.as_fd();
    let mut flags = 0;
    if plan.zerocopy {
        net::enable_zerocopy(fd).map_err(|e| {
            SockError::data(
                "enabling SO_ZEROCOPY (MSG_ZEROCOPY needs Linux 4.14 or newer)",
                e,
            )
        })?;
        flags = libc::MSG_ZEROCOPY;
    }
    if let Some(rate) = plan.pacing {
        net::set_max_pacing_rate(fd, rate)
            .map_err(|e| SockError::data("setting SO_MAX_PACING_RATE (--rate)", e))?;
    }
    let src = if plan.copy || plan.zerocopy {
        // Filled by this (pinned) thread: its pages are on this thread's node.
        Source::Buffer(vec![0x5au8; plan.size], flags)
    } else {
        Source::File(
            memfd_with(plan.size)
                .map_err(|e| SockError::data("creating the in-memory send file (memfd)", e))?,
        )
    };
    // Concurrent flows keep their common schedule, however late this
    // thread got to run; a test on its own starts now.
    let began = Instant::now();
    let start = plan.together.unwrap_or(began);
    let boundary = start + plan.omit;
    let end = boundary + plan.duration;
    let mut total: u64 = 0;
    let mut messages: u64 = 0;
    let mut measuring = false;
    let mut calls: u64 = 0;
    let (mut m_bytes, mut m_msgs, mut m_calls, mut m_t0, mut m_cpu0, mut m_retr0) =
        (0u64, 0u64, 0u64, began, ThreadCpu::start(), None);
    let mut off = 0usize;
    let mut since_drain = 0u32;
    loop {
        let now = Instant::now();
        if !measuring && now >= boundary {
            measuring = true;
            m_bytes = total;
            m_msgs = messages;
            m_calls = calls;
            m_t0 = now;
            m_cpu0 = ThreadCpu::start();
            m_retr0 = net::tcp_total_retrans(fd);
        }
        if now >= end && off == 0 {
            break;
        }
        if abort.load(Ordering::Relaxed) {
            return Err(SockError::PeerGone("stopped: another stream failed".into()));
        }
        let sent = match &src {
            Source::Buffer(buf, fl) => net::send(fd, &buf[off..], *fl),
            Source::File(f) => net::sendfile(fd, f.as_fd(), off, plan.size - off),
        };
        match sent {
            Ok(n) => {
                total += n as u64;
                calls += 1;
                off += n;
                if off == plan.size {
                    off = 0;
                    messages += 1;
                }
                if flags != 0 {
                    since_drain += 1;
                    if since_drain >= 256 {
                        since_drain = 0;
                        net::drain_errqueue(fd);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if flags != 0 && e.raw_os_error() == Some(libc::ENOBUFS) => {
                // Too many zerocopy notifications outstanding: read them.
                if net::drain_errqueue(fd) == 0 {
                    let _ = net::wait_readable(fd, Duration::from_millis(1));
                }
            }
            Err(e) => return Err(SockError::data(format!("stream {} send", c.idx), e)),
        }
    }
    let t_end = Instant::now();
    let cpu = m_cpu0.used_secs();
    let retrans = match (m_retr0, net::tcp_total_retrans(fd)) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let _ = c.stream.shutdown(Shutdown::Write);
    let buf_node = match &src {
        Source::Buffer(b, _) => explain::buffer_node(b),
        Source::File(_) => None,
    };
    Ok(StreamReport {
        idx: c.idx,
        dir: c.dir,
        sender: true,
        total_bytes: total,
        bytes: total - m_bytes,
        messages: messages - m_msgs,
        calls: calls - m_calls,
        secs: t_end.duration_since(m_t0).as_secs_f64(),
        cpu_s: cpu,
        retrans,
        buf_node,
        pin_error: None,
        from_s: None,
        to_s: None,
        sent_from_s: Some(clock.unix(began)),
        progress: None,
    })
}

/// The discarding receiver (the default) asks the kernel to wake it only
/// once this many bytes are queued (SO_RCVLOWAT). Woken for every segment
/// that arrives (64 KiB on a veth, or less), a receiver that has nothing to
/// copy goes back to sleep at once, and every wake-up is a cross-CPU
/// interrupt paid by the CPU that runs the receive path: on a veth pair or
/// loopback, the sender's (docs/sockets.md, "One stream across a veth
/// pair"). Measured on both: 64 KiB to
/// 256 KiB is as good as it gets for one stream; from 512 KiB two
/// unpinned streams on loopback stall on delayed ACKs while the reader
/// waits for its mark.
pub(super) const DISCARD_LOWAT: usize = 128 << 10;

/// ... or this long after it went to sleep, with whatever has arrived by
/// then (SO_RCVTIMEO), so a slow stream is still read every few
/// milliseconds and its interval still ends at its last byte.
pub(super) const DISCARD_WAKE: Duration = Duration::from_millis(5);

/// Bytes one discarding receive may take: more than the low-water mark, so
/// one call takes everything queued. The buffer is never written (the
/// kernel drops the bytes), so its pages are never allocated.
pub(super) const DISCARD_READ: usize = 1 << 20;

/// Read until end of stream. The warm-up boundary is `omit` after the
/// first byte; the interval ends at the last byte. The bytes of a receive
/// arrived after the previous receive (which took everything queued) or
/// the previous empty wait, so the interval of the first counted receive
/// starts there, not at its own return.
///
/// A stream of concurrent flows (`plan.together`) measures on the flows'
/// common schedule instead: its warm-up ends `omit` after the common start
/// (or at its first byte, if that comes later). Its interval starts at the
/// first receive after that boundary, or at the first wait after it that
/// found nothing queued, and ends with its last receive or empty wait at or
/// before `duration` after the boundary: a stream stalled on a retransmit
/// timeout is still in the test. What arrives later is the senders' queues draining after
/// they stopped (at a shared bottleneck, and after losses, that drain ends
/// at different times for each flow): read, not counted.
pub(super) fn run_receiver(
    c: &Conn,
    plan: &Plan,
    clock: &WallClock,
) -> Result<StreamReport, SockError> {
    let fd = c.stream.as_fd();
    let discard = !plan.copy;
    let mut buf = if discard {
        vec![0u8; DISCARD_READ.max(plan.size)]
    } else {
        let mut b = vec![0u8; plan.size];
        // Place the pages now, on this (pinned) thread's node.
        explain::first_touch(&mut b);
        b
    };
    if discard {
        net::set_rcvlowat(fd, DISCARD_LOWAT)
            .map_err(|e| SockError::data("setting SO_RCVLOWAT", e))?;
        c.stream
            .set_read_timeout(Some(DISCARD_WAKE))
            .map_err(|e| SockError::data("setting the receive timeout", e))?;
    }
    // Without --copy the kernel discards the bytes (no copy to user space).
    let rflags = if discard { libc::MSG_TRUNC } else { 0 };
    let mut total: u64 = 0;
    let mut reads: u64 = 0;
    let mut first: Option<Instant> = None;
    let mut boundary = Instant::now();
    // Concurrent flows: the end of the common interval, and the totals
    // when a receive first came after it.
    let common_end = plan.together.map(|t| t + plan.omit + plan.duration);
    let mut at_end: Option<(u64, u64)> = None;
    let mut cpu_at_end = None;
    // ... and the latest wait inside it that found nothing queued: a
    // stream that is stalled (a lost segment's retransmit timeout) is still
    // in the test until then.
    let mut quiet: Option<Instant> = None;
    let mut measuring = false;
    let (mut m_bytes, mut m_reads, mut m_t0) = (0u64, 0u64, boundary);
    let mut m_cpu0 = ThreadCpu::start();
    // The last byte, and the latest moment at which nothing was queued.
    let mut last = boundary;
    // Counted from the end's start (common to its streams).
    let mut progress = plan.progress.then(|| ProgressRecorder::new(clock.origin()));
    let mut drained = boundary;
    // The last byte, counted or not.
    let mut heard = boundary;
    loop {
        let got = net::recv(fd, &mut buf, rflags);
        let now = Instant::now();
        let n = match got {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) if discard && net::is_timeout(&e) => {
                // A short wait that found nothing: the peer is dead only
                // after the whole timeout without a byte.
                if now.duration_since(heard) >= plan.timeout {
                    return Err(SockError::data(
                        format!("stream {} receive", c.idx),
                        net::timed_out(),
                    ));
                }
                drained = now;
                if plan.together.is_some() && first.is_some() && at_end.is_none() {
                    if !measuring && now >= boundary {
                        // Nothing queued at the boundary (a stream stalled
                        // there): its interval starts now, exactly.
                        measuring = true;
                        m_bytes = total;
                        m_reads = reads;
                        m_t0 = now;
                        m_cpu0 = ThreadCpu::start();
                    }
                    if measuring && common_end.is_some_and(|e| now <= e) {
                        quiet = Some(now);
                    }
                }
                continue;
            }
            Err(e) => return Err(SockError::data(format!("stream {} receive", c.idx), e)),
        };
        heard = now;
        if let Some(p) = progress.as_mut() {
            p.at(now, total, total + n as u64);
        }
        if first.is_none() {
            first = Some(now);
            boundary = match plan.together {
                Some(t) => (t + plan.omit).max(now),
                None => now + plan.omit,
            };
        }
        if at_end.is_none() && common_end.is_some_and(|e| now > e) {
            at_end = Some((total, reads));
            cpu_at_end = Some(m_cpu0.used_secs());
        }
        // After the common interval: read, not counted.
        let counted = at_end.is_none();
        if counted && !measuring && now >= boundary {
            measuring = true;
            m_bytes = total;
            m_reads = reads;
            m_t0 = drained.max(first.unwrap_or(now));
            m_cpu0 = ThreadCpu::start();
        }
        total += n as u64;
        reads += 1;
        if counted {
            last = now;
        }
        drained = now;
    }
    let cpu = if measuring {
        cpu_at_end.unwrap_or_else(|| m_cpu0.used_secs())
    } else {
        Some(0.0)
    };
    let (counted, counted_reads) = at_end.unwrap_or((total, reads));
    let last = quiet.map_or(last, |q| q.max(last));
    let (bytes, secs) = if measuring {
        (counted - m_bytes, last.duration_since(m_t0).as_secs_f64())
    } else {
        (0, 0.0)
    };
    let size = plan.size as u64;
    Ok(StreamReport {
        idx: c.idx,
        dir: c.dir,
        sender: false,
        total_bytes: total,
        bytes,
        // Receivers see a byte stream; report whole messages' worth.
        messages: if measuring {
            bytes / size
        } else {
            counted_reads - m_reads
        },
        calls: counted_reads - m_reads,
        secs,
        cpu_s: cpu,
        retrans: None,
        buf_node: if discard {
            None
        } else {
            explain::buffer_node(&buf)
        },
        pin_error: None,
        from_s: measuring.then(|| clock.unix(m_t0)),
        to_s: measuring.then(|| clock.unix(last)),
        sent_from_s: None,
        progress: progress.map(|p| p.finish(clock)),
    })
}

/// What one end's streams measured, and its host's report (CPU, counters,
/// placement) over the interval from the warm-up boundary to the end of the
/// last stream.
pub(super) struct EndReport {
    pub(super) streams: Vec<StreamReport>,
    pub(super) host: HostReport,
}

/// Run every connection on its own thread (pinned to this end's CPUs); on
/// the first failure shut all connections down so the other threads end at
/// once.
pub(super) fn run_streams(
    conns: &[Conn],
    plan: &Plan,
    setup: &EndSetup,
) -> Result<EndReport, SockError> {
    let abort = AtomicBool::new(false);
    let clock = WallClock::now();
    let clock = &clock;
    let boundary = Instant::now() + plan.omit;
    let mut host: Option<HostMeter> = None;
    let (tx, rx) = mpsc::channel::<Result<StreamReport, SockError>>();
    let mut reports = Vec::with_capacity(conns.len());
    let mut first_err: Option<SockError> = None;
    std::thread::scope(|s| {
        for c in conns {
            let tx = tx.clone();
            let abort = &abort;
            std::thread::Builder::new()
                .name(format!("fabperf-tcp-{}", c.idx))
                .spawn_scoped(s, move || {
                    let pinned = setup.pin();
                    let r = if c.sender {
                        run_sender(c, plan, abort, clock)
                    } else {
                        run_receiver(c, plan, clock)
                    };
                    let r = r.map(|mut rep| {
                        rep.pin_error = pinned.error.clone();
                        rep
                    });
                    let _ = tx.send(r);
                })
                .expect("spawning a stream thread");
        }
        drop(tx);
        loop {
            // The host meter starts at the warm-up boundary (or when the
            // first stream ends, if that is earlier).
            let wait = boundary.saturating_duration_since(Instant::now());
            let r = if host.is_none() && !wait.is_zero() {
                match rx.recv_timeout(wait) {
                    Ok(r) => r,
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        host = Some(setup.meter());
                        continue;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            } else {
                if host.is_none() {
                    host = Some(setup.meter());
                }
                match rx.recv() {
                    Ok(r) => r,
                    Err(_) => break,
                }
            };
            match r {
                Ok(rep) => reports.push(rep),
                Err(e) => {
                    if first_err.is_none() {
                        abort.store(true, Ordering::Relaxed);
                        for c in conns {
                            let _ = c.stream.shutdown(Shutdown::Both);
                        }
                        first_err = Some(e);
                    }
                }
            }
        }
    });
    if let Some(e) = first_err {
        return Err(e);
    }
    reports.sort_by_key(|r| (r.dir, r.idx));
    let buf_node = reports.iter().find_map(|r| r.buf_node);
    let pin_errors: Vec<String> = reports.iter().filter_map(|r| r.pin_error.clone()).collect();
    let host = setup.report(host.as_ref(), buf_node, &pin_errors, "no measured interval");
    Ok(EndReport {
        streams: reports,
        host,
    })
}
