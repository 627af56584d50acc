//! cni-bench against Debian's containernetworking-plugins (/usr/lib/cni) and
//! against fake plugins that fail the ways real ones do. Needs root (network
//! namespaces); as another user these tests say so and return.

use fabperf_cnibench::{bench_chain, conf, Options, Quiet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const DEBIAN_CNI: &str = "/usr/lib/cni";

/// The root tests share /run/netns and host links: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn root() -> bool {
    let r = rustix::process::geteuid().is_root();
    if !r {
        eprintln!("skipped: needs root for network namespaces");
    }
    r
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fabperf-cnibench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn opts(cni_path: Vec<PathBuf>, n: u32) -> Options {
    Options {
        cni_path,
        iterations: n,
        warmup: 1,
        ifname: "eth0".into(),
        timeout: Duration::from_secs(20),
    }
}

fn chain(text: &str) -> fabperf_cnibench::Chain {
    conf::parse_network(text, "test.conflist").unwrap()
}

/// Debian's plugins must be there when the tests run as root (CI installs
/// containernetworking-plugins).
fn debian_plugins() -> PathBuf {
    let p = PathBuf::from(DEBIAN_CNI);
    for b in ["bridge", "host-local", "macvlan", "host-device", "tuning"] {
        assert!(
            p.join(b).exists(),
            "{DEBIAN_CNI}/{b} missing: apt-get install containernetworking-plugins (ci/install-deps.sh)"
        );
    }
    p
}

fn ip(args: &[&str]) {
    let s = Command::new("ip").args(args).status().unwrap();
    assert!(s.success(), "ip {args:?}");
}

#[test]
fn bridge_host_local_tuning_chain() {
    if !root() {
        return;
    }
    let _g = serial();
    let d = tmpdir("bridge");
    let c = chain(&format!(
        r#"{{"cniVersion":"1.0.0","name":"fpcb-br","plugins":[
            {{"type":"bridge","bridge":"fpcbbr0","isGateway":true,
              "ipam":{{"type":"host-local","subnet":"10.213.7.0/24","dataDir":"{}"}}}},
            {{"type":"tuning","sysctl":{{"net.ipv4.conf.eth0.rp_filter":"0"}}}}]}}"#,
        d.join("ipam").display()
    ));
    let r = bench_chain(&c, &opts(vec![debian_plugins()], 5), &mut Quiet);
    let _ = Command::new("ip").args(["link", "del", "fpcbbr0"]).status();
    let [add, del] = r.unwrap();
    assert_eq!((add.op.as_str(), del.op.as_str()), ("add", "del"));
    assert_eq!(add.iterations, 5);
    assert_eq!(add.plugins, "bridge+host-local, tuning");
    let l = add.lat_us.unwrap();
    assert!(l.min > 0.0 && l.min <= l.p50 && l.p50 <= l.max, "{l:?}");
    // Every lease was released by DEL (host-local keeps one file per address).
    let leases: Vec<_> = std::fs::read_dir(d.join("ipam/fpcb-br"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("10.213.7."))
        .collect();
    assert!(leases.is_empty(), "leases left: {leases:?}");
    // No sandbox namespace left behind.
    let left = std::fs::read_dir("/run/netns")
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with(&format!("fabperf-cnibench-{}-", std::process::id()))
                })
                .count()
        })
        .unwrap_or(0);
    assert_eq!(left, 0);
}

#[test]
fn macvlan_and_host_device_on_a_veth_nic() {
    if !root() {
        return;
    }
    let _g = serial();
    let plugins = debian_plugins();
    let d = tmpdir("macvlan");
    // A veth pair stands in for the NIC (no dummy module needed).
    let dummy = format!("fpcbd{}", std::process::id() % 100000);
    let peer = format!("fpcbp{}", std::process::id() % 100000);
    ip(&["link", "add", &dummy, "type", "veth", "peer", "name", &peer]);
    ip(&["link", "set", &dummy, "up"]);
    ip(&["link", "set", &peer, "up"]);
    let mac = chain(&format!(
        r#"{{"cniVersion":"0.4.0","name":"fpcb-mv","type":"macvlan","master":"{dummy}","mode":"bridge",
            "ipam":{{"type":"host-local","subnet":"10.213.8.0/24","dataDir":"{}"}}}}"#,
        d.join("ipam").display()
    ));
    let r1 = bench_chain(&mac, &opts(vec![plugins.clone()], 3), &mut Quiet);
    let hd = chain(&format!(
        r#"{{"cniVersion":"0.4.0","name":"fpcb-hd","type":"host-device","device":"{dummy}",
            "ipam":{{"type":"host-local","subnet":"10.213.9.0/24","dataDir":"{}"}}}}"#,
        d.join("ipam").display()
    ));
    let r2 = bench_chain(&hd, &opts(vec![plugins], 3), &mut Quiet);
    // host-device gives the NIC back to the host on DEL.
    let back = Command::new("ip")
        .args(["link", "show", &dummy])
        .output()
        .unwrap()
        .status
        .success();
    let _ = Command::new("ip").args(["link", "del", &dummy]).status();
    assert_eq!(r1.unwrap()[0].iterations, 3);
    assert_eq!(r2.unwrap()[1].iterations, 3);
    assert!(back, "host-device did not return {dummy} to the host");
}

