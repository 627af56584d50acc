//! `fabperf tune check | restore` and `fabperf server --allow-tune` input
//! handling (no root needed).

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_fabperf");

#[test]
fn check_accepts_the_shipped_levels_and_refuses_hostile_profiles() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../sim/profiles");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 8, "the eight levels");
    let out = Command::new(BIN)
        .args(["tune", "check"])
        .args(&files)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(text.matches(": profile ").count(), 8, "{text}");

    let d = tempfile::tempdir().unwrap();
    let bad = d.path().join("bad.toml");
    std::fs::write(
        &bad,
        "name = \"bad\"\n[sysctl]\n\"net.core/../../kernel.x\" = 1\n\"vm.swappiness\" = 1\nnet.core.rmem_max = 999999999999\n[link]\nmtu = 9\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["tune", "check"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for want in [
        "4 problem(s)",
        "not a sysctl name",
        "only net.*",
        "sane range",
        "576..=65535",
    ] {
        assert!(err.contains(want), "missing {want:?}: {err}");
    }
    let out = Command::new(BIN)
        .args(["tune", "check"])
        .arg(d.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a regular file"));
}

#[test]
fn restore_with_nothing_to_do_and_with_a_journal_that_is_not_a_file() {
    let d = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["tune", "restore", "--state-dir"])
        .arg(d.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to restore"));
    // A journal that is a symlink (to anything) is refused, never followed.
    let ino = std::fs::metadata("/proc/thread-self/ns/net")
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap();
    let tune = d.path().join("tune");
    std::fs::create_dir(&tune).unwrap();
    std::fs::set_permissions(&tune, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", tune.join(format!("netns-{ino}.journal"))).unwrap();
    let out = Command::new(BIN)
        .args(["tune", "restore", "--state-dir"])
        .arg(d.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a regular file") && err.contains("--discard"),
        "{err}"
    );
    let out = Command::new(BIN)
        .args(["tune", "restore", "--discard", "--state-dir"])
        .arg(d.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("moved aside"));
    assert!(std::fs::metadata("/etc/passwd").is_ok());
}

#[test]
fn allow_tune_takes_known_names_only() {
    let out = Command::new(BIN)
        .args(["server", "--allow-tune", "sysctl,kernel", "--port", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not something an agent may tune"));
}

#[test]
fn check_shows_ring_and_channel_values_as_values() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("rings.toml");
    std::fs::write(
        &p,
        "name = \"rings\"\n[nic]\nrings = { rx = 4096 }\nchannels = { combined = 8 }\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .args(["tune", "check"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("  nic rings rx 4096\n"), "{text}");
    assert!(text.contains("  nic channels combined 8\n"), "{text}");
    assert!(!text.contains("Some(") && !text.contains("None"), "{text}");
}
