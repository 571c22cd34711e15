//! tachy: live function latency for compiled programs.

mod cli;
mod disasm;
mod plan;
mod probe;
mod report;
mod resolve;
mod session;
mod symbols;
mod target;

use clap::Parser;

fn main() {
    let cli = cli::Cli::parse();
    let result = match cli.cmd {
        cli::Command::Latency(a) => a.validate().and_then(session::latency),
        cli::Command::List(a) => session::list(a),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("tachy: {e:#}");
            std::process::exit(1);
        }
    }
}
