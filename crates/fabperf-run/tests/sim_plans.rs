//! Every plan shipped in sim/plans/ parses and plans cells (a typo there
//! would only show when someone runs it on the testbed).

use std::path::Path;

#[test]
fn every_sim_plan_parses() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sim/plans");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().and_then(|x| x.to_str()) != Some("toml") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let plan = fabperf_run::plan::parse(&text, &p.display().to_string(), &dir)
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        assert!(!plan.tests.is_empty(), "{}", p.display());
        n += 1;
    }
    assert!(n >= 10, "only {n} plans found in {}", dir.display());
}

#[test]
fn the_pod_vs_service_plan_compares_the_same_agents() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../sim/plans");
    let p = dir.join("pod-vs-service.toml");
    let plan =
        fabperf_run::plan::parse(&std::fs::read_to_string(&p).unwrap(), "pvs", &dir).unwrap();
    assert_eq!(plan.baseline.as_deref(), Some("pod"));
    let kinds: Vec<&str> = plan.tests.iter().map(|t| t.kind.name()).collect();
    assert_eq!(kinds, ["tcp-bw", "tcp-lat", "udp-bw", "http-load"]);
    for t in &plan.tests {
        assert_eq!(t.paths, ["pod", "service"], "{}", t.name);
    }
}
