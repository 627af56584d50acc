//! Counter snapshots around a measurement, and their deltas.
//!
//! What RDMA operators read before and after a run to explain a figure: the RDMA port's
//! counters (`/sys/class/infiniband/<dev>/ports/<p>/counters/*`, the InfiniBand PMA set) and
//! hardware counters (`.../hw_counters/*`: mlx5's `out_of_sequence`, `np_cnp_sent`, ..., rxe's
//! `retry_exceeded_err`, ...), the netdev's `/sys/class/net/<if>/statistics/*`, and the host's
//! `/proc/net/snmp` and `/proc/net/netstat` (TCP retransmits, UDP buffer errors), and on the
//! live host the netdev driver's `ethtool -S` set ([`crate::ethtool`]). [`snapshot`] reads them
//! (through a [`Root`], so snapshots of captures and fixtures work the same way) and [`delta`]
//! keeps what changed, grouped by source.
//!
//! Units: every value is a count, except `port_xmit_data` and `port_rcv_data`, which the IB
//! PMA counts in 4-byte words (octets ÷ 4): [`Unit::FourByteWords`], [`CounterDelta::bytes`].

use crate::root::Root;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Which counters to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CounterSpec {
    /// An RDMA device and port, e.g. (`mlx5_0`, 1).
    pub rdma: Option<(String, u32)>,
    /// A netdev, e.g. `eth0`.
    pub netdev: Option<String>,
    /// The host's `/proc/net/snmp` and `/proc/net/netstat` (of this network namespace).
    pub host: bool,
}

pub use fabperf_results::counters::{unit, CounterDelta, CounterSource, Unit};

/// One group of counters as read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterGroup {
    pub source: CounterSource,
    /// `mlx5_0 port 1`, `eth0`, or `host`.
    pub subject: String,
    /// The directory or file read, as read (snapshot paths include the snapshot directory).
    pub path: String,
    pub values: BTreeMap<String, u64>,
}

/// Counters at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterSnapshot {
    pub groups: Vec<CounterGroup>,
    /// Sources that could not be read (absent directory, permission denied), with the reason.
    pub missing: Vec<String>,
}

/// Files in counter directories that are settings, not counters.
const NOT_COUNTERS: &[&str] = &["lifespan"];

fn read_dir_counters(root: &Root, dir: &str) -> Result<BTreeMap<String, u64>, String> {
    let names = root.try_list(dir).map_err(|e| e.to_string())?;
    let mut values = BTreeMap::new();
    for n in names {
        if NOT_COUNTERS.contains(&n.as_str()) {
            continue;
        }
        if let Some(v) = root
            .read(&format!("{dir}/{n}"))
            .and_then(|t| t.trim().parse::<u64>().ok())
        {
            values.insert(n, v);
        }
    }
    Ok(values)
}

/// Keys of `/proc/net/snmp` that are settings or gauges (they go up and down), not counters.
const SNMP_NOT_COUNTERS: &[&str] = &[
    "Ip.Forwarding",
    "Ip.DefaultTTL",
    "Tcp.RtoAlgorithm",
    "Tcp.RtoMin",
    "Tcp.RtoMax",
    "Tcp.MaxConn",
    "Tcp.CurrEstab",
];

/// Parse `/proc/net/snmp` or `/proc/net/netstat`: pairs of lines `Proto: Name Name ...` /
/// `Proto: value value ...`, into `Proto.Name` keys. Settings and gauges (`Tcp.MaxConn`,
/// `Tcp.CurrEstab`, and any negative value) are left out; lines that do not pair up are
/// ignored.
pub fn parse_proc_net(text: &str) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i + 1 < lines.len() {
        let (Some((p1, names)), Some((p2, vals))) =
            (lines[i].split_once(':'), lines[i + 1].split_once(':'))
        else {
            i += 1;
            continue;
        };
        if p1 != p2 || p1.is_empty() {
            i += 1;
            continue;
        }
        let names: Vec<&str> = names.split_whitespace().collect();
        let vals: Vec<&str> = vals.split_whitespace().collect();
        // A header line has names, not numbers.
        if names.first().is_some_and(|n| n.parse::<i64>().is_ok()) {
            i += 1;
            continue;
        }
        for (n, v) in names.iter().zip(vals.iter()) {
            let key = format!("{p1}.{n}");
            if SNMP_NOT_COUNTERS.contains(&key.as_str()) {
                continue;
            }
            if let Ok(v) = v.parse::<u64>() {
                out.insert(key, v);
            }
        }
        i += 2;
    }
    out
}

