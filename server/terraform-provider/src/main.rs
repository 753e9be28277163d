//! `terraform-provider-sless`: a Terraform provider (plugin protocol 6) for the sless
//! REST API, started by Terraform itself.

mod common;
mod data;
mod job;
mod provider;
mod trigger;
mod workload;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tf_provider::serve("sless", provider::SlessProvider::default()).await
}
