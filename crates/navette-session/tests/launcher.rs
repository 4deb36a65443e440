//! The embedded launcher with real processes: output forwarding, exit
//! codes, fail-fast, timeouts, interruption, cleanup, and the bootstrap
//! across processes. No assertion depends on how long anything takes.

use std::io::{self, Write};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use navette_session::launcher::{
    ExitReport, LaunchConfig, LaunchError, MAX_RANKS, Outcome, TIMEOUT_EXIT_CODE,
    launch_with_output,
};

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<String> {
        let text = String::from_utf8(self.0.lock().unwrap().clone()).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        lines.sort();
        lines
    }
}

/// `ranks` copies of `sh -c script`.
fn sh(ranks: u32, script: &str) -> LaunchConfig {
    LaunchConfig::new(ranks, "sh").args(["-c", script])
}

fn run(config: &LaunchConfig) -> (ExitReport, Captured, Captured) {
    let (out, err) = (Captured::default(), Captured::default());
    let report = launch_with_output(config, Box::new(out.clone()), Box::new(err.clone()))
        .expect("the job launches");
    (report, out, err)
}

/// Whether `pid` is a running (not zombie) process.
fn running(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let state = stat[stat.rfind(')')? + 1..]
                .split_whitespace()
                .next()?
                .to_owned();
            Some(state != "Z" && state != "X")
        })
        .unwrap_or(false)
}

fn assert_all_gone(report: &ExitReport) {
    for r in &report.ranks {
        assert!(
            !running(r.pid),
            "rank {} (pid {}) still runs",
            r.rank,
            r.pid
        );
    }
}

#[test]
fn output_is_prefixed_with_the_rank() {
    let (report, out, err) = run(&sh(
        4,
        r#"echo "rank $NAVETTE_RANK of $NAVETTE_SIZE"; echo oops >&2"#,
    ));
    assert_eq!(report.outcome, Outcome::Success);
    assert_eq!(report.exit_code(), 0);
    assert_eq!(
        out.lines(),
        [
            "[0] rank 0 of 4",
            "[1] rank 1 of 4",
            "[2] rank 2 of 4",
            "[3] rank 3 of 4"
        ]
    );
    assert_eq!(
        err.lines(),
        ["[0] oops", "[1] oops", "[2] oops", "[3] oops"]
    );
    assert_eq!(report.ranks.len(), 4);
    assert!(
        report
            .ranks
            .iter()
            .all(|r| r.status.is_some_and(|s| s.success()))
    );
}

