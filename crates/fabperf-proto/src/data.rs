//! Which agent a data connection or datagram belongs to.
//!
//! A test's data connections (`FBPD` + cookie) and its UDP hello go to the
//! same address as its control connection. Behind an address with several
//! agents (a Kubernetes Service, a load balancer) each connection may land
//! on another agent, and kube-proxy picks for a Service's UDP port on its
//! own. So every agent marks the cookies it issues: four bytes naming this
//! agent process, eight random bytes, and a four-byte tag, an HMAC over
//! both under the agents' shared secret (or a fixed label without one). An
//! agent that gets a cookie it holds no test for can then tell the client
//! plainly why:
//!
//! - `other_agent`: another agent (sharing the token) issued it — the
//!   address balanced the connection to the wrong agent;
//! - `ended`: this agent issued it, but the test no longer waits for it;
//! - `unknown`: nobody this agent knows issued it (another token, or not
//!   fabperf);
//! - `full`: the test has all the connections it asked for.
//!
//! On TCP the agent answers every data connection: `FBPA` (accepted) or
//! `FBPR` + a 2-byte big-endian length + a JSON [`DataRefusal`] (at most
//! [`MAX_REFUSAL`] bytes), then closes. On UDP the hello carries the cookie
//! ([`UDP_HELLO_LEN`] bytes: the 32-byte datagram header, the cookie,
//! zeros), and the agent's UDP door — its port, held while no UDP test runs
//! — answers a hello it holds no test for with a refusal datagram of at
//! most the hello's size: the 32-byte header (`FBPU`, kind
//! [`UDP_T_REFUSED`], the hello's session) then the same length and JSON.

use crate::auth;
use crate::error::ProtoError;
use crate::frame::AgentIdentity;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// A 16-byte token naming one test's data connections.
pub type Cookie = [u8; 16];

/// An accepted data connection: the agent's first four bytes.
pub const DATA_ACCEPTED: [u8; 4] = *b"FBPA";
/// A refused data connection: `FBPR`, u16 BE length, JSON [`DataRefusal`].
pub const DATA_REFUSED: [u8; 4] = *b"FBPR";
/// Largest refusal body (TCP and UDP).
pub const MAX_REFUSAL: usize = 1024;

/// First four bytes of every fabperf datagram.
pub const UDP_MAGIC: [u8; 4] = *b"FBPU";
/// The datagram header's length.
pub const UDP_HEADER_LEN: usize = 32;
/// Datagram kind: the client's hello (header, cookie, zero padding).
pub const UDP_T_HELLO: u8 = 1;
/// Datagram kind: an agent's refusal of a hello.
pub const UDP_T_REFUSED: u8 = 5;
/// Length of a hello datagram: a refusal never exceeds it, so the UDP door
/// cannot be used to amplify traffic toward a forged source.
pub const UDP_HELLO_LEN: usize = 512;
/// Longest node or path name carried in a refusal (longer ones are cut).
const MAX_NAME: usize = 200;

/// Why an agent refused a data connection or a UDP hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalReason {
    /// Another agent (sharing this agent's token) issued the cookie.
    OtherAgent,
    /// This agent issued it; the test no longer waits for it.
    Ended,
    /// Not a cookie of any agent this one can recognise.
    Unknown,
    /// The test already has every data connection it asked for.
    Full,
}

/// What an agent says when it refuses a data connection or a UDP hello.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataRefusal {
    pub reason: RefusalReason,
    /// The refusing agent's node and path label, when it has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

