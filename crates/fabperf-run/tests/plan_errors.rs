//! Plan parsing: every mistake located as FILE:LINE:COL, all reported at once.

use fabperf_run::plan::{parse, Kind, Pattern};
use std::path::Path;

fn errors(text: &str) -> Vec<String> {
    match parse(text, "p.toml", Path::new("/plans")) {
        Ok(p) => panic!("expected errors, got a plan: {p:?}"),
        Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
    }
}

fn has(errs: &[String], loc: &str, text: &str) {
    assert!(
        errs.iter()
            .any(|e| e.starts_with(&format!("p.toml:{loc}: ")) && e.contains(text)),
        "no error at {loc} containing {text:?} in:\n{}",
        errs.join("\n")
    );
}

const AGENTS: &str = "name = \"t\"\n[[agents]]\nname = \"a\"\naddr = \"10.0.0.1\"\n[[agents]]\nname = \"b\"\naddr = \"10.0.0.2:6000\"\npath = \"host\"\n";

#[test]
fn a_good_plan_parses_with_defaults() {
    let text = format!(
        "{AGENTS}baseline = \"host\"\n[[tests]]\nkind = \"tcp-bw\"\nsizes = [\"64K\", 1048576]\nstreams = [1, 4]\nduration = \"2s\"\nrepeats = 3\nparams = {{ omit_s = 0.5 }}\n"
    );
    // baseline after [[agents]] belongs to the last agent table: invalid,
    // so build the valid form with baseline at the top.
    let text = text.replace("baseline = \"host\"\n", "");
    let text = format!("baseline = \"host\"\ntoken_file = \"tok\"\n{text}");
    let p = parse(&text, "p.toml", Path::new("/plans")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.name, "t");
    assert_eq!(p.baseline.as_deref(), Some("host"));
    assert_eq!(p.token_file.as_deref(), Some(Path::new("/plans/tok")));
    assert_eq!(p.agents.len(), 2);
    let t = &p.tests[0];
    assert_eq!(t.kind, Kind::TcpBw);
    assert_eq!(t.name, "tcp-bw-1");
    assert_eq!(t.paths, vec!["host".to_string()]);
    assert!(matches!(
        t.pattern,
        Pattern::Mesh {
            ordered: true,
            retest: 2,
            retest_sample: 8
        }
    ));
    assert_eq!(t.points.len(), 4);
    assert_eq!(t.points[1].params["size"], 65536);
    assert_eq!(t.points[1].params["streams"], 4);
    assert_eq!(t.points[1].params["duration_s"], 2.0);
    assert_eq!(t.points[1].params["omit_s"], 0.5);
    assert!((t.cell_secs - 2.5).abs() < 1e-9);
    assert_eq!(p.hash.len(), 64);
}

#[test]
fn syntax_errors_point_at_the_spot() {
    let e = errors("name = \"t\"\n[[agents]]\nname = \"a\"\naddr = \n");
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with("p.toml:4:"), "{e:?}");
    let e = errors("name = \"t\"\nbogus = 1\n");
    has(&e, "2:1", "unknown field `bogus`");
}

#[test]
fn every_problem_is_reported_at_once() {
    let text = format!(
        "{AGENTS}[[agents]]\nname = \"c\"\naddr = \"x\"\ndns = \"y\"\n\
         [[tests]]\nkind = \"tcp-bww\"\n\
         [[tests]]\nkind = \"udp-bw\"\npattern = \"incast\"\nduration = 1\n\
         [[tests]]\nkind = \"tcp-lat\"\nstreams = [2]\nduration = \"fast\"\n\
         [[tests]]\nkind = \"tcp-bw\"\nsizes = [\"64Q\", 0]\nduration = 1\nrepeats = 0\n\
         [[tests]]\nkind = \"rdma-bw\"\nmtus = [1500]\nops = [\"atomic\"]\nduration = 1\n\
         [[tests]]\nkind = \"tcp-bw\"\npattern = \"pairs\"\npairs = [[\"a\"], [\"a\", \"a\"]]\nduration = 1\n\
         [[tests]]\nkind = \"tcp-bw\"\nparams = {{ windoww = 1 }}\nduration = 1\n\
         [[tests]]\nkind = \"tcp-bw\"\npaths = [\"ipoib\"]\nduration = 1\n"
    );
    let e = errors(&text);
    has(&e, "12:7", "either `addr`");
    has(&e, "14:8", "unknown test kind \"tcp-bww\"");
    has(&e, "17:11", "udp-bw cannot");
    has(&e, "21:11", "`streams` applies to tcp-bw");
    has(&e, "22:12", "\"fast\" is not a duration");
    has(&e, "25:10", "unknown unit \"Q\" in size \"64Q\"");
    has(&e, "25:17", "a size must be positive");
    has(&e, "27:11", "repeats 0 is out of range");
    has(&e, "30:9", "RDMA MTU 1500");
    has(&e, "31:8", "unknown op \"atomic\"");
    has(&e, "36:10", "got 1 names");
    has(&e, "36:17", "against itself");
    has(&e, "40:10", "has no parameter \"windoww\"");
    has(&e, "44:10", "path \"ipoib\" has no agents");
    assert!(e.len() >= 14, "{}", e.join("\n"));
}

