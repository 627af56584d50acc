//! The driver's statistics of a netdev (`ethtool -S`), through the `SIOCETHTOOL` ioctl.
//!
//! mlx5's `rx_discards_phy`, `rx_prio<N>_pause`, `tx_pause_storm_warning_events`,
//! `rx_out_of_buffer`, ... exist only in this set: the ethtool netlink family carries the
//! standard statistics groups (`ETHTOOL_MSG_STATS_GET`: IEEE 802.3 MAC/PHY/control, RMON) but
//! not a driver's private counters, and the rust-netlink `ethtool` crate covers neither, so
//! this is the ioctl interface ethtool(8) itself uses, in three calls:
//!
//! 1. `ETHTOOL_GSSET_INFO` with the `ETH_SS_STATS` bit: how many statistics the driver has
//!    (none, or the bit cleared, for drivers without statistics: loopback);
//! 2. `ETHTOOL_GSTRINGS` of `ETH_SS_STATS`: their names, 32 bytes each (`ETH_GSTRING_LEN`);
//! 3. `ETHTOOL_GSTATS`: their values, one `u64` each, in the same order.
//!
//! The caller passes the count from step 1 in `len` / `n_stats`. Recent kernels (6.18 here)
//! compare it with the driver's count and answer a changed set with a count of 0 and no data;
//! older ones ignore it and write as many names and values as the driver reports *at the time
//! of the call*, whatever the caller's buffer holds. A driver whose set grows between the
//! calls (mlx5 adds per-channel counters when channels are added) would make such a kernel
//! write past a buffer sized from step 1, so each buffer here has room to spare and ends right
//! at an inaccessible guard page: the kernel's `copy_to_user` copies in order and stops with
//! `EFAULT` at the guard, so a grown set can only fail the call, never overwrite memory. A
//! failed or changed read (a count other than step 1's) is retried once with fresh counts,
//! then reported.
//!
//! [`parse_stats`] turns the two raw arrays into a map; it is pure and fuzzed
//! (`fuzz/fuzz_targets/detect_ethtool.rs`).

use std::collections::BTreeMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Bytes per statistics name (`ETH_GSTRING_LEN`).
pub const ETH_GSTRING_LEN: usize = 32;
/// Most statistics accepted from a driver (mlx5 with 64 channels has a few thousand).
pub const MAX_STATS: usize = 1 << 16;

const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETHTOOL_GSSET_INFO: u32 = 0x37;
const ETH_SS_STATS: u32 = 1;

/// Why the driver's statistics could not be read.
#[derive(Debug)]
pub enum EthtoolError {
    /// No interface of that name in this network namespace.
    NoSuchDevice,
    /// A name that cannot be an interface name.
    BadName(String),
    /// A system call failed.
    Os { what: &'static str, err: io::Error },
    /// The driver's answer does not make sense (too many statistics, a set that kept
    /// changing, names and values that do not pair up).
    Bad(String),
}

impl std::fmt::Display for EthtoolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EthtoolError::NoSuchDevice => {
                f.write_str("no such interface in this network namespace")
            }
            EthtoolError::BadName(n) => write!(f, "{n:?} is not an interface name"),
            EthtoolError::Os { what, err } => write!(f, "{what}: {err}"),
            EthtoolError::Bad(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for EthtoolError {}

/// Names and values of the driver's statistics into a map. `names` holds 32-byte,
/// NUL-padded names, `values` one native-endian `u64` per name. Empty names are skipped; a
/// name the driver repeats keeps its first value; bytes outside printable ASCII become `?`
/// (a name is the driver's text, not trusted to be clean).
pub fn parse_stats(names: &[u8], values: &[u8]) -> Result<BTreeMap<String, u64>, String> {
    if !names.len().is_multiple_of(ETH_GSTRING_LEN) {
        return Err(format!(
            "{} bytes of names are not a whole number of {ETH_GSTRING_LEN}-byte names",
            names.len()
        ));
    }
    if !values.len().is_multiple_of(8) {
        return Err(format!(
            "{} bytes of values are not a whole number of 8-byte values",
            values.len()
        ));
    }
    let n = names.len() / ETH_GSTRING_LEN;
    if values.len() / 8 != n {
        return Err(format!(
            "{n} names but {} values: the driver's statistics changed while they were read",
            values.len() / 8
        ));
    }
    if n > MAX_STATS {
        return Err(format!(
            "{n} statistics, more than the {MAX_STATS} accepted"
        ));
    }
    let mut out = BTreeMap::new();
    for (raw, v) in names
        .chunks_exact(ETH_GSTRING_LEN)
        .zip(values.chunks_exact(8))
    {
        let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
        let name: String = raw[..end]
            .iter()
            .map(|&b| if b.is_ascii_graphic() { b as char } else { '?' })
            .collect();
        if name.is_empty() {
            continue;
        }
        let mut b = [0u8; 8];
        b.copy_from_slice(v);
        out.entry(name).or_insert(u64::from_ne_bytes(b));
    }
    Ok(out)
}

/// An anonymous mapping whose usable part ends right before an inaccessible guard page, so
/// that a kernel write past `len` bytes fails with `EFAULT` instead of reaching other memory.
struct Guarded {
    base: *mut u8,
    map_len: usize,
    /// Offset of the usable bytes from `base`: they end at the guard page.
    off: usize,
    len: usize,
}

impl Guarded {
    fn new(len: usize) -> io::Result<Guarded> {
        let page = rustix::param::page_size();
        let usable = len.max(1).div_ceil(page) * page;
        let map_len = usable + page;
        // SAFETY: a fresh private anonymous mapping at an address the kernel picks (null
        // hint); nothing else refers to it.
        let base = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                map_len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::PRIVATE,
            )
        }?
        .cast::<u8>();
        let g = Guarded {
            base,
            map_len,
            off: usable - len,
            len,
        };
        // SAFETY: the last page lies inside the mapping just created (`usable` is a whole
        // number of pages below `map_len`); making it inaccessible touches nothing else.
        unsafe {
            rustix::mm::mprotect(
                base.add(usable).cast(),
                page,
                rustix::mm::MprotectFlags::empty(),
            )
        }?;
        Ok(g)
    }