#[test]
fn prefixes_can_be_turned_off_and_the_environment_extended() {
    let mut config = sh(2, r#"echo "$GREETING $NAVETTE_RANK""#);
    config.prefix_output = false;
    config.env.push(("GREETING".into(), "hello".into()));
    let (report, out, _) = run(&config);
    assert_eq!(report.exit_code(), 0);
    assert_eq!(out.lines(), ["hello 0", "hello 1"]);
}

#[test]
fn one_rank_may_keep_the_launchers_standard_error() {
    let mut config = sh(2, r#"echo "err $NAVETTE_RANK" >&2"#);
    config.inherit_stderr = Some(0);
    let (report, _, err) = run(&config);
    assert_eq!(report.exit_code(), 0);
    // Rank 0 wrote to the test's own standard error, not through the sink.
    assert_eq!(err.lines(), ["[1] err 1"]);
}

#[test]
fn the_first_failure_ends_the_job_and_gives_its_code() {
    let script = r#"if [ "$NAVETTE_RANK" = 2 ]; then exit 3; fi; sleep 30"#;
    let (report, _, _) = run(&sh(4, script));
    assert_eq!(report.exit_code(), 3);
    assert!(matches!(
        report.outcome,
        Outcome::RankFailed { rank: 2, .. }
    ));
    assert_all_gone(&report);
    // The others were ended by a signal, not by finishing their sleep.
    for r in report.ranks.iter().filter(|r| r.rank != 2) {
        assert!(r.status.is_some_and(|s| !s.success()), "{r:?}");
    }
}

#[test]
fn a_rank_killed_by_a_signal_gives_128_plus_the_signal() {
    let script = r#"if [ "$NAVETTE_RANK" = 1 ]; then kill -9 $$; fi; sleep 30"#;
    let (report, _, _) = run(&sh(3, script));
    assert_eq!(report.exit_code(), 128 + 9);
    assert_all_gone(&report);
}

#[test]
fn without_fail_fast_every_rank_finishes() {
    let mut config = sh(
        3,
        r#"if [ "$NAVETTE_RANK" = 1 ]; then exit 5; fi; echo done"#,
    );
    config.fail_fast = false;
    let (report, out, _) = run(&config);
    assert_eq!(report.exit_code(), 5);
    assert_eq!(out.lines(), ["[0] done", "[2] done"]);
    assert!(report.ranks.iter().all(|r| r.status.is_some()));
}

#[test]
fn a_timeout_ends_the_job_with_124() {
    let mut config = sh(2, "sleep 30");
    config.timeout = Some(Duration::from_millis(200));
    let (report, _, _) = run(&config);
    assert_eq!(report.outcome, Outcome::TimedOut);
    assert_eq!(report.exit_code(), TIMEOUT_EXIT_CODE);
    assert_all_gone(&report);
}

#[test]
fn an_interruption_ends_the_job_with_128_plus_the_signal() {
    let mut config = sh(2, "sleep 30");
    config.interrupt = Some(Arc::new(AtomicUsize::new(2)));
    let (report, _, _) = run(&config);
    assert_eq!(report.outcome, Outcome::Interrupted { signal: 2 });
    assert_eq!(report.exit_code(), 130);
    assert_all_gone(&report);
}

#[test]
fn processes_left_behind_by_ranks_are_ended() {
    // Each rank leaves a background sleep in its process group, holding
    // its output open, and exits successfully.
    let (report, out, _) = run(&sh(2, "sleep 30 & echo $!"));
    assert_eq!(report.exit_code(), 0);
    let lines = out.lines();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for line in lines {
        let pid: u32 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(!running(pid), "the background sleep {pid} still runs");
    }
}

#[test]
fn a_program_that_cannot_start_is_an_error() {
    let config = LaunchConfig::new(2, "/nonexistent/navette-test-program");
    let result = launch_with_output(&config, Box::new(io::sink()), Box::new(io::sink()));
    assert!(
        matches!(result, Err(LaunchError::Spawn { rank: 0, .. })),
        "{result:?}"
    );
    let zero = LaunchConfig::new(0, "true");
    assert!(matches!(
        launch_with_output(&zero, Box::new(io::sink()), Box::new(io::sink())),
        Err(LaunchError::Config(_))
    ));
    // Too many for one host: refused before anything starts.
    for ranks in [MAX_RANKS + 1, u32::MAX] {
        let many = LaunchConfig::new(ranks, "true");
        match launch_with_output(&many, Box::new(io::sink()), Box::new(io::sink())) {
            Err(LaunchError::Config(why)) => {
                assert!(why.contains(&format!("at most {MAX_RANKS}")), "{why}")
            }
            other => panic!("{ranks} ranks gave {other:?}"),
        }
    }
}

#[test]
fn ranks_exchange_values_through_the_bootstrap() {
    let config = LaunchConfig::new(4, env!("CARGO_BIN_EXE_navette-bootstrap-check"));
    let (report, out, err) = run(&config);
    assert_eq!(
        report.outcome,
        Outcome::Success,
        "stderr: {:?}",
        err.lines()
    );
    let lines = out.lines();
    assert_eq!(lines.len(), 4, "{lines:?}");
    for (rank, line) in lines.iter().enumerate() {
        assert!(
            line.starts_with(&format!("[{rank}] rank {rank} of 4: bootstrap ok")),
            "{line}"
        );
    }
    // Every rank reports the same job.
    let job = |line: &String| line.rsplit_once("job ").map(|(_, j)| j.to_owned());
    assert!(lines.iter().all(|l| job(l) == job(&lines[0])));
}

#[test]
fn a_rank_that_ends_before_connecting_fails_the_others_fences() {
    // Rank 1 exits at once, successfully, without ever connecting: rank
    // 0's first fence fails instead of waiting for it for ever. (The
    // timeout only keeps a regression from hanging the suite.)
    let check = env!("CARGO_BIN_EXE_navette-bootstrap-check");
    let mut config = sh(
        2,
        &format!("if [ \"$NAVETTE_RANK\" = 1 ]; then exit 0; fi; exec '{check}'"),
    );
    config.timeout = Some(Duration::from_secs(120));
    let (report, _, err) = run(&config);
    assert!(
        matches!(report.outcome, Outcome::RankFailed { rank: 0, .. }),
        "{:?}, stderr: {:?}",
        report.outcome,
        err.lines()
    );
    assert!(
        err.lines().iter().any(|l| l.contains("rank 1 left")),
        "{:?}",
        err.lines()
    );
    assert_all_gone(&report);
}

/// An output that fails every write with `kind`.
struct Failing(io::ErrorKind);

impl Write for Failing {
    fn write(&mut self, _: &[u8]) -> io::Result<usize> {
        Err(self.0.into())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn output_that_cannot_be_written_is_reported() {
    let config = sh(2, "echo hello");
    let err = Captured::default();
    let report = launch_with_output(
        &config,
        Box::new(Failing(io::ErrorKind::StorageFull)),
        Box::new(err.clone()),
    )
    .expect("the job launches");
    assert_eq!(report.outcome, Outcome::Success);
    assert!(report.lost_output.is_some(), "{report:?}");
    assert_eq!(
        report.exit_code(),
        1,
        "the ranks succeeded, their lines were lost"
    );
    assert!(
        err.lines()
            .iter()
            .any(|l| l.starts_with("navette: output lost: cannot write the ranks' standard output")),
        "{:?}",
        err.lines()
    );
    // A reader that went away is no failure.
    let report = launch_with_output(
        &config,
        Box::new(Failing(io::ErrorKind::BrokenPipe)),
        Box::new(io::sink()),
    )
    .expect("the job launches");
    assert_eq!(
        (report.lost_output, report.outcome),
        (None, Outcome::Success)
    );
}

#[test]
fn a_lone_check_is_a_singleton() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_navette-bootstrap-check"))
        .env_clear()
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("rank 0 of 1: bootstrap ok"));
}

#[test]
fn a_foreign_launcher_is_refused_by_name() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_navette-bootstrap-check"))
        .env_clear()
        .env("OMPI_COMM_WORLD_SIZE", "4")
        .env("OMPI_COMM_WORLD_RANK", "1")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.contains("Open MPI") && err.contains("navette run"),
        "{err}"
    );
}