fn cut(s: &str) -> String {
    let mut end = s.len().min(MAX_NAME);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

impl DataRefusal {
    /// A refusal signed by nobody in particular (for agents without an
    /// identity).
    pub fn new(reason: RefusalReason, who: Option<&AgentIdentity>) -> DataRefusal {
        DataRefusal {
            reason,
            node: who.map(|w| cut(&w.node)),
            path: who.map(|w| cut(&w.path)),
        }
    }

    /// The JSON body (at most [`MAX_REFUSAL`] bytes: names are cut to
    /// [`MAX_NAME`] bytes each).
    fn body(&self) -> Vec<u8> {
        let r = DataRefusal {
            reason: self.reason,
            node: self.node.as_deref().map(cut),
            path: self.path.as_deref().map(cut),
        };
        serde_json::to_vec(&r).expect("a refusal serializes")
    }

    /// `FBPR` + length + JSON, as the agent writes it on a data connection.
    pub fn encode_tcp(&self) -> Vec<u8> {
        let body = self.body();
        let mut out = Vec::with_capacity(6 + body.len());
        out.extend_from_slice(&DATA_REFUSED);
        out.extend_from_slice(&(body.len() as u16).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Decode the JSON body of a refusal (at most [`MAX_REFUSAL`] bytes).
    pub fn decode_body(body: &[u8]) -> Result<DataRefusal, ProtoError> {
        if body.len() > MAX_REFUSAL {
            return Err(ProtoError::FrameTooLarge {
                len: body.len(),
                max: MAX_REFUSAL,
            });
        }
        let mut r: DataRefusal = serde_json::from_slice(body)
            .map_err(|e| ProtoError::BadJson(format!("the agent's refusal: {e}")))?;
        r.node = r.node.map(|n| crate::text::escape(&cut(&n)));
        r.path = r.path.map(|p| crate::text::escape(&cut(&p)));
        Ok(r)
    }

    /// The refusal datagram answering a hello of `session`.
    pub fn encode_udp(&self, session: [u8; 4]) -> Vec<u8> {
        let body = self.body();
        let mut out = vec![0u8; UDP_HEADER_LEN];
        out[..4].copy_from_slice(&UDP_MAGIC);
        out[4] = UDP_T_REFUSED;
        out[8..12].copy_from_slice(&session);
        out.extend_from_slice(&(body.len() as u16).to_be_bytes());
        out.extend_from_slice(&body);
        debug_assert!(out.len() <= UDP_HELLO_LEN);
        out
    }

    /// A refusal datagram: `Some((session, refusal))` when `d` is one
    /// (well-formed), `None` for any other datagram.
    pub fn decode_udp(d: &[u8]) -> Option<([u8; 4], DataRefusal)> {
        if d.len() < UDP_HEADER_LEN + 2 || d[..4] != UDP_MAGIC || d[4] != UDP_T_REFUSED {
            return None;
        }
        let len = u16::from_be_bytes([d[UDP_HEADER_LEN], d[UDP_HEADER_LEN + 1]]) as usize;
        let body = d.get(UDP_HEADER_LEN + 2..UDP_HEADER_LEN + 2 + len)?;
        let r = DataRefusal::decode_body(body).ok()?;
        Some(([d[8], d[9], d[10], d[11]], r))
    }

    /// The refusing agent in words: "the agent on node N (path P)".
    pub fn who(&self) -> String {
        describe_agent(self.node.as_deref(), self.path.as_deref())
    }
}

/// "the agent on node N (path P)", or less when names are missing.
pub fn describe_agent(node: Option<&str>, path: Option<&str>) -> String {
    match (node, path) {
        (Some(n), Some(p)) => format!("the agent on node {n} (path {p})"),
        (Some(n), None) => format!("the agent on node {n}"),
        (None, Some(p)) => format!("an agent of path {p}"),
        (None, None) => "an agent that does not name itself".into(),
    }
}

/// A UDP hello carrying `cookie`: the header (kind hello, `session`), the
/// cookie, zeros up to [`UDP_HELLO_LEN`].
pub fn udp_hello(session: u32, cookie: &Cookie) -> Vec<u8> {
    let mut d = vec![0u8; UDP_HELLO_LEN];
    d[..4].copy_from_slice(&UDP_MAGIC);
    d[4] = UDP_T_HELLO;
    d[8..12].copy_from_slice(&session.to_be_bytes());
    d[UDP_HEADER_LEN..UDP_HEADER_LEN + 16].copy_from_slice(cookie);
    d
}

/// The session and cookie of a UDP hello; `None` for anything else
/// (including a hello shorter than [`UDP_HELLO_LEN`], which is not
/// answered: its answer could be larger than it).
pub fn parse_udp_hello(d: &[u8]) -> Option<([u8; 4], Cookie)> {
    if d.len() < UDP_HELLO_LEN || d[..4] != UDP_MAGIC || d[4] != UDP_T_HELLO {
        return None;
    }
    let mut c = [0u8; 16];
    c.copy_from_slice(&d[UDP_HEADER_LEN..UDP_HEADER_LEN + 16]);
    Some(([d[8], d[9], d[10], d[11]], c))
}

/// What an agent knows about a cookie it holds no test for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CookieOrigin {
    /// Issued by this agent process.
    Mine,
    /// Issued by another agent holding the same key.
    OtherAgent,
    /// Neither.
    Unknown,
}

/// Issues and recognises cookies for one agent process.
#[derive(Clone)]
pub struct CookieMint {
    instance: [u8; 4],
    key: Vec<u8>,
}

/// The key of agents without a token: cookies are still marked (so a
/// refusal can say "another agent"), though anyone can forge the mark.
const OPEN_KEY: &[u8] = b"fabperf agent without a token";

impl CookieMint {
    /// A mint for a new agent process; `token` is the agents' shared secret.
    pub fn new(token: Option<&[u8]>) -> CookieMint {
        CookieMint {
            instance: auth::random_bytes::<4>(),
            key: token.unwrap_or(OPEN_KEY).to_vec(),
        }
    }

    fn tag(&self, instance: &[u8], random: &[u8]) -> [u8; 4] {
        let mut m = Hmac::<Sha256>::new_from_slice(&self.key).expect("HMAC takes any key length");
        m.update(b"fabperf data cookie v1\0");
        m.update(instance);
        m.update(random);
        let out = m.finalize().into_bytes();
        [out[0], out[1], out[2], out[3]]
    }

    /// A fresh cookie of this agent.
    pub fn issue(&self) -> Cookie {
        let random = auth::random_bytes::<8>();
        let mut c = [0u8; 16];
        c[..4].copy_from_slice(&self.instance);
        c[4..12].copy_from_slice(&random);
        c[12..].copy_from_slice(&self.tag(&self.instance, &random));
        c
    }

    /// Who issued `c` (constant time in the tag).
    pub fn origin(&self, c: &Cookie) -> CookieOrigin {
        let want = self.tag(&c[..4], &c[4..12]);
        let diff = want
            .iter()
            .zip(&c[12..])
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if diff != 0 {
            CookieOrigin::Unknown
        } else if c[..4] == self.instance {
            CookieOrigin::Mine
        } else {
            CookieOrigin::OtherAgent
        }
    }

    /// The refusal reason for a cookie no test waits for.
    pub fn refusal_reason(&self, c: &Cookie) -> RefusalReason {
        match self.origin(c) {
            CookieOrigin::Mine => RefusalReason::Ended,
            CookieOrigin::OtherAgent => RefusalReason::OtherAgent,
            CookieOrigin::Unknown => RefusalReason::Unknown,
        }
    }
}

/// A refusal reason in words.
pub fn reason_text(r: RefusalReason) -> &'static str {
    match r {
        RefusalReason::OtherAgent => "its cookie is another agent's",
        RefusalReason::Ended => "its test no longer waits for it",
        RefusalReason::Unknown => "its cookie is unknown",
        RefusalReason::Full => "its test has all its connections",
    }
}

/// What reached the wrong place: a TCP data connection or UDP datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    Connection,
    Datagrams,
}

