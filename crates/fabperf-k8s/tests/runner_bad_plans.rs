//! Bad `[runner]` tables fail with FILE:LINE:COL at what the user wrote,
//! including the problems only `fabperf run`'s own plan parser finds.

use fabperf_k8s::plan::{parse_plan, PlanErrors};
use std::path::{Path, PathBuf};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

const BASE: &str = r#"namespace = "fabperf"
image = "registry.example.com/fabperf:1"
paths = ["host", "pod", "service", "ipoib", "roce"]

[ipoib]
master = "ib0"
range = "192.168.150.0/24"

[roce]
netdev = "ens1f0np0"
range = "192.168.160.0/24"

[nodes]
names = ["node-a", "node-b"]

"#;

fn errs(text: &str) -> PlanErrors {
    parse_plan(text, "plan.toml", &examples()).expect_err("the plan must be rejected")
}

/// 1-based line and column (in characters) of the first `at` after BASE
/// in `text`.
fn pos(text: &str, at: &str) -> (usize, usize) {
    let from = if text.starts_with(BASE) {
        BASE.len()
    } else {
        0
    };
    let off = from
        + text[from..]
            .find(at)
            .unwrap_or_else(|| panic!("{at:?} not in the plan"));
    let before = &text[..off];
    (
        before.matches('\n').count() + 1,
        before.rsplit('\n').next().unwrap().chars().count() + 1,
    )
}

/// `runner` appended to BASE is rejected with exactly one problem, at the
/// first `at` in it, whose message holds `needle`.
fn one(runner: &str, at: &str, needle: &str) {
    let text = format!("{BASE}{runner}");
    let e = errs(&text);
    assert_eq!(
        e.0.len(),
        1,
        "expected one problem for {runner:?}, got: {e}"
    );
    let (line, col) = pos(&text, at);
    let e0 = &e.0[0];
    assert_eq!(
        (e0.file.as_str(), e0.line, e0.col),
        ("plan.toml", line, col),
        "{e0} (wanted at {at:?})"
    );
    assert!(e0.msg.contains(needle), "{e0} should mention {needle:?}");
    // The TOML reader's own messages (types, unknown keys) name the key.
    if !e0.msg.starts_with("invalid type") && !e0.msg.starts_with("unknown field") {
        assert!(e0.msg.starts_with("[runner] "), "{e0}");
    }
}

#[test]
fn base_with_default_runner_is_valid() {
    let p = parse_plan(BASE, "plan.toml", &examples()).unwrap();
    assert!(p.runner.is_some());
}

#[test]
fn schedule_and_time_zone() {
    one(
        "[runner]\nschedule = \"0 25 * * *\"\n",
        "\"0 25",
        "above the maximum 23",
    );
    one("[runner]\nschedule = \"0 3 * *\"\n", "\"0 3", "4 fields");
    one(
        "[runner]\nschedule = \"CRON_TZ=UTC 0 3 * * *\"\n",
        "\"CRON_TZ",
        "time_zone instead",
    );
    one(
        "[runner]\nschedule = \"@sometimes\"\n",
        "\"@some",
        "unknown descriptor",
    );
    one(
        "[runner]\ntime_zone = \"Etc/UTC\"\n",
        "\"Etc/UTC",
        "applies to a schedule",
    );
    one(
        "[runner]\nschedule = \"@daily\"\ntime_zone = \"Local\"\n",
        "\"Local",
        "explicit IANA zone",
    );
    one(
        "[runner]\nschedule = \"@daily\"\ntime_zone = \"../../etc/passwd\"\n",
        "\"../",
        "not an IANA zone name",
    );
    one("[runner]\nschedule = 5\n", "5", "invalid type");
}

