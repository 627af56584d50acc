// Temporary: replaced by the RDMA work (issue 3).
use std::process::ExitCode;
#[derive(clap::Args)]
pub struct BwArgs {}
#[derive(clap::Args)]
pub struct LatArgs {}
pub fn run_bw(_: BwArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("rdma-bw is being built")
}
pub fn run_lat(_: LatArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("rdma-lat is being built")
}