#[test]
fn engine_rules_apply_to_sweeps() {
    // tcp-bw refuses a 1 GiB message: the engine's own check, located.
    let e = errors(&format!(
        "{AGENTS}[[tests]]\nkind = \"tcp-bw\"\nsizes = [\"1G\"]\nduration = 1\n"
    ));
    has(&e, "11:10", "tcp-bw rejects these parameters");
    // A negative warm-up in params.
    let e = errors(&format!(
        "{AGENTS}[[tests]]\nkind = \"tcp-bw\"\nparams = {{ omit_s = -1 }}\nduration = 1\n"
    ));
    assert!(e.iter().any(|x| x.contains("rejects")), "{e:?}");
}

#[test]
fn names_addresses_and_ranges() {
    let e = errors(
        "name = \"bad name\"\ntimeout = 0\nretries = 99\n[[agents]]\nname = \"a;rm\"\naddr = \"1.2.3.4\"\n\
         [[agents]]\naddr = \"1.2.3.5\"\n[[agents]]\ndns = \"-bad-.example\"\n[[agents]]\nname = \"b\"\naddr = \"1.2.3.6:80\"\nport = 81\n\
         [[agents]]\nname = \"b\"\naddr = \"1.2.3.7\"\nport = 70000\n",
    );
    has(&e, "1:8", "name \"bad name\"");
    has(&e, "2:11", "timeout must be more than zero");
    has(&e, "3:11", "retries 99");
    has(&e, "5:8", "agent name \"a;rm\"");
    has(&e, "7:1", "needs a `name`");
    has(&e, "10:7", "is not a DNS name");
    has(&e, "13:8", "either in `addr` or in `port`");
    has(&e, "18:8", "port 70000");
}

#[test]
fn missing_sections() {
    let e = errors("name = \"t\"\n");
    assert!(e.iter().any(|x| x.contains("no [[agents]]")));
    assert!(e.iter().any(|x| x.contains("no [[tests]]")));
    let e = errors("[[agents]]\nname = \"a\"\naddr = \"1.1.1.1\"\n[[tests]]\nkind = \"tcp-bw\"\nduration = 1\n");
    assert!(e.iter().any(|x| x.contains("needs a `name")), "{e:?}");
}

#[test]
fn two_paths_need_a_choice() {
    let e = errors(&format!(
        "{AGENTS}[[agents]]\ndns = \"pods.example\"\npath = \"pod\"\n[[tests]]\nkind = \"tcp-lat\"\nduration = 1\n"
    ));
    assert!(e.iter().any(|x| x.contains("say which path")), "{e:?}");
}

#[test]
fn hostile_text_does_not_panic() {
    for t in [
        "\u{0}",
        "name = \"t\"\n[[tests]]\nkind = 5\n",
        "name = \"t\"\n[[agents]]\nname = \"\u{202e}evil\"\naddr = \"a\"\n",
        "name = \"é\"\n",
        "[[tests]]\nsizes = [[[[[[[[[[[1]]]]]]]]]]]\n",
        "name = \"t\"\n[[tests]]\nkind = \"tcp-bw\"\nduration = 1e308\n",
        "name = \"t\"\n[[tests]]\nkind = \"tcp-bw\"\nduration = -1\n",
        "name = \"t\"\n[[tests]]\nkind = \"tcp-bw\"\nduration = nan\n",
        "name = \"t\"\n[[tests]]\nkind = \"tcp-bw\"\nsizes = [\"99999999999999999999999G\"]\n",
    ] {
        assert!(parse(t, "p.toml", Path::new(".")).is_err(), "{t:?}");
    }
}

