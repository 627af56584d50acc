//! The timer thread: closes handshakes past their deadline and stops the
//! running test at its end.

use super::*;

/// `t + d`, or far in the future when that overflows.
pub(super) fn later(t: Instant, d: Duration) -> Instant {
    t.checked_add(d)
        .or_else(|| t.checked_add(Duration::from_secs(10 * 365 * 86400)))
        .unwrap_or(t)
}

/// The agent's clock: closes handshakes past their deadline, stops the
/// running test at its deadline, and logs what it closed (aggregated, so
/// a flood of connections cannot flood the log).
pub(super) fn timer_loop(sh: &Shared) {
    const TICK: Duration = Duration::from_millis(50);
    const LOG_EVERY: Duration = Duration::from_secs(10);
    let mut last_log = Instant::now();
    let mut last_sort_log = Instant::now();
    while !sh.stop.load(Ordering::SeqCst) {
        std::thread::sleep(TICK);
        let now = Instant::now();
        {
            let mut p = sh.pending();
            let late: Vec<u64> = p
                .conns
                .iter()
                .filter(|(_, c)| c.deadline <= now)
                .map(|(id, _)| *id)
                .collect();
            for id in late {
                p.close(id);
                p.timed_out += 1;
            }
            if now.duration_since(last_log) >= LOG_EVERY && (p.evicted > 0 || p.timed_out > 0) {
                let (e, t) = (p.evicted, p.timed_out);
                p.evicted = 0;
                p.timed_out = 0;
                drop(p);
                last_log = now;
                sh.log(&format!(
                    "closed {t} connection(s) that did not finish the handshake within {:.1} s \
                     and {e} oldest unfinished handshake(s) to admit new connections \
                     (at most {MAX_PENDING}, {MAX_PENDING_PER_SOURCE} per source address)",
                    sh.limits.io_timeout.as_secs_f64()
                ));
            }
        }
        if now.duration_since(last_sort_log) >= LOG_EVERY {
            let mut so = sh.sorting();
            let (e, t) = (so.evicted, so.timed_out);
            so.evicted = 0;
            so.timed_out = 0;
            let cap = so.cap;
            drop(so);
            if e > 0 || t > 0 {
                last_sort_log = now;
                sh.log(&format!(
                    "closed {t} connection(s) that sent nothing within {:.1} s \
                     and {e} oldest silent connection(s) to admit new ones (at most {cap})",
                    sh.limits.io_timeout.as_secs_f64()
                ));
            }
            if let Some(line) = sh.http.as_ref().and_then(|h| h.take_summary()) {
                last_sort_log = now;
                sh.log(&line);
            }
        }
        let stopped: Vec<(String, SocketAddr, String)> = sh
            .busy()
            .iter()
            .filter(|b| b.clock.enforce(now))
            .map(|b| (b.test.clone(), b.peer, b.clock.describe()))
            .collect();
        for (test, peer, why) in stopped {
            sh.log(&format!(
                "{peer}: stopping {test} at the agent's time limit ({why})"
            ));
        }
    }
}