    /// Start of the usable bytes (aligned to 4 bytes when `len` is a multiple of 4, to 8
    /// when it is a multiple of 8: they end at a page boundary).
    fn ptr(&self) -> *mut u8 {
        // SAFETY: `off` < `map_len` (see `new`), so this stays inside the mapping.
        unsafe { self.base.add(self.off) }
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `len` readable bytes start at `ptr()` (inside the mapping, before the
        // guard); the mapping lives as long as `self` and is only written through `ptr()`
        // by an ioctl that has returned before this borrow.
        unsafe { std::slice::from_raw_parts(self.ptr(), self.len) }
    }

    fn put_u32(&mut self, at: usize, v: u32) {
        assert!(at + 4 <= self.len);
        // SAFETY: in bounds (checked above) and `&mut self` excludes other access.
        unsafe { self.ptr().add(at).cast::<u32>().write_unaligned(v) }
    }

    fn put_u64(&mut self, at: usize, v: u64) {
        assert!(at + 8 <= self.len);
        // SAFETY: in bounds (checked above) and `&mut self` excludes other access.
        unsafe { self.ptr().add(at).cast::<u64>().write_unaligned(v) }
    }

    fn get_u64(&self, at: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.bytes()[at..at + 8]);
        u64::from_ne_bytes(b)
    }

    fn get_u32(&self, at: usize) -> u32 {
        let mut b = [0u8; 4];
        b.copy_from_slice(&self.bytes()[at..at + 4]);
        u32::from_ne_bytes(b)
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        // SAFETY: `base`/`map_len` are exactly the mapping created in `new`, unmapped once.
        let _ = unsafe { rustix::mm::munmap(self.base.cast(), self.map_len) };
    }
}

/// `SIOCETHTOOL` on `ifname` with the ethtool command at `buf`.
fn ethtool_ioctl(sock: &OwnedFd, ifname: &str, buf: *mut u8) -> io::Result<()> {
    // SAFETY: ifreq is plain old data; all-zero bytes are a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    ifr.ifr_ifru.ifru_data = buf.cast();
    // SAFETY: `ifr` names the interface (NUL-terminated: at most IFNAMSIZ - 1 bytes were
    // copied into a zeroed array, see `valid_name`) and points at a command buffer the caller
    // owns for the duration of the call; the kernel writes at most the command's own
    // reply into it, and a reply longer than the buffer hits its guard page (EFAULT).
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCETHTOOL, &mut ifr) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() < libc::IFNAMSIZ
        && n != "."
        && n != ".."
        && !n
            .bytes()
            .any(|b| b == b'/' || b == 0 || b.is_ascii_whitespace())
}

fn os(what: &'static str, err: io::Error) -> EthtoolError {
    match err.raw_os_error() {
        Some(libc::ENODEV) => EthtoolError::NoSuchDevice,
        _ => EthtoolError::Os { what, err },
    }
}

