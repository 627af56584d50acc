//! `fabperf run` plans: any text must give a plan or located errors, never
//! a panic; a plan that parses expands against a small roster without one.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match fabperf_run::plan::parse(text, "fuzz.toml", Path::new("/nonexistent")) {
        Ok(plan) => {
            let mut roster = fabperf_run::Roster::default();
            for (i, name) in ["a", "b", "c"].iter().enumerate() {
                for path in plan.agents.iter().map(|a| a.path.clone()) {
                    let addr: std::net::SocketAddr = format!("127.0.0.{}:5301", i + 1).parse().unwrap();
                    let _ = roster.insert(fabperf_run::RosterAgent {
                        name: name.to_string(),
                        path,
                        addr,
                        test_addr: addr,
                        hello: serde_json::json!({}),
                        reachable: true,
                    });
                }
            }
            // Keep expansion bounded: huge sweeps are refused by the parser.
            let _ = fabperf_run::expand(&plan, &roster);
        }
        Err(e) => {
            for x in &e.0 {
                assert!(x.line >= 1 && x.col >= 1);
            }
        }
    }
});
