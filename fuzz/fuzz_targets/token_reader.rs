//! The one reader of secret files: any content of a token file gives a
//! token (trimmed, never empty) or an error, never a panic, and the token
//! proves and verifies both ways. The bytes go through a real file, as the
//! reader's size checks and UTF-8-free handling read them.
#![no_main]

use fabperf_proto::auth::{self, Side};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn file() -> &'static std::path::Path {
    static P: OnceLock<std::path::PathBuf> = OnceLock::new();
    P.get_or_init(|| std::env::temp_dir().join(format!("fabperf-fuzz-token-{}", std::process::id())))
}

fuzz_target!(|data: &[u8]| {
    std::fs::write(file(), data).unwrap();
    match auth::read_token_file(file()) {
        Ok(t) => {
            assert!(!t.is_empty());
            assert!((t.len() as u64) <= auth::MAX_TOKEN_BYTES);
            assert_eq!(t.trim_ascii(), &t[..], "a token is trimmed");
            let (a, c) = (auth::new_nonce(), auth::new_nonce());
            let p = auth::prove(&t, Side::Client, &a, &c);
            assert!(auth::verify(&t, Side::Client, &a, &c, &p));
            assert!(!auth::verify(&t, Side::Agent, &a, &c, &p));
        }
        Err(e) => assert!(!e.is_empty()),
    }
});