/// How many statistics the driver of `ifname` has (0: none).
fn stats_count(sock: &OwnedFd, ifname: &str) -> Result<usize, EthtoolError> {
    // struct ethtool_sset_info { u32 cmd; u32 reserved; u64 sset_mask; u32 data[]; }: one
    // bit asked for, so the kernel writes one u32 of data (at offset 16).
    let mut b = Guarded::new(24).map_err(|e| os("mmap", e))?;
    b.put_u32(0, ETHTOOL_GSSET_INFO);
    let mask = 1u64 << ETH_SS_STATS;
    b.put_u64(8, mask);
    ethtool_ioctl(sock, ifname, b.ptr()).map_err(|e| os("ETHTOOL_GSSET_INFO", e))?;
    let got = b.get_u64(8);
    if got & mask == 0 {
        return Ok(0);
    }
    let n = b.get_u32(16) as usize;
    if n > MAX_STATS {
        return Err(EthtoolError::Bad(format!(
            "the driver reports {n} statistics, more than the {MAX_STATS} accepted"
        )));
    }
    Ok(n)
}

/// One read of names and values; `Ok(None)` when the set changed under it.
fn read_once(sock: &OwnedFd, ifname: &str) -> Result<Option<BTreeMap<String, u64>>, EthtoolError> {
    let n = stats_count(sock, ifname)?;
    if n == 0 {
        return Ok(Some(BTreeMap::new()));
    }
    // Room for a set that grows by half (plus some) between the calls.
    let cap = (n + n / 2 + 64).min(MAX_STATS);
    // struct ethtool_gstrings { u32 cmd; u32 string_set; u32 len; u8 data[]; }
    let mut names = Guarded::new(12 + cap * ETH_GSTRING_LEN).map_err(|e| os("mmap", e))?;
    names.put_u32(0, ETHTOOL_GSTRINGS);
    names.put_u32(4, ETH_SS_STATS);
    // The count just read: kernels since 6.x compare it with the driver's and answer a
    // changed set with `len` 0 and no data (older ones ignore it and write what they have).
    names.put_u32(8, n as u32);
    match ethtool_ioctl(sock, ifname, names.ptr()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EFAULT) => return Ok(None),
        Err(e) => return Err(os("ETHTOOL_GSTRINGS", e)),
    }
    let n_names = names.get_u32(8) as usize;
    // struct ethtool_stats { u32 cmd; u32 n_stats; u64 data[]; }
    let mut values = Guarded::new(8 + cap * 8).map_err(|e| os("mmap", e))?;
    values.put_u32(0, ETHTOOL_GSTATS);
    values.put_u32(4, n as u32);
    match ethtool_ioctl(sock, ifname, values.ptr()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EFAULT) => return Ok(None),
        Err(e) => return Err(os("ETHTOOL_GSTATS", e)),
    }
    let n_values = values.get_u32(4) as usize;
    if n_names != n || n_values != n {
        return Ok(None);
    }
    let names = &names.bytes()[12..12 + n_names * ETH_GSTRING_LEN];
    let vals = &values.bytes()[8..8 + n_values * 8];
    parse_stats(names, vals)
        .map(Some)
        .map_err(EthtoolError::Bad)
}

/// The driver's statistics of `ifname` (what `ethtool -S` prints), in this process's network
/// namespace. An interface whose driver keeps none (loopback) gives an empty map.
pub fn driver_stats(ifname: &str) -> Result<BTreeMap<String, u64>, EthtoolError> {
    if !valid_name(ifname) {
        return Err(EthtoolError::BadName(ifname.to_string()));
    }
    let sock = control_socket()?;
    for _ in 0..2 {
        if let Some(m) = read_once(&sock, ifname)? {
            return Ok(m);
        }
    }
    Err(EthtoolError::Bad(
        "the driver's statistics kept changing while they were read (channels reconfigured?)"
            .into(),
    ))
}

