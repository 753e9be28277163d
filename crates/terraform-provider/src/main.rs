//! `terraform-provider-sless`: a Terraform provider (plugin protocol 6) for the sless
//! REST API, started by Terraform itself.

mod common;
mod data;
mod job;
mod provider;
mod trigger;
mod workload;

fn main() -> anyhow::Result<()> {
    // tf-provider appends a backtrace to every diagnostic when backtraces are on (a
    // developer's RUST_BACKTRACE=1): keep them for panics only. Set before any thread
    // starts, so nothing reads the environment concurrently.
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "0") };
    }
    // Terraform talks to the plugin over mutual TLS, and rustls refuses to guess a crypto
    // provider when a workspace build compiles in more than one (ring is what reqwest uses).
    rustls::crypto::ring::default_provider()
        .install_default()
        .map_err(|_| anyhow::anyhow!("a TLS crypto provider was installed twice"))?;
    tokio::runtime::Runtime::new()?.block_on(tf_provider::serve(
        "sless",
        provider::SlessProvider::default(),
    ))
}
