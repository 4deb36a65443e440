//! `navette-compare`: what `bench/compare` runs once everything is
//! installed and built. See `bench/compare -h`.
#![forbid(unsafe_code)]

use clap::{CommandFactory, Parser};
use navette_compare::args::Cli;

fn main() {
    let cli = Cli::parse();
    if let Err(e) = cli.check() {
        Cli::command()
            .error(clap::error::ErrorKind::ValueValidation, e)
            .exit();
    }
    let code = match navette_compare::run(&cli, &mut std::io::stdout()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("compare: error: {e}");
            1
        }
    };
    std::process::exit(code);
}
