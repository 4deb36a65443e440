//! The `navette` command; see the library for what each subcommand does.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = navette_cli::Cli::parse();
    let stdout = std::io::stdout();
    match navette_cli::run(cli, &mut stdout.lock()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // Not `eprint!`: a closed standard error must not panic.
            let report = navette_cli::error_report(&err);
            let _ = std::io::Write::write_all(&mut std::io::stderr(), report.as_bytes());
            ExitCode::FAILURE
        }
    }
}
