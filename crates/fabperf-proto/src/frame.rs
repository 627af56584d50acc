//! Preamble and frame encoding.

use crate::error::{ErrorCode, ProtoError};
use serde::{Deserialize, Serialize};
use std::io::{ErrorKind, Read, Write};
use std::time::Duration;

/// First four bytes of a control connection.
pub const MAGIC: [u8; 4] = *b"FBPF";
/// First four bytes of a data connection (followed by a 16-byte cookie).
pub const DATA_MAGIC: [u8; 4] = *b"FBPD";
/// Control protocol version. Bump on any incompatible change.
/// v2: mutual authentication (`Auth` / `AuthOk` before `Start`).
/// v3: one start for concurrent flows: a test is set up completely, then
/// started at an instant the client gives (`tcp-bw`'s `Go`, `rdma-bw`'s
/// start delay, `drive`'s ready/go), and reports its measured interval in
/// Unix time; the agent's hello says how many tests of one group it admits.
/// v4: v3's one start, and the agent answers every data connection (`FBPA`,
/// or `FBPR` and why: [`crate::data`]); cookies name their agent; UDP hellos
/// carry the cookie.
pub const PROTO_VERSION: u16 = 4;
/// Largest frame either side accepts.
pub const MAX_FRAME: usize = 1 << 20;
/// Largest frame an agent reads from a peer that has not authenticated
/// (the `Auth` message).
pub const PRE_AUTH_FRAME: usize = 4 << 10;
/// Largest `Start` an agent without a token reads (large enough for an
/// RDMA request with 4096 queue pairs).
pub const OPEN_START_FRAME: usize = 256 << 10;
/// The agent's default TCP (and UDP) port.
pub const DEFAULT_PORT: u16 = 5301;

/// The 8-byte preamble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preamble {
    pub version: u16,
}

impl Preamble {
    pub fn encode(&self) -> [u8; 8] {
        let v = self.version.to_be_bytes();
        [MAGIC[0], MAGIC[1], MAGIC[2], MAGIC[3], v[0], v[1], 0, 0]
    }
}

/// Who an agent is, announced in its `Hello`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentIdentity {
    /// Node name (`--node-name`, else `$NODE_NAME`, else the hostname).
    pub node: String,
    /// Label of the network path the agent serves (`--path-label`, e.g.
    /// `host`, `pod`, `ipoib`).
    pub path: String,
    /// The address other agents use to test this agent's path
    /// (`--advertise`), when it is not the one the client reached (a pod's
    /// IPoIB or RoCE address behind a Service on its primary network).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<std::net::IpAddr>,
    /// What the agent knows about its node (opaque to the protocol).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inventory: Option<serde_json::Value>,
}

/// What an agent can hold, announced in its `Hello` so that a runner can
/// check a plan against it before running anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentCapacity {
    /// Most tests of one group (the senders of an incast) it runs at once.
    pub group_tests: u32,
    /// Open files it can give a group's tests: each holds its control
    /// connection and one data connection per stream and direction.
    pub group_fds: u64,
    /// Threads likewise: one per connection.
    pub group_threads: u64,
}

/// One control message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Msg {
    /// Agent -> client, right after the preambles.
    Hello {
        fabperf_version: String,
        auth_required: bool,
        /// Hex nonce to authenticate against (present when auth is required).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        nonce: Option<String>,
        /// Test kinds this agent serves.
        tests: Vec<String>,
        /// Who the agent is (node, network path, inventory).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agent: Option<AgentIdentity>,
        /// What it can hold (concurrent tests of a group).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        capacity: Option<AgentCapacity>,
    },
    /// Client -> agent when the agent requires authentication: the
    /// client's own nonce and its proof over both nonces (see
    /// [`crate::auth`]).
    Auth { nonce: String, proof: String },
    /// Agent -> client: the client's proof was right; the agent's proof
    /// over both nonces.
    AuthOk { proof: String },
    /// Client -> agent: run this test.
    Start {
        test: String,
        params: serde_json::Value,
        fabperf_version: String,
        /// Tests that carry the same group id may run on the agent at the
        /// same time (the senders of an incast, set up by `fabperf run`);
        /// without one the agent runs one test at a time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<String>,
    },
    /// Agent -> client: the test is accepted; test-specific setup info.
    Accept { info: serde_json::Value },
    /// Test-specific message, either direction.
    Test { body: serde_json::Value },
    /// Either direction: the request failed.
    Error { code: ErrorCode, message: String },
    /// Client -> agent: done, closing.
    Bye,
}

