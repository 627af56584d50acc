//! The tuner against a real network namespace (root only; skipped with the
//! reason otherwise): apply, read back, restore; a tuner that dies without
//! restoring is undone by the next one; hostile journals block tuning.
//! Each test runs in a thread of its own that unshares its network
//! namespace, so the host's settings are never touched.

use fabperf_tune::journal::{self, Paths};
use fabperf_tune::{parse_profile, policy, sysctl, Allow, PolicySpec, Tuner};
use std::net::IpAddr;
use std::process::Command;

fn root() -> bool {
    rustix::process::geteuid().is_root()
}

fn sh(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Run `f` in a thread with a fresh network namespace holding a veth pair
/// va (10.99.0.1/24) <-> vb (10.99.0.2/24).
fn in_netns(f: impl FnOnce() + Send + 'static) {
    std::thread::spawn(move || {
        // SAFETY: unsharing the network namespace affects this thread
        // only; no memory is involved.
        let rc = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(
            rc,
            0,
            "unshare(CLONE_NEWNET): {}",
            std::io::Error::last_os_error()
        );
        sh(&["ip", "link", "set", "lo", "up"]);
        sh(&[
            "ip", "link", "add", "va", "type", "veth", "peer", "name", "vb",
        ]);
        sh(&["ip", "addr", "add", "10.99.0.1/24", "dev", "va"]);
        sh(&["ip", "addr", "add", "10.99.0.2/24", "dev", "vb"]);
        sh(&["ip", "link", "set", "va", "up"]);
        sh(&["ip", "link", "set", "vb", "up"]);
        f()
    })
    .join()
    .expect("the namespace thread panicked");
}

const PROFILE: &str = r#"
name = "netns-test"
outside = ["vm.swappiness = 10"]
[sysctl]
net.ipv4.tcp_rmem = "4096 87380 16777216"
net.ipv4.tcp_fin_timeout = 21
net.core.somaxconn = ">4097"
net.core.busy_poll = 50
[nic]
gro = true
tso = false
lro = true
rings = { rx = 512 }
channels = { rx = 2, tx = 2 }
[link]
mtu = 4000
[irq]
cpus = "all"
"#;

fn snapshot() -> Vec<String> {
    let mut v: Vec<String> = [
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_fin_timeout",
        "net.core.somaxconn",
    ]
    .iter()
    .map(|n| sysctl::read(n).unwrap())
    .collect();
    let l = fabperf_tune::link::link_by_name("va").unwrap();
    v.push(format!("mtu {}", l.mtu));
    let mut et = fabperf_tune::ethtool::Ethtool::open().unwrap();
    let f = et.features(l.index).unwrap();
    v.push(format!(
        "gro {} tso {}",
        f.active.contains("rx-gro"),
        f.active.contains("tx-tcp-segmentation")
    ));
    let c = et.channels(l.index).unwrap();
    v.push(format!("channels {:?} {:?}", c.rx, c.tx));
    v.push(format!("rules {}", policy::rule_count().unwrap_or(0)));
    v
}

fn skip_unless_root() -> bool {
    if !root() {
        eprintln!("skipped: the namespace tests need root (unshare, ip link, nft)");
        return true;
    }
    false
}

#[test]
fn apply_reports_every_setting_and_restore_puts_all_back() {
    if skip_unless_root() {
        return;
    }
    in_netns(|| {
        let dir = tempfile::tempdir().unwrap();
        let before = snapshot();
        let tuner = Tuner::new(dir.path().to_path_buf(), Allow::all());
        let p = parse_profile(PROFILE, "p.toml").unwrap();
        let addr: IpAddr = "10.99.0.1".parse().unwrap();
        let spec = PolicySpec {
            rules: 5,
            conntrack: false,
        };
        let have_nft = policy::nft_binary().is_some();
        let r = tuner
            .apply(Some(&p), have_nft.then_some(&spec), addr, 5301)
            .unwrap();
        assert_eq!(r.interface.as_deref(), Some("va"));
        let by = |s: &str| {
            r.items
                .iter()
                .find(|i| i.setting == s)
                .unwrap_or_else(|| panic!("no item {s}: {r:#?}"))
        };
        assert!(by("net.ipv4.tcp_rmem").outcome.took_effect());
        assert!(by("va/mtu").outcome.took_effect());
        assert!(by("va/channels").outcome.took_effect(), "{r:#?}");
        // Host-wide in a namespace, fixed by the driver, unsupported, no
        // IRQs: each reported, none silent.
        let w = r.warnings("node-x").join("\n");
        for want in [
            "net.core.busy_poll = 50 not applied, not available",
            "va/lro = on not applied, not available",
            "va/rings",
            "va/irq-affinity",
            "not applied by fabperf (outside net.* sysctls, NIC, MTU, IRQ): vm.swappiness = 10",
        ] {
            assert!(w.contains(want), "missing {want:?} in:\n{w}");
        }
        let during = snapshot();
        assert_ne!(during, before);
        assert_eq!(sysctl::read("net.ipv4.tcp_fin_timeout").unwrap(), "21");
        assert_eq!(fabperf_tune::link::link_by_name("va").unwrap().mtu, 4000);
        if have_nft {
            assert_eq!(policy::rule_count().unwrap(), 5);
        }
        let paths = Paths::for_netns(dir.path(), journal::netns_identity().0);
        assert!(journal::read(&paths).unwrap().is_some(), "journal written");
        let rr = tuner.restore().unwrap();
        assert!(rr.ok(), "{rr:?}");
        assert_eq!(snapshot(), before);
        assert!(journal::read(&paths).unwrap().is_none(), "journal removed");
        assert!(tuner.restore().is_none());
    });
}

#[test]
fn a_tuner_that_dies_is_undone_by_the_next() {
    if skip_unless_root() {
        return;
    }
    in_netns(|| {
        let dir = tempfile::tempdir().unwrap();
        let before = snapshot();
        let p = parse_profile(PROFILE, "p.toml").unwrap();
        let addr: IpAddr = "10.99.0.1".parse().unwrap();
        {
            let t = Tuner::new(dir.path().to_path_buf(), Allow::all());
            t.apply(Some(&p), None, addr, 5301).unwrap();
            // Dropped without restore: as if killed (its lock goes with it).
        }
        assert_ne!(snapshot(), before);
        let t2 = Tuner::new(dir.path().to_path_buf(), Allow::all());
        let log = t2.recover().join("\n");
        assert!(
            log.contains("restored the settings of profile netns-test"),
            "{log}"
        );
        assert_eq!(snapshot(), before);
        // A live holder's journal is left alone.
        let t3 = Tuner::new(dir.path().to_path_buf(), Allow::all());
        t3.apply(Some(&p), None, addr, 5301).unwrap();
        let t4 = Tuner::new(dir.path().to_path_buf(), Allow::all());
        assert!(t4
            .recover()
            .join("")
            .contains("another fabperf agent holds"));
        let e = t4.apply(Some(&p), None, addr, 5301).unwrap_err();
        assert!(e.to_string().contains("another fabperf agent"), "{e}");
        t3.restore().unwrap();
        assert_eq!(snapshot(), before);
    });
}

#[test]
fn a_corrupt_journal_blocks_tuning_and_touches_nothing() {
    if skip_unless_root() {
        return;
    }
    in_netns(|| {
        let dir = tempfile::tempdir().unwrap();
        let before = snapshot();
        let paths = Paths::for_netns(dir.path(), journal::netns_identity().0);
        journal::check_dir(&paths.dir, true).unwrap();
        std::fs::write(&paths.journal, b"{\"version\": 1, \"entries\": [oops").unwrap();
        std::fs::set_permissions(
            &paths.journal,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
        let t = Tuner::new(dir.path().to_path_buf(), Allow::all());
        let log = t.recover().join("\n");
        assert!(
            log.contains("corrupt") && log.contains("--discard"),
            "{log}"
        );
        let p = parse_profile(PROFILE, "p.toml").unwrap();
        let e = t
            .apply(Some(&p), None, "10.99.0.1".parse().unwrap(), 5301)
            .unwrap_err();
        assert!(e.to_string().contains("nothing changed"), "{e}");
        assert_eq!(snapshot(), before);
        // `fabperf tune restore` refuses it, --discard moves it aside.
        let e = fabperf_tune::tuner::restore_from_state(dir.path(), false).unwrap_err();
        assert!(e.contains("corrupt"), "{e}");
        let ok = fabperf_tune::tuner::restore_from_state(dir.path(), true).unwrap();
        assert!(ok.contains("moved aside"), "{ok}");
        assert!(journal::read(&paths).unwrap().is_none());
    });
}

#[test]
fn an_agent_that_may_not_tune_says_so_for_each_setting() {
    if skip_unless_root() {
        return;
    }
    in_netns(|| {
        let dir = tempfile::tempdir().unwrap();
        let before = snapshot();
        let t = Tuner::new(dir.path().to_path_buf(), Allow::parse("mtu").unwrap());
        let p = parse_profile(PROFILE, "p.toml").unwrap();
        let r = t
            .apply(Some(&p), None, "10.99.0.1".parse().unwrap(), 5301)
            .unwrap();
        let w = r.warnings("n").join("\n");
        assert!(
            w.contains("net.ipv4.tcp_rmem = 4096 87380 16777216 not applied, not allowed"),
            "{w}"
        );
        assert!(w.contains("--allow-tune including sysctl"), "{w}");
        assert!(w.contains("va/gro = on not applied, not allowed"), "{w}");
        assert!(r
            .items
            .iter()
            .any(|i| i.setting == "va/mtu" && i.outcome.took_effect()));
        t.restore().unwrap();
        assert_eq!(snapshot(), before);
        // Policy rules that may not be installed fail the request: the
        // rule count is the measurement.
        let e = t
            .apply(
                None,
                Some(&PolicySpec {
                    rules: 3,
                    conntrack: false,
                }),
                "10.99.0.1".parse().unwrap(),
                5301,
            )
            .unwrap_err();
        assert!(
            e.to_string().contains("--allow-tune including policy"),
            "{e}"
        );
    });
}

/// A journal whose boot id or namespace cookie is not this one's: its
/// settings went with the boot (or namespace). `fabperf tune restore` and
/// `apply` set it aside as the agent's start-up recovery does; nothing of
/// it is written into this namespace.
#[test]
fn journals_of_another_boot_or_namespace_are_set_aside_not_restored() {
    if skip_unless_root() {
        return;
    }
    in_netns(|| {
        let dir = tempfile::tempdir().unwrap();
        let (ino, cookie) = journal::netns_identity();
        let paths = Paths::for_netns(dir.path(), ino);
        let before = sysctl::read("net.core.somaxconn").unwrap();
        assert_ne!(before, "1234");
        let stale = journal::Journal {
            version: journal::JOURNAL_VERSION,
            netns: ino,
            netns_cookie: cookie,
            boot_id: "00000000-0000-0000-0000-000000000000".into(),
            pid: 1,
            created_at: "2020-01-01T00:00:00Z".into(),
            what: "profile stale".into(),
            entries: vec![journal::Saved::Sysctl {
                name: "net.core.somaxconn".into(),
                previous: "1234".into(),
            }],
        };
        journal::write(&paths, &stale).unwrap();
        let out = fabperf_tune::tuner::restore_from_state(dir.path(), false).unwrap();
        assert!(
            out.contains("earlier boot") && out.contains("kept as"),
            "{out}"
        );
        assert_eq!(sysctl::read("net.core.somaxconn").unwrap(), before);
        assert!(journal::read(&paths).unwrap().is_none(), "set aside");
        // This boot, but another namespace's cookie (an inode reused).
        let other_ns = journal::Journal {
            boot_id: journal::boot_id(),
            netns_cookie: Some(cookie.unwrap_or(0).wrapping_add(1)),
            ..stale.clone()
        };
        if cookie.is_some() {
            journal::write(&paths, &other_ns).unwrap();
            let t = Tuner::new(dir.path().to_path_buf(), Allow::all());
            let p = parse_profile(
                "name = \"fin\"\n[sysctl]\nnet.ipv4.tcp_fin_timeout = 22\n",
                "p.toml",
            )
            .unwrap();
            let r = t
                .apply(Some(&p), None, "10.99.0.1".parse().unwrap(), 5301)
                .unwrap();
            assert!(
                r.notes.iter().any(|n| n.contains("no longer exists")),
                "{:?}",
                r.notes
            );
            assert_eq!(sysctl::read("net.core.somaxconn").unwrap(), before);
            assert!(t.restore().unwrap().ok());
        }
        let kept = std::fs::read_dir(dir.path().join("tune"))
            .unwrap()
            .flatten()
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.contains(".earlier-boot-") || n.contains(".gone-netns-")
            })
            .count();
        assert_eq!(kept, if cookie.is_some() { 2 } else { 1 });
    });
}
