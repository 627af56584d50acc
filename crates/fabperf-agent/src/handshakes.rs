//! Connections before their test: the ones that have not sent their first
//! four bytes (unsorted) and fabperf handshakes in progress (pending), each
//! capped in total and per source, the oldest closed to admit a new one.

use super::*;

/// Where handshakes come from, for the per-source cap: an IPv4 address,
/// or the /64 prefix of an IPv6 address (one host usually holds a whole
/// /64).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Source(pub(super) IpAddr);

impl Source {
    pub(super) fn of(ip: IpAddr) -> Source {
        match ip.to_canonical() {
            IpAddr::V6(v6) => {
                let s = v6.segments();
                Source(IpAddr::V6(Ipv6Addr::new(
                    s[0], s[1], s[2], s[3], 0, 0, 0, 0,
                )))
            }
            v4 => Source(v4),
        }
    }
}

/// A connection in its handshake.
pub(super) struct PendingConn {
    pub(super) source: Source,
    /// When the agent closes it if the handshake has not finished.
    pub(super) deadline: Instant,
    pub(super) stream: TcpStream,
}

/// Handshakes in progress, oldest first (ids are accept order).
#[derive(Default)]
pub(super) struct Pending {
    pub(super) conns: BTreeMap<u64, PendingConn>,
    /// Closed by the agent (evicted or out of time) since the last log line.
    pub(super) evicted: u64,
    pub(super) timed_out: u64,
}

impl Pending {
    /// Close and forget the handshake `id`.
    pub(super) fn close(&mut self, id: u64) {
        if let Some(c) = self.conns.remove(&id) {
            let _ = c.stream.shutdown(Shutdown::Both);
        }
    }

    /// Register a new handshake (`id`: its connection's place in accept
    /// order), closing the oldest of its source and then the oldest overall
    /// when at a cap. Connections are sorted on an event loop, so they may
    /// get here out of accept order: when the new one is itself the oldest,
    /// it is the one refused (false).
    pub(super) fn admit(
        &mut self,
        id: u64,
        stream: &TcpStream,
        source: Source,
        deadline: Instant,
    ) -> bool {
        let same: Vec<u64> = self
            .conns
            .iter()
            .filter(|(_, c)| c.source == source)
            .map(|(id, _)| *id)
            .collect();
        if same.len() >= MAX_PENDING_PER_SOURCE {
            self.evicted += 1;
            if id < same[0] {
                return false;
            }
            self.close(same[0]);
        }
        if self.conns.len() >= MAX_PENDING {
            if let Some(&oldest) = self.conns.keys().next() {
                self.evicted += 1;
                if id < oldest {
                    return false;
                }
                self.close(oldest);
            }
        }
        let Ok(stream) = stream.try_clone() else {
            return false;
        };
        self.conns.insert(
            id,
            PendingConn {
                source,
                deadline,
                stream,
            },
        );
        true
    }
}

/// A connection that has not sent its first four bytes yet.
pub(super) struct Unsorted {
    pub(super) source: Source,
    /// Dropping it closes the connection (its task sees the channel end).
    pub(super) _cancel: tokio::sync::oneshot::Sender<()>,
}

/// Connections waiting for their first four bytes, oldest first.
#[derive(Default)]
pub(super) struct Sorting {
    pub(super) next: u64,
    pub(super) conns: BTreeMap<u64, Unsorted>,
    pub(super) per_source: HashMap<Source, usize>,
    pub(super) cap: usize,
    pub(super) cap_per_source: usize,
    pub(super) evicted: u64,
    pub(super) timed_out: u64,
}

impl Sorting {
    pub(super) fn remove(&mut self, id: u64) -> bool {
        let Some(c) = self.conns.remove(&id) else {
            return false;
        };
        if let Some(n) = self.per_source.get_mut(&c.source) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&c.source);
            }
        }
        true
    }

    /// Register a new connection, closing the oldest of its source and then
    /// the oldest overall when at a cap.
    pub(super) fn admit(&mut self, source: Source) -> (u64, tokio::sync::oneshot::Receiver<()>) {
        if self.per_source.get(&source).copied().unwrap_or(0) >= self.cap_per_source {
            let oldest = self
                .conns
                .iter()
                .find(|(_, c)| c.source == source)
                .map(|(id, _)| *id);
            if let Some(id) = oldest {
                self.remove(id);
                self.evicted += 1;
            }
        }
        if self.conns.len() >= self.cap {
            if let Some(&id) = self.conns.keys().next() {
                self.remove(id);
                self.evicted += 1;
            }
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let id = self.next;
        self.next += 1;
        self.conns.insert(
            id,
            Unsorted {
                source,
                _cancel: tx,
            },
        );
        *self.per_source.entry(source).or_insert(0) += 1;
        (id, rx)
    }
}
