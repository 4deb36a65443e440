//! Indexed: one Madeleine message made of two blocks in separate memory, a
//! [`HEAD`]-byte block packed with receive mode EXPRESS and a large block
//! packed CHEAPER, both sent CHEAPER (from where they are: the engine
//! copies only what it finds small), back and forth. MPI's program
//! (`bench/mpi/indexed.c`) sends the same two blocks as one element of an
//! hindexed datatype. The row's size is both blocks.

use std::time::Duration;

use navette::{Gate, Node, ReceiveMode, SendMode};

use super::{BenchError, Role, SizeLimit, TAG, pattern, zeroed};

/// Bytes of the first block.
pub const HEAD: usize = 64;

fn send_message(node: &Node, gate: Gate, head: &[u8], body: &[u8]) -> navette::Result<()> {
    let mut msg = node.begin_packing(gate, TAG)?;
    msg.pack(head, SendMode::Cheaper, ReceiveMode::Express)?;
    msg.pack(body, SendMode::Cheaper, ReceiveMode::Cheaper)?;
    msg.end_packing()
}

fn receive_message(
    node: &Node,
    gate: Gate,
    head: &mut [u8],
    body: &mut [u8],
) -> navette::Result<()> {
    let mut msg = node.begin_unpacking(gate, TAG)?;
    msg.unpack_express(head, SendMode::Cheaper)?;
    msg.unpack_cheaper(body, SendMode::Cheaper)?;
    msg.end_unpacking().map(drop)
}

/// Times `count` round trips of a `size`-byte indexed message ([`HEAD`]
/// bytes and the rest) after `warm` untimed ones, and checks what arrived.
pub(super) fn navette_indexed(
    node: &Node,
    role: Role,
    size: usize,
    warm: u32,
    count: u32,
) -> Result<Duration, BenchError> {
    let large = size.checked_sub(HEAD).ok_or(BenchError::Size {
        pattern: "indexed",
        what: "a message",
        size,
        limit: SizeLimit::UnderHeader { header: HEAD },
    })?;
    let gate = role.peer(node);
    // Four separate allocations: what goes out, what comes in.
    let (head_out, body_out) = (pattern(HEAD, size, 0)?, pattern(large, size, 1)?);
    let (mut head_in, mut body_in) = (vec![0u8; HEAD], zeroed(large)?);
    let elapsed = super::time_rounds(warm, count, || -> navette::Result<()> {
        if role == Role::Client {
            send_message(node, gate, &head_out, &body_out)?;
            receive_message(node, gate, &mut head_in, &mut body_in)
        } else {
            receive_message(node, gate, &mut head_in, &mut body_in)?;
            send_message(node, gate, &head_out, &body_out)
        }
    })?;
    if head_in != head_out || body_in != body_out {
        return Err(BenchError::Corrupt {
            pattern: "indexed",
            implementation: "navette",
            size,
        });
    }
    Ok(elapsed)
}
