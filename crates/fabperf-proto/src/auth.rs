//! Shared-secret authentication, both ways.
//!
//! The agent sends a random 32-byte nonce in `Hello`. The client answers
//! with its own random nonce and its proof, HMAC-SHA256(key = token,
//! "fabperf-auth-v2 client" || agent nonce || client nonce). The agent
//! checks it with the MAC's constant-time comparison (the time taken does
//! not reveal how many bytes matched) and answers with its own proof over
//! the same nonces under another label, "fabperf-auth-v2 agent": the
//! labels keep one side's proof from ever serving as the other's. Each
//! side's nonce is fresh per connection, so a recorded proof is worth
//! nothing on another connection. The token never crosses the wire. A
//! client holding a token refuses an agent that does not prove it.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::path::Path;

type HmacSha256 = Hmac<Sha256>;

/// Random bytes from the OS.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    // getrandom only fails when the OS has no entropy source at all.
    getrandom::getrandom(&mut b).expect("the OS random source is unavailable");
    b
}

pub fn new_nonce() -> String {
    to_hex(&random_bytes::<32>())
}

/// Lowercase hex of `b`.
pub fn to_hex(b: &[u8]) -> String {
    hex::encode(b)
}

/// The bytes of a hex string (either case); `None` for an odd length or a
/// character that is not a hex digit.
pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    hex::decode(s).ok()
}

/// Which side a proof is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Agent,
}

impl Side {
    fn label(self) -> &'static [u8] {
        match self {
            Side::Client => b"fabperf-auth-v2 client\0",
            Side::Agent => b"fabperf-auth-v2 agent\0",
        }
    }
}