impl Msg {
    pub fn kind(&self) -> &'static str {
        match self {
            Msg::Hello { .. } => "hello",
            Msg::Auth { .. } => "auth",
            Msg::AuthOk { .. } => "auth_ok",
            Msg::Start { .. } => "start",
            Msg::Accept { .. } => "accept",
            Msg::Test { .. } => "test",
            Msg::Error { .. } => "error",
            Msg::Bye => "bye",
        }
    }
}

fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// Read exactly `buf.len()` bytes; map EOF and timeouts to protocol errors.
pub(crate) fn read_full<R: Read>(
    r: &mut R,
    buf: &mut [u8],
    what: &str,
    timeout: Option<Duration>,
) -> Result<(), ProtoError> {
    let mut off = 0;
    while off < buf.len() {
        match r.read(&mut buf[off..]) {
            Ok(0) => {
                return Err(ProtoError::Closed {
                    what: what.to_string(),
                })
            }
            Ok(n) => off += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if is_timeout(&e) => {
                return Err(ProtoError::Timeout {
                    what: what.to_string(),
                    waited: timeout.unwrap_or_default(),
                })
            }
            Err(e) if e.kind() == ErrorKind::ConnectionReset => {
                return Err(ProtoError::Closed {
                    what: format!("{what} (connection reset)"),
                })
            }
            Err(e) => return Err(ProtoError::io(format!("reading {what}"), e)),
        }
    }
    Ok(())
}

pub fn write_preamble<W: Write>(w: &mut W) -> Result<(), ProtoError> {
    w.write_all(
        &Preamble {
            version: PROTO_VERSION,
        }
        .encode(),
    )
    .map_err(|e| ProtoError::io("sending preamble", e))
}

/// Read and check the peer's preamble (magic and version).
pub fn read_preamble<R: Read>(
    r: &mut R,
    timeout: Option<Duration>,
) -> Result<Preamble, ProtoError> {
    let mut b = [0u8; 8];
    read_full(r, &mut b[..4], "the peer's preamble", timeout)?;
    if b[..4] != MAGIC {
        return Err(ProtoError::BadMagic {
            got: [b[0], b[1], b[2], b[3]],
        });
    }
    read_full(r, &mut b[4..], "the peer's preamble", timeout)?;
    let version = u16::from_be_bytes([b[4], b[5]]);
    if version != PROTO_VERSION {
        return Err(ProtoError::VersionMismatch {
            local: PROTO_VERSION,
            remote: version,
        });
    }
    Ok(Preamble { version })
}

/// Encode one message as a frame.
pub fn encode_frame(msg: &Msg) -> Result<Vec<u8>, ProtoError> {
    let body = serde_json::to_vec(msg).map_err(|e| ProtoError::BadJson(e.to_string()))?;
    if body.len() > MAX_FRAME {
        return Err(ProtoError::FrameTooLarge {
            len: body.len(),
            max: MAX_FRAME,
        });
    }
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as u32).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

pub fn write_frame<W: Write>(w: &mut W, msg: &Msg) -> Result<(), ProtoError> {
    let f = encode_frame(msg)?;
    w.write_all(&f)
        .and_then(|_| w.flush())
        .map_err(|e| match e.kind() {
            ErrorKind::BrokenPipe | ErrorKind::ConnectionReset => ProtoError::Closed {
                what: format!("sending {}", msg.kind()),
            },
            _ => ProtoError::io(format!("sending {}", msg.kind()), e),
        })
}

/// Decode a frame body (the bytes after the length).
pub fn decode_body(body: &[u8]) -> Result<Msg, ProtoError> {
    if body.is_empty() {
        return Err(ProtoError::EmptyFrame);
    }
    serde_json::from_slice(body).map_err(|e| ProtoError::BadJson(e.to_string()))
}

