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
