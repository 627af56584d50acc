//! The `mtu` plan kind: its parameters, its bound, and its mistakes.

use fabperf_run::plan::{parse, Kind};
use std::path::Path;

const AGENTS: &str =
    "name = \"m\"\n[[agents]]\nname = \"a\"\naddr = \"10.0.0.1\"\n[[agents]]\nname = \"b\"\naddr = \"10.0.0.2\"\n";

#[test]
fn mtu_cells_take_their_duration_and_params() {
    let text = format!(
        "{AGENTS}[[tests]]\nkind = \"mtu\"\npattern = \"pairs\"\npairs = [[\"a\", \"b\"], [\"b\", \"a\"]]\n\
         duration = \"20s\"\nparams = {{ icmp = false, attempts = 5 }}\n"
    );
    let p = parse(&text, "p.toml", Path::new("/")).unwrap_or_else(|e| panic!("{e}"));
    let t = &p.tests[0];
    assert_eq!(t.kind, Kind::Mtu);
    assert_eq!(t.points.len(), 1);
    let pt = &t.points[0];
    assert_eq!(pt.params["duration_s"], 20.0);
    assert_eq!(pt.params["icmp"], false);
    assert_eq!(pt.params["attempts"], 5);
    assert_eq!(Kind::parse("mtu"), Some(Kind::Mtu));
}

#[test]
fn mtu_mistakes_are_located() {
    let bad = |tests: &str| -> Vec<String> {
        match parse(&format!("{AGENTS}{tests}"), "p.toml", Path::new("/")) {
            Ok(_) => panic!("expected errors for {tests}"),
            Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
        }
    };
    let e = bad("[[tests]]\nkind = \"mtu\"\nduration = \"10m\"\n");
    assert!(e.iter().any(|e| e.contains("duration_s 600")), "{e:?}");
    let e = bad("[[tests]]\nkind = \"mtu\"\nparams = { attempts = 0 }\n");
    assert!(e.iter().any(|e| e.contains("attempts 0")), "{e:?}");
    let e = bad("[[tests]]\nkind = \"mtu\"\nparams = { atempts = 3 }\n");
    assert!(e.iter().any(|e| e.contains("atempts")), "{e:?}");
    let e = bad("[[tests]]\nkind = \"mtu\"\nsizes = [\"1K\"]\n");
    assert!(e.iter().any(|e| e.contains("mtu")), "{e:?}");
}