#[test]
fn storage_and_exports() {
    one("[runner]\nstorage = \"disk\"\n", "\"disk", "\"emptyDir\"");
    one(
        "[runner]\nstorage_class = \"fast\"\n",
        "\"fast",
        "storage = \"pvc\" only",
    );
    one(
        "[runner]\nstorage = \"pvc\"\nstorage_class = \"Fast_SSD\"\n",
        "\"Fast_SSD",
        "StorageClass name",
    );
    one("[runner]\nstorage_size = \"2G\"\n", "\"2G", "Mi, Gi or Ti");
    one(
        "[runner]\nstorage_size = \"1Mi\"\n",
        "\"1Mi",
        "out of range",
    );
    one(
        "[runner]\nopenmetrics_file = true\n",
        "true",
        "would go with the pod",
    );
    one(
        "[runner]\nexport_stdout = false\n",
        "false",
        "go with the pod unseen",
    );
    one(
        "[runner]\npushgateway = \"https://pgw:9091\"\n",
        "\"https",
        "plain HTTP",
    );
    one(
        "[runner]\npushgateway = \"pushgateway:9091\"\n",
        "\"pushgateway",
        "not an http:// URL",
    );
    one(
        "[runner]\npushgateway = \"http://\"\n",
        "\"http",
        "names no host",
    );
    one(
        "[runner]\npushgateway = \"http://pgw:99999\"\n",
        "\"http",
        "not 1..=65535",
    );
    one(
        "[runner]\npushgateway = \"http://user:pw@pgw:9091\"\n",
        "\"http",
        "credentials",
    );
    // A URL reaches a shell variable and an HTTP request: nothing that
    // either would read differently.
    for bad in [
        "http://pgw:9091/$(reboot)",
        "http://pgw:9091/`id`",
        "http://pgw:9091/a b",
        "http://pgw:9091/\\u000a",
        "http://pgw:9091/a;b",
        "http://pgw:9091/\\\"x",
    ] {
        one(
            &format!("[runner]\npushgateway = \"{bad}\"\n"),
            "\"http",
            "characters a URL may not",
        );
    }
}

#[test]
fn resources_and_job_settings() {
    one("[runner]\ncpu = 0\n", "0", "out of range 1..=64");
    one("[runner]\ncpu = 1.5\n", "1.5", "invalid type");
    one("[runner]\nmemory = \"512M\"\n", "\"512M", "Mi or Gi");
    one("[runner]\nmemory = \"64Mi\"\n", "\"64Mi", "out of range");
    one(
        "[runner]\ndeadline = \"30s\"\n",
        "\"30s",
        "shorter than a minute",
    );
    one("[runner]\ndeadline = \"soon\"\n", "\"soon", "deadline");
    one(
        "[runner]\nbackoff_limit = -1\n",
        "-1",
        "out of range 0..=20",
    );
    one(
        "[runner]\ncluster_domain = \"Cluster Local\"\n",
        "\"Cluster",
        "not a DNS name",
    );
    one(
        "[runner]\nnode_selector = { role = \"a b\" }\n",
        "\"a b",
        "not a label value",
    );
    one(
        "[runner]\ncolour = \"blue\"\n",
        "colour",
        "unknown field `colour`",
    );
}