fn safe_name(n: &str) -> bool {
    !n.is_empty() && n != "." && n != ".." && !n.contains('/')
}

/// Read the counters `spec` asks for from `root` ([`Root::live`] for this host).
pub fn snapshot(root: &Root, spec: &CounterSpec) -> CounterSnapshot {
    let mut snap = CounterSnapshot::default();
    let mut group =
        |source: CounterSource, subject: String, dir: String| match read_dir_counters(root, &dir) {
            Ok(values) => snap.groups.push(CounterGroup {
                source,
                subject,
                path: root.display(&dir),
                values,
            }),
            Err(e) => snap.missing.push(format!("{}: {e}", root.display(&dir))),
        };
    if let Some((dev, port)) = &spec.rdma {
        if safe_name(dev) {
            let base = format!("/sys/class/infiniband/{dev}/ports/{port}");
            let subject = format!("{dev} port {port}");
            group(
                CounterSource::RdmaPort,
                subject.clone(),
                format!("{base}/counters"),
            );
            group(
                CounterSource::RdmaHw,
                subject,
                format!("{base}/hw_counters"),
            );
        }
    }
    if let Some(nd) = spec.netdev.as_deref().filter(|n| safe_name(n)) {
        group(
            CounterSource::Netdev,
            nd.to_string(),
            format!("/sys/class/net/{nd}/statistics"),
        );
        // The driver's set exists only on the live host (a snapshot has no ioctl). A driver
        // without statistics (loopback) gives no group and is not missing anything.
        if root.is_live() {
            let path = format!("SIOCETHTOOL {nd}");
            match crate::ethtool::driver_stats(nd) {
                Ok(values) if values.is_empty() => {}
                Ok(values) => snap.groups.push(CounterGroup {
                    source: CounterSource::Ethtool,
                    subject: nd.to_string(),
                    path,
                    values,
                }),
                Err(e) => snap.missing.push(format!("{path}: {e}")),
            }
        }
    }
    if spec.host {
        for (source, file) in [
            (CounterSource::Snmp, "/proc/net/snmp"),
            (CounterSource::Netstat, "/proc/net/netstat"),
        ] {
            // Live: the calling thread's network namespace (`/proc/net` is the main
            // thread's, which a thread that entered another namespace does not share).
            let read = if root.is_live() {
                file.replacen("/proc/", "/proc/thread-self/", 1)
            } else {
                file.to_string()
            };
            match root.try_read_limited(&read, crate::root::MAX_ATTR_BYTES) {
                Ok(b) => snap.groups.push(CounterGroup {
                    source,
                    subject: "host".into(),
                    path: root.display(file),
                    values: parse_proc_net(&String::from_utf8_lossy(&b)),
                }),
                Err(e) => snap.missing.push(format!("{}: {e}", root.display(file))),
            }
        }
    }
    snap
}

