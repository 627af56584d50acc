//! The policy-scale model: N allow rules in a per-pod chain, installed with
//! Debian's nftables userspace (`nft`) the way an iptables- or
//! nftables-mode policy controller (kube-router, Calico in iptables mode)
//! programs NetworkPolicies: traffic to the pod jumps to the pod's chain,
//! which holds one allow rule per admitted peer; the peers under test match
//! the last rule, so every packet to the agent walks all N rules. With
//! `conntrack`, established flows are accepted before the rules, as those
//! controllers' chains do, and only new connections walk them.
//!
//! This models rule count in the netfilter data path of the agent's
//! network namespace; it is not any CNI's eBPF datapath.

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;
use wait_timeout::ChildExt;

/// The nftables table fabperf owns.
pub const TABLE: &str = "fabperf_policy";
/// Most rules per pod chain.
pub const MAX_RULES: u32 = 10_000;

/// How many rules, and whether established flows skip them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    pub rules: u32,
    #[serde(default)]
    pub conntrack: bool,
}

impl PolicySpec {
    pub fn validate(&self) -> Result<(), String> {
        if self.rules > MAX_RULES {
            return Err(format!("{} policy rules: at most {MAX_RULES}", self.rules));
        }
        Ok(())
    }
}

/// A source address that never occurs: the peers of the first N-1 rules
/// (RFC 2544's benchmark range 198.19.0.0/16, or 2001:db8:fab::/64).
fn unused_peer(i: u32, v6: bool) -> String {
    if v6 {
        format!("2001:db8:fab::{:x}", i + 1)
    } else {
        format!("198.19.{}.{}", (i + 1) >> 8, (i + 1) & 0xff)
    }
}

/// The nftables ruleset for a pod at `addr` whose agent listens on `port`.
pub fn ruleset(spec: &PolicySpec, addr: IpAddr, port: u16) -> String {
    let v6 = addr.is_ipv6();
    let fam = if v6 { "ip6" } else { "ip" };
    let mut s = String::new();
    // Create-then-delete makes the load idempotent (a leftover table goes).
    s.push_str(&format!("table inet {TABLE}\ndelete table inet {TABLE}\n"));
    s.push_str(&format!("table inet {TABLE} {{\n"));
    s.push_str("  chain ingress {\n    type filter hook input priority filter; policy accept;\n");
    s.push_str(&format!("    {fam} daddr {addr} jump pod\n  }}\n"));
    s.push_str("  chain pod {\n");
    if spec.conntrack {
        s.push_str("    ct state established,related accept\n");
    }
    for i in 0..spec.rules.saturating_sub(1) {
        s.push_str(&format!(
            "    {fam} saddr {} meta l4proto {{ tcp, udp }} th dport {port} accept\n",
            unused_peer(i, v6)
        ));
    }
    if spec.rules > 0 {
        s.push_str(&format!(
            "    accept comment \"fabperf policy {}: the peers under test\"\n",
            spec.rules
        ));
    }
    s.push_str("  }\n}\n");
    s
}

/// The `nft` binary (Debian package nftables).
pub fn nft_binary() -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/sbin", "/usr/bin"].map(PathBuf::from));
    dirs.into_iter()
        .map(|d| d.join("nft"))
        .find(|p| p.is_file())
}

fn run_nft(args: &[&str], stdin: Option<&str>) -> Result<String, String> {
    let nft = nft_binary().ok_or_else(|| {
        "nft is not installed (Debian package nftables); the policy-rule model needs it".to_string()
    })?;
    let mut child = Command::new(&nft)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("running {}: {}", nft.display(), crate::os_text(&e)))?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())
            .map_err(|e| format!("feeding nft: {}", crate::os_text(&e)))?;
    }
    // Bounded: a wedged nft is killed.
    match child.wait_timeout(Duration::from_secs(60)) {
        Ok(Some(_)) => {}
        Ok(None) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err("nft did not finish within 60 s and was killed".into());
        }
        Err(e) => return Err(format!("waiting for nft: {e}")),
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("waiting for nft: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        let err = String::from_utf8_lossy(&out.stderr);
        Err(format!(
            "nft failed ({}): {}",
            out.status,
            crate::clip(err.lines().next().unwrap_or("").trim())
        ))
    }
}

/// Install the rules (replacing fabperf's table if it is there).
pub fn install(spec: &PolicySpec, addr: IpAddr, port: u16) -> Result<(), String> {
    spec.validate()?;
    run_nft(&["-f", "-"], Some(&ruleset(spec, addr, port))).map(|_| ())
}

/// Whether fabperf's table exists in this network namespace.
pub fn table_exists() -> Result<bool, String> {
    let out = run_nft(&["list", "tables"], None)?;
    Ok(out
        .lines()
        .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["table", "inet", TABLE]))
}

/// Remove fabperf's table (nothing when it is not there).
pub fn remove() -> Result<(), String> {
    if table_exists()? {
        run_nft(&["delete", "table", "inet", TABLE], None)?;
    }
    Ok(())
}

/// How many rules fabperf's pod chain holds (for checks).
pub fn rule_count() -> Result<usize, String> {
    if !table_exists()? {
        return Ok(0);
    }
    let out = run_nft(&["list", "chain", "inet", TABLE, "pod"], None)?;
    Ok(out.lines().filter(|l| l.contains("accept")).count())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ruleset_has_n_rules_and_the_last_admits_the_peers() {
        let r = ruleset(
            &PolicySpec {
                rules: 3,
                conntrack: false,
            },
            "198.18.1.2".parse().unwrap(),
            5301,
        );
        assert!(r.contains("ip daddr 198.18.1.2 jump pod"));
        assert_eq!(r.matches("th dport 5301 accept").count(), 2);
        assert!(r.contains("198.19.0.1 ") && r.contains("198.19.0.2 "));
        assert!(r.contains("fabperf policy 3"));
        assert!(!r.contains("ct state"));
        let r = ruleset(
            &PolicySpec {
                rules: 300,
                conntrack: true,
            },
            "fd00::2".parse().unwrap(),
            6000,
        );
        assert!(r.contains("ip6 daddr fd00::2 jump pod"));
        assert!(r.contains("ct state established,related accept"));
        assert!(r.contains("2001:db8:fab::12b "));
        let r = ruleset(
            &PolicySpec {
                rules: 0,
                conntrack: false,
            },
            "10.0.0.1".parse().unwrap(),
            1,
        );
        assert!(!r.contains("accept comment"));
        assert!(PolicySpec {
            rules: MAX_RULES + 1,
            conntrack: false
        }
        .validate()
        .is_err());
    }
}