#[test]
fn sweeps_that_explode_are_refused() {
    let sizes: Vec<String> = (1..=1100).map(|i| i.to_string()).collect();
    let list = sizes.join(", ");
    let text = format!(
        "{AGENTS}[[tests]]\nkind = \"tcp-bw\"\nsizes = [{list}]\nstreams = [{}]\nduration = 1\nrepeats = 1000\n",
        (1..=1000).map(|i| i.to_string()).collect::<Vec<_>>().join(", ")
    );
    let e = errors(&text);
    assert!(e.iter().any(|x| x.contains("more than")), "{e:?}");
}

#[test]
fn the_suspect_rule_is_the_median_unless_the_plan_names_clusterkit() {
    use fabperf_run::summary::RuleKind;
    let plan = |extra: &str| format!("{AGENTS}[[tests]]\nkind = \"tcp-bw\"\nduration = 1\n{extra}");
    let p = parse(&plan(""), "p.toml", Path::new("/plans")).unwrap();
    assert_eq!(p.tests[0].suspect_rule, RuleKind::Median);
    let p = parse(
        &plan("suspect_rule = \"clusterkit\"\nsuspect_bw = 0.5\n"),
        "p.toml",
        Path::new("/plans"),
    )
    .unwrap();
    let r = p.tests[0].rule();
    assert_eq!(
        (r.kind, r.bw_fraction, r.lat_factor),
        (RuleKind::Clusterkit, 0.5, 2.1)
    );
    let e = errors(&plan("suspect_rule = \"min\"\n"));
    has(
        &e,
        "12:16",
        "unknown suspect_rule \"min\"; one of: median, clusterkit",
    );
}

/// A test of `n_sizes` sizes × `n_streams` stream counts × 3 directions.
fn huge_test(n_sizes: usize, n_streams: usize) -> String {
    let sizes: Vec<String> = (1..=n_sizes).map(|i| (i * 64).to_string()).collect();
    let streams: Vec<String> = (1..=n_streams).map(|i| i.to_string()).collect();
    format!(
        "[[tests]]\nkind = \"tcp-bw\"\nsizes = [{}]\nstreams = [{}]\ndirections = [\"forward\", \"reverse\", \"bidir\"]\nduration = \"1s\"\n",
        sizes.join(", "),
        streams.join(", ")
    )
}

#[test]
fn a_huge_sweep_is_counted_before_it_is_built() {
    // A ~10 KB plan: 1000 sizes × 1000 streams × 3 directions would be
    // 3 million points; refused with the count, nothing built.
    let text = format!("{AGENTS}{}", huge_test(1000, 1000));
    assert!(text.len() < 12_000, "{}", text.len());
    let e = errors(&text);
    assert!(
        e.iter().any(|e| e.contains(
            "expands to 3000000 sweep points (1000 sizes × 1000 streams × 3 directions)"
        ) && e.contains("20000")),
        "{e:?}"
    );
    // Two tests that each fit but together do not (600 points × 1000
    // repeats = 600000 cells each): the second is refused before its
    // points exist.
    let one =
        huge_test(20, 10).replace("duration = \"1s\"\n", "duration = \"1s\"\nrepeats = 1000\n");
    let text = format!("{AGENTS}{one}{one}");
    let e = errors(&text);
    assert!(
        e.iter()
            .any(|e| e.contains("600000 cells") && e.contains("400000 left of the 1000000")),
        "{e:?}"
    );
}

