//! Shared-secret authentication.
//!
//! The agent sends a random 32-byte nonce in `Hello`; the client answers
//! with HMAC-SHA256(key = token, message = "fabperf-auth-v1" || nonce). The
//! agent verifies with the MAC's constant-time comparison, so the time taken
//! does not reveal how many bytes matched. The token never crosses the wire.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::path::Path;

type HmacSha256 = Hmac<Sha256>;

const DOMAIN: &[u8] = b"fabperf-auth-v1";

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

pub fn to_hex(b: &[u8]) -> String {
    const H: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(H[(x >> 4) as usize] as char);
        s.push(H[(x & 15) as usize] as char);
    }
    s
}

pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let v = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(v(p[0])? << 4 | v(p[1])?))
        .collect()
}

fn mac_for(token: &[u8], nonce_hex: &str) -> HmacSha256 {
    // HMAC accepts keys of any length; new_from_slice cannot fail for it.
    let mut m = HmacSha256::new_from_slice(token).expect("HMAC takes any key length");
    m.update(DOMAIN);
    m.update(nonce_hex.as_bytes());
    m
}

/// The client's answer to a nonce.
pub fn respond(token: &[u8], nonce_hex: &str) -> String {
    to_hex(&mac_for(token, nonce_hex).finalize().into_bytes())
}

/// Constant-time check of a client's answer.
pub fn verify(token: &[u8], nonce_hex: &str, answer_hex: &str) -> bool {
    let Some(answer) = from_hex(answer_hex) else {
        return false;
    };
    mac_for(token, nonce_hex).verify_slice(&answer).is_ok()
}

/// Read a token file: its contents with surrounding whitespace trimmed.
/// An empty token is refused.
pub fn read_token_file(path: &Path) -> Result<Vec<u8>, String> {
    let raw = std::fs::read(path)
        .map_err(|e| format!("cannot read token file {}: {e}", path.display()))?;
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
    fn respond_verify() {
        let n = new_nonce();
        assert_eq!(n.len(), 64);
        let a = respond(b"secret", &n);
        assert!(verify(b"secret", &n, &a));
        assert!(!verify(b"other", &n, &a));
        assert!(!verify(b"secret", &new_nonce(), &a));
        assert!(!verify(b"secret", &n, "zz"));
        assert!(!verify(b"secret", &n, &a[..10]));
    }

    #[test]
    fn hex_round_trip() {
        let b = [0u8, 1, 0xab, 0xff];
        assert_eq!(from_hex(&to_hex(&b)).unwrap(), b);
        assert!(from_hex("abc").is_none());
        assert!(from_hex("zz").is_none());
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
}
