//! The RPC shape over Madeleine messages: a header (the body's length)
//! unpacked EXPRESS, then the body unpacked CHEAPER into memory allocated
//! after reading the header — by rendezvous, straight into it — and the
//! same back.

use std::time::Duration;

use navette::{Gate, Node, ReceiveMode, SendMode};

use super::{BenchError, Role, TAG, payload};

fn send_message(node: &Node, gate: Gate, body: &[u8]) -> navette::Result<()> {
    let header = (body.len() as u64).to_le_bytes();
    let mut msg = node.begin_packing(gate, TAG)?;
    msg.pack(&header, SendMode::Safer, ReceiveMode::Express)?;
    msg.pack(body, SendMode::Cheaper, ReceiveMode::Cheaper)?;
    msg.end_packing()
}

fn receive_message(node: &Node, gate: Gate) -> navette::Result<Vec<u8>> {
    let mut msg = node.begin_unpacking(gate, TAG)?;
    let mut header = [0u8; 8];
    msg.unpack_express(&mut header, SendMode::Safer)?;
    let mut body = vec![0u8; u64::from_le_bytes(header) as usize];
    msg.unpack_cheaper(&mut body, SendMode::Cheaper)?;
    msg.end_unpacking()?;
    Ok(body)
}

/// One-way time of an RPC-shaped round trip with a `size`-byte body.
pub(super) fn navette_rpc(
    node: &Node,
    role: Role,
    size: usize,
    warm: u32,
    count: u32,
) -> Result<Duration, BenchError> {
    let peer = role.peer(node);
    let body = payload(size);
    let mut last = Vec::new();
    let elapsed = super::time_rounds(warm, count, || -> navette::Result<()> {
        if role == Role::Client {
            send_message(node, peer, &body)?;
            last = receive_message(node, peer)?;
        } else {
            last = receive_message(node, peer)?;
            send_message(node, peer, &last)?;
        }
        Ok(())
    })?;
    if last != body {
        return Err(BenchError::Corrupt {
            pattern: "rpc",
            implementation: "navette",
            size,
        });
    }
    Ok(elapsed)
}
