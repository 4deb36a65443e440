//! The parsers on outputs captured from real runs on Debian bookworm (Open
//! MPI 4.1.4, MPICH 4.0.2 over UCX, UCX 1.13.1, this repository's navette,
//! MPI and floor programs), and the benchmark output document they feed.
//! Nothing here installs or runs a tool.

use navette_compare::record::{Document, Record, Skip, SkipKind};
use navette_compare::runner::Output;
use navette_compare::tools::{Figure, ParseError, floor, mpi, mpich, navette, openmpi, ucx};

const SIZES: [usize; 9] = [8, 64, 512, 4096, 32768, 262144, 1048576, 4194304, 16777216];

fn fixture(name: &str) -> String {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn openmpi_output_over_both_transports() {
    for name in ["openmpi-shm.out", "openmpi-tcp.out"] {
        let figures = openmpi::parse(&fixture(name)).unwrap();
        let sizes: Vec<usize> = figures.iter().map(|f| f.size).collect();
        assert_eq!(sizes, SIZES, "{name}");
        for f in &figures {
            let (lat, bw) = (f.latency_us.unwrap(), f.bandwidth_mbps.unwrap());
            assert!(lat > 0.0 && bw > 0.0, "{name}: {f:?}");
            // bandwidth is size / one-way time, to the printed precision.
            let implied = f.size as f64 / lat;
            assert!(
                (implied - bw).abs() <= 0.01 * implied + 0.01,
                "{name}: {f:?}"
            );
        }
    }
    let first = openmpi::parse("size=8 iterations=20000 latency_us=0.1320 bandwidth_mbps=60.59\n");
    assert_eq!(
        first.unwrap(),
        vec![Figure {
            size: 8,
            latency_us: Some(0.132),
            bandwidth_mbps: Some(60.59)
        }]
    );
}

#[test]
fn openmpi_errors() {
    assert!(matches!(
        openmpi::parse("--------\nmpirun was unable to launch\n"),
        Err(ParseError::NoResult(_))
    ));
    assert!(matches!(
        openmpi::parse("size=8 iterations=1 latency_us=fast bandwidth_mbps=1\n"),
        Err(ParseError::BadField {
            field: "latency_us",
            ..
        })
    ));
}

#[test]
fn ucx_final_lines() {
    let lat = ucx::parse(&fixture("ucx-shm-tag_lat-8.out")).unwrap();
    assert_eq!(lat.iterations, 20000);
    assert_eq!(lat.latency_us, 0.275);
    // 27.76 MiB/s in 10^6 B/s.
    assert!((lat.bandwidth_mbps - 27.76 * 1.048576).abs() < 1e-9);
    let bw = ucx::parse(&fixture("ucx-tcp-tag_bw-1M.out")).unwrap();
    assert_eq!(bw.iterations, 256);
    assert!((bw.bandwidth_mbps - 1716.80 * 1.048576).abs() < 1e-9);
    // A run long enough to print progress lines: the Final line wins.
    let long = ucx::parse(&fixture("ucx-tcp-tag_lat-64-progress.out")).unwrap();
    assert_eq!(long.iterations, 400_000);
    assert_eq!(long.latency_us, 9.436);
}

#[test]
fn ucx_transports_and_errors() {
    let shm = fixture("ucx-shm-tag_lat-8.out");
    assert_eq!(ucx::lanes(&shm).as_deref(), Some("sysv/memory cma/memory"));
    assert_eq!(ucx::error(&shm), None, "DIAG lines are not errors");
    let tcp = fixture("ucx-tcp-tag_bw-1M.out");
    assert_eq!(ucx::lanes(&tcp).as_deref(), Some("tcp/lo"));
    let refused = fixture("ucx-refused.out");
    assert!(ucx::parse(&refused).is_err());
    assert_eq!(
        ucx::error(&refused).as_deref(),
        Some("client failed. connect() failed: Connection refused")
    );
    // Without a Final line (another UCX version), the last row of numbers.
    let csv_less = "   100   0.5   0.6   0.7   10.0   12.0   5   6\n";
    assert_eq!(ucx::parse(csv_less).unwrap().latency_us, 0.7);
}

#[test]
fn ucx_server_readiness_from_proc() {
    // Captured while `ucx_perftest -p 13498` waited for its client.
    let table = fixture("proc-net-tcp.txt");
    assert!(ucx::listening(&table, 13498));
    assert!(!ucx::listening(&table, 13499));
}

#[test]
fn floor_output() {
    let found = floor::parse(&fixture("floor.out")).unwrap();
    let line = found.cacheline.unwrap();
    assert_eq!(line.size, 64);
    assert!(line.latency_us.unwrap() > 0.0 && line.bandwidth_mbps.is_none());
    let sizes: Vec<usize> = found.memcpy.iter().map(|f| f.size).collect();
    assert_eq!(sizes, SIZES);
    assert!(
        found
            .memcpy
            .iter()
            .all(|f| f.latency_us.is_none() && f.bandwidth_mbps.unwrap() > 0.0)
    );
    assert!(floor::parse("floor: cannot pin to core 1\n").is_err());
}

#[test]
fn navette_document_and_refusal() {
    let records = navette::parse(&fixture("navette-tcp.json")).unwrap();
    assert_eq!(records.len(), 18);
    for imp in ["navette", "raw-tcp"] {
        let sizes: Vec<usize> = records
            .iter()
            .filter(|r| r.implementation == imp)
            .map(|r| r.size)
            .collect();
        assert_eq!(sizes, SIZES, "{imp}");
    }
    assert!(
        records
            .iter()
            .all(|r| r.transport == "tcp" && r.pattern == "pingpong")
    );
    assert!(navette::parse("{\"runs\": 3}").is_err());

    use std::os::unix::process::ExitStatusExt;
    let refused = Output {
        status: Some(std::process::ExitStatus::from_raw(1 << 8)),
        stdout: String::new(),
        stderr: fixture("navette-shm-unavailable.err"),
    };
    assert!(navette::is_unavailable(&refused));
    assert_eq!(
        refused.failure(),
        "navette: error: NAVETTE_DRIVER=shm: the shared-memory driver is not available yet"
    );
}

#[test]
fn document_in_the_architecture_format() {
    let mut doc = Document::new("0.1.0".into());
    doc.host = "vm".into();
    doc.date = "2026-01-02T03:04:05Z".into();
    doc.runs = vec![
        Record::new("pingpong", "tcp", "navette", 8, Some(11.2), Some(0.7)),
        Record::new("pingpong", "shm", "memcpy", 64, None, Some(21000.5)),
    ];
    let value: serde_json::Value = serde_json::from_str(&doc.to_json()).unwrap();
    assert_eq!(
        value,
        serde_json::json!({
            "navette_version": "0.1.0", "host": "vm", "date": "2026-01-02T03:04:05Z",
            "runs": [
                { "pattern": "pingpong", "transport": "tcp", "impl": "navette",
                  "size": 8, "latency_us": 11.2, "bandwidth_mbps": 0.7 },
                { "pattern": "pingpong", "transport": "shm", "impl": "memcpy",
                  "size": 64, "bandwidth_mbps": 21000.5 }
            ]
        }),
        "no `skipped` key when nothing was skipped; absent figures are left out"
    );
    doc.skipped.push(Skip {
        pattern: "pingpong".into(),
        transport: "shm".into(),
        implementation: "navette".into(),
        segments: None,
        threads: None,
        rails: None,
        strategy: None,
        kind: SkipKind::Unavailable,
        sizes: vec![8],
        reason: "not available yet".into(),
    });
    let value: serde_json::Value = serde_json::from_str(&doc.to_json()).unwrap();
    assert_eq!(
        value["skipped"],
        serde_json::json!([{ "pattern": "pingpong", "transport": "shm", "impl": "navette",
                             "kind": "unavailable", "sizes": [8], "reason": "not available yet" }])
    );
    // What navette-compare writes, navette's own reader takes back.
    let back = navette::parse(&doc.to_json()).unwrap();
    assert_eq!(back, doc.runs);
}

#[test]
fn multiseg_output_of_both_mpis() {
    let names = [
        "openmpi-multiseg-shm.out",
        "mpich-multiseg-shm.out",
        "mpich-multiseg-tcp.out",
    ];
    for name in names {
        let series = mpi::parse_multiseg(&fixture(name)).unwrap();
        let cases: Vec<(usize, usize)> =
            series.iter().map(|s| (s.segments, s.figure.size)).collect();
        assert_eq!(
            cases,
            [(8, 4), (8, 64), (8, 1024), (16, 4), (16, 64), (16, 1024)],
            "{name}"
        );
        for s in &series {
            let (lat, bw) = (
                s.figure.latency_us.unwrap(),
                s.figure.bandwidth_mbps.unwrap(),
            );
            // bandwidth is the series' bytes over its one-way time.
            let implied = (s.segments * s.figure.size) as f64 / lat;
            assert!(
                (implied - bw).abs() <= 0.01 * implied + 0.01,
                "{name}: {s:?}"
            );
        }
    }
    // MPICH's UCX log says which transports it used between the ranks.
    let mpich_out = fixture("mpich-multiseg-shm.out");
    assert_eq!(
        mpich::transports(&mpich_out).as_deref(),
        Some("sysv/memory cma/memory")
    );
    assert_eq!(ucx::error(&mpich_out), None, "DIAG lines are not errors");
    assert_eq!(
        mpich::transports(&fixture("mpich-multiseg-tcp.out")).as_deref(),
        Some("tcp/lo")
    );
}

#[test]
fn indexed_output_of_both_mpis_and_the_floor() {
    // The floor (`bench/floor/floor.c indexed`) prints the MPI programs'
    // lines, read by the same parser.
    for name in [
        "openmpi-indexed-shm.out",
        "mpich-indexed-shm.out",
        "floor-indexed.out",
    ] {
        let figures = mpi::parse_indexed(&fixture(name)).unwrap();
        assert_eq!(figures.len(), 1, "{name}");
        assert_eq!(figures[0].size, 64 + 262_144, "{name}: both blocks");
        assert!(figures[0].latency_us.unwrap() > 0.0);
    }
    assert!(matches!(
        mpi::parse_indexed(&fixture("openmpi-multiseg-shm.out")),
        Err(ParseError::NoResult(_))
    ));
}

#[test]
fn navette_multiseg_document() {
    let records = navette::parse(&fixture("navette-multiseg-shm.json")).unwrap();
    assert_eq!(records.len(), 6);
    assert!(records.iter().all(|r| r.pattern == "multiseg"
        && r.transport == "shm"
        && r.strategy.as_deref() == Some("aggregate")));
    let cases: Vec<(Option<usize>, usize)> = records.iter().map(|r| (r.segments, r.size)).collect();
    assert_eq!(
        cases,
        [
            (Some(8), 4),
            (Some(8), 64),
            (Some(8), 1024),
            (Some(16), 4),
            (Some(16), 64),
            (Some(16), 1024)
        ]
    );
    // Written back by navette-compare, the optional keys stay.
    let mut doc = Document::new("0.1.0".into());
    doc.runs = records.clone();
    let value: serde_json::Value = serde_json::from_str(&doc.to_json()).unwrap();
    assert_eq!(value["runs"][0]["segments"], 8);
    assert_eq!(value["runs"][0]["strategy"], "aggregate");
    assert_eq!(navette::parse(&doc.to_json()).unwrap(), records);
}

#[test]
fn rpc_output_of_both_mpis() {
    let sizes = [0, 64, 1024, 16 << 10, 256 << 10, 1 << 20];
    for name in ["openmpi-rpc-shm.out", "mpich-rpc-tcp.out"] {
        let figures = mpi::parse_rpc(&fixture(name)).unwrap();
        let found: Vec<usize> = figures.iter().map(|f| f.size).collect();
        assert_eq!(found, sizes, "{name}");
        assert!(
            figures
                .iter()
                .all(|f| f.latency_us.unwrap() > 0.0 && f.bandwidth_mbps.is_none()),
            "{name}"
        );
    }
    assert_eq!(
        mpich::transports(&fixture("mpich-rpc-tcp.out")).as_deref(),
        Some("tcp/lo")
    );
    // Neither migrate's nor rpc_rate's lines pass for rpc's.
    assert!(mpi::parse_rpc(&fixture("openmpi-migrate-tcp.out")).is_err());
    assert!(mpi::parse_rpc(&fixture("openmpi-rpc_rate-shm.out")).is_err());
}

#[test]
fn migrate_output_of_both_mpis() {
    for name in ["openmpi-migrate-tcp.out", "mpich-migrate-shm.out"] {
        let figure = mpi::parse_migrate(&fixture(name)).unwrap();
        assert_eq!(figure.size, 650, "{name}");
        assert!(figure.latency_us.unwrap() > 0.0, "{name}");
    }
    assert_eq!(
        mpich::transports(&fixture("mpich-migrate-shm.out")).as_deref(),
        Some("sysv/memory cma/memory")
    );
    assert!(mpi::parse_migrate(&fixture("openmpi-rpc-shm.out")).is_err());
}

#[test]
fn rpc_rate_output_of_both_mpis() {
    for name in ["openmpi-rpc_rate-shm.out", "mpich-rpc_rate-tcp.out"] {
        let out = fixture(name);
        let figures = mpi::parse_rpc_rate(&out).unwrap();
        let cases: Vec<(usize, usize)> = figures.iter().map(|f| (f.threads, f.size)).collect();
        assert_eq!(cases, [(1, 0), (4, 0), (16, 0)], "{name}");
        assert!(figures.iter().all(|f| f.rate_per_s > 0.0), "{name}");
        assert_eq!(mpi::unavailable(&out), None, "{name}");
    }
    assert!(mpi::parse_rpc_rate(&fixture("mpich-rpc-tcp.out")).is_err());
}

#[test]
fn rpc_rate_rows_in_the_document() {
    let mut doc = Document::new("0.1.0".into());
    doc.runs = vec![Record {
        threads: Some(4),
        rate_per_s: Some(1.5e6),
        ..Record::new("rpc_rate", "shm", "openmpi", 0, None, None)
    }];
    let value: serde_json::Value = serde_json::from_str(&doc.to_json()).unwrap();
    assert_eq!(
        value["runs"][0],
        serde_json::json!({ "pattern": "rpc_rate", "transport": "shm", "impl": "openmpi",
                            "size": 0, "threads": 4, "rate_per_s": 1.5e6 })
    );
    assert_eq!(navette::parse(&doc.to_json()).unwrap(), doc.runs);
}
