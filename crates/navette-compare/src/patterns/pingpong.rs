//! Ping-pong: one message of each size back and forth between two
//! processes; one-way latency = round trip / 2, bandwidth = size / one-way
//! time. Over shm, the floor (cache-line hand-off, memcpy) comes first;
//! over tcp, navette brings its raw TCP baseline in the same run.

use std::time::{Duration, Instant};

use super::{Context, Outcome, Pattern};
use crate::args::Transport;
use crate::record::{SkipKind, implementation as imp};
use crate::runner::{Background, Output, Runner};
use crate::tools::{Figure, default_iterations, floor, navette, openmpi, ucx, warmup};

const PATTERN: Pattern = Pattern::Pingpong;

pub(super) fn run(ctx: &mut Context<'_>) -> Outcome {
    let mut outcome = Outcome::default();
    if ctx.transport == Transport::Shm {
        measure_floor(ctx, &mut outcome);
    }
    measure_navette(ctx, &mut outcome);
    measure_openmpi(ctx, &mut outcome);
    measure_ucx(ctx, &mut outcome);
    outcome
}

/// The stem of raw file names: `pingpong-shm-TOOL` (and the round).
fn raw_name(ctx: &Context<'_>, tool: &str) -> String {
    ctx.raw_name(PATTERN, tool)
}

/// Skips `imps` at every size (`sizes` empty for the size-less cache line).
fn skip_all(ctx: &Context<'_>, outcome: &mut Outcome, imps: &[&str], kind: SkipKind, reason: &str) {
    for &name in imps {
        let sizes = if name == imp::CACHELINE {
            Vec::new()
        } else {
            ctx.sizes.to_vec()
        };
        outcome.skip(ctx, PATTERN, name, kind, sizes, reason.to_owned());
    }
}

/// Runs a tool; on a start failure, skips `imps` at every size.
fn run_tool(
    ctx: &mut Context<'_>,
    outcome: &mut Outcome,
    imps: &[&str],
    tool: &str,
    command: &mut std::process::Command,
) -> Option<Output> {
    let name = raw_name(ctx, tool);
    match ctx.runner.run(&name, command) {
        Ok(output) => Some(output),
        Err(e) => {
            let reason = format!("could not run: {e}");
            skip_all(ctx, outcome, imps, SkipKind::Failed, &reason);
            None
        }
    }
}

fn measure_floor(ctx: &mut Context<'_>, outcome: &mut Outcome) {
    let mut command = floor::command(&ctx.programs.floor, ctx.sizes);
    let imps = [imp::CACHELINE, imp::MEMCPY];
    let Some(output) = run_tool(ctx, outcome, &imps, "floor", &mut command) else {
        return;
    };
    let failure = (!output.success()).then(|| output.failure());
    match floor::parse(&output.stdout) {
        Ok(found) => {
            match found.cacheline {
                Some(line) => outcome.push(ctx, PATTERN, imp::CACHELINE, &[line]),
                None => {
                    let reason = failure
                        .clone()
                        .unwrap_or_else(|| "no cacheline line".into());
                    skip_all(ctx, outcome, &[imp::CACHELINE], SkipKind::Failed, &reason);
                }
            }
            outcome.settle(ctx, PATTERN, imp::MEMCPY, &found.memcpy, failure);
        }
        Err(e) => {
            let reason = failure.unwrap_or_else(|| e.to_string());
            skip_all(ctx, outcome, &imps, SkipKind::Failed, &reason);
        }
    }
}

fn measure_navette(ctx: &mut Context<'_>, outcome: &mut Outcome) {
    let json = ctx
        .runner
        .raw_dir()
        .join(format!("{}.json", raw_name(ctx, "navette")));
    let _ = std::fs::remove_file(&json);
    let raw_tcp = ctx.transport == Transport::Tcp;
    let imps: &[&str] = if raw_tcp {
        &[imp::NAVETTE, imp::RAW_TCP]
    } else {
        &[imp::NAVETTE]
    };
    if let Some(reason) = &ctx.programs.navette_unbuilt {
        skip_all(ctx, outcome, imps, SkipKind::Failed, reason);
        return;
    }
    let request = navette::BenchRequest {
        pattern: PATTERN.name(),
        driver: ctx.transport.name(),
        sizes: ctx.sizes,
        segments: None,
        threads: None,
        iterations: ctx.iterations,
        raw_tcp,
        memory: None,
        json: &json,
    };
    let mut command = navette::command(&ctx.programs.navette, &request);
    let Some(output) = run_tool(ctx, outcome, imps, "navette", &mut command) else {
        return;
    };
    let (records, failure) = match navette::read_run(&output, &json) {
        Ok(read) => read,
        Err((kind, reason)) => {
            skip_all(ctx, outcome, imps, kind, &reason);
            return;
        }
    };
    for &name in imps {
        let (ours, theirs): (Vec<_>, Vec<_>) = records
            .iter()
            .filter(|r| r.implementation == name && r.pattern == PATTERN.name())
            .partition(|r| r.transport == ctx.transport.name());
        if let Some(other) = theirs.first() {
            let reason = format!(
                "navette ran over {}, not {}: its rows are not used",
                other.transport,
                ctx.transport.name()
            );
            skip_all(ctx, outcome, &[name], SkipKind::Failed, &reason);
            continue;
        }
        let figures: Vec<Figure> = ours
            .iter()
            .map(|r| Figure {
                size: r.size,
                latency_us: r.latency_us,
                bandwidth_mbps: r.bandwidth_mbps,
            })
            .collect();
        outcome.settle(ctx, PATTERN, name, &figures, failure.clone());
    }
}

