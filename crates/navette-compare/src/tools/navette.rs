//! `navette bench PATTERN`, on two ranks of the embedded launcher (`navette
//! run -n 2`), each rank pinned to its core with `taskset` as Open MPI's
//! and UCX's processes are (unpinned ranks on two cores sometimes share
//! one, and a spinning ping-pong then takes ten times longer). It writes
//! the benchmark output document with `--json`; the driver is chosen by
//! `NAVETTE_DRIVER`.

use std::path::Path;
use std::process::Command;

use super::{CORES, ParseError};
use crate::record::{Record, Runs, SkipKind};
use crate::runner::Output;

/// How `navette bench` is asked for one pattern.
#[derive(Clone, Debug)]
pub struct BenchRequest<'a> {
    /// `pingpong`, `stream`, `rpc`, …
    pub pattern: &'a str,
    /// The driver: `shm` or `tcp`.
    pub driver: &'a str,
    /// Sizes in bytes (per segment for multiseg, the large block for
    /// indexed, a call's argument for rpc and rpc_rate); empty: no
    /// `--sizes` (migrate, whose task state has its own size).
    pub sizes: &'a [usize],
    /// Segments per series, for multiseg.
    pub segments: Option<&'a [usize]>,
    /// Client threads, for rpc_rate (`--threads`).
    pub threads: Option<&'a [usize]>,
    /// Timed iterations per size, if fixed.
    pub iterations: Option<u32>,
    /// Add `--baseline raw-tcp`.
    pub raw_tcp: bool,
    /// `--memory` of indexed's large blocks (`heap`, `huge`), if given.
    pub memory: Option<&'a str>,
    /// Where navette writes its document.
    pub json: &'a Path,
}

/// The command for `request`.
pub fn command(navette: &Path, request: &BenchRequest<'_>) -> Command {
    let mut command = Command::new(navette);
    let sizes: Vec<String> = request.sizes.iter().map(usize::to_string).collect();
    // Rank 0 on the first core, rank 1 on the second.
    let pin = format!(
        "case $NAVETTE_RANK in 0) core={};; *) core={};; esac; exec taskset -c $core \"$0\" \"$@\"",
        CORES.0, CORES.1
    );
    command
        .env("NAVETTE_DRIVER", request.driver)
        .args(["run", "-n", "2", "--no-prefix", "--", "sh", "-c", &pin])
        .arg(navette)
        .args(["bench", request.pattern]);
    if !sizes.is_empty() {
        command.args(["--sizes", &sizes.join(",")]);
    }
    command.arg("--json").arg(request.json);
    if let Some(n) = request.iterations {
        command.args(["--iterations", &n.to_string()]);
    }
    if let Some(segments) = request.segments {
        let segments: Vec<String> = segments.iter().map(usize::to_string).collect();
        command.args(["--segments", &segments.join(",")]);
    }
    if let Some(threads) = request.threads {
        let threads: Vec<String> = threads.iter().map(usize::to_string).collect();
        command.args(["--threads", &threads.join(",")]);
    }
    if request.raw_tcp {
        command.args(["--baseline", "raw-tcp"]);
    }
    if let Some(memory) = request.memory {
        command.args(["--memory", memory]);
    }
    command
}

/// The rows of navette's document.
pub fn parse(json: &str) -> Result<Vec<Record>, ParseError> {
    serde_json::from_str::<Runs>(json)
        .map(|doc| doc.runs)
        .map_err(|e| ParseError::Json(e.to_string()))
}

/// Whether a failed run said that the driver does not exist yet (as
/// `NAVETTE_DRIVER=shm` does until the shared-memory driver lands): an
/// expected skip rather than a failure.
pub fn is_unavailable(output: &Output) -> bool {
    !output.success() && output.stderr.contains("not available")
}

/// Whether a failed run was refused because `navette bench` does not know
/// `pattern` (yet): clap's `invalid value 'PATTERN'`; the reason to skip
/// navette's rows for, if so.
pub fn unknown_pattern(output: &Output, pattern: &str) -> Option<String> {
    if output.success() {
        return None;
    }
    let quoted = format!("'{pattern}'");
    let line = output
        .stderr
        .lines()
        .find(|l| l.contains("invalid value") && l.contains(&quoted))?;
    Some(format!(
        "navette bench has no pattern {pattern} yet ({})",
        line.trim()
    ))
}

/// The version of the navette binary (`navette --version`), or of this
/// workspace when it does not answer.
pub fn version(navette: &Path) -> String {
    Command::new(navette)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| parse_version(&String::from_utf8_lossy(&o.stdout)))
        .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_owned())
}

/// `navette 0.1.0` → `0.1.0`.
pub fn parse_version(text: &str) -> Option<String> {
    text.split_whitespace().nth(1).map(str::to_owned)
}

