//! `kube-emulator --port N`: serves the emulator and prints a kubeconfig for it.

use std::net::SocketAddr;

use kube_emulator::Emulator;

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut port = 0u16;
    while let Some(arg) = args.next() {
        match (arg.as_str(), args.next().map(|p| p.parse::<u16>())) {
            ("--port", Some(Ok(p))) => port = p,
            _ => {
                eprintln!("usage: kube-emulator [--port N]");
                std::process::exit(2);
            }
        }
    }
    let (emulator, _) = Emulator::start_on(SocketAddr::from(([127, 0, 0, 1], port))).await?;
    print!("{}", emulator.kubeconfig_yaml());
    tokio::signal::ctrl_c().await
}
