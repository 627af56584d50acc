// Temporary: replaced by the detect/doctor work (issue 4).
use std::process::ExitCode;
#[derive(clap::Args)]
pub struct DetectArgs {}
#[derive(clap::Args)]
pub struct DoctorArgs {}
pub fn run_detect(_: DetectArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("detect is being built")
}
pub fn run_doctor(_: DoctorArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("doctor is being built")
}
