//! The `navette` command: size parsing, the demo's figures and JSON, and
//! the compiled binary. Figures are simulated virtual time, never real time.

use std::process::Command;
use std::time::Duration;

use clap::Parser;
use navette_cli::demo::{self, DemoConfig, DemoError, Pattern, TABLE_HEADER};
use navette_cli::json::BenchDocument;
use navette_cli::sizes::{SizeError, parse_sizes};
use navette_cli::{Cli, CliError};
use serde_json::Value;

fn small_config() -> DemoConfig {
    DemoConfig::new(vec![0, 8, 64 << 10], Some(2), 7, 1.0, 10.0).expect("valid flags")
}

#[test]
fn sizes_parse_with_binary_suffixes() {
    assert_eq!(parse_sizes("0,8,1K,16M"), Ok(vec![0, 8, 1024, 16 << 20]));
    assert_eq!(parse_sizes("64k, 2G"), Ok(vec![64 << 10, 2 << 30]));
    assert!(matches!(
        parse_sizes("abc"),
        Err(SizeError::NotANumber { item }) if item == "abc"
    ));
    assert!(matches!(
        parse_sizes("8,,1K"),
        Err(SizeError::EmptyItem { position: 2 })
    ));
    assert!(matches!(
        parse_sizes("4X"),
        Err(SizeError::BadSuffix { .. })
    ));
    assert_eq!(parse_sizes(""), Err(SizeError::Empty));
}

#[test]
fn demo_rows_follow_the_link_model() {
    let config = small_config();
    let report = demo::run(&config, |_| {}).expect("the demo runs");
    let sizes: Vec<usize> = report.results.iter().map(|r| r.size).collect();
    assert_eq!(sizes, [0, 8, 64 << 10]);
    for r in &report.results {
        assert_eq!(r.iterations, 2);
        // 1 µs + size / 10 GB/s, rounded up to the nanosecond.
        let wire = Duration::from_nanos((r.size as u64).div_ceil(10));
        assert_eq!(r.floor, Duration::from_micros(1) + wire);
        assert!(r.pingpong >= r.floor, "{r:?}");
        assert!(r.rpc >= r.floor, "{r:?}");
        assert!(r.ratio() >= 1.0);
    }
    let table = report.table();
    assert!(table.contains(TABLE_HEADER));
    assert!(table.contains("SIMULATED virtual time"));
    assert!(table.contains("seed 7"));
    let rows: Vec<&str> = table
        .lines()
        .skip_while(|l| *l != TABLE_HEADER)
        .skip(2)
        .collect();
    assert_eq!(rows.len(), 3);
    for (row, size) in rows.iter().zip(["0", "8", "64K"]) {
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cells.len(), 7, "{row}");
        assert_eq!(cells[..2], [size, "2"]);
        assert!(cells[2..].iter().all(|c| c.parse::<f64>().is_ok()), "{row}");
    }
}

#[test]
fn link_flags_set_the_floor() {
    let config = DemoConfig::new(vec![1000], Some(1), 0, 5.0, 1.0).expect("valid flags");
    assert_eq!(config.floor(1000), Duration::from_micros(6));
    let report = demo::run(&config, |_| {}).expect("the demo runs");
    assert!(report.results[0].pingpong >= Duration::from_micros(6));
}

#[test]
fn virtual_time_is_the_same_on_every_run() {
    let first = demo::run(&small_config(), |_| {}).expect("the demo runs");
    let second = demo::run(&small_config(), |_| {}).expect("the demo runs");
    assert_eq!(first.results, second.results);
}

