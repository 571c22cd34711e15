//! tachy: parse the arguments, run, print one error chain, exit.

use clap::Parser;
use tachy::{cli, session};

fn main() {
    let cli = cli::Cli::parse();
    let result = match cli.cmd {
        cli::Command::Latency(a) => a.validate().and_then(session::latency),
        cli::Command::Nested(a) => a.validate().and_then(session::latency),
        cli::Command::List(a) => session::list(a),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            // A closed pipe (`tachy list … | head`) is the reader's choice, not an error.
            let broken_pipe = e
                .chain()
                .filter_map(|c| c.downcast_ref::<std::io::Error>())
                .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe);
            if broken_pipe {
                std::process::exit(0);
            }
            eprintln!("tachy: {e:#}");
            std::process::exit(1);
        }
    }
}
