//! `fabperf k8s render` and `fabperf cni-bench` as a user runs them: exit
//! codes, messages, and nothing half-written.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_fabperf")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fabperf-k8s-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

const PLAN: &str = "examples/two-node-roce-ipoib.toml";

#[test]
fn render_writes_nothing_when_the_device_plugin_dir_fails() {
    let d = tmpdir("atomic");
    let out = d.join("manifests");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("10-networks.yaml"), "# kept\n").unwrap();
    // A file where the device plugin directory should be.
    std::fs::write(d.join("dp"), "not a directory").unwrap();
    let plan = repo().join(PLAN);
    let o = run(&[
        "k8s",
        "render",
        "--plan",
        plan.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--device-plugin-out",
        d.join("dp").to_str().unwrap(),
    ]);
    assert!(!o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("cannot create directory"),
        "{}",
        stderr(&o)
    );
    let left: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    assert_eq!(
        left,
        ["10-networks.yaml"],
        "manifests were written: {left:?}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("10-networks.yaml")).unwrap(),
        "# kept\n"
    );
}

#[test]
fn render_with_a_token_file_writes_a_private_secret() {
    let d = tmpdir("token");
    let tok = d.join("token");
    std::fs::write(&tok, "9b2f0c4e6a8d1357ace0bdf2468ace13\n").unwrap();
    let plan = repo().join(PLAN);
    let out = d.join("m");
    let o = run(&[
        "k8s",
        "render",
        "--plan",
        plan.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--token-file",
        tok.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let secret = out.join("01-token-secret.yaml");
    let text = std::fs::read_to_string(&secret).unwrap();
    assert!(text.contains("token: 9b2f0c4e6a8d1357ace0bdf2468ace13"));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(!stderr(&o).contains("kubectl -n fabperf create secret"));
    // Without a token file: no Secret, the command to make one.
    let o = run(&["k8s", "render", "--plan", plan.to_str().unwrap()]);
    assert!(o.status.success());
    assert!(!String::from_utf8_lossy(&o.stdout).contains("kind: Secret"));
    assert!(stderr(&o).contains(
        "kubectl -n fabperf create secret generic fabperf-agent-token --from-file=token=TOKEN_FILE"
    ));
    // The old example token is refused.
    std::fs::write(&tok, "fabperf-example-token-change-me").unwrap();
    let o = run(&[
        "k8s",
        "render",
        "--plan",
        plan.to_str().unwrap(),
        "--token-file",
        tok.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("published examples"), "{}", stderr(&o));
}

#[test]
fn cni_bench_usage_errors_exit_2() {
    let conf = repo().join("examples/cni-bench-bridge.conflist");
    let c = conf.to_str().unwrap();
    for (args, needle) in [
        (
            vec!["cni-bench", "-c", c, "-n", "0"],
            "0 is not in 1..=1000000",
        ),
        (
            vec!["cni-bench", "-c", c, "--timeout", "-1"],
            "must be positive",
        ),
        (vec!["cni-bench", "-c", c, "--timeout", "NaN"], "finite"),
        (
            vec!["cni-bench", "-c", c, "--ifname", "a/b"],
            "not an interface name",
        ),
        (
            vec!["cni-bench", "-c", c, "--cni-path", ":"],
            "names no directory",
        ),
        (vec!["cni-bench"], "--config"),
    ] {
        let o = run(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
    // A malformed file is an error naming it, exit 1.
    let d = tmpdir("cnibad");
    std::fs::write(d.join("bad.conflist"), "{\"name\": \"x\"").unwrap();
    let o = run(&["cni-bench", "-c", d.join("bad.conflist").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("bad.conflist: not valid JSON"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn cni_bench_reports_finished_chains_when_a_later_one_fails() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("skipped: needs root for network namespaces");
        return;
    }
    let d = tmpdir("cnifail");
    let fake = d.join("failing");
    std::fs::write(
        &fake,
        "#!/bin/sh\ncat >/dev/null\nprintf '{\"cniVersion\":\"1.0.0\",\"code\":7,\"msg\":\"invalid network config\"}'\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(
        d.join("failing.conf"),
        r#"{"cniVersion":"1.0.0","name":"second","type":"failing"}"#,
    )
    .unwrap();
    let conf = repo().join("examples/cni-bench-bridge.conflist");
    let o = run(&[
        "cni-bench",
        "-c",
        conf.to_str().unwrap(),
        "-c",
        d.join("failing.conf").to_str().unwrap(),
        "-n",
        "3",
        "--cni-path",
        &format!("/usr/lib/cni:{}", d.display()),
    ]);
    let _ = Command::new("ip")
        .args(["link", "del", "cnibench0"])
        .output();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("cnibench-bridge") && out.contains("ADD") && out.contains("DEL"),
        "{out}"
    );
    assert!(
        stderr(&o).contains("failing ADD failed: CNI error 7: invalid network config"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn render_writes_the_runner_under_run_and_prunes_a_dropped_cronjob() {
    let d = tmpdir("runner");
    let out = d.join("m");
    let nightly = std::fs::read_to_string(repo().join("examples/runner-nightly.toml")).unwrap();
    // Detect files by absolute path: the plan is rendered from elsewhere.
    let nightly = nightly.replace(
        "\"node-a.detect.json\"",
        &format!(
            "\"{}\"",
            repo().join("examples/node-a.detect.json").display()
        ),
    );
    let nightly = nightly.replace(
        "\"node-b.detect.json\"",
        &format!(
            "\"{}\"",
            repo().join("examples/node-b.detect.json").display()
        ),
    );
    let plan = d.join("plan.toml");
    std::fs::write(&plan, &nightly).unwrap();
    let render = |plan: &Path| {
        run(&[
            "k8s",
            "render",
            "--plan",
            plan.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ])
    };
    let o = render(&plan);
    assert!(o.status.success(), "{}", stderr(&o));
    for f in [
        "run/00-runner.yaml",
        "run/10-job.yaml",
        "run/20-cronjob.yaml",
    ] {
        assert!(out.join(f).is_file(), "{f}");
    }
    assert!(
        stderr(&o).contains(&format!(
            "start it with `kubectl apply -f {}/` and follow it with `kubectl -n fabperf-nightly logs -f job/fabperf-run`",
            out.join("run").display()
        )),
        "{}",
        stderr(&o)
    );
    // No schedule any more: the CronJob file goes, the Job stays.
    std::fs::write(
        &plan,
        nightly.replace("schedule = \"30 2 * * *\"\ntime_zone = \"Etc/UTC\"\n", ""),
    )
    .unwrap();
    let o = render(&plan);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!out.join("run/20-cronjob.yaml").exists());
    assert!(out.join("run/10-job.yaml").is_file());
    assert!(
        stderr(&o).contains("removed stale run/20-cronjob.yaml"),
        "{}",
        stderr(&o)
    );
    // Without --out the stream carries the runner and says when to apply it.
    let o = run(&["k8s", "render", "--plan", plan.to_str().unwrap()]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("# file: run/10-job.yaml"));
    assert!(
        stderr(&o).contains("apply it after the agents are ready"),
        "{}",
        stderr(&o)
    );
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn a_bad_plan_exits_2_with_one_problem_a_line() {
    let d = tmpdir("badplan");
    let plan = d.join("plan.toml");
    std::fs::write(
        &plan,
        "image = \"registry.example.com/fabperf:1\"\npaths = [\"pod\"]\n\n[runner]\nschedule = \"0 25 * * *\"\nname = \"a\\u001b[2Jb\"\n",
    )
    .unwrap();
    let o = run(&["k8s", "render", "--plan", plan.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines[0], "fabperf: error: the plan has 2 problems:",
        "{err}"
    );
    let p = plan.display().to_string();
    assert!(
        lines[1].starts_with(&format!("  {p}:5:12: [runner] schedule")),
        "{err}"
    );
    assert!(
        lines[2].starts_with(&format!("  {p}:6:8: [runner] name")),
        "{err}"
    );
    // What the user typed comes back escaped: no terminal control.
    assert!(!err.contains('\u{1b}'), "{err:?}");
    assert!(o.stdout.is_empty());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn yaml_1_1_booleans_are_quoted_and_links_inside_out_are_refused() {
    let d = tmpdir("yaml11");
    // The example plan in a namespace called "no" (a YAML 1.1 boolean).
    let text = std::fs::read_to_string(repo().join(PLAN)).unwrap();
    let text = text.replacen("namespace = \"fabperf\"", "namespace = \"no\"", 1);
    assert!(
        text.contains("namespace = \"no\""),
        "the example names its namespace"
    );
    let plan = d.join("plan.toml");
    std::fs::write(&plan, text).unwrap();
    // With the detect files it names, next to it.
    for e in std::fs::read_dir(repo().join("examples"))
        .unwrap()
        .flatten()
    {
        if e.file_name().to_string_lossy().ends_with(".detect.json") {
            std::fs::copy(e.path(), d.join(e.file_name())).unwrap();
        }
    }
    let o = run(&["k8s", "render", "--plan", plan.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let y = String::from_utf8_lossy(&o.stdout);
    assert!(y.contains("namespace: 'no'"), "{y}");
    assert!(
        !y.lines().any(|l| l.trim_end().ends_with(": no")),
        "an unquoted `no` reads as false:\n{y}"
    );
    // A directory symlink inside --out is not followed.
    let out = d.join("out");
    let elsewhere = d.join("elsewhere");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(
        elsewhere.join("keep.yaml"),
        "# Generated by `fabperf k8s render`\nkeep\n",
    )
    .unwrap();
    std::os::unix::fs::symlink(&elsewhere, out.join("cni")).unwrap();
    let o = run(&[
        "k8s",
        "render",
        "--plan",
        plan.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("symbolic link inside the output directory"),
        "{}",
        stderr(&o)
    );
    let there: Vec<_> = std::fs::read_dir(&elsewhere)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        there.len(),
        1,
        "written or pruned through the link: {there:?}"
    );
    let _ = std::fs::remove_dir_all(&d);
}