#[test]
fn json_document_has_every_field() {
    let report = demo::run(&small_config(), |_| {}).expect("the demo runs");
    let doc: Value =
        serde_json::from_str(&BenchDocument::new(report.runs()).to_json()).expect("valid JSON");
    assert_eq!(doc["navette_version"], env!("CARGO_PKG_VERSION"));
    assert!(doc["host"].as_str().is_some_and(|h| !h.is_empty()));
    let date = doc["date"].as_str().expect("a date");
    assert_eq!(
        (date.len(), &date[10..11], &date[19..]),
        (20, "T", "Z"),
        "{date}"
    );
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 3 * 4);
    for run in runs {
        assert!(["pingpong", "rpc"].contains(&run["pattern"].as_str().expect("pattern")));
        assert_eq!(run["transport"], "sim");
        assert!(["navette", "model"].contains(&run["impl"].as_str().expect("impl")));
        assert!(run["size"].as_u64().is_some());
        assert!(
            run["latency_us"].as_f64().is_some_and(|l| l >= 1.0),
            "{run}"
        );
        assert!(run["bandwidth_mbps"].as_f64().is_some_and(|b| b >= 0.0));
    }
    let rpc_64k = runs
        .iter()
        .find(|r| {
            r["pattern"] == Pattern::Rpc.name() && r["impl"] == "navette" && r["size"] == 65536
        })
        .expect("a navette rpc row for 64K");
    assert!(rpc_64k["bandwidth_mbps"].as_f64().is_some_and(|b| b > 0.0));
}

#[test]
fn bad_flags_are_errors() {
    let config = |lat, bw, iters| DemoConfig::new(vec![8], iters, 0, lat, bw);
    assert!(matches!(
        config(0.0, 10.0, None),
        Err(DemoError::BadLatency(_))
    ));
    assert!(matches!(
        config(f64::NAN, 10.0, None),
        Err(DemoError::BadLatency(_))
    ));
    assert!(matches!(
        config(1.0, -1.0, None),
        Err(DemoError::BadBandwidth(_))
    ));
    assert!(matches!(
        config(1.0, 10.0, Some(0)),
        Err(DemoError::NoIterations)
    ));
    assert!(config(1.0, 0.0, None).is_ok(), "0 GB/s is an infinite link");
    let cli = Cli::parse_from([
        "navette",
        "demo",
        "--sim",
        "--sizes",
        "8",
        "--latency-us",
        "-3",
    ]);
    assert!(matches!(
        navette_cli::run(cli, &mut Vec::new()),
        Err(CliError::Demo(DemoError::BadLatency(_)))
    ));
    assert!(Cli::try_parse_from(["navette", "demo", "--sizes", "abc"]).is_err());
}

#[test]
fn info_config_prints_the_defaults() {
    let mut out = Vec::new();
    navette_cli::run(Cli::parse_from(["navette", "info", "config"]), &mut out).expect("runs");
    let text = String::from_utf8(out).expect("UTF-8");
    for section in [
        "[EngineConfig]",
        "[RailCaps]",
        "[NodeConfig]",
        "[SimClusterBuilder]",
    ] {
        assert!(text.contains(section), "{section} missing");
    }
    let threshold = navette::RailCaps::default().rdv_threshold.to_string();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("rdv_threshold"))
        .expect("an rdv_threshold line");
    assert!(line.contains(&threshold), "{line}");
    // Every environment variable the library reads is listed.
    for var in [
        navette::DRIVER_VAR,
        navette::STRATEGY_VAR,
        navette::LOG_VAR,
        navette::STATS_VAR,
        navette::shm::COPY_VAR,
        navette::shm::SHARE_VAR,
        navette::shm::LIVENESS_VAR,
        navette::shm::STAGE_VAR,
        navette::tcp::CONGESTION_VAR,
        navette::tcp::KEEPALIVE_VAR,
        navette::tcp::links::LINKS_VAR,
    ] {
        assert!(text.contains(&format!("env {var}")), "{var} missing");
    }
}

fn navette_bin(args: &[&str]) -> std::process::Output {
    navette_bin_with(args, &[])
}

/// Runs the binary with extra environment variables.
fn navette_bin_with(args: &[&str], vars: &[(&str, &str)]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_navette"))
        .args(args)
        .envs(vars.iter().copied())
        .output()
        .expect("the binary starts")
}

/// Runs the binary, expects success, returns its standard output.
fn navette_ok(args: &[&str]) -> String {
    navette_ok_with(args, &[])
}

/// [`navette_ok`] with extra environment variables.
fn navette_ok_with(args: &[&str], vars: &[(&str, &str)]) -> String {
    let out = navette_bin_with(args, vars);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The benchmark output document at `path`.
fn read_json(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("the JSON file")).expect("JSON")
}

