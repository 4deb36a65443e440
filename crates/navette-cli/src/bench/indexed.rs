//! Indexed: one Madeleine message made of two blocks in separate memory, a
//! [`HEAD`]-byte block packed with receive mode EXPRESS and a large block
//! packed CHEAPER, both sent CHEAPER (from where they are: the engine
//! copies only what it finds small), back and forth. MPI's program
//! (`bench/mpi/indexed.c`) sends the same two blocks as one element of an
//! hindexed datatype. The row's size is both blocks. The large blocks (sent
//! and received into) are `Vec`s, or with `--memory huge`
//! [`navette::HugeBuffer`]s (`bench/compare`'s default for navette; the MPIs
//! there run in both memories and keep their faster).

use std::time::Duration;

use navette::{Gate, Node, ReceiveMode, SendMode};

use super::{BenchError, Memory, Role, SizeLimit, TAG, buffer, pattern, pattern_fill};

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

/// A large block in one of the [`Memory`] kinds.
enum Block {
    Heap(Vec<u8>),
    Huge(navette::HugeBuffer),
}

impl Block {
    /// `len` bytes in `memory`, byte `i` being `fill(i)` (written in place).
    fn new(memory: Memory, len: usize, fill: impl Fn(usize) -> u8) -> Result<Self, BenchError> {
        Ok(match memory {
            Memory::Heap => Self::Heap(buffer(len, fill)?),
            Memory::Huge => {
                let mut huge = navette::HugeBuffer::zeroed(len)?;
                for (i, byte) in huge.iter_mut().enumerate() {
                    *byte = fill(i);
                }
                Self::Huge(huge)
            }
        })
    }
}

impl std::ops::Deref for Block {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Self::Heap(v) => v,
            Self::Huge(h) => h,
        }
    }
}

impl std::ops::DerefMut for Block {
    fn deref_mut(&mut self) -> &mut [u8] {
        match self {
            Self::Heap(v) => v,
            Self::Huge(h) => h,
        }
    }
}

/// Times `count` round trips of a `size`-byte indexed message ([`HEAD`]
/// bytes and the rest, in `memory`) after `warm` untimed ones, and checks
/// what arrived.
pub(super) fn navette_indexed(
    node: &Node,
    role: Role,
    size: usize,
    memory: Memory,
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
    let head_out = pattern(HEAD, size, 0)?;
    let body_out = Block::new(memory, large, pattern_fill(size, 1))?;
    let mut head_in = vec![0u8; HEAD];
    let mut body_in = Block::new(memory, large, |_| 0)?;
    let elapsed = super::time_rounds(warm, count, || -> navette::Result<()> {
        if role == Role::Client {
            send_message(node, gate, &head_out, &body_out)?;
            receive_message(node, gate, &mut head_in, &mut body_in)
        } else {
            receive_message(node, gate, &mut head_in, &mut body_in)?;
            send_message(node, gate, &head_out, &body_out)
        }
    })?;
    if head_in != head_out || *body_in != *body_out {
        return Err(BenchError::Corrupt {
            pattern: "indexed",
            implementation: "navette",
            size,
        });
    }
    Ok(elapsed)
}