/// Any datagram socket carries SIOCETHTOOL (the kernel hands unknown socket ioctls to the
/// device layer); IPv4 first, a Unix socket where IPv4 is compiled out.
fn control_socket() -> Result<OwnedFd, EthtoolError> {
    let mut last = None;
    for family in [libc::AF_INET, libc::AF_UNIX] {
        // SAFETY: socket() takes plain integers and returns a new descriptor or -1.
        let fd = unsafe { libc::socket(family, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd >= 0 {
            // SAFETY: `fd` is a fresh descriptor this function owns.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        last = Some(io::Error::last_os_error());
    }
    Err(EthtoolError::Os {
        what: "socket",
        err: last.unwrap_or_else(|| io::Error::other("no socket family")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> [u8; 32] {
        let mut b = [0u8; 32];
        b[..s.len()].copy_from_slice(s.as_bytes());
        b
    }

    fn arrays(items: &[(&str, u64)]) -> (Vec<u8>, Vec<u8>) {
        let mut n = Vec::new();
        let mut v = Vec::new();
        for (k, x) in items {
            n.extend_from_slice(&name(k));
            v.extend_from_slice(&x.to_ne_bytes());
        }
        (n, v)
    }

    #[test]
    fn names_and_values_pair_up() {
        let (n, v) = arrays(&[
            ("rx_discards_phy", 3),
            ("rx_prio3_pause", 17),
            ("", 9),
            ("rx_discards_phy", 99),
        ]);
        let m = parse_stats(&n, &v).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(m["rx_discards_phy"], 3, "the first of a repeated name wins");
        assert_eq!(m["rx_prio3_pause"], 17);
        // A name that fills all 32 bytes has no NUL.
        let long = "a".repeat(32);
        let (n, v) = arrays(&[(&long, 1)]);
        assert_eq!(parse_stats(&n, &v).unwrap()[&long], 1);
    }

    #[test]
    fn hostile_driver_answers_are_refused_or_cleaned() {
        let (n, v) = arrays(&[("a", 1), ("b", 2)]);
        for (names, values, why) in [
            (&n[..31], &v[..], "whole number"),
            (&n[..], &v[..15], "whole number"),
            (&n[..32], &v[..], "1 names but 2 values"),
            (&n[..], &v[..8], "2 names but 1 values"),
        ] {
            let e = parse_stats(names, values).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
        // Control characters and escapes in a name do not reach a terminal.
        let mut raw = name("rx_\x1b[31m_err\n");
        raw[20] = 0xff;
        let m = parse_stats(&raw, &5u64.to_ne_bytes()).unwrap();
        let k = m.keys().next().unwrap();
        assert!(k.bytes().all(|b| b.is_ascii_graphic()), "{k:?}");
        assert!(k.starts_with("rx_?[31m_err?"), "{k:?}");
        assert_eq!(parse_stats(&[], &[]).unwrap().len(), 0);
        let too_many = vec![b'a'; (MAX_STATS + 1) * 32];
        let vals = vec![0u8; (MAX_STATS + 1) * 8];
        assert!(parse_stats(&too_many, &vals)
            .unwrap_err()
            .contains("more than"));
    }

    #[test]
    fn guard_page_stops_a_write_past_the_buffer() {
        let mut g = Guarded::new(20).unwrap();
        g.put_u32(16, 7);
        assert_eq!(g.get_u32(16), 7);
        assert_eq!(g.bytes().len(), 20);
        // The byte after the buffer is the guard page: the kernel refuses to write there.
        let past = g.ptr().wrapping_add(20);
        // SAFETY (test): read(2) into an inaccessible page fails with EFAULT, writes nothing.
        let f = std::fs::File::open("/proc/self/stat").unwrap();
        let rc = unsafe { libc::read(f.as_raw_fd(), past.cast(), 8) };
        assert_eq!(rc, -1);
        assert_eq!(
            io::Error::last_os_error().raw_os_error(),
            Some(libc::EFAULT)
        );
    }

    #[test]
    fn bad_interface_names_never_reach_the_kernel() {
        for n in ["", ".", "..", "a/b", "0123456789abcdef", "a b", "x\0y"] {
            assert!(
                matches!(driver_stats(n), Err(EthtoolError::BadName(_))),
                "{n:?}"
            );
        }
    }

    #[test]
    fn live_interfaces() {
        // Loopback keeps no driver statistics; an absent interface is named as such.
        assert_eq!(driver_stats("lo").unwrap().len(), 0);
        assert!(matches!(
            driver_stats("fabperf-none0"),
            Err(EthtoolError::NoSuchDevice)
        ));
        // A veth pair has a driver set (peer_ifindex, per-queue XDP counters).
        // Names of this process only (other test runs may do the same at the same time).
        let a = format!("fpe{}a", std::process::id() % 100_000);
        let b = format!("fpe{}b", std::process::id() % 100_000);
        let made = std::process::Command::new("ip")
            .args(["link", "add", &a, "type", "veth", "peer", "name", &b])
            .status()
            .is_ok_and(|s| s.success());
        if !made {
            eprintln!("skipping the veth part: cannot create a veth pair here (not root?)");
            return;
        }
        let r = driver_stats(&a);
        let _ = std::process::Command::new("ip")
            .args(["link", "del", &a])
            .status();
        let m = r.unwrap();
        assert!(m.contains_key("peer_ifindex"), "{m:?}");
    }
}