#[test]
fn binary_runs_the_demo() {
    let json = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("navette-cli-demo.json");
    let json_arg = json.to_str().expect("a UTF-8 path");
    let stdout = navette_ok(&[
        "demo",
        "--sim",
        "--sizes",
        "8,64K",
        "--iterations",
        "3",
        "--json",
        json_arg,
    ]);
    assert!(stdout.contains(TABLE_HEADER), "{stdout}");
    let doc = read_json(&json);
    assert_eq!(doc["runs"].as_array().map(Vec::len), Some(2 * 4));
}

#[test]
fn binary_refuses_bad_sizes() {
    let out = navette_bin(&["demo", "--sizes", "8,abc"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"abc\" is not a size"));
}

#[test]
fn binary_runs_the_demo_on_two_launched_ranks() {
    let args = ["demo", "--sizes", "0,8,100K", "--iterations", "5"];
    // Shared memory by default; tcp on request, beside raw TCP.
    for (vars, transport) in [(&[][..], "shm"), (&[("NAVETTE_DRIVER", "tcp")][..], "tcp")] {
        let stdout = navette_ok_with(&args, vars);
        for pattern in ["pingpong", "rpc"] {
            let title = format!("navette bench {pattern} over {transport}");
            assert!(stdout.contains(&title), "{stdout}");
        }
        assert_eq!(stdout.contains("raw-tcp"), transport == "tcp", "{stdout}");
        assert!(stdout.contains("verified byte for byte"), "{stdout}");
    }
}

#[test]
fn binary_runs_a_benchmark_with_its_baseline() {
    let json = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("navette-cli-bench.json");
    let json_arg = json.to_str().expect("a UTF-8 path");
    for pattern in ["pingpong", "stream", "rpc"] {
        navette_ok_with(
            &[
                "bench",
                pattern,
                "--sizes",
                "1,64K",
                "--iterations",
                "4",
                "--window",
                "4",
                "--baseline",
                "raw-tcp",
                "--json",
                json_arg,
            ],
            &[("NAVETTE_DRIVER", "tcp")],
        );
        let doc = read_json(&json);
        let runs = doc["runs"].as_array().expect("runs");
        assert_eq!(runs.len(), 4, "{doc}");
        assert_eq!(runs[0]["pattern"], pattern);
        assert_eq!(runs[0]["transport"], "tcp");
        assert_eq!(runs[1]["impl"], "raw-tcp");
    }
}

#[test]
fn binary_benchmarks_over_shared_memory_by_default() {
    let json = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("navette-cli-bench-shm.json");
    let json_arg = json.to_str().expect("a UTF-8 path");
    for pattern in ["pingpong", "stream", "rpc"] {
        let args = [
            "bench",
            pattern,
            "--sizes",
            "8,1M",
            "--iterations",
            "4",
            "--window",
            "4",
        ];
        navette_ok(&[&args[..], &["--json", json_arg]].concat());
        let doc = read_json(&json);
        let runs = doc["runs"].as_array().expect("runs");
        assert_eq!(runs.len(), 2, "{doc}");
        assert!(
            runs.iter()
                .all(|r| r["transport"] == "shm" && r["impl"] == "navette"),
            "{doc}"
        );
    }
}