/// The records a `navette bench --json JSON` run wrote, with its failure
/// (if it exited badly: rows it still wrote are kept); or, when there is
/// nothing to read, how to skip its rows and why (not available: the
/// driver is refused; else failed).
pub fn read_run(
    output: &Output,
    json: &Path,
) -> Result<(Vec<Record>, Option<String>), (SkipKind, String)> {
    let (kind, failure) = if is_unavailable(output) {
        (SkipKind::Unavailable, Some(output.failure()))
    } else {
        (
            SkipKind::Failed,
            (!output.success()).then(|| output.failure()),
        )
    };
    let records = match std::fs::read_to_string(json) {
        Ok(text) => parse(&text).map_err(|e| e.to_string()),
        Err(e) => Err(format!("{}: {e}", json.display())),
    };
    match records {
        Ok(records) => Ok((records, failure)),
        Err(e) => Err((kind, failure.unwrap_or(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::describe;

    #[test]
    fn command_line() {
        let json = Path::new("/o/raw/navette-tcp.json");
        let request = BenchRequest {
            pattern: "pingpong",
            driver: "tcp",
            sizes: &[8, 4096],
            segments: None,
            threads: None,
            iterations: Some(100),
            raw_tcp: true,
            memory: None,
            json,
        };
        assert_eq!(
            describe(&command(Path::new("navette"), &request)),
            "NAVETTE_DRIVER=tcp navette run -n 2 --no-prefix -- sh -c \
             'case $NAVETTE_RANK in 0) core=0;; *) core=1;; esac; \
             exec taskset -c $core \"$0\" \"$@\"' \
             navette bench pingpong --sizes 8,4096 \
             --json /o/raw/navette-tcp.json --iterations 100 --baseline raw-tcp"
        );
    }

    #[test]
    fn versions() {
        assert_eq!(parse_version("navette 0.1.0\n").as_deref(), Some("0.1.0"));
        assert_eq!(parse_version(""), None);
    }

    #[test]
    fn multiseg_command_line() {
        let request = BenchRequest {
            pattern: "multiseg",
            driver: "shm",
            sizes: &[4, 64],
            segments: Some(&[8, 16]),
            threads: None,
            iterations: None,
            raw_tcp: false,
            memory: None,
            json: Path::new("m.json"),
        };
        let line = describe(&command(Path::new("navette"), &request));
        assert!(
            line.ends_with("navette bench multiseg --sizes 4,64 --json m.json --segments 8,16"),
            "{line}"
        );
        // indexed is told the memory of its large blocks.
        let request = BenchRequest {
            pattern: "indexed",
            sizes: &[262_144],
            segments: None,
            memory: Some("huge"),
            ..request
        };
        let line = describe(&command(Path::new("navette"), &request));
        assert!(
            line.ends_with("navette bench indexed --sizes 262144 --json m.json --memory huge"),
            "{line}"
        );
    }

    #[test]
    fn rpc_command_lines() {
        let request = BenchRequest {
            pattern: "rpc_rate",
            driver: "tcp",
            sizes: &[0],
            segments: None,
            threads: Some(&[1, 4, 16]),
            iterations: Some(50),
            raw_tcp: false,
            memory: None,
            json: Path::new("r.json"),
        };
        let line = describe(&command(Path::new("navette"), &request));
        assert!(
            line.ends_with(
                "navette bench rpc_rate --sizes 0 --json r.json --iterations 50 --threads 1,4,16"
            ),
            "{line}"
        );
        // migrate's task state has its own size: no --sizes.
        let request = BenchRequest {
            pattern: "migrate",
            sizes: &[],
            threads: None,
            iterations: None,
            ..request
        };
        let line = describe(&command(Path::new("navette"), &request));
        assert!(
            line.ends_with("navette bench migrate --json r.json"),
            "{line}"
        );
    }

    #[test]
    fn patterns_navette_bench_does_not_know() {
        use std::os::unix::process::ExitStatusExt;
        let refused = Output {
            status: Some(std::process::ExitStatus::from_raw(2 << 8)),
            stdout: String::new(),
            stderr: "error: invalid value 'rpc_rate' for '<PATTERN>'\n  [possible values: \
                     pingpong, stream, rpc, multiseg, indexed]\n"
                .into(),
        };
        assert_eq!(
            unknown_pattern(&refused, "rpc_rate").as_deref(),
            Some(
                "navette bench has no pattern rpc_rate yet \
                 (error: invalid value 'rpc_rate' for '<PATTERN>')"
            )
        );
        assert_eq!(unknown_pattern(&refused, "migrate"), None);
        let ran = Output {
            status: Some(std::process::ExitStatus::from_raw(0)),
            ..refused
        };
        assert_eq!(unknown_pattern(&ran, "rpc_rate"), None);
    }

    #[test]
    fn rpc_rate_rows() {
        let json = r#"{"navette_version": "0.1.0", "runs": [
            {"pattern": "rpc_rate", "transport": "shm", "impl": "navette",
             "size": 0, "threads": 4, "rate_per_s": 812345.5},
            {"pattern": "migrate", "transport": "shm", "impl": "navette",
             "size": 650, "latency_us": 0.41}]}"#;
        let records = parse(json).unwrap();
        assert_eq!(records[0].threads, Some(4));
        assert_eq!(records[0].rate_per_s, Some(812_345.5));
        assert_eq!(records[0].latency_us, None);
        assert_eq!(records[1].size, 650);
        assert_eq!(records[1].latency_us, Some(0.41));
    }
}