#[test]
fn baseline_and_run_plan_keys() {
    one(
        "[runner]\nbaseline = \"overlay\"\n",
        "\"overlay\"\n",
        "not a path the runner tests",
    );
    // The service path is one the runner tests (through its per-node
    // single-endpoint Services).
    parse_plan(
        &format!("{BASE}[runner]\nbaseline = \"service\"\n"),
        "plan.toml",
        &examples(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // Found by fabperf run's own parser, reported at the value.
    one(
        "[runner]\nname = \"bad name!\"\n",
        "\"bad name",
        "name \"bad name!\"",
    );
    one("[runner]\ntimeout = \"forever\"\n", "\"forever", "timeout");
    one("[runner]\nretries = 99\n", "99", "out of range 0..=20");
}

#[test]
fn tests_paths_and_kinds() {
    // Every kind the pod agents serve runs on the service path too.
    for kind in ["tcp-bw", "tcp-lat", "udp-bw", "udp-lat", "http-load", "mtu"] {
        let p = parse_plan(
            &format!("{BASE}[runner]\n[[runner.tests]]\nkind = \"{kind}\"\npaths = [\"pod\", \"service\"]\n"),
            "plan.toml",
            &examples(),
        )
        .unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert!(p
            .runner
            .unwrap()
            .run_plan
            .contains("paths = [\"pod\", \"service\"]"));
    }
    one(
        "[runner]\n[[runner.tests]]\nkind = \"rdma-bw\"\npaths = [\"service\"]\n",
        "\"rdma-bw",
        "no RDMA device",
    );
    one(
        "[runner]\n[[runner.tests]]\nkind = \"tcp-bw\"\npath = \"overlay\"\n",
        "\"overlay",
        "unknown path \"overlay\"",
    );
    one(
        "[runner]\n[[runner.tests]]\nkind = \"rdma-bw\"\npaths = [\"roce\", \"pod\"]\n",
        "\"rdma-bw",
        "no RDMA device",
    );
    one(
        "[runner]\n[[runner.tests]]\nkind = \"rdma-lat\"\npath = \"ipoib\"\n",
        "\"rdma-lat",
        "ipoib-cni gives the pod an IPoIB child",
    );
    one(
        "[runner]\n[[runner.tests]]\nkind = \"tcp-bwx\"\npath = \"pod\"\n",
        "\"tcp-bwx",
        "unknown test kind",
    );
    one(
        "[runner]\n[[runner.tests]]\nkind = \"tcp-bw\"\npath = \"pod\"\nsizes = [\"64K\",\n         \"1Q\"]\n",
        "\"1Q",
        "unknown unit \"Q\"",
    );
    one(
        "[runner]\n[[runner.tests]]\nkind = \"tcp-bw\"\npath = \"pod\"\nstrems = [4]\n",
        "strems",
        "unknown field `strems`",
    );
    one(
        "[runner]\n[[runner.tests]]\nkind = \"tcp-bw\"\n",
        "[[runner.tests]]",
        "say which path(s)",
    );
    one(
        "[runner]\n[[runner.tests]]\nkind = \"udp-lat\"\npath = \"pod\"\npattern = \"incast\"\n",
        "\"incast",
        "cannot",
    );
    one("[runner]\ntests = []\n", "[]", "tests is empty");
    one(
        "[runner]\n[[runner.tests]]\nkind = \"tcp-bw\"\npath = \"pod\"\nparams = { omit_s = \"x\" }\n",
        // fabperf run reports engine parameters at the test's kind.
        "\"tcp-bw\"\npath = \"pod\"\nparams",
        "tcp-bw rejects these parameters",
    );
}

#[test]
fn every_bad_test_is_reported_at_once() {
    // The run-plan parser stops at the first key it cannot read; each test
    // is checked on its own, so one bad test hides no other's problems.
    let text = format!(
        "{BASE}[runner]\n[[runner.tests]]\nkind = \"tcp-bw\"\npath = \"pod\"\nbogus = 1\n\n[[runner.tests]]\nkind = \"tcp-lat\"\npath = \"pod\"\nsizes = [0]\n\n[[runner.tests]]\nkind = \"udp-bw\"\npath = \"host\"\nrates = [\"fast\"]\n"
    );
    let e = errs(&text);
    let at: Vec<(usize, usize)> = e.0.iter().map(|x| (x.line, x.col)).collect();
    assert_eq!(
        at,
        [pos(&text, "bogus"), pos(&text, "0]"), pos(&text, "\"fast")],
        "{e}"
    );
    // Duplicate names span tests: found by parsing the whole plan.
    let text = format!(
        "{BASE}[runner]\n[[runner.tests]]\nname = \"bw\"\nkind = \"tcp-bw\"\npath = \"pod\"\n\n[[runner.tests]]\nname = \"bw\"\nkind = \"tcp-bw\"\npath = \"host\"\n"
    );
    let e = errs(&text);
    assert_eq!(e.0.len(), 1, "{e}");
    let second = text.rfind("\"bw\"").unwrap();
    let want = pos(&text[second..], "\"bw\"");
    let line = text[..second].matches('\n').count() + want.0;
    assert_eq!((e.0[0].line, e.0[0].col), (line, 8), "{e}");
    assert!(e.0[0].msg.contains("two tests are named \"bw\""), "{e}");
}

#[test]
fn no_cascade_from_problems_elsewhere() {
    // A broken control_port is reported once, not again by the runner.
    let e = errs(&BASE.replace("paths =", "control_port = 0\npaths ="));
    assert_eq!(e.0.len(), 1, "{e}");
    assert!(e.0[0].msg.contains("control_port"), "{e}");
}

#[test]
fn hostile_values_are_refused_not_panicked_on() {
    let long = "x".repeat(100_000);
    for runner in [
        format!("[runner]\nname = \"{long}\"\n"),
        format!("[runner]\nschedule = \"{long}\"\n"),
        format!("[runner]\npushgateway = \"http://{long}\"\n"),
        "[runner]\nname = \"a\\u0000b\"\n".to_string(),
        "[runner]\nschedule = \"0 3 * * *\\u001b[2J\"\n".to_string(),
        "[runner]\nname = \"\u{202e}evil\"\n".to_string(),
        "[runner]\n[[runner.tests]]\nkind = \"tcp-bw\"\npath = \"pod\"\nsizes = [\"\u{1F600}\"]\n"
            .to_string(),
        "[runner]\n[[runner.tests]]\n\"\u{e9}\" = 1\nkind = \"tcp-bw\"\npath = \"pod\"\n"
            .to_string(),
        "[runner]\nbaseline = \"\u{e9}t\u{e9}\"\n".to_string(),
        "[runner]\n[[runner.tests]]\nkind = \"tcp-bw\"\npath = \"pod\"\nrepeats = 99999999999999\n"
            .to_string(),
    ] {
        let text = format!("{BASE}{runner}");
        let e = errs(&text);
        for x in &e.0 {
            assert!(x.line >= 1 && x.col >= 1, "{x}");
            assert!(x.line <= text.lines().count() + 1, "{x}");
        }
    }
}
