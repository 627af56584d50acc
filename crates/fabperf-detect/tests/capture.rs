//! A capture of this machine round-trips: `--capture DIR` then `--root DIR` gives the same
//! inventory as the live run.

use fabperf_detect::capture::{capture, CaptureError};
use fabperf_detect::{detect_live, detect_root, DetectOptions, Inventory, Source};
use std::fs;
use std::path::Path;

fn normalized(mut i: Inventory) -> Inventory {
    i.source = Source {
        mode: String::new(),
        root: String::new(),
        addresses: String::new(),
    };
    i
}

fn symlinks_stay_inside(dir: &Path, top: &Path) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let md = fs::symlink_metadata(&p).unwrap();
        if md.file_type().is_symlink() {
            let t = fs::read_link(&p).unwrap();
            assert!(t.is_relative(), "{} -> {}", p.display(), t.display());
            if let Ok(real) = fs::canonicalize(&p) {
                assert!(
                    real.starts_with(top),
                    "{} escapes to {}",
                    p.display(),
                    real.display()
                );
            }
        } else if md.is_dir() {
            symlinks_stay_inside(&p, top);
        }
    }
}

#[test]
fn capture_of_this_host_round_trips() {
    let opts = DetectOptions::default();
    // Other processes may add or remove interfaces meanwhile: retry until the host holds
    // still across the capture (it is compared with the live runs right before and after).
    for _attempt in 0..10 {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("capture");
        let before = normalized(detect_live(&opts).unwrap());
        let rep = capture(&dir, &opts).unwrap();
        let after = normalized(detect_live(&opts).unwrap());
        if before != after || normalized(rep.inventory.clone()) != before {
            continue;
        }
        let back = detect_root(&dir, &opts).unwrap();
        assert_eq!(back.source.mode, "snapshot");
        assert_eq!(
            normalized(back),
            before,
            "snapshot read differs from the live run"
        );

        for f in [
            "ip-addr.json",
            "ip-route.json",
            "fabperf-tc.json",
            "fabperf-userspace.json",
            "detect.json",
            "doctor.json",
            "fabperf-capture.json",
        ] {
            assert!(dir.join(f).is_file(), "{f} missing");
        }
        assert!(dir.join("sys/class/net").is_dir());
        assert!(dir.join("proc/sys/kernel/hostname").is_file());
        assert!(rep.files > 5);
        // detect.json is the live inventory and loads back.
        let saved = Inventory::from_json_file(dir.join("detect.json")).unwrap();
        assert_eq!(normalized(saved), before);
        // The bundle is self-contained: every link is relative and stays inside it.
        let top = fs::canonicalize(&dir).unwrap();
        symlinks_stay_inside(&top, &top);
        return;
    }
    panic!("the host's interfaces kept changing during 10 capture attempts");
}

#[test]
fn capture_refuses_a_non_empty_directory() {
    let tmp = tempfile::tempdir().unwrap();
    fs::write(tmp.path().join("keep.txt"), "precious").unwrap();
    let e = capture(tmp.path(), &DetectOptions::default()).unwrap_err();
    assert!(matches!(e, CaptureError::NotEmpty(_)));
    assert_eq!(
        fs::read_to_string(tmp.path().join("keep.txt")).unwrap(),
        "precious"
    );
}

#[test]
fn capture_with_a_bad_node_ip_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cap");
    let opts = DetectOptions {
        node_ip: Some("198.51.100.254".parse().unwrap()),
    };
    let e = capture(&dir, &opts).unwrap_err();
    assert!(matches!(e, CaptureError::Detect(_)), "{e}");
    assert!(!dir.exists());
}

#[test]
fn live_detect_reports_this_host() {
    let i = detect_live(&DetectOptions::default()).unwrap();
    assert_eq!(i.source.mode, "live");
    assert_eq!(i.source.addresses, "netlink");
    assert!(i.netdev("lo").is_some_and(|n| n.kind == "loopback"));
    assert!(i.memlock.is_some());
    if !Path::new("/sys/class/infiniband").exists() {
        assert!(!i.rdma_available);
        assert!(i
            .rdma_note
            .as_deref()
            .is_some_and(|n| n.starts_with("no RDMA devices")));
    }
}

/// Netlink and `ip -j` agree on this host (when iproute2 is installed).
#[test]
fn netlink_matches_iproute2() {
    let run = |args: &[&str]| {
        std::process::Command::new("ip")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).to_string())
    };
    for _attempt in 0..10 {
        let (Some(a1), Some(r1)) = (
            run(&["-j", "addr", "show"]),
            run(&["-j", "route", "show", "table", "main"]),
        ) else {
            eprintln!("iproute2 not installed: nothing to compare");
            return;
        };
        let live = fabperf_detect::ipstate::IpState::live().unwrap();
        let a2 = run(&["-j", "addr", "show"]).unwrap();
        let r2 = run(&["-j", "route", "show", "table", "main"]).unwrap();
        if a1 != a2 || r1 != r2 {
            continue;
        }
        let addrs = fabperf_detect::ipstate::parse_addr_json(&a1).unwrap();
        let routes = fabperf_detect::ipstate::parse_route_json(&r1).unwrap();
        let mut x = addrs.clone();
        let mut y = live.addrs.clone();
        x.sort();
        y.sort();
        assert_eq!(x, y);
        assert_eq!(routes, live.routes);
        return;
    }
    panic!("addresses kept changing");
}
