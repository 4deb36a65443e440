//! The benchmark logic, run by two rank threads over the simulated network
//! with the raw TCP baseline on real loopback sockets. Figures are not
//! checked (tests never assert on time), only that every size is measured,
//! verified and reported.

use navette::sim::SimCluster;
use navette_cli::bench::{self, Baseline, BenchConfig, Memory, Pattern};
use navette_session::Bootstrap;
use navette_session::local::LocalBootstrap;

fn config(pattern: Pattern) -> BenchConfig {
    BenchConfig {
        pattern,
        sizes: vec![0, 8, 5000, 100_000],
        iterations: Some(5),
        window: 4,
        baseline: Some(Baseline::RawTcp),
        memory: Memory::Heap,
        transport: "sim".into(),
        tcp_congestion: Default::default(),
        segments: Vec::new(),
        threads: vec![1, 3],
        strategy: "aggregate".into(),
    }
}

fn run(pattern: Pattern) -> Vec<bench::SizeFigures> {
    run_config(&config(pattern))
}

/// Runs `config` on two rank threads of a simulated cluster (eager below
/// 4 KiB, rendezvous above); rank 0's figures, one per case.
fn run_config(config: &BenchConfig) -> Vec<bench::SizeFigures> {
    let cluster = SimCluster::builder(2).rdv_threshold(4096).build();
    let boots = LocalBootstrap::job(2, 1, [9; 32]);
    let cases = bench::cases(config).unwrap().len();
    std::thread::scope(|s| {
        let (node1, boot1) = (cluster.node(1), &boots[1]);
        let server = s.spawn(move || bench::run_rank(node1, boot1, config, |_| {}));
        let mut rows = Vec::new();
        let figures = bench::run_rank(cluster.node(0), &boots[0], config, |f| {
            rows.push(bench::table_row(f));
        })
        .unwrap();
        assert!(server.join().unwrap().unwrap().is_empty());
        assert_eq!(rows.len(), cases);
        assert_eq!(boots[0].rank(), 0);
        figures
    })
}

#[test]
fn pingpong_measures_every_size_against_raw_tcp() {
    let figures = run(Pattern::Pingpong);
    assert_eq!(
        figures.iter().map(|f| f.size).collect::<Vec<_>>(),
        [0, 8, 5000, 100_000]
    );
    // Every size but the empty one, which plain TCP cannot send.
    let with_baseline: Vec<usize> = figures
        .iter()
        .filter(|f| f.baseline.is_some())
        .map(|f| f.size)
        .collect();
    assert_eq!(with_baseline, [8, 5000, 100_000]);
    let config = BenchConfig {
        sizes: vec![],
        iterations: None,
        window: 1,
        ..config(Pattern::Pingpong)
    };
    let runs = bench::runs(&config, &figures);
    assert_eq!(runs.len(), 7);
    assert_eq!(runs[2].implementation, "raw-tcp");
    let header = bench::table_header(&config);
    assert!(header.contains("raw-tcp"));
    assert!(
        header.contains("congestion control loopback:reno"),
        "{header}"
    );
}

#[test]
fn stream_measures_every_size() {
    let figures = run(Pattern::Stream);
    assert_eq!(figures.len(), 4);
    assert!(figures.iter().all(|f| f.navette.bandwidth_mbps >= 0.0));
}

#[test]
fn multiseg_measures_every_series_and_size() {
    let config = BenchConfig {
        sizes: vec![0, 4, 1024, 5000],
        segments: vec![1, 3, 8],
        iterations: Some(3),
        ..config(Pattern::Multiseg)
    };
    let figures = run_config(&config);
    let cases: Vec<(Option<usize>, usize)> = figures.iter().map(|f| (f.segments, f.size)).collect();
    let expected: Vec<(Option<usize>, usize)> = [1, 3, 8]
        .into_iter()
        .flat_map(|s| [0, 4, 1024, 5000].map(|size| (Some(s), size)))
        .collect();
    assert_eq!(cases, expected);
    assert!(figures.iter().all(|f| f.iterations == 3));
    // The raw baseline sends a series' bytes as one message: none when
    // the series is empty.
    assert!(
        figures.iter().all(|f| f.baseline.is_some() == (f.size > 0)),
        "{figures:?}"
    );
    let rows = bench::document::rows(&config, &figures);
    assert_eq!(rows.len(), 12 + 9);
    for row in &rows {
        assert_eq!(row.run.pattern, "multiseg");
        assert!(row.segments.is_some());
        let navette = row.run.implementation == "navette";
        assert_eq!(
            row.strategy.as_deref(),
            navette.then_some("aggregate"),
            "{row:?}"
        );
    }
    let json = serde_json::to_value(&rows[0]).unwrap();
    assert_eq!(json["segments"], 1);
    assert_eq!(json["impl"], "navette");
    assert!(bench::table_header(&config).contains("segs"));
    assert!(bench::table_row(&figures[4]).trim_start().starts_with('3'));
}

