//! Profiles and policy counts as plan dimensions, against in-process
//! loopback agents that may change nothing (they share the host's network
//! namespace): every setting comes back as "not allowed" in the records'
//! warnings, and a policy count the agents may not install fails its cell.

mod common;

use fabperf_store::{CellState, Role, Store};

const PROFILE: &str = r#"
name = "wide-buffers"
outside = ["vm.swappiness = 10"]
[sysctl]
net.ipv4.tcp_rmem = "4096 87380 16777216"
[nic]
gro = true
"#;

#[test]
fn profiles_and_policies_are_dimensions_with_reported_settings() {
    let agents = common::start(2, None);
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("wide.toml"), PROFILE).unwrap();
    let tests = "[[tests]]\nname = \"bw\"\nkind = \"tcp-bw\"\nduration = \"0.2s\"\nretest = 0\nordered = false\n\
                 profiles = [\"wide.toml\"]\n\
                 [[tests]]\nname = \"pol\"\nkind = \"tcp-lat\"\nduration = \"0.2s\"\nretest = 0\nordered = false\n\
                 policies = [0, 3]\n";
    let plan = common::plan(d.path(), "dims", agents.port, 2, tests);
    let db = d.path().join("r.db");
    let out = fabperf_run::run(&common::opts(&plan, &db)).unwrap();
    // bw: 1 pair under the profile; pol: 1 pair × 2 counts, the 3-rule
    // cell fails (the agents may not install rules).
    let s = Store::open_read_only(&db).unwrap();
    let run = s.latest_run().unwrap().unwrap();
    let cells = s.cells(run.id).unwrap();
    let errors: Vec<_> = cells.iter().map(|c| (&c.spec.dims, &c.error)).collect();
    assert_eq!(
        (out.cells, out.done, out.failed),
        (3, 2, 1),
        "{out:?} {errors:?}"
    );
    let bw = cells.iter().find(|c| c.spec.test == "bw").unwrap();
    assert_eq!(bw.spec.dims["profile"], "wide-buffers");
    let failed = cells.iter().find(|c| c.state == CellState::Failed).unwrap();
    assert_eq!(failed.spec.dims["policies"], 3);
    let err = failed.error.clone().unwrap_or_default();
    assert!(err.contains("--allow-tune including policy"), "{err}");
    let ms = s.measurements(run.id, None).unwrap();
    let total = ms
        .iter()
        .find(|(_, m)| m.role == Role::Total && m.record.test == "tcp-bw")
        .unwrap();
    let tuning: Vec<&str> = total
        .1
        .record
        .warnings
        .iter()
        .filter(|n| n.id == "tuning")
        .map(|n| n.message.as_str())
        .collect();
    let w = tuning.join("\n");
    assert!(
        w.contains("profile wide-buffers on n1: net.ipv4.tcp_rmem = 4096 87380 16777216 not applied, not allowed"),
        "{w}"
    );
    assert!(w.contains("on n2:"), "both ends are tuned: {w}");
    assert!(w.contains("not applied by fabperf"), "{w}");
    drop(s);

    // An edited profile is another measurement: the cell's id changes.
    let ids = |db: &std::path::Path| -> Vec<String> {
        let s = Store::open_read_only(db).unwrap();
        let run = s.latest_run().unwrap().unwrap();
        s.cells(run.id)
            .unwrap()
            .into_iter()
            .filter(|c| c.spec.test == "bw")
            .map(|c| c.spec.cell_id)
            .collect()
    };
    let before = ids(&db);
    std::fs::write(
        d.path().join("wide.toml"),
        PROFILE.replace("gro = true", "gro = false"),
    )
    .unwrap();
    let again = fabperf_run::run(&common::opts(&plan, &db)).unwrap();
    assert_eq!(
        again.ran, 1,
        "only the edited profile's cell runs: {again:?}"
    );
    let after = ids(&db);
    assert!(
        after.iter().any(|id| !before.contains(id)),
        "{before:?} {after:?}"
    );
}