#[test]
fn binary_runs_multiseg_and_indexed_over_shared_memory() {
    let json =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("navette-cli-bench-series.json");
    let json_arg = json.to_str().expect("a UTF-8 path");
    let args = [
        "bench",
        "multiseg",
        "--sizes",
        "4,1K",
        "--segments",
        "2,3",
        "--iterations",
        "4",
        "--json",
        json_arg,
    ];
    let stdout = navette_ok_with(&args, &[("NAVETTE_STRATEGY", "default")]);
    assert!(
        stdout.contains("navette bench multiseg over shm"),
        "{stdout}"
    );
    let doc = read_json(&json);
    let runs = doc["runs"].as_array().expect("runs");
    let cases: Vec<(u64, u64)> = runs
        .iter()
        .map(|r| (r["segments"].as_u64().unwrap(), r["size"].as_u64().unwrap()))
        .collect();
    assert_eq!(cases, [(2, 4), (2, 1024), (3, 4), (3, 1024)], "{doc}");
    assert!(
        runs.iter()
            .all(|r| r["pattern"] == "multiseg" && r["strategy"] == "default"),
        "{doc}"
    );
    navette_ok(&["bench", "indexed", "--iterations", "4", "--json", json_arg]);
    let doc = read_json(&json);
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{doc}");
    assert_eq!(runs[0]["size"], 64 + (256 << 10), "both blocks by default");
    assert_eq!(runs[0]["transport"], "shm");
    assert!(runs[0]["latency_us"].as_f64().unwrap() > 0.0);
    // The 256 KiB block is read by the kernel (single copy, shared by both
    // ranks): Navette copies the 64-byte block and packet headers only,
    // where ranks may read each other's memory (Yama's ptrace_scope 0).
    let copies = runs[0]["copies"].as_f64().expect("copies");
    let ptrace_scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope");
    let single_copy = ptrace_scope.map_or(true, |s| s.trim() == "0");
    if single_copy {
        assert!(copies < 1024.0, "{copies} bytes copied per message: {doc}");
    }
    // An RPC's 256 KiB body lands in the memory its handler allocated
    // after reading the header, and the reply's in the caller's, with no
    // copy by Navette on the way.
    navette_ok(&[
        "bench",
        "rpc",
        "--sizes",
        "256K",
        "--iterations",
        "4",
        "--json",
        json_arg,
    ]);
    let doc = read_json(&json);
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(
        (runs.len(), &runs[0]["pattern"]),
        (1, &"rpc".into()),
        "{doc}"
    );
    let copies = runs[0]["copies"].as_f64().expect("copies");
    if single_copy {
        assert!(copies < 1024.0, "{copies} bytes copied per call: {doc}");
    }
}

#[test]
fn bench_refuses_drivers_it_does_not_have() {
    for (driver, says) in [("sim", "navette demo --sim"), ("udp", "unknown driver")] {
        let out = Command::new(env!("CARGO_BIN_EXE_navette"))
            .args(["bench", "pingpong", "--sizes", "8"])
            .env("NAVETTE_DRIVER", driver)
            .output()
            .expect("the binary starts");
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{stderr}");
    }
}

