//! Multi-segment ping-pong: each ping and each pong is a series of
//! `segments` messages of `size` bytes, each sent by its own non-blocking
//! send. Segment k travels on its own channel (`ChannelId(k + 1)`, so never
//! the default channel the other patterns use) with tag k: the engine opens
//! a channel on first use, so one per segment costs nothing, and it is what
//! MPI's program does with one duplicated communicator per segment
//! (`bench/mpi/multiseg.c`). A strategy that aggregates across the gates of
//! one peer puts the segments in one packet: over tcp the open packet
//! leaves at the next round; over shared memory segments of at most
//! `ShmConfig::stage_max` bytes wait in it until the sender waits for
//! them, and larger ones leave at once when the rail is idle, so the
//! receiver starts on the first while the sender writes the next.
//!
//! Each segment goes by `Node::isend_safer_into` from a buffer the rank
//! keeps: as MPI's `MPI_Isend` of a small buffer into a request array, the
//! data is copied as the message leaves (or into its peer's open packet),
//! the buffer is never shared or counted, and the request goes straight
//! into the rank's list of sends.
//!
//! Rank 0 posts its receives for the pong, issues its sends, then waits for
//! all of them; rank 1 posts its receives, waits for the ping, then sends
//! and waits. Each wait is for a whole list of requests at once, as MPI's
//! program's `MPI_Waitall`. One-way time is half the round trip of a whole
//! series.

use std::time::Duration;

use navette::{ChannelId, Gate, Node, Received, Request, wait_all_into};

use super::{BenchError, Role, is_pattern, pattern, zeroed};

/// Most segments per series (the channels are numbered in 16 bits).
pub const MAX_SEGMENTS: usize = 1024;

/// The gate and tag of segment `k` towards `peer`.
fn flow(k: usize, peer: navette::Rank) -> Result<(Gate, u64), BenchError> {
    let channel = u16::try_from(k + 1).map_err(|_| BenchError::NoChannel { segment: k })?;
    Ok((Gate::new(ChannelId(channel), peer), k as u64))
}

/// Waits for `recvs` (emptying it) and puts their buffers back into
/// `buffers`, in order; `landed` is storage kept between calls.
fn land<'n>(
    recvs: &mut Vec<Request<'n, Received>>,
    landed: &mut Vec<navette::Result<Received>>,
    buffers: &mut Vec<Vec<u8>>,
) -> navette::Result<()> {
    wait_all_into(recvs, landed);
    for outcome in landed.drain(..) {
        buffers.push(outcome?.data);
    }
    Ok(())
}

/// Times `count` series of `segments` segments of `size` bytes, after
/// `warm` untimed ones, and checks the last series received.
pub(super) fn navette_multiseg(
    node: &Node,
    role: Role,
    segments: usize,
    size: usize,
    warm: u32,
    count: u32,
) -> Result<Duration, BenchError> {
    let peer = role.peer(node).peer;
    let flows = (0..segments)
        .map(|k| flow(k, peer))
        .collect::<Result<Vec<_>, _>>()?;
    let data = (0..segments)
        .map(|k| pattern(size, size, k))
        .collect::<Result<Vec<_>, _>>()?;
    let mut buffers = (0..segments)
        .map(|_| zeroed(size))
        .collect::<Result<Vec<_>, _>>()?;
    // The request lists are reused from series to series: as MPI's program
    // keeps its request arrays, the loop allocates nothing of its own.
    let mut recvs = Vec::with_capacity(segments);
    let mut sends = Vec::with_capacity(segments);
    let mut landed = Vec::with_capacity(segments);
    let mut sent = Vec::with_capacity(segments);
    let series = |count: u32| -> navette::Result<()> {
        for _ in 0..count {
            recvs.extend(
                buffers
                    .drain(..)
                    .zip(&flows)
                    .map(|(buf, &(gate, tag))| node.irecv(gate, tag, buf)),
            );
            // The server answers once the whole ping is in.
            if role == Role::Server {
                land(&mut recvs, &mut landed, &mut buffers)?;
            }
            for (&(gate, tag), bytes) in flows.iter().zip(&data) {
                node.isend_safer_into(gate, tag, bytes, &mut sends)?;
            }
            wait_all_into(&mut sends, &mut sent);
            for outcome in sent.drain(..) {
                outcome?;
            }
            land(&mut recvs, &mut landed, &mut buffers)?;
        }
        Ok(())
    };
    let elapsed = super::time_series(warm, count, series)?;
    let intact = buffers.len() == segments
        && buffers
            .iter()
            .enumerate()
            .all(|(k, got)| is_pattern(got, size, size, k));
    if !intact {
        return Err(BenchError::Corrupt {
            pattern: "multiseg",
            implementation: "navette",
            size,
        });
    }
    Ok(elapsed)
}
