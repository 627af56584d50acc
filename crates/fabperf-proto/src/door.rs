//! The agent's UDP door: its UDP port, held while no UDP test runs, so a
//! UDP hello that reaches this agent for a test it does not hold is
//! answered with a refusal (see [`crate::data`]) instead of an ICMP port
//! unreachable the client could only guess at. A UDP test closes the door
//! for as long as it runs ([`crate::DataHub::udp_socket`]) and binds the
//! port itself; the door opens again when the test's guard is dropped.

use crate::data::{parse_udp_hello, DataRefusal};
use rustix::event::{PollFd, PollFlags, Timespec};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What the door logs through.
pub type DoorLog = Arc<dyn Fn(&str) + Send + Sync>;
/// What the door answers a hello's cookie with (nothing: stay silent).
pub(crate) type DoorAnswer = Arc<dyn Fn(&[u8; 16]) -> Option<DataRefusal> + Send + Sync>;

/// Most refusals the door sends per second (all sources together).
const MAX_ANSWERS_PER_S: u32 = 50;
/// How long a UDP test waits for the door to close.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

#[derive(Default)]
struct DoorState {
    /// UDP tests running (the door stays closed while any does).
    users: usize,
    /// The door holds the port now.
    open: bool,
    stop: bool,
    /// The door thread has ended.
    ended: bool,
}

pub(crate) struct Door {
    addr: SocketAddr,
    state: Mutex<DoorState>,
    cv: Condvar,
    wake_r: OwnedFd,
    wake_w: OwnedFd,
}