/// Runs the binary, expects it to fail with exit code `code` (never killed
/// by a signal, never a panic or an aborted allocation), and returns its
/// standard error.
fn navette_fails(args: &[&str], code: i32) -> String {
    let out = navette_bin(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
    for crash in ["panicked", "memory allocation", "signal"] {
        assert!(!stderr.contains(crash), "{args:?}: {stderr}");
    }
    stderr
}

#[test]
fn binary_refuses_zero_iterations() {
    let commands: [&[&str]; 9] = [
        &["bench", "pingpong", "--sizes", "8"],
        &["bench", "stream", "--sizes", "8"],
        &["bench", "rpc", "--sizes", "8"],
        &["bench", "migrate"],
        &["bench", "multiseg", "--sizes", "8"],
        &["bench", "indexed", "--sizes", "8"],
        &["bench", "rpc_rate", "--sizes", "8", "--threads", "1"],
        &["demo", "--sizes", "8"],
        &["demo", "--sim", "--sizes", "8"],
    ];
    for command in commands {
        let args = [command, &["--iterations", "0"]].concat();
        let stderr = navette_fails(&args, 2);
        assert!(
            stderr.contains("--iterations takes 1 to 4294967295"),
            "{args:?}: {stderr}"
        );
    }
    let stderr = navette_fails(&["bench", "pingpong", "--iterations", "4294967296"], 2);
    assert!(stderr.contains("out of range"), "{stderr}");
}

#[test]
fn binary_refuses_sizes_over_one_gib() {
    for args in [
        &["bench", "pingpong", "--sizes", "1024G"][..],
        &["demo", "--sim", "--sizes", "8,1024G"],
        &["demo", "--sizes", "1025M"],
    ] {
        let stderr = navette_fails(args, 2);
        assert!(stderr.contains("is too large"), "{args:?}: {stderr}");
        assert!(stderr.contains("at most 1G"), "{args:?}: {stderr}");
    }
}

#[test]
fn binary_refuses_windows_it_cannot_hold() {
    for window in ["0", "4097", "100000000000"] {
        let stderr = navette_fails(&["bench", "stream", "--sizes", "8", "--window", window], 2);
        assert!(stderr.contains("--window takes 1 to 4096"), "{stderr}");
    }
    // Each within its bound, but 64 GiB at once: refused before any rank
    // starts, so said once.
    let stderr = navette_fails(&["bench", "stream", "--sizes", "8,1G", "--window", "64"], 1);
    assert_eq!(stderr.matches("navette: error:").count(), 1, "{stderr}");
    assert!(
        stderr.contains("stream: 64 messages in flight of 1G"),
        "{stderr}"
    );
    assert!(stderr.contains("lower --window or --sizes"), "{stderr}");
    let stderr = navette_fails(
        &["bench", "multiseg", "--sizes", "1G", "--segments", "8"],
        1,
    );
    assert!(stderr.contains("lower --segments or --sizes"), "{stderr}");
}

#[test]
fn demo_refuses_simulation_flags_without_sim() {
    for flag in [
        &["--json", "out.json"][..],
        &["--seed", "3"],
        &["--latency-us", "2"],
        &["--bandwidth-gbps", "1"],
    ] {
        let args = [&["demo", "--sizes", "8"][..], flag].concat();
        let stderr = navette_fails(&args, 2);
        assert!(
            stderr.contains("required arguments were not provided") && stderr.contains("--sim"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn demo_help_says_what_it_runs() {
    let top = navette_ok(&["--help"]);
    let demo_line = top
        .lines()
        .find(|l| l.trim_start().starts_with("demo"))
        .expect("a demo line");
    assert!(demo_line.contains("shared memory"), "{top}");
    let help = navette_ok(&["demo", "--help"]);
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for says in [
        "NAVETTE_DRIVER=tcp",
        "with --sim, 20, or 5 from 1 MiB on",
        "from 8 to 100000 round trips",
        "Seed of the simulated network (--sim only)",
    ] {
        assert!(flat.contains(says), "{says:?} missing: {help}");
    }
}

#[test]
fn demo_and_bench_need_two_ranks() {
    let navette = env!("CARGO_BIN_EXE_navette");
    for command in [
        &["demo", "--sizes", "8"][..],
        &["bench", "pingpong", "--sizes", "8"],
    ] {
        let out = Command::new(navette)
            .args(["run", "-n", "1", "--", navette])
            .args(command)
            .output()
            .expect("the binary starts");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        let says = format!("navette {} needs 2 ranks, and this job has 1", command[0]);
        assert!(stderr.contains(&says), "{stderr}");
        assert!(!stderr.contains("no open rail"), "{stderr}");
    }
}

#[test]
fn output_errors_are_not_blamed_on_the_baseline() {
    if !std::path::Path::new("/dev/full").exists() {
        eprintln!("no /dev/full: nothing to write to that fails");
        return;
    }
    let navette = env!("CARGO_BIN_EXE_navette");
    for command in [
        "bench pingpong --sizes 8 --iterations 20",
        "demo --sizes 8 --iterations 20",
    ] {
        // Each rank's own standard output is the full device.
        let script = format!("exec \"$0\" {command} >/dev/full");
        let out = Command::new(navette)
            .args(["run", "-n", "2", "--", "sh", "-c", &script, navette])
            .output()
            .expect("the binary starts");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command}: {stderr}");
        assert!(
            stderr.contains("navette: error: cannot write the output: "),
            "{command}: {stderr}"
        );
        assert!(!stderr.contains("raw TCP"), "{command}: {stderr}");
        assert!(!stderr.contains("caused by"), "said once: {stderr}");
    }
}

/// An error whose message says nothing of its cause.
#[derive(Debug, thiserror::Error)]
#[error("the job failed")]
struct Outer(#[source] std::io::Error);

#[test]
fn error_reports_name_each_cause_once() {
    let err = CliError::WriteJson {
        path: "/x/out.json".into(),
        source: std::io::Error::other("no space left"),
    };
    assert_eq!(
        navette_cli::error_report(&err),
        "navette: error: cannot write /x/out.json: no space left\n"
    );
    let err = Outer(std::io::Error::other("connection reset"));
    assert_eq!(
        navette_cli::error_report(&err),
        "navette: error: the job failed\n  caused by: connection reset\n"
    );
    // A transparent wrapper adds no line of its own.
    let bench = navette_cli::bench::BenchError::Output(std::io::Error::other("broken pipe"));
    assert_eq!(
        navette_cli::error_report(&CliError::Bench(bench)),
        "navette: error: cannot write the output: broken pipe\n"
    );
}
