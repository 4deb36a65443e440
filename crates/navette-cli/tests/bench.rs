//! The benchmark logic, run by two rank threads over the simulated network
//! with the raw TCP baseline on real loopback sockets. Figures are not
//! checked (tests never assert on time), only that every size is measured,
//! verified and reported.

use navette::sim::SimCluster;
use navette_cli::bench::{self, Baseline, BenchConfig, Pattern};
use navette_session::Bootstrap;
use navette_session::local::LocalBootstrap;

fn run(pattern: Pattern) -> Vec<bench::SizeFigures> {
    let cluster = SimCluster::builder(2).rdv_threshold(4096).build();
    let boots = LocalBootstrap::job(2, 1, [9; 32]);
    let config = BenchConfig {
        pattern,
        sizes: vec![0, 8, 5000, 100_000],
        iterations: Some(5),
        window: 4,
        baseline: Some(Baseline::RawTcp),
        transport: "sim".into(),
        tcp_congestion: Default::default(),
    };
    std::thread::scope(|s| {
        let (node1, boot1, config1) = (cluster.node(1), &boots[1], &config);
        let server = s.spawn(move || bench::run_rank(node1, boot1, config1, |_| {}));
        let mut rows = Vec::new();
        let figures = bench::run_rank(cluster.node(0), &boots[0], &config, |f| {
            rows.push(bench::table_row(f));
        })
        .unwrap();
        assert!(server.join().unwrap().unwrap().is_empty());
        assert_eq!(rows.len(), 4);
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
        pattern: Pattern::Pingpong,
        sizes: vec![],
        iterations: None,
        window: 1,
        baseline: Some(Baseline::RawTcp),
        transport: "sim".into(),
        tcp_congestion: Default::default(),
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