#[test]
fn indexed_measures_both_blocks() {
    let config = BenchConfig {
        sizes: vec![0, 1000, 100_000],
        ..config(Pattern::Indexed)
    };
    let figures = run_config(&config);
    let sizes: Vec<usize> = figures.iter().map(|f| f.size).collect();
    assert_eq!(
        sizes,
        [64, 1064, 100_064],
        "the 64-byte block and the large one"
    );
    assert!(
        figures
            .iter()
            .all(|f| f.segments.is_none() && f.baseline.is_some())
    );
    let rows = bench::document::rows(&config, &figures);
    let json = serde_json::to_value(&rows).unwrap();
    assert_eq!(json[0]["size"], 64);
    assert_eq!(json[0]["strategy"], "aggregate");
    assert!(json[0]["copies"].as_f64().is_some(), "{json}");
    assert!(json[0].get("segments").is_none());
    assert!(
        json[1].get("strategy").is_none() && json[1].get("copies").is_none(),
        "the raw baseline has none"
    );
}

#[test]
fn indexed_blocks_in_huge_pages_are_measured_and_checked() {
    let config = BenchConfig {
        sizes: vec![0, 100_000],
        memory: Memory::Huge,
        baseline: None,
        ..config(Pattern::Indexed)
    };
    let figures = run_config(&config);
    let sizes: Vec<usize> = figures.iter().map(|f| f.size).collect();
    assert_eq!(sizes, [64, 100_064]);
}

#[test]
fn memory_is_chosen_for_indexed_alone() {
    for pattern in [Pattern::Pingpong, Pattern::Multiseg, Pattern::Rpc] {
        let config = BenchConfig {
            memory: Memory::Huge,
            ..config(pattern)
        };
        let err = bench::cases(&config).unwrap_err();
        assert!(
            matches!(err, bench::BenchError::Memory { memory: "huge", .. }),
            "{err:?}"
        );
        assert!(err.to_string().contains("indexed"), "{err}");
    }
}