/// An incast whose data flows out of the receiver (reverse, RDMA read) is
/// an outcast: refused where the pattern is written. Forward and bidir
/// incasts (each direction aggregated on its own) pass.
#[test]
fn an_incast_of_reverse_or_read_flows_is_refused_as_an_outcast() {
    let e = errors(&format!(
        "{AGENTS}[[tests]]\nkind = \"tcp-bw\"\npattern = \"incast\"\ndirections = [\"forward\", \"reverse\"]\nduration = 1\n"
    ));
    has(&e, "11:11", "outcast");
    assert!(e.iter().any(|x| x.contains("reverse")), "{e:?}");
    let e = errors(&format!(
        "{AGENTS}[[tests]]\nkind = \"tcp-bw\"\npattern = \"incast\"\nparams = {{ direction = \"reverse\" }}\nduration = 1\n"
    ));
    has(&e, "11:11", "outcast");
    let e = errors(&format!(
        "{AGENTS}[[tests]]\nkind = \"rdma-bw\"\npattern = \"incast\"\nops = [\"write\", \"read\"]\nduration = 1\n"
    ));
    has(&e, "11:11", "RDMA read");
    for ok in [
        "kind = \"tcp-bw\"\npattern = \"incast\"\ndirections = [\"forward\", \"bidir\"]\n",
        "kind = \"rdma-bw\"\npattern = \"incast\"\nops = [\"write\", \"send\"]\n",
        "kind = \"tcp-bw\"\npattern = \"bisection\"\ndirections = [\"reverse\"]\n",
    ] {
        parse(
            &format!("{AGENTS}[[tests]]\n{ok}duration = 1\n"),
            "p.toml",
            Path::new("/plans"),
        )
        .unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
}

#[test]
fn rails_are_checked_where_they_are_written() {
    use fabperf_run::rails::RailSpec;
    let good = format!(
        "{AGENTS}[[tests]]\nkind = \"rdma-bw\"\nrails = \"rdma\"\ncross_rails = true\n[[tests]]\nkind = \"tcp-bw\"\nrails = [\"net1\", \"net2\"]\n"
    );
    let p = parse(&good, "p.toml", Path::new("/plans")).unwrap_or_else(|e| panic!("{e}"));
    let r = p.tests[0].rails.as_ref().unwrap();
    assert_eq!((&r.spec, r.cross), (&RailSpec::Rdma, true));
    let r = p.tests[1].rails.as_ref().unwrap();
    assert_eq!(r.spec, RailSpec::Named(vec!["net1".into(), "net2".into()]));
    assert!(!r.cross);
    // Each error at the key it is about (line 11: the first test's `rails`).
    let errs = errors(&format!(
        "{AGENTS}[[tests]]\nkind = \"udp-bw\"\nrails = \"rdma\"\n\
         [[tests]]\nkind = \"tcp-bw\"\npattern = \"incast\"\nrails = [\"a\", \"a\", \"../x\"]\n\
         [[tests]]\nkind = \"tcp-bw\"\nrails = [\"net1\"]\ncross_rails = true\n\
         [[tests]]\nkind = \"rdma-bw\"\nrails = 3\nparams = {{ device = \"mlx5_0\" }}\n\
         [[tests]]\nkind = \"tcp-lat\"\ncross_rails = true\n"
    ));
    has(&errs, "11:9", "udp-bw cannot run on rails");
    has(&errs, "15:9", "\"a\" is listed twice");
    has(&errs, "15:9", "is not a device or interface name");
    has(
        &errs,
        "15:9",
        "rails take the patterns \"mesh\" and \"pairs\"",
    );
    has(&errs, "19:15", "cross_rails needs an RDMA kind");
    has(&errs, "22:9", "rails = 3: give \"rdma\"");
    has(&errs, "26:15", "`cross_rails` needs `rails`");
    let errs = errors(&format!(
        "{AGENTS}[[tests]]\nkind = \"rdma-bw\"\nrails = [\"mlx5_1\"]\nparams = {{ remote_device = \"mlx5_0\" }}\n"
    ));
    has(&errs, "12:10", "remove `remote_device` from params");
}

#[test]
fn a_meshs_retest_sample_is_a_count_of_a_mesh() {
    let plan = |extra: &str| format!("{AGENTS}[[tests]]\nkind = \"tcp-bw\"\nduration = 1\n{extra}");
    let p = parse(&plan("retest_sample = 0\n"), "p.toml", Path::new("/plans")).unwrap();
    assert!(matches!(
        p.tests[0].pattern,
        Pattern::Mesh {
            retest_sample: 0,
            ..
        }
    ));
    let e = errors(&plan("retest_sample = -1\n"));
    has(&e, "12:17", "retest_sample");
    let e = errors(&plan("pattern = \"incast\"\nretest_sample = 4\n"));
    has(
        &e,
        "13:17",
        "`retest_sample` applies to pattern \"mesh\" only",
    );
}
