//! Minimal CIDR arithmetic for IPAM ranges: parse, contain, overlap.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

fn to_u128(a: IpAddr) -> (bool, u128) {
    match a {
        IpAddr::V4(v) => (false, u32::from(v) as u128),
        IpAddr::V6(v) => (true, u128::from(v)),
    }
}

impl Cidr {
    fn bits(&self) -> u32 {
        if self.addr.is_ipv4() {
            32
        } else {
            128
        }
    }
    /// First and last address of the block, as integers.
    pub fn bounds(&self) -> (u128, u128) {
        let (_, v) = to_u128(self.addr);
        let host_bits = self.bits() - self.prefix as u32;
        let mask: u128 = if host_bits >= 128 {
            u128::MAX
        } else {
            (1u128 << host_bits) - 1
        };
        (v & !mask, v | mask)
    }
    pub fn is_v6(&self) -> bool {
        self.addr.is_ipv6()
    }
    pub fn overlaps(&self, other: &Cidr) -> bool {
        if self.is_v6() != other.is_v6() {
            return false;
        }
        let (a0, a1) = self.bounds();
        let (b0, b1) = other.bounds();
        a0 <= b1 && b0 <= a1
    }
    pub fn contains(&self, ip: IpAddr) -> bool {
        let (v6, v) = to_u128(ip);
        if v6 != self.is_v6() {
            return false;
        }
        let (lo, hi) = self.bounds();
        lo <= v && v <= hi
    }
    /// The address bits beyond the prefix are zero (e.g. 10.0.0.0/8, not 10.0.0.1/8).
    pub fn is_network_address(&self) -> bool {
        to_u128(self.addr).1 == self.bounds().0
    }
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (a, p) = s.split_once('/').ok_or_else(|| {
            format!("{s:?} is not in CIDR form ADDRESS/PREFIX (e.g. 192.168.50.0/24)")
        })?;
        let addr: IpAddr = a
            .parse()
            .map_err(|_| format!("{a:?} in {s:?} is not an IP address"))?;
        let prefix: u8 = p
            .parse()
            .map_err(|_| format!("prefix {p:?} in {s:?} is not a number"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if prefix > max {
            return Err(format!("prefix /{prefix} in {s:?} exceeds /{max}"));
        }
        Ok(Cidr { addr, prefix })
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_and_contain() {
        let a: Cidr = "192.168.50.0/24".parse().unwrap();
        let b: Cidr = "192.168.50.128/25".parse().unwrap();
        let c: Cidr = "192.168.51.0/24".parse().unwrap();
        let big: Cidr = "192.168.0.0/16".parse().unwrap();
        assert!(a.overlaps(&b) && b.overlaps(&a));
        assert!(!a.overlaps(&c));
        assert!(big.overlaps(&c));
        assert!(a.contains("192.168.50.7".parse().unwrap()));
        assert!(!a.contains("192.168.51.7".parse().unwrap()));
        let v6: Cidr = "fd00::/64".parse().unwrap();
        assert!(!v6.overlaps(&a));
        assert!(v6.contains("fd00::1".parse().unwrap()));
        assert!(a.is_network_address());
        assert!(!"10.0.0.1/8".parse::<Cidr>().unwrap().is_network_address());
    }

    #[test]
    fn parse_errors() {
        assert!("192.168.1.0".parse::<Cidr>().is_err());
        assert!("192.168.1.0/33".parse::<Cidr>().is_err());
        assert!("300.1.1.0/24".parse::<Cidr>().is_err());
        assert!("0.0.0.0/0".parse::<Cidr>().is_ok());
    }
}
