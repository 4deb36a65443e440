//! Real jobs: `navette run` starting the rank programs of `examples/` —
//! checked exchanges over tcp and over shared memory (both rendezvous
//! paths), a refused intruder, fail-fast, a rank killed mid-transfer, and
//! the SIGUSR1 report of a stalled rank.
//!
//! The rank programs are examples of this package: `cargo test -p
//! navette-cli` builds them (into `target/<profile>/examples/`, next to the
//! `navette` binary), but `cargo test --test launch` alone does not. A
//! missing or outdated example fails the test and says how to build it.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

use common::{assert_success, example, text};

/// Every job gets this many seconds before `navette run` ends it: a safety
/// net so that a hang fails the test instead of blocking it, never a
/// measurement.
const JOB_TIMEOUT: &str = "60";

/// `navette run -n <ranks> --timeout … -- <example> <args>`, to the end.
fn run_example(ranks: u32, name: &str, args: &[&str]) -> Output {
    run_example_with(ranks, name, args, &[])
}

/// [`run_example`] with extra environment variables for the ranks.
fn run_example_with(ranks: u32, name: &str, args: &[&str], vars: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_navette"))
        .envs(vars.iter().copied())
        .args([
            "run",
            "-n",
            &ranks.to_string(),
            "--timeout",
            JOB_TIMEOUT,
            "--",
        ])
        .arg(example(name))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("navette runs")
}

/// The lines of `stdout` printed by `rank` (through the launcher's
/// `[rank] ` prefix) that start with `start`.
fn rank_lines(stdout: &str, rank: u32, start: &str) -> Vec<String> {
    let prefix = format!("[{rank}] {start}");
    stdout
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .map(str::to_owned)
        .collect()
}

/// Runs `alltoall` over tcp and checks that every rank printed its summary.
fn alltoall(ranks: u32, args: &[&str]) {
    alltoall_with(ranks, args, &[("NAVETTE_DRIVER", "tcp")]);
}

/// Runs `alltoall` with `vars` and checks every rank's summary.
fn alltoall_with(ranks: u32, args: &[&str], vars: &[(&str, &str)]) {
    let out = run_example_with(ranks, "alltoall", args, vars);
    assert_success(&out);
    let stdout = text(&out.stdout);
    for rank in 0..ranks {
        let summary = format!("alltoall: rank {rank} of {ranks} ok");
        assert_eq!(
            rank_lines(&stdout, rank, &summary).len(),
            1,
            "no summary from rank {rank}:\n{stdout}"
        );
    }
}

#[test]
fn alltoall_2_ranks() {
    alltoall(2, &[]);
}

#[test]
fn alltoall_4_ranks() {
    alltoall(4, &[]);
}

#[test]
fn alltoall_16_ranks_oversubscribed() {
    alltoall(16, &["--sizes", "0,1,1K,64K,256K"]);
}

#[test]
fn alltoall_64_mib_messages() {
    alltoall(2, &["--sizes", "64M", "--large"]);
}

const SHM: (&str, &str) = ("NAVETTE_DRIVER", "shm");

#[test]
fn alltoall_shm_2_ranks() {
    alltoall_with(2, &[], &[SHM]);
}

#[test]
fn alltoall_shm_8_ranks_oversubscribed() {
    alltoall_with(8, &["--sizes", "0,1,1K,64K,256K"], &[SHM]);
}

#[test]
fn alltoall_shm_32_ranks_oversubscribed() {
    alltoall_with(32, &["--sizes", "0,8,4K,64K"], &[SHM]);
}

#[test]
fn alltoall_shm_64_mib_single_copy() {
    alltoall_with(
        2,
        &["--sizes", "64M", "--large"],
        &[SHM, ("NAVETTE_SHM_COPY", "single")],
    );
}

#[test]
fn alltoall_shm_64_mib_two_copies() {
    alltoall_with(
        2,
        &["--sizes", "64M", "--large"],
        &[SHM, ("NAVETTE_SHM_COPY", "fallback")],
    );
}

/// Real processes over both rails at once: a shm rail and a tcp rail to
/// every peer (whichever is idle takes the next packet).
#[test]
fn alltoall_shm_and_tcp_rails_4_ranks() {
    alltoall_with(
        4,
        &["--sizes", "0,1,1K,64K,256K,4M", "--large"],
        &[("NAVETTE_DRIVER", "shm+tcp")],
    );
}