/// The client's error for a refusal: `control` is the agent that answered
/// the test's control connection (from its hello).
pub fn refusal_error(
    r: &DataRefusal,
    control: Option<&AgentIdentity>,
    kind: DataKind,
) -> ProtoError {
    let ctl_who = control.map_or_else(
        || "an agent that does not name itself".to_string(),
        |a| {
            describe_agent(
                Some(&crate::text::escape(&a.node)),
                Some(&crate::text::escape(&a.path)),
            )
        },
    );
    // Both agents named and the names differ: another agent for sure.
    let named_apart = control.is_some_and(|a| {
        r.node.is_some()
            && (r.node.as_deref() != Some(crate::text::escape(&a.node).as_str())
                || r.path.as_deref() != Some(crate::text::escape(&a.path).as_str()))
    });
    let (what, these) = match kind {
        DataKind::Connection => ("data connection", "this data connection"),
        DataKind::Datagrams => ("UDP datagrams", "its UDP datagrams"),
    };
    let advice = match kind {
        DataKind::Connection => {
            "an address with several agents behind it (a Kubernetes Service, a load balancer) \
             picks one for every connection"
        }
        DataKind::Datagrams => {
            "an address with several agents behind it (a Kubernetes Service, a load balancer) \
             picks one for its UDP port on its own, apart from TCP (kube-proxy keeps even \
             sessionAffinity: ClientIP per service port)"
        }
    };
    let fix = "test one agent through an address that has only that agent behind it: its \
               own address, or a Service whose only endpoint it is (`fabperf k8s render` \
               writes one per node for the service path)";
    if r.reason == RefusalReason::OtherAgent || (r.reason == RefusalReason::Unknown && named_apart)
    {
        return ProtoError::WrongAgent(format!(
            "this address balanced your {what} to another agent: the test's control \
             connection reached {ctl_who}, but {these} reached {}{}; {advice}. Fix: {fix}",
            r.who(),
            if r.reason == RefusalReason::Unknown {
                ", which does not recognise its cookie (does it hold another token?)"
            } else {
                ""
            }
        ));
    }
    let why = match r.reason {
        RefusalReason::Ended => {
            "no longer waits for it (the test ended or gave up waiting: see the agent's log)"
        }
        RefusalReason::Full => "already has every data connection the test asked for",
        RefusalReason::Unknown => "does not recognise its cookie",
        RefusalReason::OtherAgent => unreachable!("handled above"),
    };
    ProtoError::DataRefused(format!("{} refused the {what}: it {why}", r.who()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(node: &str, path: &str) -> AgentIdentity {
        AgentIdentity {
            node: node.into(),
            path: path.into(),
            addr: None,
            inventory: None,
        }
    }

    #[test]
    fn cookies_name_their_agent() {
        let a = CookieMint::new(Some(b"secret"));
        let b = CookieMint::new(Some(b"secret"));
        let other_token = CookieMint::new(Some(b"another"));
        let c = a.issue();
        assert_ne!(c, a.issue(), "fresh every time");
        assert_eq!(a.origin(&c), CookieOrigin::Mine);
        assert_eq!(b.origin(&c), CookieOrigin::OtherAgent);
        assert_eq!(other_token.origin(&c), CookieOrigin::Unknown);
        assert_eq!(a.refusal_reason(&c), RefusalReason::Ended);
        assert_eq!(b.refusal_reason(&c), RefusalReason::OtherAgent);
        // Any changed bit breaks the tag.
        for i in 0..16 {
            let mut d = c;
            d[i] ^= 0x01;
            assert_eq!(b.origin(&d), CookieOrigin::Unknown, "byte {i}");
        }
        assert_eq!(a.origin(&[0u8; 16]), CookieOrigin::Unknown);
        // Agents without a token recognise each other too.
        let (x, y) = (CookieMint::new(None), CookieMint::new(None));
        assert_eq!(y.origin(&x.issue()), CookieOrigin::OtherAgent);
    }

    #[test]
    fn refusals_round_trip_and_are_bounded() {
        let r = DataRefusal::new(RefusalReason::OtherAgent, Some(&who("fp-node3", "overlay")));
        let t = r.encode_tcp();
        assert_eq!(&t[..4], b"FBPR");
        let len = u16::from_be_bytes([t[4], t[5]]) as usize;
        assert_eq!(DataRefusal::decode_body(&t[6..6 + len]).unwrap(), r);
        let u = r.encode_udp([1, 2, 3, 4]);
        assert_eq!(DataRefusal::decode_udp(&u), Some(([1, 2, 3, 4], r.clone())));
        // Long names are cut: the datagram stays within the hello's size.
        let huge = DataRefusal::new(
            RefusalReason::Ended,
            Some(&who(&"n".repeat(5000), &"é".repeat(3000))),
        );
        assert!(huge.encode_udp([0; 4]).len() <= UDP_HELLO_LEN);
        assert!(huge.encode_tcp().len() <= 6 + MAX_REFUSAL);
        // Hostile bodies: garbage, too large, control characters escaped.
        assert!(DataRefusal::decode_body(b"not json").is_err());
        assert!(DataRefusal::decode_body(&vec![b' '; MAX_REFUSAL + 1]).is_err());
        let esc =
            DataRefusal::decode_body(br#"{"reason":"unknown","node":"a\u001b[31mb"}"#).unwrap();
        assert!(!esc.node.unwrap().contains('\u{1b}'));
        assert!(DataRefusal::decode_udp(&u[..u.len() - 1]).is_none());
        assert!(DataRefusal::decode_udp(b"FBPU").is_none());
        assert!(DataRefusal::decode_udp(&udp_hello(7, &[9; 16])).is_none());
    }

    #[test]
    fn hellos_carry_the_cookie() {
        let h = udp_hello(0xdead_beef, &[7; 16]);
        assert_eq!(h.len(), UDP_HELLO_LEN);
        assert_eq!(
            parse_udp_hello(&h),
            Some((0xdead_beefu32.to_be_bytes(), [7; 16]))
        );
        // Short hellos are not answered (the answer could be larger).
        assert_eq!(parse_udp_hello(&h[..64]), None);
        let mut not = h.clone();
        not[4] = 2;
        assert_eq!(parse_udp_hello(&not), None);
    }

    #[test]
    fn errors_say_which_agents() {
        let ctl = who("fp-node2", "overlay");
        let r = DataRefusal::new(RefusalReason::OtherAgent, Some(&who("fp-node3", "overlay")));
        let e = refusal_error(&r, Some(&ctl), DataKind::Connection).to_string();
        assert!(
            e.starts_with("this address balanced your data connection to another agent: "),
            "{e}"
        );
        assert!(e.contains("fp-node2") && e.contains("fp-node3"), "{e}");
        let e = refusal_error(&r, Some(&ctl), DataKind::Datagrams).to_string();
        assert!(
            e.starts_with("this address balanced your UDP datagrams to another agent"),
            "{e}"
        );
        assert!(e.contains("per service port"), "{e}");
        // Another agent with another token: still another agent.
        let r = DataRefusal::new(RefusalReason::Unknown, Some(&who("fp-node4", "overlay")));
        let e = refusal_error(&r, Some(&ctl), DataKind::Connection).to_string();
        assert!(
            e.contains("to another agent") && e.contains("another token"),
            "{e}"
        );
        // The same agent, the test over: not a balancing problem.
        let r = DataRefusal::new(RefusalReason::Ended, Some(&ctl));
        let e = refusal_error(&r, Some(&ctl), DataKind::Connection);
        assert!(matches!(e, ProtoError::DataRefused(_)), "{e}");
        assert!(e.to_string().contains("no longer waits"), "{e}");
    }
}
