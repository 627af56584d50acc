//! The agent token: never inline in a plan; read from `token_file` and
//! refused when it is the old example's or too weak.

use super::*;

/// The token of the committed examples of earlier releases: refused everywhere.
pub const EXAMPLE_TOKEN: &str = "fabperf-example-token-change-me";

/// Why a token is unusable, or `Ok` for a token worth deploying: at least 16
/// characters without whitespace, not a placeholder, not the old example token.
pub fn check_token_text(t: &str) -> Result<(), String> {
    if t == EXAMPLE_TOKEN || fabperf_proto::auth::refuse_public_token(t.as_bytes()).is_err() {
        return Err("this is the token of fabperf's published examples; generate your own (`openssl rand -hex 24`)".into());
    }
    if t.chars().count() < 16 || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("the token must be at least 16 characters without whitespace (e.g. `openssl rand -hex 24`)".into());
    }
    let lower = t.to_ascii_lowercase();
    for p in [
        "change-me",
        "changeme",
        "change_me",
        "replace",
        "placeholder",
        "example",
        "your-token",
        "yourtoken",
        "secret-here",
        "token-here",
        "insert",
        "todo",
        "fixme",
        "xxxx",
        "<",
        ">",
        "${",
    ] {
        if lower.contains(p) {
            return Err(format!(
                "the token looks like a placeholder (contains {p:?}); generate a real one (`openssl rand -hex 24`)"
            ));
        }
    }
    let distinct: BTreeSet<char> = t.chars().collect();
    if distinct.len() < 6 {
        return Err(format!(
            "the token uses only {} distinct characters; generate a real one (`openssl rand -hex 24`)",
            distinct.len()
        ));
    }
    Ok(())
}

/// Read and check a token file (one line; a trailing newline is ignored).
pub fn read_token_file(p: &Path) -> Result<String, String> {
    let text = crate::files::read_text_capped(p, crate::files::MAX_TOKEN_BYTES, "token file")
        .map_err(|e| format!("{e:#}"))?;
    let t = text.trim_end_matches(['\n', '\r']);
    check_token_text(t).map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(t.to_string())
}