/// Read one frame of at most `max` bytes. `timeout` is only used for the
/// error message; the caller bounds the reads (socket timeouts or a
/// deadline). The body buffer grows as bytes arrive, so a peer that
/// announces a large frame and then stalls costs only what it sent.
pub fn read_frame<R: Read>(
    r: &mut R,
    max: usize,
    timeout: Option<Duration>,
    what: &str,
) -> Result<Msg, ProtoError> {
    let mut len = [0u8; 4];
    read_full(r, &mut len, what, timeout)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > max {
        return Err(ProtoError::FrameTooLarge { len, max });
    }
    if len == 0 {
        return Err(ProtoError::EmptyFrame);
    }
    let mut body = Vec::with_capacity(len.min(CHUNK));
    let mut chunk = [0u8; CHUNK];
    while body.len() < len {
        let n = (len - body.len()).min(CHUNK);
        read_full(r, &mut chunk[..n], what, timeout)?;
        body.extend_from_slice(&chunk[..n]);
    }
    decode_body(&body)
}

/// Bytes read at a time into a frame body.
const CHUNK: usize = 8 << 10;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::io::Cursor;

    fn all_msgs() -> Vec<Msg> {
        vec![
            Msg::Hello {
                fabperf_version: "0.1.0".into(),
                auth_required: true,
                nonce: Some("00ff".into()),
                tests: vec!["tcp-bw".into()],
                agent: Some(AgentIdentity {
                    addr: None,
                    node: "node-1".into(),
                    path: "host".into(),
                    inventory: Some(json!({"rdma": []})),
                }),
                capacity: Some(AgentCapacity {
                    group_tests: 1024,
                    group_fds: 4096,
                    group_threads: 4096,
                }),
            },
            Msg::Hello {
                fabperf_version: "0.1.0".into(),
                auth_required: false,
                nonce: None,
                tests: vec![],
                agent: None,
                capacity: None,
            },
            Msg::Auth {
                nonce: "ab".into(),
                proof: "cd".into(),
            },
            Msg::AuthOk { proof: "ef".into() },
            Msg::Start {
                group: None,
                test: "tcp-bw".into(),
                params: json!({"streams": 2, "size": 131072}),
                fabperf_version: "0.1.0".into(),
            },
            Msg::Accept {
                info: json!({"cookie": "abc"}),
            },
            Msg::Test {
                body: json!({"qpn": 17, "gid": "fe80::1"}),
            },
            Msg::Error {
                code: ErrorCode::Busy,
                message: "busy".into(),
            },
            Msg::Bye,
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for m in all_msgs() {
            let f = encode_frame(&m).unwrap();
            let back = read_frame(&mut Cursor::new(&f), MAX_FRAME, None, "x").unwrap();
            assert_eq!(m, back);
        }
    }

    #[test]
    fn stream_of_frames() {
        let mut buf = Vec::new();
        for m in all_msgs() {
            write_frame(&mut buf, &m).unwrap();
        }
        let mut c = Cursor::new(buf);
        for m in all_msgs() {
            assert_eq!(read_frame(&mut c, MAX_FRAME, None, "x").unwrap(), m);
        }
        assert!(matches!(
            read_frame(&mut c, MAX_FRAME, None, "x"),
            Err(ProtoError::Closed { .. })
        ));
    }

    #[test]
    fn preamble_round_trip_and_checks() {
        let mut buf = Vec::new();
        write_preamble(&mut buf).unwrap();
        assert_eq!(&buf[..4], b"FBPF");
        assert_eq!(
            read_preamble(&mut Cursor::new(&buf), None).unwrap().version,
            PROTO_VERSION
        );

        let other = Preamble {
            version: PROTO_VERSION + 1,
        }
        .encode();
        match read_preamble(&mut Cursor::new(&other), None) {
            Err(ProtoError::VersionMismatch { local, remote }) => {
                assert_eq!(local, PROTO_VERSION);
                assert_eq!(remote, PROTO_VERSION + 1);
            }
            r => panic!("{r:?}"),
        }
        let http = b"GET / HTTP/1.1\r\n";
        assert!(matches!(
            read_preamble(&mut Cursor::new(&http[..]), None),
            Err(ProtoError::BadMagic { .. })
        ));
        assert!(matches!(
            read_preamble(&mut Cursor::new(&b"FB"[..]), None),
            Err(ProtoError::Closed { .. })
        ));
    }

    #[test]
    fn oversized_frame_rejected_before_allocation() {
        let mut f = ((MAX_FRAME + 1) as u32).to_be_bytes().to_vec();
        f.extend_from_slice(b"{}");
        assert!(matches!(
            read_frame(&mut Cursor::new(f), MAX_FRAME, None, "x"),
            Err(ProtoError::FrameTooLarge { .. })
        ));
        let f = u32::MAX.to_be_bytes().to_vec();
        assert!(matches!(
            read_frame(&mut Cursor::new(f), MAX_FRAME, None, "x"),
            Err(ProtoError::FrameTooLarge { .. })
        ));
    }

    #[test]
    fn frame_limit_is_the_callers() {
        let f = encode_frame(&Msg::Test {
            body: json!("x".repeat(5000)),
        })
        .unwrap();
        assert!(matches!(
            read_frame(&mut Cursor::new(&f), PRE_AUTH_FRAME, None, "x"),
            Err(ProtoError::FrameTooLarge {
                max: PRE_AUTH_FRAME,
                ..
            })
        ));
        assert!(read_frame(&mut Cursor::new(&f), MAX_FRAME, None, "x").is_ok());
    }

    #[test]
    fn announced_length_is_not_allocated_up_front() {
        // A peer announcing 1 MiB and sending 10 bytes: the reader sees the
        // end of the stream, having buffered only what arrived.
        let mut f = (MAX_FRAME as u32).to_be_bytes().to_vec();
        f.extend_from_slice(b"{\"type\":\"b");
        assert!(matches!(
            read_frame(&mut Cursor::new(f), MAX_FRAME, None, "x"),
            Err(ProtoError::Closed { .. })
        ));
    }

    #[test]
    fn hello_without_agent_identity_still_decodes() {
        let m: Msg = serde_json::from_str(
            r#"{"type":"hello","fabperf_version":"0.1.0","auth_required":false,"tests":[]}"#,
        )
        .unwrap();
        assert!(matches!(m, Msg::Hello { agent: None, .. }));
        let v = serde_json::to_value(Msg::Hello {
            fabperf_version: "x".into(),
            auth_required: false,
            nonce: None,
            tests: vec![],
            agent: None,
            capacity: None,
        })
        .unwrap();
        assert!(v.get("agent").is_none());
    }

    #[test]
    fn empty_frame_rejected() {
        let f = 0u32.to_be_bytes().to_vec();
        assert!(matches!(
            read_frame(&mut Cursor::new(f), MAX_FRAME, None, "x"),
            Err(ProtoError::EmptyFrame)
        ));
    }

    #[test]
    fn truncated_frame_is_closed() {
        let mut f = encode_frame(&Msg::Bye).unwrap();
        f.truncate(f.len() - 2);
        assert!(matches!(
            read_frame(&mut Cursor::new(f), MAX_FRAME, None, "x"),
            Err(ProtoError::Closed { .. })
        ));
        // Truncated inside the length prefix.
        assert!(matches!(
            read_frame(&mut Cursor::new(vec![0u8, 0]), MAX_FRAME, None, "x"),
            Err(ProtoError::Closed { .. })
        ));
    }

    fn raw(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as u32).to_be_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    #[test]
    fn malformed_bodies_rejected() {
        for body in [
            &b"not json"[..],
            b"{\"type\":\"no_such_message\"}",
            b"{\"no_type\":1}",
            b"[1,2,3]",
            b"{\"type\":\"start\"}",
            b"\xff\xfe\xfd",
            b"{\"type\":\"error\",\"code\":\"no_such_code\",\"message\":\"x\"}",
        ] {
            match read_frame(&mut Cursor::new(raw(body)), MAX_FRAME, None, "x") {
                Err(ProtoError::BadJson(_)) => {}
                r => panic!("{:?} -> {r:?}", String::from_utf8_lossy(body)),
            }
        }
    }

    #[test]
    fn error_codes_map() {
        assert_eq!(ProtoError::EmptyFrame.code(), ErrorCode::BadFrame);
        assert_eq!(
            ProtoError::VersionMismatch {
                local: 1,
                remote: 2
            }
            .code(),
            ErrorCode::VersionMismatch
        );
    }
}