#[test]
fn alltoall_refuses_large_sizes_without_the_flag() {
    let out = run_example(2, "alltoall", &["--sizes", "2M"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("--large allows 64M"), "{out:?}");
}

#[test]
fn pingpong_2_ranks() {
    let out = run_example(2, "pingpong", &["--sizes", "0,8,64K", "--iterations", "20"]);
    assert_success(&out);
    let stdout = text(&out.stdout);
    for header in ["pingpong: tagged send/recv", "rpc: header EXPRESS"] {
        assert_eq!(rank_lines(&stdout, 0, header).len(), 1, "{stdout}");
    }
    // Both tables: a row per size, starting with the size.
    for size in ["0", "8", "64K"] {
        let rows = stdout
            .lines()
            .filter(|l| {
                l.strip_prefix("[0]")
                    .unwrap_or("")
                    .split_whitespace()
                    .next()
                    == Some(size)
            })
            .count();
        assert_eq!(rows, 2, "rows for size {size}:\n{stdout}");
    }
    assert_eq!(
        rank_lines(&stdout, 1, "pingpong: rank 1 answered").len(),
        1,
        "{stdout}"
    );
}

#[test]
fn pingpong_needs_2_ranks() {
    let out = run_example(3, "pingpong", &[]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text(&out.stderr).contains("run with 2 ranks"), "{out:?}");
}

#[test]
fn an_intruder_is_refused_and_the_session_goes_on() {
    let out = run_example(3, "intruder", &[]);
    assert_success(&out);
    let stdout = text(&out.stdout);
    for attempt in ["wrong key", "wrong job id"] {
        let lines = rank_lines(&stdout, 0, &format!("intruder: rank 0: {attempt}: rank 1"));
        assert_eq!(lines.len(), 1, "{stdout}");
        assert!(
            lines[0].contains("closed the connection") || lines[0].contains("reset"),
            "{stdout}"
        );
    }
    assert_eq!(
        rank_lines(&stdout, 1, "intruder: rank 1: refused 2 connections").len(),
        1,
        "{stdout}"
    );
    for rank in 0..3 {
        let done = format!("intruder: rank {rank}: ring exchange ok");
        assert_eq!(rank_lines(&stdout, rank, &done).len(), 1, "{stdout}");
    }
    // Rank 1's driver logs each refusal (a warning, on stderr by default).
    let stderr = without_ansi_escapes(&text(&out.stderr));
    for why in ["failed to prove the job key", "peer is in job"] {
        let logged = stderr
            .lines()
            .filter(|l| l.starts_with("[1] ") && l.contains("tcp: refused connection"))
            .filter(|l| l.contains(why))
            .count();
        assert_eq!(logged, 1, "refusal ({why}) not logged once:\n{stderr}");
    }
}

/// `text` without terminal escape sequences (`ESC [ … letter`): log lines
/// may be coloured even when they go to a pipe.
fn without_ansi_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.next() == Some('[') {
                chars.by_ref().find(char::is_ascii_alphabetic);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether process `pid` is gone (or a zombie about to be reaped).
fn process_gone(pid: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    // `pid (comm) state …`: the comm may hold spaces or parentheses.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    matches!(state, Some('Z' | 'X'))
}

#[test]
fn a_failing_rank_ends_the_job_with_its_status() {
    let out = run_example(4, "fail", &["2"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(stderr.contains("rank 2 exited with status 3"), "{stderr}");
    let pids: Vec<String> = (0..4)
        .map(|rank| {
            let lines = rank_lines(&stdout, rank, &format!("fail: rank {rank} pid "));
            assert_eq!(lines.len(), 1, "no pid from rank {rank}:\n{stdout}");
            lines[0].rsplit(' ').next().expect("a pid").to_owned()
        })
        .collect();
    for (rank, pid) in pids.iter().enumerate() {
        assert!(
            process_gone(pid),
            "rank {rank} (pid {pid}) outlived the job"
        );
    }
}

#[test]
fn sigusr1_prints_what_a_stalled_rank_waits_for() {
    let mut navette = Command::new(env!("CARGO_BIN_EXE_navette"))
        .args(["run", "-n", "2", "--timeout", JOB_TIMEOUT, "--"])
        .arg(example("stall"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("navette runs");
    // Rank 0 prints its pid once its SIGUSR1 handler is in place.
    // Both pipes stay open until the job ends: closing one early could
    // make the launcher's forwarding fail.
    let mut stdout = BufReader::new(navette.stdout.take().expect("piped"));
    let mut stderr = BufReader::new(navette.stderr.take().expect("piped"));
    let mut seen = Vec::new();
    let pid = (&mut stdout)
        .lines()
        .map_while(Result::ok)
        .inspect(|line| seen.push(line.clone()))
        .find_map(|line| {
            let rest = line.strip_prefix("[0] stall: rank 0 pid ")?;
            Some(rest.split_whitespace().next()?.to_owned())
        })
        .unwrap_or_else(|| panic!("rank 0 printed no pid: {seen:?}"));
    let kill = Command::new("kill")
        .args(["-USR1", &pid])
        .status()
        .expect("kill runs");
    assert!(kill.success(), "kill -USR1 {pid} failed");
    // The report comes on rank 0's standard error. If it never does, the
    // job's timeout closes the pipe and the search ends.
    let mut report = Vec::new();
    let found = (&mut stderr)
        .lines()
        .map_while(Result::ok)
        .inspect(|line| report.push(line.clone()))
        .any(|line| line.starts_with("[0] ") && line.contains("waiting for a message from rank 1"));
    // Ends the job (the launcher ends every rank on SIGTERM).
    let term = Command::new("kill")
        .args(["-TERM", &navette.id().to_string()])
        .status()
        .expect("kill runs");
    let status = navette.wait().expect("navette ends");
    drop((stdout, stderr));
    assert!(found, "no report on rank 0's stderr: {report:#?}");
    assert!(term.success());
    assert_eq!(status.code(), Some(128 + 15), "{status:?}");
    assert!(process_gone(&pid), "rank 0 (pid {pid}) outlived the job");
}

/// A rank killed with SIGKILL while messages stream over shared memory:
/// the launcher ends the job, and nothing of the job is left in /dev/shm.
#[test]
fn a_killed_rank_leaves_nothing_in_dev_shm() {
    let mut navette = Command::new(env!("CARGO_BIN_EXE_navette"))
        .args(["run", "-n", "2", "--timeout", JOB_TIMEOUT, "--"])
        .arg(example("crash"))
        .env("NAVETTE_DRIVER", "shm")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("navette runs");
    let stdout = navette.stdout.take().expect("piped");
    let (mut victim, mut job) = (None, None);
    for line in BufReader::new(stdout).lines() {
        let line = line.expect("output is text");
        if let Some(rest) = line.strip_prefix("[1] crash: rank 1 pid ") {
            let fields: Vec<&str> = rest.split(' ').collect();
            assert_eq!(fields[3], "driver", "{line}");
            assert_eq!(fields[4], "shm", "{line}");
            victim = Some(fields[0].to_owned());
            job = Some(fields[2].to_owned());
        }
        if line.starts_with("[1] crash: rank 1 receiving") {
            break;
        }
    }
    let (victim, job) = (victim.expect("rank 1's pid"), job.expect("the job id"));
    let killed = Command::new("kill")
        .args(["-KILL", &victim])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let status = navette.wait().expect("navette ends");
    assert_eq!(
        status.code(),
        Some(128 + 9),
        "the job ends with the killed rank's status"
    );
    let segment = navette_session::launcher::job_segment_path(
        u64::from_str_radix(&job, 16).expect("a hex job id"),
    );
    assert!(!segment.exists(), "{} is left behind", segment.display());
    let leftovers: Vec<String> = std::fs::read_dir("/dev/shm")
        .expect("/dev/shm")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(&job))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// 4 ranks, rank 3 killed (SIGKILL) in the middle of a rendezvous transfer
/// and of an RPC: over shm (its liveness check) and tcp (a reset
/// connection), the transfer's receive, the call and a receive from rank 3
/// fail with `PeerUnreachable`; the three others then carry on; the
/// launcher (`--no-fail-fast`) reports how rank 3 ended.
#[test]
fn a_killed_rank_fails_what_needs_it_and_the_others_carry_on() {
    for driver in ["shm", "tcp"] {
        let out = Command::new(env!("CARGO_BIN_EXE_navette"))
            .env("NAVETTE_DRIVER", driver)
            .args(["run", "-n", "4", "--no-fail-fast", "--timeout", JOB_TIMEOUT])
            .arg("--")
            .arg(example("peerloss"))
            .stdin(Stdio::null())
            .output()
            .expect("navette runs");
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        let context = format!("{driver}:\n{stdout}\n{stderr}");
        assert_eq!(out.status.code(), Some(128 + 9), "{context}");
        assert!(
            stderr.contains("rank 3 was killed by signal 9"),
            "{context}"
        );
        let lost = [
            (0, "the stream from rank 3 failed: rank 3 unreachable"),
            (1, "the call of die at rank 3 failed: rank 3 unreachable"),
            (2, "the receive from rank 3 failed: rank 3 unreachable"),
        ];
        for (rank, what) in lost {
            let line = format!("peerloss: rank {rank}: {what}");
            assert_eq!(rank_lines(&stdout, rank, &line).len(), 1, "{context}");
            let on = format!("peerloss: rank {rank}: the survivors carried on");
            assert_eq!(rank_lines(&stdout, rank, &on).len(), 1, "{context}");
        }
    }
}

/// The soak's short version: 4 ranks (oversubscribed) mix tagged,
/// pack/unpack and RPC traffic of random sizes up to 8 MiB for 2 seconds,
/// over shm and over tcp; every rank checks every byte and reports its
/// counts, none lost or corrupt. (The long version is run by hand:
/// `--seconds 60`.)
#[test]
fn soak_4_ranks_shm_and_tcp() {
    for driver in ["shm", "tcp"] {
        let out = run_example_with(
            4,
            "soak",
            &["--seconds", "2"],
            &[("NAVETTE_DRIVER", driver)],
        );
        assert_success(&out);
        let stdout = text(&out.stdout);
        for rank in 0..4 {
            let lines = rank_lines(&stdout, rank, &format!("soak: rank {rank}: "));
            assert_eq!(lines.len(), 1, "{driver}:\n{stdout}");
            assert!(
                lines[0].ends_with(", 0 lost, 0 corrupt"),
                "{driver}: {}",
                lines[0]
            );
        }
    }
}

/// A process outside the job (this test) asks the launcher's bootstrap
/// socket to serve it, then dials a rank's tcp port with a hello of its
/// own making (job id and key it made up): both refuse it and log why,
/// and the job goes on.
#[test]
fn a_foreign_process_on_a_rank_port_is_refused() {
    let mut navette = Command::new(env!("CARGO_BIN_EXE_navette"))
        .args(["run", "-n", "3", "--timeout", JOB_TIMEOUT, "--"])
        .arg(example("intruder"))
        .arg("--foreign")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("navette runs");
    let mut lines = BufReader::new(navette.stdout.take().expect("piped")).lines();
    let mut seen = Vec::new();
    let mut socket = None;
    let addr = loop {
        let line = lines
            .next()
            .expect("rank 1 prints its address")
            .expect("text");
        seen.push(line.clone());
        if let Some(path) = line.strip_prefix("[1] intruder: rank 1 bootstrap at ") {
            socket = Some(std::path::PathBuf::from(path));
        }
        if let Some(addr) = line.strip_prefix("[1] intruder: rank 1 listens at ") {
            break addr.to_owned();
        }
    };
    // The launcher's bootstrap socket: a process it did not start, with a
    // key of its own, is refused.
    let socket = socket.expect("rank 1 prints the bootstrap socket");
    let asked = navette_session::LauncherClient::connect_to(&socket, 0, 3, 0x0bad_f00d, [0x42; 32]);
    assert!(asked.is_err(), "the bootstrap served a foreign process");
    let mut stream = std::net::TcpStream::connect(&addr).expect("rank 1 accepts");
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let hello = navette_wire::handshake::Hello {
        version: navette_wire::handshake::PROTOCOL_VERSION,
        job_id: 0x0bad_f00d,
        rank: 0,
        nonce: *b"not of this job!",
    };
    let mut out = Vec::new();
    hello.encode(&mut out);
    use std::io::{Read, Write};
    stream.write_all(&out).unwrap();
    let _ = stream.write_all(&[0x42; navette_wire::handshake::Proof::LEN]);
    let mut rest = Vec::new();
    // Closed (or reset) by rank 1: never left waiting.
    let ended = match stream.read_to_end(&mut rest) {
        Ok(_) => true,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    assert!(ended, "rank 1 kept the foreign connection open");
    seen.extend(lines.map_while(Result::ok));
    let status = navette.wait().expect("navette ends");
    let stdout = seen.join("\n");
    assert!(status.success(), "{stdout}");
    assert_eq!(
        rank_lines(&stdout, 1, "intruder: rank 1: refused 1 connections").len(),
        1,
        "{stdout}"
    );
    for rank in 0..3 {
        let done = format!("intruder: rank {rank}: ring exchange ok");
        assert_eq!(rank_lines(&stdout, rank, &done).len(), 1, "{stdout}");
    }
    let mut stderr = String::new();
    navette
        .stderr
        .take()
        .expect("piped")
        .read_to_string(&mut stderr)
        .unwrap();
    let stderr = without_ansi_escapes(&stderr);
    assert!(
        stderr
            .lines()
            .any(|l| l.starts_with("[1] ") && l.contains("tcp: refused connection")),
        "{stderr}"
    );
    let me = format!(
        "navette: refused a bootstrap connection from process {}",
        std::process::id()
    );
    assert!(stderr.lines().any(|l| l.starts_with(&me)), "{stderr}");
}