impl Door {
    fn state(&self) -> MutexGuard<'_, DoorState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake(&self) {
        let _ = rustix::io::write(&self.wake_w, &[1]);
    }

    /// Close the door for a UDP test (waits until the port is free).
    pub(crate) fn close_for_test(self: &Arc<Self>) -> DoorGuard {
        let mut st = self.state();
        st.users += 1;
        drop(st);
        self.wake();
        let deadline = Instant::now() + CLOSE_WAIT;
        let mut st = self.state();
        while st.open && !st.ended {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            st = self
                .cv
                .wait_timeout(st, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        DoorGuard { door: self.clone() }
    }

    pub(crate) fn stop(&self) {
        self.state().stop = true;
        self.cv.notify_all();
        self.wake();
    }
}

/// Keeps the door closed while a UDP test runs.
pub struct DoorGuard {
    door: Arc<Door>,
}

impl Drop for DoorGuard {
    fn drop(&mut self) {
        let mut st = self.door.state();
        st.users = st.users.saturating_sub(1);
        drop(st);
        self.door.cv.notify_all();
        self.door.wake();
    }
}

/// Start the door on `addr` (the agent's bind address and port). `answer`
/// classifies a hello's cookie and returns the refusal to send, if any.
pub(crate) fn open(
    addr: SocketAddr,
    answer: DoorAnswer,
    log: DoorLog,
) -> std::io::Result<Arc<Door>> {
    let (wake_r, wake_w) = rustix::pipe::pipe_with(
        rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
    )?;
    let door = Arc::new(Door {
        addr,
        state: Mutex::new(DoorState::default()),
        cv: Condvar::new(),
        wake_r,
        wake_w,
    });
    let d = door.clone();
    std::thread::Builder::new()
        .name("fabperf-udp-door".into())
        .spawn(move || {
            run(&d, &*answer, &*log);
            d.state().ended = true;
            d.cv.notify_all();
        })?;
    Ok(door)
}

fn drain(fd: &OwnedFd) {
    let mut b = [0u8; 64];
    while matches!(rustix::io::read(fd, &mut b), Ok(n) if n > 0) {}
}

fn run(d: &Door, answer: &dyn Fn(&[u8; 16]) -> Option<DataRefusal>, log: &dyn Fn(&str)) {
    let mut sock: Option<UdpSocket> = None;
    let mut bind_failed_logged = false;
    // When the last UDP test gave the port back: its socket may close a
    // moment after its guard, so a bind failure right then is retried
    // quietly.
    let mut reopened: Option<Instant> = None;
    let mut window = Instant::now();
    let mut answered = 0u32;
    let mut dropped = 0u64;
    let mut buf = vec![0u8; 2048];
    loop {
        {
            let mut st = d.state();
            if st.stop {
                return;
            }
            if st.users > 0 {
                sock = None;
                st.open = false;
                d.cv.notify_all();
                drop(st);
                // Wait for the tests to end (the guard's drop wakes us).
                let st = d.state();
                let _st =
                    d.cv.wait_while(st, |s| s.users > 0 && !s.stop)
                        .unwrap_or_else(|p| p.into_inner());
                reopened = Some(Instant::now());
                continue;
            }
        }
        if sock.is_none() {
            match UdpSocket::bind(d.addr).and_then(|s| s.set_nonblocking(true).map(|_| s)) {
                Ok(s) => {
                    sock = Some(s);
                    bind_failed_logged = false;
                    d.state().open = true;
                }
                Err(_) if reopened.is_some_and(|t| t.elapsed() < Duration::from_secs(3)) => {
                    wait_wake(d, None, Duration::from_millis(20));
                    continue;
                }
                Err(e) => {
                    if !bind_failed_logged {
                        log(&format!(
                            "UDP door: cannot hold UDP {} ({e}); UDP hellos that reach this agent \
                             for another agent's test go unanswered",
                            d.addr
                        ));
                        bind_failed_logged = true;
                    }
                    wait_wake(d, None, Duration::from_secs(1));
                    continue;
                }
            }
        }
        let s = sock.as_ref().expect("bound above");
        if !wait_wake(d, Some(s), Duration::from_secs(1)) {
            continue;
        }
        for _ in 0..64 {
            let (n, from) = match s.recv_from(&mut buf) {
                Ok(r) => r,
                Err(_) => break,
            };
            let Some((session, cookie)) = parse_udp_hello(&buf[..n]) else {
                continue;
            };
            let Some(refusal) = answer(&cookie) else {
                continue;
            };
            if window.elapsed() >= Duration::from_secs(1) {
                if dropped > 0 {
                    log(&format!(
                        "UDP door: {dropped} more refusal(s) not sent (at most {MAX_ANSWERS_PER_S} per second)"
                    ));
                }
                window = Instant::now();
                answered = 0;
                dropped = 0;
            }
            if answered >= MAX_ANSWERS_PER_S {
                dropped += 1;
                continue;
            }
            answered += 1;
            let _ = s.send_to(&refusal.encode_udp(session), from);
            if answered == 1 {
                log(&format!(
                    "{from}: UDP hello for a test this agent does not hold ({}); told the client",
                    match refusal.reason {
                        crate::data::RefusalReason::OtherAgent =>
                            "another agent's: the client's address balances UDP over several agents",
                        crate::data::RefusalReason::Ended => "a test of this agent that has ended",
                        _ => "a cookie no agent sharing this token issued",
                    }
                ));
            }
        }
    }
}

/// Wait until `sock` is readable (true) or the wake pipe is written or
/// `timeout` passes (false).
fn wait_wake(d: &Door, sock: Option<&UdpSocket>, timeout: Duration) -> bool {
    let t = Timespec::try_from(timeout).unwrap_or(Timespec {
        tv_sec: 1,
        tv_nsec: 0,
    });
    let wake = d.wake_r.as_fd();
    let readable = match sock {
        Some(s) => {
            let fd = s.as_fd();
            let mut p = [
                PollFd::new(&wake, PollFlags::IN),
                PollFd::new(&fd, PollFlags::IN),
            ];
            let _ = rustix::event::poll(&mut p, Some(&t));
            !p[1].revents().is_empty()
        }
        None => {
            let mut p = [PollFd::new(&wake, PollFlags::IN)];
            let _ = rustix::event::poll(&mut p, Some(&t));
            false
        }
    };
    drain(&d.wake_r);
    readable
}
