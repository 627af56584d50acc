//! The plan readers, from a file as the commands read them: `fabperf run`'s
//! (plan::load) and `k8s render`'s (load_plan), both through the one file
//! reader. Any bytes give a plan or errors, never a panic, and a sweep is
//! counted before it is built (the fuzzer's memory limit would catch one
//! that is not).
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn dir() -> &'static std::path::Path {
    static P: OnceLock<std::path::PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("fabperf-fuzz-plan-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let p = dir().join("plan.toml");
    std::fs::write(&p, data).unwrap();
    if let Ok(plan) = fabperf_run::plan::load(&p) {
        let points: usize = plan.tests.iter().map(|t| t.points.len()).sum();
        assert!(points <= fabperf_run::plan::MAX_POINTS, "{points} points");
    }
    let _ = fabperf_k8s::load_plan(&p);
});
