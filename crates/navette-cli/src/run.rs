//! `navette run -n N [--no-prefix] [--no-fail-fast] [--timeout SECS] --
//! prog args…`: start `N` ranks of `prog` on this host with the embedded
//! launcher ([`navette_session::launcher`]), forward their output with a
//! `[rank] ` prefix, and exit with the job's code: the first failing
//! rank's exit code (128 + signal number if a signal killed it), 124 on
//! timeout, 128 + signal number if `navette` itself was interrupted
//! (SIGINT, SIGTERM or SIGHUP end every rank first), 0 if all succeeded
//! (1 if their output could not all be written: a full disk, an I/O
//! error; not a closed pipe); 127 if the program cannot be found, 126 if
//! it cannot be executed. At most 4096 ranks.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use navette_session::launcher::{self, ExitReport, LaunchConfig, LaunchError, Outcome};
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// A line on standard error; a closed or full standard error is ignored
/// (`eprintln!` would panic there, and lose the job's exit code).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

/// Arguments of `navette run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Number of ranks to start, 1 to 4096.
    #[arg(short = 'n', long = "ranks", value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(launcher::MAX_RANKS)))]
    pub ranks: u32,
    /// Forward the ranks' output as is, without the `[rank] ` prefix.
    #[arg(long)]
    pub no_prefix: bool,
    /// Let every rank finish even after one fails.
    #[arg(long)]
    pub no_fail_fast: bool,
    /// End every rank after this many seconds and exit with 124.
    #[arg(long, value_name = "SECS", value_parser = parse_seconds)]
    pub timeout: Option<Duration>,
    /// The program and its arguments (after `--`).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROG"
    )]
    pub command: Vec<OsString>,
}

fn parse_seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{text:?} is not a positive number of seconds"))
}

impl RunArgs {
    /// The launcher's configuration.
    pub fn config(&self) -> LaunchConfig {
        let (program, args) = self.command.split_first().expect("clap requires a program");
        let mut config = LaunchConfig::new(self.ranks, program.clone()).args(args.iter().cloned());
        config.prefix_output = !self.no_prefix;
        config.fail_fast = !self.no_fail_fast;
        config.timeout = self.timeout;
        config
    }
}

/// Runs the job and exits the process with its code unless it is 0.
pub fn run(args: RunArgs) -> ! {
    let code = launch(&args);
    let _ = io::stdout().flush();
    std::process::exit(code)
}

/// Runs the job, reporting on standard error how it ended if not well;
/// the exit code.
pub fn launch(args: &RunArgs) -> i32 {
    launch_config(args.config())
}

/// Runs the job `config` describes, as [`launch`] does.
pub fn launch_config(mut config: LaunchConfig) -> i32 {
    let interrupt = Arc::new(AtomicUsize::new(0));
    for signal in [SIGINT, SIGTERM, SIGHUP] {
        // Without the handler a signal kills `navette` alone and the ranks
        // run on; say so and go on.
        if let Err(e) =
            signal_hook::flag::register_usize(signal, Arc::clone(&interrupt), signal as usize)
        {
            say!("navette run: cannot handle signal {signal}: {e}");
        }
    }
    config.interrupt = Some(interrupt);
    let (out, err) = match output_handles() {
        Ok(handles) => handles,
        Err(e) => {
            say!("navette run: error: cannot duplicate the standard output: {e}");
            return 1;
        }
    };
    match launcher::launch_with_output(&config, Box::new(out), Box::new(err)) {
        Ok(report) => {
            if let Some(line) = summary(&report, &config) {
                say!("navette run: {line}");
            }
            report.exit_code()
        }
        Err(e) => {
            say!("navette run: error: {e}");
            match &e {
                LaunchError::Spawn { source, .. } if source.kind() == io::ErrorKind::NotFound => {
                    127
                }
                LaunchError::Spawn { source, .. }
                    if source.kind() == io::ErrorKind::PermissionDenied =>
                {
                    126
                }
                _ => 1,
            }
        }
    }
}

/// Our standard output and error as files of their own: the forwarding
/// threads must not go through `std::io::stdout()`, whose lock the caller
/// may hold for the whole command (`main` does).
fn output_handles() -> io::Result<(File, File)> {
    let out = io::stdout().as_fd().try_clone_to_owned()?;
    let err = io::stderr().as_fd().try_clone_to_owned()?;
    Ok((File::from(out), File::from(err)))
}

/// A line saying how the job ended, unless every rank succeeded.
pub fn summary(report: &ExitReport, config: &LaunchConfig) -> Option<String> {
    let others = if config.fail_fast && config.ranks > 1 {
        "; the ranks still running were ended"
    } else {
        ""
    };
    match &report.outcome {
        Outcome::Success => None,
        Outcome::RankFailed { rank, status } => Some(
            match (
                status.code(),
                std::os::unix::process::ExitStatusExt::signal(status),
            ) {
                (Some(code), _) => format!("rank {rank} exited with status {code}{others}"),
                (None, Some(signal)) => {
                    format!("rank {rank} was killed by signal {signal}{others}")
                }
                (None, None) => format!("rank {rank} failed ({status}){others}"),
            },
        ),
        Outcome::TimedOut => Some(format!(
            "timed out after {:?}; every rank was ended",
            config.timeout.unwrap_or_default()
        )),
        Outcome::Interrupted { signal } => Some(format!(
            "interrupted by signal {signal}; every rank was ended"
        )),
        other => Some(format!("ended: {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Command};

    fn parse(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let cli = Cli::try_parse_from(["navette", "run"].iter().chain(args))?;
        match cli.command {
            Command::Run(args) => Ok(args),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn arguments_become_a_launch_configuration() {
        let args = parse(&["-n", "4", "--", "prog", "-x", "--y"]).unwrap();
        let config = args.config();
        assert_eq!(config.ranks, 4);
        assert_eq!(config.program, "prog");
        assert_eq!(config.args, ["-x", "--y"]);
        assert!(config.prefix_output && config.fail_fast);
        assert_eq!(config.timeout, None);

        let args = parse(&[
            "-n",
            "2",
            "--no-prefix",
            "--no-fail-fast",
            "--timeout",
            "1.5",
            "prog",
        ])
        .unwrap();
        let config = args.config();
        assert!(!config.prefix_output && !config.fail_fast);
        assert_eq!(config.timeout, Some(Duration::from_millis(1500)));
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert!(parse(&["-n", "0", "prog"]).is_err());
        assert!(parse(&["-n", "2"]).is_err());
        assert!(parse(&["prog"]).is_err());
        assert!(parse(&["-n", "2", "--timeout", "0", "prog"]).is_err());
        assert!(parse(&["-n", "2", "--timeout", "-1", "prog"]).is_err());
        assert!(parse(&["-n", "2", "--timeout", "soon", "prog"]).is_err());
    }
}