/// What changed from `before` to `after`: per group, the counters that grew (non-zero deltas
/// only) and those that went down; groups where nothing changed are left out.
pub fn delta(before: &CounterSnapshot, after: &CounterSnapshot) -> Vec<CounterDelta> {
    let mut out = Vec::new();
    for a in &after.groups {
        let Some(b) = before
            .groups
            .iter()
            .find(|b| b.source == a.source && b.subject == a.subject)
        else {
            continue;
        };
        let mut deltas = BTreeMap::new();
        let mut units = BTreeMap::new();
        let mut reset = Vec::new();
        for (name, &va) in &a.values {
            let Some(&vb) = b.values.get(name) else {
                continue;
            };
            match va.checked_sub(vb) {
                Some(0) => {}
                Some(d) => {
                    let u = unit(a.source, name);
                    if u != Unit::Count {
                        units.insert(name.clone(), u);
                    }
                    deltas.insert(name.clone(), d);
                }
                None => reset.push(name.clone()),
            }
        }
        if deltas.is_empty() && reset.is_empty() {
            continue;
        }
        out.push(CounterDelta {
            source: a.source,
            subject: a.subject.clone(),
            path: a.path.clone(),
            deltas,
            units,
            reset,
        });
    }
    out.sort_by(|x, y| (x.source, &x.subject).cmp(&(y.source, &y.subject)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::Path;

    fn write(base: &Path, rel: &str, text: &str) {
        let p = base.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }

    const SNMP: &str = "Ip: Forwarding DefaultTTL InReceives\nIp: 1 64 1000\nTcp: RtoAlgorithm MaxConn RetransSegs OutSegs\nTcp: 1 -1 5 100\nUdp: InDatagrams RcvbufErrors InErrors\nUdp: 10 0 0\n";

    fn tree(base: &Path, xmit: u64, oos: u64, rx_bytes: u64, retrans: u64, rcvbuf: u64) {
        let port = "sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/infiniband/mlx5_0/ports/1";
        write(
            base,
            &format!("{port}/counters/port_xmit_data"),
            &format!("{xmit}\n"),
        );
        write(base, &format!("{port}/counters/port_rcv_data"), "7\n");
        write(base, &format!("{port}/counters/symbol_error"), "0\n");
        write(
            base,
            &format!("{port}/hw_counters/out_of_sequence"),
            &format!("{oos}\n"),
        );
        write(base, &format!("{port}/hw_counters/lifespan"), "10\n");
        write(base, &format!("{port}/hw_counters/garbage"), "n/a\n");
        write(
            base,
            "sys/devices/virtual/net/eth0/statistics/rx_bytes",
            &format!("{rx_bytes}\n"),
        );
        write(
            base,
            "sys/devices/virtual/net/eth0/statistics/rx_dropped",
            "3\n",
        );
        let ib = base.join("sys/class/infiniband");
        fs::create_dir_all(&ib).unwrap();
        let net = base.join("sys/class/net");
        fs::create_dir_all(&net).unwrap();
        let _ = std::os::unix::fs::symlink(
            "../../devices/pci0000:00/0000:00:01.0/0000:01:00.0/infiniband/mlx5_0",
            ib.join("mlx5_0"),
        );
        let _ = std::os::unix::fs::symlink("../../devices/virtual/net/eth0", net.join("eth0"));
        write(
            base,
            "proc/1/net/snmp",
            &SNMP
                .replace("1 -1 5 100", &format!("1 -1 {retrans} 100"))
                .replace("10 0 0", &format!("10 {rcvbuf} {rcvbuf}")),
        );
        write(
            base,
            "proc/1/net/netstat",
            "TcpExt: SyncookiesSent TCPLostRetransmit\nTcpExt: 0 2\n",
        );
        let _ = std::os::unix::fs::symlink("1", base.join("proc/self"));
        let _ = std::os::unix::fs::symlink("self/net", base.join("proc/net"));
    }

    #[test]
    fn snapshot_and_delta_on_a_fixture_tree() {
        let d = tempfile::tempdir().unwrap();
        let spec = CounterSpec {
            rdma: Some(("mlx5_0".into(), 1)),
            netdev: Some("eth0".into()),
            host: true,
        };
        tree(d.path(), 1000, 4, 500, 5, 0);
        let root = Root::at(d.path());
        let before = snapshot(&root, &spec);
        assert!(before.missing.is_empty(), "{:?}", before.missing);
        assert_eq!(before.groups.len(), 5);
        let hw = &before.groups[1];
        assert_eq!(hw.source, CounterSource::RdmaHw);
        assert!(!hw.values.contains_key("lifespan") && !hw.values.contains_key("garbage"));
        let snmp = &before.groups[3];
        assert_eq!(snmp.values["Tcp.RetransSegs"], 5);
        assert!(!snmp.values.contains_key("Tcp.MaxConn"), "-1 is a setting");
        assert!(!snmp.values.contains_key("Tcp.RtoAlgorithm"), "a setting");
        assert!(!snmp.values.contains_key("Ip.DefaultTTL"), "a setting");

        // The run: 250 words sent, 3 out-of-sequence, 9000 bytes received, 2 retransmits, UDP
        // buffer overflows; symbol_error and rx_dropped unchanged.
        tree(d.path(), 1250, 7, 9500, 7, 4);
        let after = snapshot(&root, &spec);
        let ds = delta(&before, &after);
        let by = |s: CounterSource| ds.iter().find(|x| x.source == s).unwrap();
        let port = by(CounterSource::RdmaPort);
        assert_eq!(port.subject, "mlx5_0 port 1");
        assert_eq!(port.deltas.len(), 1);
        assert_eq!(port.deltas["port_xmit_data"], 250);
        assert_eq!(port.units["port_xmit_data"], Unit::FourByteWords);
        assert_eq!(port.bytes("port_xmit_data"), Some(1000));
        assert_eq!(by(CounterSource::RdmaHw).deltas["out_of_sequence"], 3);
        let nd = by(CounterSource::Netdev);
        assert_eq!(nd.deltas.len(), 1);
        assert_eq!(nd.bytes("rx_bytes"), Some(9000));
        assert_eq!(by(CounterSource::Snmp).deltas["Tcp.RetransSegs"], 2);
        assert_eq!(by(CounterSource::Snmp).deltas["Udp.RcvbufErrors"], 4);
        assert!(
            ds.iter().all(|x| x.source != CounterSource::Netstat),
            "unchanged"
        );
        assert!(port
            .path
            .ends_with("sys/class/infiniband/mlx5_0/ports/1/counters"));

        // A counter that went down is reported as reset, not as a huge delta.
        tree(d.path(), 10, 7, 9500, 7, 4);
        let ds = delta(&after, &snapshot(&root, &spec));
        assert_eq!(ds.len(), 1);
        assert_eq!(ds[0].reset, vec!["port_xmit_data".to_string()]);
        assert!(ds[0].deltas.is_empty());
    }

    #[test]
    fn missing_sources_are_named_and_names_cannot_escape() {
        let d = tempfile::tempdir().unwrap();
        let root = Root::at(d.path());
        let s = snapshot(
            &root,
            &CounterSpec {
                rdma: Some(("mlx5_9".into(), 1)),
                netdev: Some("../../../etc".into()),
                host: true,
            },
        );
        assert!(s.groups.is_empty());
        assert_eq!(s.missing.len(), 4, "{:?}", s.missing);
        assert!(s.missing[0].contains("mlx5_9/ports/1/counters"));
    }

    #[test]
    fn proc_net_parser_pairs_lines_and_skips_garbage() {
        let m = parse_proc_net(SNMP);
        assert_eq!(m["Ip.InReceives"], 1000);
        assert_eq!(m["Udp.InDatagrams"], 10);
        for bad in [
            "",
            "Tcp:",
            "Tcp: A B\nUdp: 1 2\n",
            "x\ny\nz",
            "Tcp: A\nTcp: 1 2 3\n",
        ] {
            let m = parse_proc_net(bad);
            assert!(m.len() <= 1, "{bad:?}: {m:?}");
        }
    }

    #[test]
    fn live_host_counters_read() {
        let s = snapshot(
            &Root::live(),
            &CounterSpec {
                rdma: None,
                netdev: Some("lo".into()),
                host: true,
            },
        );
        let snmp = s
            .groups
            .iter()
            .find(|g| g.source == CounterSource::Snmp)
            .expect("/proc/net/snmp");
        assert!(snmp.values.contains_key("Tcp.OutSegs"), "{:?}", snmp.values);
        assert!(s
            .groups
            .iter()
            .any(|g| g.source == CounterSource::Netdev && g.values.contains_key("rx_bytes")));
        // Loopback's driver keeps no ethtool statistics: no group, and nothing missing.
        assert!(s.missing.is_empty(), "{:?}", s.missing);
        assert!(s.groups.iter().all(|g| g.source != CounterSource::Ethtool));
        // An interface that is not there is named as missing, in both of its sources.
        let s = snapshot(
            &Root::live(),
            &CounterSpec {
                rdma: None,
                netdev: Some("fabperf-none0".into()),
                host: false,
            },
        );
        assert_eq!(s.missing.len(), 2, "{:?}", s.missing);
        assert!(s.missing[1].starts_with("SIOCETHTOOL fabperf-none0: no such interface"));
    }
}