#[test]
fn bad_profile_and_policy_dimensions_are_plan_errors() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("evil.toml"),
        "name = \"evil\"\n[sysctl]\n\"kernel.core_pattern\" = \"x\"\n",
    )
    .unwrap();
    std::fs::write(d.path().join("a.toml"), "name = \"same\"\n").unwrap();
    std::fs::write(
        d.path().join("b.toml"),
        "name = \"same\"\n[link]\nmtu = 1500\n",
    )
    .unwrap();
    let text = "name = \"p\"\n[[agents]]\nname = \"a\"\naddr = \"127.0.0.1\"\n\
                [[tests]]\nkind = \"tcp-bw\"\nprofiles = [\"evil.toml\", \"missing.toml\", \"a.toml\", \"b.toml\"]\n\
                policies = [0, 0, -1, 20000]\n\
                [[tests]]\nkind = \"tcp-lat\"\npolicy_conntrack = true\nprofiles = []\n";
    let e = fabperf_run::plan::parse(text, "p.toml", d.path()).unwrap_err();
    let all = e.to_string();
    for want in [
        "only net.*",
        "cannot read profile",
        "two different profiles are named \"same\"",
        "policies 0 is listed twice",
        "policies -1 is out of range",
        "policies 20000 is out of range",
        "`policy_conntrack` applies with `policies` only",
        "`profiles` is empty",
    ] {
        assert!(all.contains(want), "missing {want:?} in\n{all}");
    }
    assert!(all.contains("p.toml:7:"), "located: {all}");
}

#[test]
fn a_policy_command_sets_each_count_once_and_zero_at_the_end() {
    let agents = common::start(2, None);
    let d = tempfile::tempdir().unwrap();
    let log = d.path().join("policies.log");
    let plan = d.path().join("cmd.toml");
    std::fs::write(
        &plan,
        format!(
            "name = \"cmd\"\ntimeout = \"5s\"\nretries = 0\n\
             [[agents]]\nname = \"n1\"\naddr = \"127.0.0.1:{port}\"\n\
             [[agents]]\nname = \"n2\"\naddr = \"127.0.0.2:{port}\"\n\
             [[tests]]\nname = \"lat\"\nkind = \"tcp-lat\"\nduration = \"0.2s\"\nretest = 0\nrepeats = 2\nordered = false\n\
             policies = [0, 50]\n\
             [policy]\ntarget = \"command\"\ncommand = [\"sh\", \"-c\", \"echo $FABPERF_POLICIES >> {}\"]\n",
            log.display(),
            port = agents.port
        ),
    )
    .unwrap();
    let out = fabperf_run::run(&common::opts(&plan, &d.path().join("r.db"))).unwrap();
    let errs: Vec<String> = {
        let s = fabperf_store::Store::open_read_only(&d.path().join("r.db")).unwrap();
        let run = s.latest_run().unwrap().unwrap();
        s.cells(run.id)
            .unwrap()
            .into_iter()
            .filter_map(|c| c.error)
            .collect()
    };
    assert_eq!((out.done, out.failed), (4, 0), "{out:?} {errs:?}");
    // Repeat 0 of both counts, then repeat 1 of both, then 0 at the end.
    let seen = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        seen.split_whitespace().collect::<Vec<_>>(),
        ["0", "50", "0", "50", "0"]
    );

    // A failing command fails its cells with its message.
    let bad = std::fs::read_to_string(&plan)
        .unwrap()
        .replace(
            &format!("echo $FABPERF_POLICIES >> {}", log.display()),
            "echo no API access >&2; exit 3",
        )
        .replace("name = \"cmd\"", "name = \"cmd2\"");
    std::fs::write(&plan, bad).unwrap();
    let out = fabperf_run::run(&common::opts(&plan, &d.path().join("r2.db"))).unwrap();
    assert_eq!(out.failed, 4, "{out:?}");
    let s = fabperf_store::Store::open_read_only(&d.path().join("r2.db")).unwrap();
    let run = s.latest_run().unwrap().unwrap();
    let err = s.cells(run.id).unwrap()[0].error.clone().unwrap();
    assert!(
        err.contains("no API access") && err.contains("exit status: 3"),
        "{err}"
    );
}