/// A nonce as sent on the wire: 64 lowercase or uppercase hex digits.
pub fn is_nonce(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn mac_for(token: &[u8], side: Side, agent_nonce: &str, client_nonce: &str) -> HmacSha256 {
    // HMAC accepts keys of any length; new_from_slice cannot fail for it.
    let mut m = HmacSha256::new_from_slice(token).expect("HMAC takes any key length");
    m.update(side.label());
    // Both nonces have a fixed length (checked by the callers), so the
    // concatenation is unambiguous.
    m.update(agent_nonce.as_bytes());
    m.update(client_nonce.as_bytes());
    m
}

/// `side`'s proof that it holds `token`, over both nonces.
pub fn prove(token: &[u8], side: Side, agent_nonce: &str, client_nonce: &str) -> String {
    to_hex(
        &mac_for(token, side, agent_nonce, client_nonce)
            .finalize()
            .into_bytes(),
    )
}

/// Constant-time check of `side`'s proof. Malformed nonces or proofs are
/// refused.
pub fn verify(
    token: &[u8],
    side: Side,
    agent_nonce: &str,
    client_nonce: &str,
    proof_hex: &str,
) -> bool {
    if !is_nonce(agent_nonce) || !is_nonce(client_nonce) {
        return false;
    }
    let Some(proof) = from_hex(proof_hex) else {
        return false;
    };
    mac_for(token, side, agent_nonce, client_nonce)
        .verify_slice(&proof)
        .is_ok()
}

/// Tokens that were published (in fabperf's example plans of earlier
/// releases, and its docs): anyone can authenticate with them.
pub const PUBLIC_TOKENS: &[&str] = &["fabperf-example-token-change-me"];

/// `Err` with what to do when `token` is a published one.
pub fn refuse_public_token(token: &[u8]) -> Result<(), String> {
    match PUBLIC_TOKENS.iter().find(|t| t.as_bytes() == token) {
        None => Ok(()),
        Some(t) => Err(format!(
            "the token is {t:?}, published in fabperf's examples: anyone can use it to run tests on this agent. \
             Rotate it: generate a secret (`openssl rand -hex 24 > token`), and in Kubernetes replace the Secret \
             (`kubectl -n NAMESPACE create secret generic fabperf-agent-token --from-file=token=token --dry-run=client -o yaml | kubectl apply -f -`) \
             and restart the agents (`kubectl -n NAMESPACE rollout restart daemonset -l app.kubernetes.io/name=fabperf-agent`)"
        )),
    }
}

/// Largest token file read (a token is a few dozen bytes).
pub const MAX_TOKEN_BYTES: u64 = 4096;

/// Read a token file: its contents with surrounding whitespace trimmed.
/// Only a regular file of at most [`MAX_TOKEN_BYTES`] is read (the one
/// reader of every secret and plan file: a FIFO, `/dev/zero` or a sparse
/// giant is refused before it is read). An empty token is refused.
pub fn read_token_file(path: &Path) -> Result<Vec<u8>, String> {
    let raw = fabperf_results::files::read_capped(path, MAX_TOKEN_BYTES, "token file")?;
    let t = raw.trim_ascii().to_vec();
    if t.is_empty() {
        return Err(format!(
            "token file {} is empty; put a secret in it, e.g. `head -c 32 /dev/urandom | base64 > {}`",
            path.display(),
            path.display()
        ));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prove_verify_both_ways() {
        let (a, c) = (new_nonce(), new_nonce());
        assert_eq!(a.len(), 64);
        assert!(is_nonce(&a));
        let pc = prove(b"secret", Side::Client, &a, &c);
        assert!(verify(b"secret", Side::Client, &a, &c, &pc));
        assert!(!verify(b"other", Side::Client, &a, &c, &pc));
        // Another connection's nonces: a recorded proof is worthless.
        assert!(!verify(b"secret", Side::Client, &new_nonce(), &c, &pc));
        assert!(!verify(b"secret", Side::Client, &a, &new_nonce(), &pc));
        // Domain separation: a client's proof is not an agent's and back.
        assert!(!verify(b"secret", Side::Agent, &a, &c, &pc));
        let pa = prove(b"secret", Side::Agent, &a, &c);
        assert_ne!(pa, pc);
        assert!(verify(b"secret", Side::Agent, &a, &c, &pa));
        assert!(!verify(b"secret", Side::Client, &a, &c, &pa));
        // Malformed input.
        assert!(!verify(b"secret", Side::Client, &a, &c, "zz"));
        assert!(!verify(b"secret", Side::Client, &a, &c, &pc[..10]));
        assert!(!verify(b"secret", Side::Client, "abc", &c, &pc));
        assert!(!verify(b"secret", Side::Client, &a, "", &pc));
        assert!(!is_nonce(&"g".repeat(64)));
    }

    #[test]
    fn hex_round_trip() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(from_hex(&to_hex(&b)).unwrap(), b);
        assert_eq!(to_hex(&b), "0001abff");
        assert_eq!(from_hex("0001ABff").unwrap(), b);
        assert_eq!(from_hex("").unwrap(), Vec::<u8>::new());
        assert!(from_hex("abc").is_none());
        assert!(from_hex("zz").is_none());
        assert!(from_hex("0x12").is_none());
        assert!(from_hex(" 12").is_none());
        assert!(from_hex("+1").is_none());
        assert!(from_hex("\u{e9}").is_none());
    }

    #[test]
    fn published_tokens_are_refused() {
        let e = refuse_public_token(b"fabperf-example-token-change-me").unwrap_err();
        assert!(e.contains("Rotate it") && e.contains("kubectl"), "{e}");
        assert!(refuse_public_token(b"0123456789abcdef0123456789abcdef").is_ok());
    }

    #[test]
    fn token_file_trims_and_refuses_empty() {
        let d = std::env::temp_dir().join(format!("fabperf-tok-{}", std::process::id()));
        std::fs::write(&d, "  s3cret\n").unwrap();
        assert_eq!(read_token_file(&d).unwrap(), b"s3cret");
        std::fs::write(&d, "\n").unwrap();
        assert!(read_token_file(&d).unwrap_err().contains("empty"));
        std::fs::remove_file(&d).unwrap();
        assert!(read_token_file(&d).is_err());
    }

    #[test]
    fn token_file_must_be_a_small_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        // /dev/zero never ends; a FIFO never opens; a sparse file is huge.
        let e = read_token_file(Path::new("/dev/zero")).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t0 = std::time::Instant::now();
        let e = read_token_file(&fifo).unwrap_err();
        assert!(e.contains("FIFO"), "{e}");
        assert!(t0.elapsed() < std::time::Duration::from_secs(2));
        let sparse = dir.path().join("sparse");
        std::fs::File::create(&sparse)
            .unwrap()
            .set_len(1 << 30)
            .unwrap();
        let e = read_token_file(&sparse).unwrap_err();
        assert!(e.contains("larger than 4096 bytes"), "{e}");
    }
}
