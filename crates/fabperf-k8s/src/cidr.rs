//! CIDR blocks of the plan's IPAM ranges, as `ipnet::IpNet`: parsing with
//! messages that say what is wrong with the plan's value, and the few
//! questions the plan checks ask of them.

use ipnet::IpNet;
use std::net::IpAddr;

/// Parse `ADDRESS/PREFIX`. The address may have host bits set (the plan
/// check reports that separately, see [`is_network_address`]).
pub fn parse(s: &str) -> Result<IpNet, String> {
    let (a, p) = s.split_once('/').ok_or_else(|| {
        format!("{s:?} is not in CIDR form ADDRESS/PREFIX (e.g. 192.168.50.0/24)")
    })?;
    let addr: IpAddr = a
        .parse()
        .map_err(|_| format!("{a:?} in {s:?} is not an IP address"))?;
    let prefix: u8 = p
        .parse()
        .map_err(|_| format!("prefix {p:?} in {s:?} is not a number"))?;
    IpNet::new(addr, prefix).map_err(|_| {
        let max = if addr.is_ipv4() { 32 } else { 128 };
        format!("prefix /{prefix} in {s:?} exceeds /{max}")
    })
}

/// The two blocks share an address (never across address families).
pub fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    // CIDR blocks are aligned: two overlap exactly when one holds the other.
    a.contains(b) || b.contains(a)
}

/// The address bits beyond the prefix are zero (e.g. 10.0.0.0/8, not 10.0.0.1/8).
pub fn is_network_address(n: &IpNet) -> bool {
    n.addr() == n.network()
}

/// Number of address bits beyond the prefix.
pub fn host_bits(n: &IpNet) -> u8 {
    n.max_prefix_len() - n.prefix_len()
}

/// Number of addresses in the block (saturating at `u128::MAX` for `::/0`).
pub fn size(n: &IpNet) -> u128 {
    1u128.checked_shl(host_bits(n).into()).unwrap_or(u128::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> IpNet {
        parse(s).unwrap()
    }

    #[test]
    fn overlap_and_contain() {
        let a = c("192.168.50.0/24");
        let b = c("192.168.50.128/25");
        let cc = c("192.168.51.0/24");
        let big = c("192.168.0.0/16");
        assert!(overlaps(&a, &b) && overlaps(&b, &a));
        assert!(!overlaps(&a, &cc));
        assert!(overlaps(&big, &cc) && overlaps(&cc, &big));
        assert!(overlaps(&a, &a));
        assert!(a.contains(&"192.168.50.7".parse::<IpAddr>().unwrap()));
        assert!(!a.contains(&"192.168.51.7".parse::<IpAddr>().unwrap()));
        let v6 = c("fd00::/64");
        assert!(!overlaps(&v6, &a) && !overlaps(&a, &v6));
        assert!(!overlaps(&c("::/0"), &c("0.0.0.0/0")));
        assert!(v6.contains(&"fd00::1".parse::<IpAddr>().unwrap()));
        assert!(!v6.contains(&"192.168.50.7".parse::<IpAddr>().unwrap()));
        assert!(is_network_address(&a));
        assert!(!is_network_address(&c("10.0.0.1/8")));
        // Host bits set on one side do not change what the block covers.
        assert!(overlaps(&c("10.0.0.1/8"), &c("10.200.0.0/16")));
    }

    #[test]
    fn sizes() {
        assert_eq!(size(&c("10.0.0.0/24")), 256);
        assert_eq!(size(&c("10.0.0.7/32")), 1);
        assert_eq!(size(&c("0.0.0.0/0")), 1 << 32);
        assert_eq!(size(&c("fd00::/64")), 1 << 64);
        assert_eq!(size(&c("::/0")), u128::MAX);
        assert_eq!(host_bits(&c("fd00::/126")), 2);
    }

    #[test]
    fn parse_errors() {
        let e = |s: &str| parse(s).unwrap_err();
        assert!(e("192.168.1.0").contains("not in CIDR form"));
        assert!(e("192.168.1.0/33").contains("exceeds /32"));
        assert!(e("fd00::/129").contains("exceeds /128"));
        assert!(e("300.1.1.0/24").contains("is not an IP address"));
        assert!(e("10.0.0.0/x").contains("is not a number"));
        assert!(e("10.0.0.0/-1").contains("is not a number"));
        assert!(e("10.0.0.0/24/1").contains("is not a number"));
        assert!(e("/24").contains("is not an IP address"));
        assert!(parse("0.0.0.0/0").is_ok());
        assert_eq!(c("fd00:0::/64").to_string(), "fd00::/64");
        assert_eq!(c("10.0.0.1/8").to_string(), "10.0.0.1/8");
    }
}
