//! The secondary networks' address ranges: whereabouts or nv-ipam, the
//! range, its bounds and exclusions, and nv-ipam's per-node blocks.

use super::*;

pub(super) fn check_ipam(
    cx: &mut Diagnostics,
    table: &str,
    range: &S<String>,
    start: &Option<S<String>>,
    end: &Option<S<String>>,
    exclude: &Option<Vec<S<String>>>,
) -> Option<WhereaboutsIpam> {
    let net = match cidr::parse(range.get_ref()) {
        Ok(c) => c,
        Err(e) => {
            cx.at(range.span(), format!("[{table}].range: {e}"));
            return None;
        }
    };
    if !cidr::is_network_address(&net) {
        cx.at(
            range.span(),
            format!("[{table}].range {net} has host bits set; write the network address"),
        );
    }
    if cidr::host_bits(&net) < 2 {
        cx.at(
            range.span(),
            format!("[{table}].range {net} is too small for two agents"),
        );
    }
    let mut ip = |v: &Option<S<String>>, key: &str| -> Option<u128> {
        let v = v.as_ref()?;
        match v.get_ref().parse::<std::net::IpAddr>() {
            Ok(a) if net.contains(&a) => Some(match a {
                std::net::IpAddr::V4(x) => u32::from(x) as u128,
                std::net::IpAddr::V6(x) => u128::from(x),
            }),
            Ok(_) => {
                cx.at(
                    v.span(),
                    format!("[{table}].{key} {} is outside range {net}", v.get_ref()),
                );
                None
            }
            Err(_) => {
                cx.at(
                    v.span(),
                    format!("[{table}].{key} {:?} is not an IP address", v.get_ref()),
                );
                None
            }
        }
    };
    let s = ip(start, "range_start");
    let e = ip(end, "range_end");
    if let (Some(s), Some(e), Some(es)) = (s, e, end.as_ref()) {
        if s > e {
            cx.at(
                es.span(),
                format!("[{table}].range_end is below range_start"),
            );
        }
    }
    let mut excl = Vec::new();
    for x in exclude.iter().flatten() {
        match cidr::parse(x.get_ref()) {
            Ok(c) if cidr::overlaps(&net, &c) => excl.push(c.to_string()),
            Ok(c) => cx.at(
                x.span(),
                format!("[{table}].exclude {c} is outside range {net}"),
            ),
            Err(er) => cx.at(x.span(), format!("[{table}].exclude: {er}")),
        }
    }
    Some(WhereaboutsIpam {
        kind: "whereabouts",
        range: net.to_string(),
        range_start: start.as_ref().map(|v| v.get_ref().clone()),
        range_end: end.as_ref().map(|v| v.get_ref().clone()),
        exclude: excl,
    })
}

/// How many per-node blocks nv-ipam (nvidia-k8s-ipam v0.4.0,
/// pkg/ipam-controller/allocator/allocator.go) can hand out of `net`: blocks
/// of `size` addresses from the first one after the network address (the
/// network address itself for /31 and /32), each ending inside the subnet
/// and before its broadcast address; a block entirely inside the exclusions
/// is skipped.
pub fn nv_ipam_blocks(net: ipnet::Ipv4Net, size: u32, exclusions: &[crate::crd::IpRange]) -> u64 {
    if size == 0 {
        return 0;
    }
    // The exclusions merged (as nv-ipam's MergeExcludeRanges does), so a
    // block is excluded when one merged range covers it.
    let mut ex: Vec<(u64, u64)> = exclusions
        .iter()
        .filter_map(|r| {
            Some((
                u64::from(u32::from(r.start_ip.parse::<std::net::Ipv4Addr>().ok()?)),
                u64::from(u32::from(r.end_ip.parse::<std::net::Ipv4Addr>().ok()?)),
            ))
        })
        .filter(|(a, b)| a <= b)
        .collect();
    ex.sort();
    let mut merged: Vec<(u64, u64)> = Vec::new();
    for (a, b) in ex {
        match merged.last_mut() {
            Some(last) if a <= last.1 + 1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    let network = u64::from(u32::from(net.network()));
    let broadcast = u64::from(u32::from(net.broadcast()));
    let p2p = net.prefix_len() >= 31;
    let mut start = if p2p { network } else { network + 1 };
    let mut n = 0;
    loop {
        let end = start + u64::from(size) - 1;
        if end > broadcast || (!p2p && end == broadcast) {
            return n;
        }
        let excluded = merged.iter().any(|(s, e)| *s <= start && end <= *e);
        if !excluded {
            n += 1;
        }
        start = end + 1;
    }
}
