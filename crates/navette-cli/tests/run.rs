//! `navette run`: the compiled command's output and exit codes.

use std::process::{Command, Output};

fn navette_run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_navette"))
        .arg("run")
        .args(args)
        .output()
        .expect("navette runs")
}

fn sorted_lines(bytes: &[u8]) -> Vec<String> {
    let mut lines: Vec<String> = String::from_utf8_lossy(bytes)
        .lines()
        .map(str::to_owned)
        .collect();
    lines.sort();
    lines
}

#[test]
fn ranks_print_with_their_prefix_and_succeed() {
    let out = navette_run(&["-n", "3", "--", "sh", "-c", "echo rank $NAVETTE_RANK"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        sorted_lines(&out.stdout),
        ["[0] rank 0", "[1] rank 1", "[2] rank 2"]
    );
    let out = navette_run(&["-n", "2", "--no-prefix", "sh", "-c", "echo $NAVETTE_SIZE"]);
    assert_eq!(sorted_lines(&out.stdout), ["2", "2"]);
}

#[test]
fn the_exit_code_is_the_failing_ranks() {
    let script = r#"if [ "$NAVETTE_RANK" = 1 ]; then exit 7; fi; sleep 30"#;
    let out = navette_run(&["-n", "3", "--", "sh", "-c", script]);
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rank 1 exited with status 7"), "{err}");
}

#[test]
fn a_timeout_exits_with_124() {
    let out = navette_run(&["-n", "2", "--timeout", "0.2", "--", "sleep", "30"]);
    assert_eq!(out.status.code(), Some(124), "{out:?}");
}

#[test]
fn a_missing_program_exits_with_127() {
    let out = navette_run(&["-n", "2", "--", "/nonexistent/navette-test-program"]);
    assert_eq!(out.status.code(), Some(127), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot start rank 0"));
}

#[test]
fn sigterm_ends_every_rank_and_exits_with_143() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let mut navette = Command::new(env!("CARGO_BIN_EXE_navette"))
        .args([
            "run",
            "-n",
            "2",
            "--",
            "sh",
            "-c",
            "echo started $$; sleep 30",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Once a rank has printed, the signal handlers are in place.
    let mut stdout = BufReader::new(navette.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    assert!(line.contains("started"), "{line}");
    let rank_pid = line.split_whitespace().last().unwrap().to_owned();
    let kill = Command::new("kill")
        .args(["-TERM", &navette.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    assert_eq!(navette.wait().unwrap().code(), Some(143));
    let stat = std::fs::read_to_string(format!("/proc/{rank_pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.trim_start().chars().next());
    assert!(
        matches!(state, None | Some(Some('Z' | 'X'))),
        "rank process {rank_pid} still runs: {stat}"
    );
}

#[test]
fn more_ranks_than_one_host_takes_are_refused_before_starting() {
    let out = navette_run(&["-n", "4097", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("4097") && err.contains("1..=4096"), "{err}");
}

#[test]
fn a_closed_standard_error_keeps_the_exit_code() {
    // The summary line cannot be written: the job's code still comes out,
    // not a panic's.
    let navette = env!("CARGO_BIN_EXE_navette");
    let out = Command::new("sh")
        .args([
            "-c",
            &format!("exec '{navette}' run -n 2 -- sh -c 'exit 3' 2>&-"),
        ])
        .output()
        .expect("sh runs");
    assert_eq!(out.status.code(), Some(3), "{out:?}");
}

#[test]
fn a_rank_that_ends_before_the_bootstrap_fails_its_peer_instead_of_hanging() {
    // Rank 1 exits at once, successfully; rank 0's node waits for it in a
    // bootstrap fence, which now fails (the timeout is only a guard).
    let navette = env!("CARGO_BIN_EXE_navette");
    let script = format!(
        "if [ \"$NAVETTE_RANK\" = 0 ]; then exec '{navette}' bench pingpong --sizes 8 --iterations 5; fi"
    );
    let out = navette_run(&["-n", "2", "--timeout", "120", "--", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rank 1 left"), "{err}");
}

#[test]
fn settings_that_are_not_utf8_or_not_filters_are_said() {
    use std::os::unix::ffi::OsStrExt;
    let navette = env!("CARGO_BIN_EXE_navette");
    let bench = [
        "run",
        "-n",
        "2",
        "--",
        navette,
        "bench",
        "pingpong",
        "--sizes",
        "8",
        "--iterations",
        "5",
    ];
    let out = Command::new(navette)
        .args(bench)
        .env("NAVETTE_DRIVER", std::ffi::OsStr::from_bytes(b"sh\xffm"))
        .output()
        .expect("navette runs");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("NAVETTE_DRIVER") && err.contains("not valid UTF-8"),
        "{err}"
    );
    // A log filter that does not parse is said, and the run goes on.
    let out = Command::new(navette)
        .args(bench)
        .env("NAVETTE_LOG", "x=notalevel")
        .output()
        .expect("navette runs");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("NAVETTE_LOG is not a log filter"), "{err}");
}