#[test]
fn indexed_refuses_a_block_too_large_for_its_head() {
    let config = BenchConfig {
        sizes: vec![8, usize::MAX],
        ..config(Pattern::Indexed)
    };
    let err = bench::cases(&config).unwrap_err();
    assert!(
        matches!(
            err,
            bench::BenchError::Size {
                pattern: "indexed",
                size: usize::MAX,
                limit: bench::SizeLimit::Overflow {
                    header: bench::indexed::HEAD
                },
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("too large"), "{err}");
}

#[test]
fn series_counts_are_checked() {
    for segments in [0, bench::multiseg::MAX_SEGMENTS + 1] {
        let config = BenchConfig {
            segments: vec![8, segments],
            ..config(Pattern::Multiseg)
        };
        let err = bench::cases(&config).unwrap_err();
        assert!(
            matches!(
                err,
                bench::BenchError::Count {
                    pattern: "multiseg",
                    count,
                    max: bench::multiseg::MAX_SEGMENTS,
                    ..
                } if count == segments
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().starts_with(&format!(
                "{segments} segments per series: multiseg takes 1 to"
            )),
            "{err}"
        );
    }
}

#[test]
fn series_share_the_pingpong_iteration_budget() {
    for size in [1, 64, 4096, 1 << 20] {
        assert_eq!(
            bench::series_iterations(1, size),
            bench::default_iterations(size)
        );
    }
    // 100 000 round trips at most, spread over a series' messages.
    assert_eq!(bench::series_iterations(8, 4), 12_500);
    assert_eq!(bench::series_iterations(16, 1024), 4096);
    assert_eq!(bench::series_iterations(16, 64 << 20), 8, "never under 8");
}

#[test]
fn rpc_calls_a_service_at_every_size() {
    let figures = run(Pattern::Rpc);
    assert_eq!(
        figures.iter().map(|f| f.size).collect::<Vec<_>>(),
        [0, 8, 5000, 100_000]
    );
    assert!(
        figures
            .iter()
            .all(|f| f.threads.is_none() && f.rate_per_s.is_none())
    );
    // The raw baseline sends the call's header too: an empty argument has
    // one.
    assert!(figures.iter().all(|f| f.baseline.is_some()));
}

#[test]
fn migrate_ships_a_task_back_and_forth() {
    let config = BenchConfig {
        sizes: vec![650, 5000],
        baseline: None,
        ..config(Pattern::Migrate)
    };
    let figures = run_config(&config);
    assert_eq!(
        figures.iter().map(|f| f.size).collect::<Vec<_>>(),
        [650, 5000]
    );
    for bad in [8, (64 << 10) + 1] {
        let refused = BenchConfig {
            sizes: vec![650, bad],
            ..config.clone()
        };
        let err = bench::cases(&refused).unwrap_err();
        assert!(
            matches!(
                err,
                bench::BenchError::Size {
                    pattern: "migrate",
                    size,
                    limit: bench::SizeLimit::Range { .. },
                    ..
                } if size == bad
            ),
            "a state of {bad} bytes: {err:?}"
        );
        assert!(
            err.to_string().contains(&format!(
                "a task state of {bad} bytes: from 25 (its header)"
            )),
            "{err}"
        );
    }
}

#[test]
fn rpc_rate_counts_calls_of_every_thread_count() {
    let config = BenchConfig {
        sizes: vec![0, 100],
        iterations: Some(20),
        ..config(Pattern::RpcRate)
    };
    let figures = run_config(&config);
    let cases: Vec<(Option<usize>, usize)> = figures.iter().map(|f| (f.threads, f.size)).collect();
    assert_eq!(
        cases,
        [(Some(1), 0), (Some(1), 100), (Some(3), 0), (Some(3), 100)]
    );
    assert!(
        figures
            .iter()
            .all(|f| f.rate_per_s.is_some_and(|r| r > 0.0))
    );
    assert!(figures.iter().all(|f| f.baseline.is_none()), "no raw rate");
    let rows = bench::document::rows(&config, &figures);
    let json = serde_json::to_value(&rows).unwrap();
    assert_eq!(json[2]["threads"], 3);
    assert_eq!(json[2]["pattern"], "rpc_rate");
    assert!(json[2]["rate_per_s"].as_f64().is_some());
    assert!(bench::table_header(&config).contains("calls/s"));
    for threads in [0, bench::MAX_THREADS + 1] {
        let bad = BenchConfig {
            threads: vec![1, threads],
            ..config.clone()
        };
        let err = bench::cases(&bad).unwrap_err();
        assert!(
            matches!(
                err,
                bench::BenchError::Count {
                    pattern: "rpc_rate",
                    what: "client threads",
                    count,
                    ..
                } if count == threads
            ),
            "{err:?}"
        );
    }
}

#[test]
fn counts_nothing_could_run_with_are_refused() {
    use bench::BenchError;
    let no_iterations = BenchConfig {
        iterations: Some(0),
        ..config(Pattern::Pingpong)
    };
    assert!(matches!(
        bench::cases(&no_iterations),
        Err(BenchError::NoIterations)
    ));
    // Before it times anything, on either rank (no division by zero).
    let cluster = SimCluster::builder(2).build();
    let boots = LocalBootstrap::job(2, 1, [9; 32]);
    for rank in 0..2 {
        let ran = bench::run_rank(
            cluster.node(rank),
            &boots[rank as usize],
            &no_iterations,
            |_| {},
        );
        assert!(matches!(ran, Err(BenchError::NoIterations)), "{ran:?}");
    }
    let no_window = BenchConfig {
        window: 0,
        ..config(Pattern::Stream)
    };
    assert!(matches!(
        bench::cases(&no_window),
        Err(BenchError::NoWindow)
    ));
    let too_much = BenchConfig {
        sizes: vec![8, 1 << 30],
        window: 5,
        ..config(Pattern::Stream)
    };
    let err = bench::cases(&too_much).unwrap_err();
    assert!(
        matches!(
            err,
            BenchError::TooMuchInFlight {
                count: 5,
                size: 1_073_741_824,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("5368709120 bytes at once"),
        "{err}"
    );
    let within = BenchConfig {
        sizes: vec![1 << 30],
        window: 4,
        ..config(Pattern::Stream)
    };
    assert_eq!(bench::cases(&within).unwrap().len(), 1, "4 GiB is allowed");
}
