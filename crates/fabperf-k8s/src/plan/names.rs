//! The name rules Kubernetes and the kernel impose: DNS labels and
//! subdomains, label keys and values, interface names, GUIDs, resource
//! names; and an integer key within a range.

use super::*;

pub(super) fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

pub(crate) fn is_label_value(s: &str) -> bool {
    s.len() <= 63
        && (s.is_empty()
            || (s
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
                && s.as_bytes()[0].is_ascii_alphanumeric()
                && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()))
}

pub(crate) fn is_label_key(s: &str) -> bool {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(is_dns_subdomain) && !name.is_empty() && is_label_value(name)
}

pub(super) fn is_ifname(s: &str) -> bool {
    !s.is_empty() && s.len() <= 15 && !s.contains(['/', ' ', ':']) && s != "." && s != ".."
}

pub(super) fn is_hex4(s: &str) -> bool {
    s.len() == 4
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

pub(super) fn is_guid(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 8
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

pub(super) fn is_sriov_resource(s: &str) -> bool {
    !s.is_empty() && s.len() <= 63 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

pub(super) fn names_or_none<'a>(it: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = it.collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// Split `PREFIX/NAME` (the prefix defaults to `rdma`).
pub fn split_resource(r: &str) -> (&str, &str) {
    r.split_once('/').unwrap_or(("rdma", r))
}

/// An integer key's value within `lo..=hi` (all within `u32`), else the
/// problem "`what` N is out of range LO..=HI".
pub(super) fn u32_in(
    cx: &mut Diagnostics,
    v: &S<i64>,
    what: &str,
    lo: i64,
    hi: i64,
) -> Option<u32> {
    cx.int_in(v, what, lo, hi).map(|n| n as u32)
}
