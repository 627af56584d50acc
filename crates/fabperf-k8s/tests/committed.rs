//! manifests/ and device-plugin-config/ hold the rendered example plan. This
//! test fails when they are stale; regenerate them from the repository root:
//!
//!   fabperf k8s render --plan examples/two-node-roce-ipoib.toml \
//!       --out manifests/ --device-plugin-out device-plugin-config/

use fabperf_k8s::{parse_plan, render, RenderedFile};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const REGEN: &str = "cargo run -p fabperf -- k8s render --plan examples/two-node-roce-ipoib.toml --out manifests/ --device-plugin-out device-plugin-config/";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn files_under(dir: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in
            std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}; run {REGEN}", d.display()))
        {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(
                    p.strip_prefix(dir)
                        .unwrap()
                        .to_string_lossy()
                        .replace('\\', "/"),
                );
            }
        }
    }
    out
}

fn compare(dir: &str, files: &[RenderedFile]) -> Result<(), String> {
    let root = repo().join(dir);
    let expected: BTreeSet<String> = files.iter().map(|f| f.rel_path.clone()).collect();
    let present = files_under(&root);
    if present != expected {
        return Err(format!(
            "{dir}/ holds {present:?} but the example plan renders {expected:?}; run {REGEN}"
        ));
    }
    for f in files {
        let on_disk = std::fs::read_to_string(root.join(&f.rel_path)).unwrap();
        if on_disk != f.content {
            return Err(format!("{dir}/{} is stale; run {REGEN}", f.rel_path));
        }
    }
    Ok(())
}

#[test]
fn committed_manifests_match_the_example_plan() {
    let name = "examples/two-node-roce-ipoib.toml";
    let text = std::fs::read_to_string(repo().join(name)).unwrap();
    let plan = parse_plan(&text, name, &repo().join("examples")).unwrap();
    let r = render(&plan).unwrap();
    compare("manifests", &r.manifests).unwrap_or_else(|e| panic!("{e}"));
    compare("device-plugin-config", &r.device_plugin).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_changed_file_is_detected() {
    // The comparison itself must be able to fail.
    let name = "examples/two-node-roce-ipoib.toml";
    let text = std::fs::read_to_string(repo().join(name)).unwrap();
    let plan = parse_plan(
        &text.replace("mtu = 9000", "mtu = 8000"),
        name,
        &repo().join("examples"),
    )
    .unwrap();
    let r = render(&plan).unwrap();
    let err = compare("manifests", &r.manifests)
        .expect_err("a different MTU must make the manifests stale");
    assert!(err.contains("10-networks.yaml is stale"), "{err}");
}