/// A fake plugin directory holding `name` with the given shell body.
fn fake(dir: &Path, name: &str, body: &str) {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

const OK_RESULT: &str = r#"cat >/dev/null; if [ "$CNI_COMMAND" = ADD ]; then echo '{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}],"ips":[]}'; fi"#;

fn err_of(c: &str, d: &Path, timeout: Duration) -> String {
    let mut o = opts(vec![d.to_path_buf()], 2);
    o.timeout = timeout;
    let e = bench_chain(&chain(c), &o, &mut Quiet).unwrap_err();
    format!("{e:#}")
}

#[test]
fn bad_plugins_give_clear_errors() {
    if !root() {
        return;
    }
    let _g = serial();
    let d = tmpdir("fake");
    fake(&d, "ok", OK_RESULT);
    // The CNI error object on stdout, non-zero exit, terminal escapes in it.
    fake(
        &d,
        "errjson",
        r#"cat >/dev/null; printf '{"cniVersion":"1.0.0","code":11,"msg":"no addresses\u001b[31m","details":"pool fpcb exhausted"}'; exit 1"#,
    );
    fake(
        &d,
        "crash",
        "cat >/dev/null; echo 'panic: boom' >&2; exit 2",
    );
    fake(&d, "garbage", "cat >/dev/null; echo 'not json'; exit 0");
    fake(&d, "hang", "exec sleep 30");
    fake(&d, "hangkids", "sleep 30 & sleep 30; echo '{}'");
    let conf = |t: &str| {
        format!(
            r#"{{"cniVersion":"1.0.0","name":"fpcb","plugins":[{{"type":"ok"}},{{"type":"{t}"}}]}}"#
        )
    };

    let e = err_of(&conf("errjson"), &d, Duration::from_secs(10));
    assert!(
        e.contains("errjson ADD failed: CNI error 11: no addresses\\x1b[31m (pool fpcb exhausted)"),
        "{e}"
    );
    let e = err_of(&conf("crash"), &d, Duration::from_secs(10));
    assert!(
        e.contains("crash ADD failed") && e.contains("panic: boom"),
        "{e}"
    );
    let e = err_of(&conf("garbage"), &d, Duration::from_secs(10));
    assert!(e.contains("not a CNI result"), "{e}");
    for hang in ["hang", "hangkids"] {
        let t0 = Instant::now();
        let e = err_of(&conf(hang), &d, Duration::from_millis(500));
        assert!(
            e.contains(&format!("{hang} ADD did not finish within 0.5 s")),
            "{e}"
        );
        // ADD timed out, then the cleanup DELs of both plugins (the hung one
        // times out again): well under the plugin's own 30 s.
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    }
    let e = err_of(&conf("no-such-plugin"), &d, Duration::from_secs(10));
    assert!(e.contains("\"no-such-plugin\" not found in"), "{e}");
    // A missing IPAM plugin is found before anything runs.
    let e = err_of(
        r#"{"cniVersion":"1.0.0","name":"fpcb","type":"ok","ipam":{"type":"no-ipam"}}"#,
        &d,
        Duration::from_secs(10),
    );
    assert!(e.contains("\"no-ipam\" not found"), "{e}");
    // A good fake chain works end to end.
    let r = bench_chain(&chain(&conf("ok")), &opts(vec![d.clone()], 3), &mut Quiet).unwrap();
    assert_eq!(r[0].iterations, 3);
}

#[test]
fn a_plugin_that_leaves_its_output_open_is_bounded_by_the_timeout() {
    if !root() {
        return;
    }
    let _g = serial();
    let d = tmpdir("linger");
    fake(&d, "ok", OK_RESULT);
    // Exits at once with a result, leaving a child that holds its stdout:
    // one in its process group, one that left it (setsid) and says its pid.
    let pids = d.join("pids");
    fake(
        &d,
        "lingers",
        &format!(
            r#"cat >/dev/null; sleep 30 & (setsid sh -c 'echo $$ >> {}; exec sleep 30' &); echo '{{"cniVersion":"1.0.0"}}'"#,
            pids.display()
        ),
    );
    let conf =
        r#"{"cniVersion":"1.0.0","name":"fpcb","plugins":[{"type":"ok"},{"type":"lingers"}]}"#;
    let t0 = Instant::now();
    let e = err_of(conf, &d, Duration::from_millis(700));
    let took = t0.elapsed();
    // Kill what left the group (by the pid it wrote), before asserting.
    if let Ok(text) = std::fs::read_to_string(&pids) {
        for p in text.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            if let Some(pid) = rustix::process::Pid::from_raw(p) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
    }
    assert!(
        e.contains("lingers ADD exited, but a process it started still held its output"),
        "{e}"
    );
    // ADD and the cleanup DELs, each bounded by the 0.7 s timeout.
    assert!(took < Duration::from_secs(8), "{took:?}");
}