fn measure_openmpi(ctx: &mut Context<'_>, outcome: &mut Outcome) {
    let mut command = openmpi::command(
        &ctx.programs.mpi_pingpong,
        ctx.transport,
        ctx.sizes,
        ctx.iterations,
    );
    let Some(output) = run_tool(ctx, outcome, &[imp::OPENMPI], "openmpi", &mut command) else {
        return;
    };
    let failure = (!output.success()).then(|| output.failure());
    let figures = match openmpi::parse(&output.stdout) {
        Ok(figures) => figures,
        Err(e) => {
            let reason = failure.unwrap_or_else(|| e.to_string());
            skip_all(ctx, outcome, &[imp::OPENMPI], SkipKind::Failed, &reason);
            return;
        }
    };
    outcome.settle(ctx, PATTERN, imp::OPENMPI, &figures, failure);
}

fn measure_ucx(ctx: &mut Context<'_>, outcome: &mut Outcome) {
    let mut figures = Vec::new();
    let mut first_failure = None;
    for &size in ctx.sizes {
        let mut figure = Figure {
            size,
            latency_us: None,
            bandwidth_mbps: None,
        };
        for test in [ucx::Test::TagLat, ucx::Test::TagBw] {
            match ucx_test(ctx, test, size) {
                Ok((result, lanes)) => {
                    match test {
                        ucx::Test::TagLat => figure.latency_us = Some(result.latency_us),
                        ucx::Test::TagBw => figure.bandwidth_mbps = Some(result.bandwidth_mbps),
                    }
                    if let Some(lanes) = lanes {
                        let note = format!("ucx transports: {lanes}");
                        if !outcome.notes.contains(&note) {
                            outcome.notes.push(note);
                        }
                    }
                }
                Err(e) => {
                    eprintln!("compare: ucx {} size {size}: {e}", test.name());
                    first_failure.get_or_insert(format!("{} size {size}: {e}", test.name()));
                }
            }
        }
        if figure.latency_us.is_some() || figure.bandwidth_mbps.is_some() {
            figures.push(figure);
        }
    }
    outcome.settle(ctx, PATTERN, imp::UCX, &figures, first_failure.clone());
    if !figures.is_empty() {
        outcome.notes.push(
            "ucx bandwidth is tag_bw's streaming figure (messages in flight); the others' is \
             ping-pong size / one-way latency (for ucx: size / its latency)"
                .into(),
        );
    }
    if let (Some(reason), true) = (first_failure, !figures.is_empty()) {
        outcome
            .notes
            .push(format!("ucx: some figures are missing: {reason}"));
    }
}

/// One ucx_perftest server and client pair; the client's figures and the
/// transports it used.
fn ucx_test(
    ctx: &mut Context<'_>,
    test: ucx::Test,
    size: usize,
) -> Result<(ucx::Final, Option<String>), String> {
    let iterations = ctx.iterations.unwrap_or_else(|| default_iterations(size));
    let port = ucx::free_port().map_err(|e| format!("no free port: {e}"))?;
    let name = raw_name(ctx, &format!("ucx-{}-{size}", test.name()));
    let mut server = ctx
        .runner
        .start(
            &format!("{name}-server"),
            &mut ucx::server(ctx.transport, port),
        )
        .map_err(|e| e.to_string())?;
    let ready = wait_listening(&mut server, port, Duration::from_secs(10));
    let client = if ready {
        let mut command = ucx::client(
            ctx.transport,
            port,
            test,
            size,
            iterations,
            warmup(iterations),
        );
        Some(ctx.runner.run(&format!("{name}-client"), &mut command))
    } else {
        None
    };
    let server = ctx.runner.finish_background(server);
    let client = match client {
        None => {
            let said = server
                .map(|s| ucx::error(&format!("{}\n{}", s.stdout, s.stderr)).unwrap_or(s.failure()))
                .unwrap_or_else(|e| e.to_string());
            return Err(format!("the server did not listen on port {port}: {said}"));
        }
        Some(client) => client.map_err(|e| e.to_string())?,
    };
    let all = format!("{}\n{}", client.stdout, client.stderr);
    let result = ucx::parse(&client.stdout).map_err(|e| match ucx::error(&all) {
        Some(said) => said,
        None if client.success() => e.to_string(),
        None => client.failure(),
    })?;
    Ok((result, ucx::lanes(&all)))
}

/// Waits until something listens on `port`, or the server exits, or
/// `limit` passes.
fn wait_listening(server: &mut Background, port: u16, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        let listening = ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|path| {
            std::fs::read_to_string(path).is_ok_and(|table| ucx::listening(&table, port))
        });
        if listening {
            return true;
        }
        if Runner::has_exited(server) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}
