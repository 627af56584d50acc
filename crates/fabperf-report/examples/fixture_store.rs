//! Write the test fixture store (the one the golden tests read) to a file,
//! for the HTML and OpenMetrics checks of ci/report-check.sh:
//!
//!   cargo run -p fabperf-report --example fixture_store -- /tmp/fixture.db

#[path = "../tests/common/mod.rs"]
mod common;

fn main() -> std::process::ExitCode {
    let Some(path) = std::env::args_os().nth(1) else {
        eprintln!("usage: fixture_store OUT.db (the file must not exist)");
        return std::process::ExitCode::from(2);
    };
    let path = std::path::PathBuf::from(path);
    if path.exists() {
        eprintln!("{} exists; give a new file", path.display());
        return std::process::ExitCode::from(2);
    }
    let run = common::build(&path);
    println!("{}: run {run}", path.display());
    std::process::ExitCode::SUCCESS
}
