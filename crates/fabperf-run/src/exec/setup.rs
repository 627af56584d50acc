//! A round's set-up: how many flows set up toward one receiver at a time
//! (a counting [`Gate`] per receiver), and the watch that calls off the
//! flows still not ready [`straggle_limit`] after the last ready one.

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Flows that set up toward one receiver at a time (below the agent's
/// cap on handshakes in progress).
pub const SETUP_PER_RECEIVER: usize = 32;

/// How long a round's flows that are not ready yet may keep the ready ones
/// waiting for their `go`, after the last one became ready: half the
/// plan's timeout, within 1 to 5 s. The ready flows' agents (and their
/// targets) wait for the start no longer than their own timeout (2 s at
/// least, 10 s by default), so one node whose set-up hangs — a lossy link,
/// an overloaded agent — must not make every other flow of its round time
/// out with it.
pub fn straggle_limit(timeout: Duration) -> Duration {
    (timeout / 2).clamp(Duration::from_secs(1), Duration::from_secs(5))
}

/// A round's set-up in progress: the flows waiting for their `ready`, and
/// when the last one became ready. A watcher calls off (closes) the flows
/// still waiting [`straggle_limit`] after that.
pub(super) struct SetupWatch {
    pub(super) limit: Duration,
    state: std::sync::Mutex<WatchState>,
}

#[derive(Default)]
struct WatchState {
    last_ready: Option<Instant>,
    waiting: BTreeMap<(usize, usize), TcpStream>,
    called_off: BTreeSet<(usize, usize)>,
    done: bool,
}

impl SetupWatch {
    pub(super) fn new(limit: Duration) -> SetupWatch {
        SetupWatch {
            limit,
            state: std::sync::Mutex::new(WatchState::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, WatchState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Flow `id` waits for its `ready` on `stream`.
    pub(super) fn waiting(&self, id: (usize, usize), stream: &TcpStream) {
        if let Ok(s) = stream.try_clone() {
            self.lock().waiting.insert(id, s);
        }
    }

    /// Flow `id` stopped waiting (`ready`: it is).
    pub(super) fn settled(&self, id: (usize, usize), ready: bool) {
        let mut st = self.lock();
        st.waiting.remove(&id);
        if ready {
            st.last_ready = Some(Instant::now());
        }
    }

    pub(super) fn was_called_off(&self, id: (usize, usize)) -> bool {
        self.lock().called_off.contains(&id)
    }

    /// Until the set-up is over: close the flows still waiting `limit`
    /// after the last ready one.
    pub(super) fn watch(&self) {
        loop {
            {
                let mut st = self.lock();
                if st.done {
                    return;
                }
                if st
                    .last_ready
                    .is_some_and(|t| t.elapsed() > self.limit && !st.waiting.is_empty())
                {
                    let waiting = std::mem::take(&mut st.waiting);
                    for (id, s) in waiting {
                        let _ = s.shutdown(std::net::Shutdown::Both);
                        st.called_off.insert(id);
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(super) fn finish(&self) {
        self.lock().done = true;
    }
}

/// A counting gate: at most `max` holders at once.
pub(super) struct Gate {
    held: std::sync::Mutex<usize>,
    freed: std::sync::Condvar,
    max: usize,
}

pub(super) struct GatePermit<'a>(&'a Gate);

impl Gate {
    pub(super) fn new(max: usize) -> Gate {
        Gate {
            held: std::sync::Mutex::new(0),
            freed: std::sync::Condvar::new(),
            max: max.max(1),
        }
    }
    pub(super) fn enter(&self) -> GatePermit<'_> {
        let mut n = self.held.lock().unwrap_or_else(|p| p.into_inner());
        while *n >= self.max {
            n = self.freed.wait(n).unwrap_or_else(|p| p.into_inner());
        }
        *n += 1;
        GatePermit(self)
    }
}

impl Drop for GatePermit<'_> {
    fn drop(&mut self) {
        let mut n = self.0.held.lock().unwrap_or_else(|p| p.into_inner());
        *n -= 1;
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;
    use std::time::Instant;

    #[test]
    fn a_flow_not_ready_long_after_the_others_is_called_off() {
        use std::io::Read;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let slow = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut far, _) = l.accept().unwrap();
        let watch = SetupWatch::new(Duration::from_millis(200));
        // Nothing is ready yet: nobody is called off, however long.
        watch.waiting((0, 1), &slow);
        std::thread::scope(|sc| {
            sc.spawn(|| watch.watch());
            std::thread::sleep(Duration::from_millis(300));
            assert!(!watch.was_called_off((0, 1)));
            // Flow (0, 0) is ready; (0, 1) still waits 200 ms later.
            watch.settled((0, 0), true);
            let t0 = Instant::now();
            let mut b = [0u8; 1];
            far.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            assert_eq!(
                far.read(&mut b).unwrap(),
                0,
                "the straggler's session is closed"
            );
            let waited = t0.elapsed();
            assert!(waited >= Duration::from_millis(200), "{waited:?}");
            assert!(watch.was_called_off((0, 1)));
            assert!(!watch.was_called_off((0, 0)));
            watch.finish();
        });
        assert_eq!(
            straggle_limit(Duration::from_secs(10)),
            Duration::from_secs(5)
        );
        assert_eq!(
            straggle_limit(Duration::from_secs(5)),
            Duration::from_millis(2500)
        );
        assert_eq!(
            straggle_limit(Duration::from_millis(500)),
            Duration::from_secs(1)
        );
    }
}
