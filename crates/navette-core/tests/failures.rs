//! Unpacks that do not mirror the packs, aborted sends and abandoned
//! receives: each fails with its typed error, rendezvous senders are told
//! instead of left waiting, and the gate goes on working.

mod common;

use common::{Net, Piece, Posted, caps, from, pieces};
use navette_core::{EngineConfig, ReceiveMode, RequestError, SendMode, TagMatch, UsageError};

const C: SendMode = SendMode::Cheaper;
const CR: ReceiveMode = ReceiveMode::Cheaper;

/// Sends and receives one more message on the gate, checking it arrives.
fn gate_still_works(net: &mut Net, tag: u64) {
    let msg = pieces(&[5, 3000, 7], 100 + tag);
    let r = net.recv(1, from(0), TagMatch::exact(tag), &msg, false);
    let sent = net.send(0, 1, tag, &msg);
    net.run();
    net.check_received(1, 0, tag, &r, &msg);
    for req in sent {
        net.ok(0, req);
    }
    assert_eq!(net.engines[1].buffered_bytes(), 0, "nothing left buffered");
}

/// Sends `msg` from rank 0 to rank 1 before or after `post` posts the
/// receive side, then runs the network; the sender's requests and what
/// `post` returned.
fn exchange<T>(
    net: &mut Net,
    msg: &[Piece],
    posted_first: bool,
    post: impl FnOnce(&mut Net) -> T,
) -> (Vec<navette_core::ReqId>, T) {
    let sent_first = (!posted_first).then(|| {
        let sent = net.send(0, 1, 1, msg);
        net.run();
        sent
    });
    let posted = post(net);
    let sent = sent_first.unwrap_or_else(|| net.send(0, 1, 1, msg));
    net.run();
    (sent, posted)
}

/// Receives `msg`'s first pieces as sent, then one unpack of `len` bytes
/// with the given modes; returns (sender's requests, the bad unpack, end).
fn mismatched(
    threshold: usize,
    posted_first: bool,
    msg: &[Piece],
    len: usize,
    send: SendMode,
    recv: ReceiveMode,
) -> (Net, Vec<navette_core::ReqId>, Posted, navette_core::ReqId) {
    let mut net = Net::new(2, 1, caps(threshold, 1000));
    let (sent, (first, bad, end)) = exchange(&mut net, msg, posted_first, |net| {
        let key = net.recv_begin(1, from(0), TagMatch::exact(1));
        let first = net.unpack(1, key, msg[0].data.len(), msg[0].send, msg[0].recv, false);
        let bad = net.unpack(1, key, len, send, recv, false);
        let end = net.recv_end(1, key);
        (first, bad, end)
    });
    assert_eq!(
        net.read(1, first.dest),
        msg[0].data,
        "the good piece landed"
    );
    (net, sent, bad, end)
}

#[test]
fn size_mismatch() {
    for threshold in [0, 64] {
        for posted_first in [true, false] {
            let msg = pieces(&[10, 2000], 1);
            let (mut net, sent, bad, end) = mismatched(threshold, posted_first, &msg, 1999, C, CR);
            let expected = RequestError::SizeMismatch {
                piece: 1,
                sent: 2000,
                posted: 1999,
            };
            assert_eq!(net.err(1, bad.req), expected);
            assert_eq!(net.err(1, end), expected);
            // 2000 bytes go by rendezvous: the sender is told.
            assert_eq!(net.err(0, sent[1]), RequestError::RejectedByReceiver);
            gate_still_works(&mut net, 2);
        }
    }
}

#[test]
fn size_mismatch_on_eager_piece_completes_sender() {
    let msg = pieces(&[10, 20], 1);
    let (mut net, sent, bad, end) = mismatched(64, true, &msg, 21, C, CR);
    assert!(matches!(
        net.err(1, bad.req),
        RequestError::SizeMismatch { piece: 1, .. }
    ));
    net.err(1, end);
    // Eager data has left the sender's memory: its request succeeded.
    net.ok(0, sent[1]);
    gate_still_works(&mut net, 2);
}

#[test]
fn mode_mismatch() {
    for threshold in [0, 64] {
        for posted_first in [true, false] {
            let msg = vec![
                Piece::new(10, 1),
                Piece::new(2000, 2).modes(SendMode::Later, ReceiveMode::Express),
            ];
            let (mut net, sent, bad, end) =
                mismatched(threshold, posted_first, &msg, 2000, SendMode::Safer, CR);
            let expected = RequestError::ModeMismatch {
                piece: 1,
                sent_send: SendMode::Later,
                sent_recv: ReceiveMode::Express,
                posted_send: SendMode::Safer,
                posted_recv: ReceiveMode::Cheaper,
            };
            assert_eq!(net.err(1, bad.req), expected);
            assert_eq!(net.err(1, end), expected);
            assert_eq!(net.err(0, sent[1]), RequestError::RejectedByReceiver);
            gate_still_works(&mut net, 2);
        }
    }
}

/// The receiver unpacks fewer pieces than were packed: the end fails and
/// the rest of the message, rendezvous pieces included, is refused.
#[test]
fn receiver_unpacks_fewer() {
    for threshold in [0, 64] {
        for posted_first in [true, false] {
            let mut net = Net::new(2, 1, caps(threshold, 1000));
            let msg = pieces(&[10, 3000, 4000], 3);
            let (sent, (only, end)) = exchange(&mut net, &msg, posted_first, |net| {
                let key = net.recv_begin(1, from(0), TagMatch::exact(1));
                let only = net.unpack(1, key, 10, C, CR, false);
                let end = net.recv_end(1, key);
                (only, end)
            });
            assert_eq!(net.read(1, only.dest), msg[0].data);
            assert!(
                matches!(
                    net.err(1, end),
                    RequestError::PieceCountMismatch { unpacked: 1, .. }
                ),
                "{:?}",
                net.outcome(1, end)
            );
            assert_eq!(net.err(0, sent[1]), RequestError::RejectedByReceiver);
            assert_eq!(net.err(0, sent[2]), RequestError::RejectedByReceiver);
            gate_still_works(&mut net, 2);
        }
    }
}

/// The receiver unpacks more pieces than were packed.
#[test]
fn receiver_unpacks_more() {
    for threshold in [0, 64] {
        for posted_first in [true, false] {
            let mut net = Net::new(2, 1, caps(threshold, 1000));
            let msg = pieces(&[10, 3000], 4);
            let (sent, (a, b, extra, end)) = exchange(&mut net, &msg, posted_first, |net| {
                let key = net.recv_begin(1, from(0), TagMatch::exact(1));
                let a = net.unpack(1, key, 10, C, CR, false);
                let b = net.unpack(1, key, 3000, C, CR, false);
                let extra = net.unpack(1, key, 5, C, CR, false);
                let end = net.recv_end(1, key);
                (a, b, extra, end)
            });
            assert_eq!(net.read(1, a.dest), msg[0].data);
            assert_eq!(net.read(1, b.dest), msg[1].data);
            let expected = RequestError::PieceCountMismatch {
                sent: navette_core::PiecesSent::Exactly(2),
                unpacked: 3,
            };
            assert_eq!(
                net.err(1, extra.req),
                RequestError::MessageFailed(Box::new(expected.clone()))
            );
            assert_eq!(net.err(1, end), expected);
            for req in sent {
                net.ok(0, req);
            }
            gate_still_works(&mut net, 2);
        }
    }
}

/// A tagged receive smaller than the message: Truncated, and a rendezvous
/// sender is refused.
#[test]
fn truncated_tagged_receive() {
    for (threshold, sender) in [(0, Err(RequestError::RejectedByReceiver)), (4096, Ok(()))] {
        let mut net = Net::new(2, 1, caps(threshold, 1000));
        let (recv, _) = recv_tagged_3(&mut net, 100);
        let sent = send_tagged_3(&mut net, vec![1; 200]);
        net.run();
        assert!(matches!(
            net.err(1, recv),
            RequestError::Truncated {
                sent: 200,
                posted: 100
            }
        ));
        assert_eq!(net.outcome(0, sent).unwrap().clone().map(|_| ()), sender);
        gate_still_works(&mut net, 4);
    }
}

/// A sender abandons its message after some pieces; the receiver's next
/// unpack (or its end) fails with `Aborted`.
#[test]
fn send_abort() {
    for threshold in [0, 64] {
        for posted_first in [true, false] {
            for unpack_next in [true, false] {
                let mut net = Net::new(2, 1, caps(threshold, 1000));
                let key = posted_first.then(|| net.recv_begin(1, from(0), TagMatch::exact(1)));
                let mut out = net.begin(0, 1, 1);
                let first = net.pack(0, &mut out, &Piece::new(2000, 1), false);
                net.engines[0].send_abort(out);
                net.run();
                let key = key.unwrap_or_else(|| net.recv_begin(1, from(0), TagMatch::exact(1)));
                let a = net.unpack(1, key, 2000, C, CR, false);
                let next = unpack_next.then(|| net.unpack(1, key, 10, C, CR, false));
                let end = net.recv_end(1, key);
                net.run();
                net.ok(0, first);
                assert_eq!(net.read(1, a.dest), Piece::new(2000, 1).data);
                if let Some(next) = next {
                    assert_eq!(net.err(1, next.req), RequestError::Aborted);
                }
                assert_eq!(net.err(1, end), RequestError::Aborted);
                gate_still_works(&mut net, 2);
            }
        }
    }
}

/// A sender abandons its message before any piece left: the empty aborted
/// message in its place fails the receiver's first unpack and its end,
/// posted before it arrives or after, and a tagged receive that matches it.
#[test]
fn send_abort_unsent() {
    for posted_first in [true, false] {
        let mut net = Net::new(2, 1, caps(64, 1000));
        let key = posted_first.then(|| net.recv_begin(1, from(0), TagMatch::exact(1)));
        let out = net.begin(0, 1, 1);
        net.engines[0].send_abort_unsent(out);
        net.run();
        let key = key.unwrap_or_else(|| net.recv_begin(1, from(0), TagMatch::exact(1)));
        let first = net.unpack(1, key, 8, C, CR, false);
        let end = net.recv_end(1, key);
        net.run();
        assert_eq!(net.err(1, first.req), RequestError::Aborted);
        assert_eq!(net.err(1, end), RequestError::Aborted);
        gate_still_works(&mut net, 2);
    }
    let mut net = Net::new(2, 1, caps(64, 1000));
    let out = net.begin(0, 1, 5);
    net.engines[0].send_abort_unsent(out);
    net.run();
    let dest = net.alloc(1, vec![0; 16]);
    let channel = common::CH;
    let tagged =
        net.engines[1].recv_tagged(channel, from(0), TagMatch::exact(5), dest, &mut net.mems[1]);
    net.run();
    assert_eq!(net.err(1, tagged), RequestError::Aborted);
}

/// Aborting before the first piece or after the last sends nothing.
#[test]
fn send_abort_without_effect() {
    let mut net = Net::new(2, 1, caps(64, 1000));
    let out = net.begin(0, 1, 1);
    net.engines[0].send_abort(out);
    assert!(!net.engines[0].has_pending(1));
    let mut out = net.begin(0, 1, 1);
    let p = Piece::new(3, 3);
    net.pack(0, &mut out, &p, true);
    net.engines[0].send_abort(out);
    let r = net.recv(
        1,
        from(0),
        TagMatch::exact(1),
        std::slice::from_ref(&p),
        false,
    );
    net.run();
    net.check_received(1, 0, 1, &r, &[p]);
}

/// The receiver abandons a message halfway: the rest is dropped, the
/// sender's rendezvous pieces are refused, later messages arrive.
#[test]
fn recv_abandon() {
    for threshold in [0, 64] {
        for posted_first in [true, false] {
            let mut net = Net::new(2, 1, caps(threshold, 1000));
            let msg = pieces(&[10, 3000, 20, 4000], 8);
            let (sent, (key, a, deferred)) = exchange(&mut net, &msg, posted_first, |net| {
                let key = net.recv_begin(1, from(0), TagMatch::exact(1));
                let a = net.unpack(1, key, 10, C, CR, false);
                let deferred = net.unpack(1, key, 3000, C, CR, true);
                (key, a, deferred)
            });
            assert_eq!(net.read(1, a.dest), msg[0].data);
            net.engines[1].recv_abandon(key);
            net.run();
            assert_eq!(
                net.err(1, deferred.req),
                RequestError::MessageFailed(Box::new(RequestError::Cancelled))
            );
            assert!(net.engines[1].recv_end(key).is_err(), "the message is gone");
            assert_eq!(net.err(0, sent[1]), RequestError::RejectedByReceiver);
            assert_eq!(net.err(0, sent[3]), RequestError::RejectedByReceiver);
            gate_still_works(&mut net, 2);
        }
    }
}

/// Abandoning a receive that never matched leaves the message for the next.
#[test]
fn recv_abandon_before_match() {
    let mut net = Net::new(2, 1, caps(64, 1000));
    let key = net.recv_begin(1, from(0), TagMatch::exact(1));
    net.engines[1].recv_abandon(key);
    let msg = pieces(&[5, 500], 9);
    net.send(0, 1, 1, &msg);
    net.run();
    assert!(net.pending(1, key));
    let r = net.recv(1, from(0), TagMatch::exact(1), &msg, false);
    net.run();
    net.check_received(1, 0, 1, &r, &msg);
}

/// Unpacking on a message that already failed fails at once.
#[test]
fn unpack_after_failure() {
    let msg = pieces(&[10, 20, 30], 1);
    let (mut net, _, _, end) = mismatched(64, false, &msg, 21, C, CR);
    net.err(1, end);
    assert!(net.engines[1].recv_end(end).is_err());
    gate_still_works(&mut net, 2);
}

/// A tagged receive posted before anything arrived waits inline in its
/// channel: losing its only source fails it, while one from any source
/// still completes from another peer.
#[test]
fn posted_tagged_receives_and_a_lost_peer() {
    let mut net = Net::new(3, 1, caps(4096, 1000));
    let d1 = net.alloc(2, vec![0; 8]);
    let d2 = net.alloc(2, vec![0; 8]);
    let only_0 = net.engines[2].recv_tagged(
        common::CH,
        from(0),
        TagMatch::exact(1),
        d1,
        &mut net.mems[2],
    );
    let any = net.engines[2].recv_tagged(
        common::CH,
        navette_core::Source::Any,
        TagMatch::exact(1),
        d2,
        &mut net.mems[2],
    );
    assert_eq!(net.engines[2].report().requests.len(), 2);
    let rail = net.rails_from(0, 2)[0];
    net.engines[2].close_rail(rail);
    net.collect();
    assert_eq!(
        net.err(2, only_0),
        RequestError::PeerUnreachable { peer: 0 }
    );
    assert!(net.outcome(2, any).is_none());
    let src = net.alloc(1, b"from one".to_vec());
    let out = net.begin(1, 2, 1);
    net.engines[1].send_tagged(out, src);
    net.run();
    assert_eq!(net.ok(2, any).peer, 1);
    // A receive posted after the loss fails at once.
    let d3 = net.alloc(2, vec![0; 8]);
    let late = net.engines[2].recv_tagged(
        common::CH,
        from(0),
        TagMatch::exact(1),
        d3,
        &mut net.mems[2],
    );
    net.collect();
    assert_eq!(net.err(2, late), RequestError::PeerUnreachable { peer: 0 });
}

/// A message receive waiting for its match from a peer that is lost fails
/// its match (a caller waiting only for the match, as an RPC's reply
/// does, would otherwise wait for ever); one from any peer keeps waiting.
#[test]
fn an_unmatched_message_receive_from_a_lost_peer_fails_its_match() {
    let mut net = Net::new(3, 1, caps(4096, 1000));
    let only_0 = net.recv_begin(2, from(0), TagMatch::exact(1));
    let any = net.recv_begin(2, navette_core::Source::Any, TagMatch::exact(1));
    let rail = net.rails_from(0, 2)[0];
    net.engines[2].close_rail(rail);
    net.collect();
    assert_eq!(
        net.err(2, only_0),
        RequestError::PeerUnreachable { peer: 0 }
    );
    assert!(net.pending(2, any));
    // Begun after the loss: its match fails at once too.
    let late = net.recv_begin(2, from(0), TagMatch::exact(2));
    net.collect();
    assert_eq!(net.err(2, late), RequestError::PeerUnreachable { peer: 0 });
}

/// A receive from a rank no message can come from (the engine's own, or
/// one past the job's size) fails as it is posted, saying why, whether it
/// is a message receive, a tagged one or one on a channel with unexpected
/// messages; a message still reaches a receive from any source.
#[test]
fn receives_from_oneself_or_outside_the_job_fail_at_once() {
    let mut net = Net::new(2, 1, caps(4096, 1000));
    let not_in_job = |rank| RequestError::Refused(UsageError::NotInJob { rank, size: 2 });
    let from_self = RequestError::Refused(UsageError::RecvFromSelf(1));
    let begun = [1, 2, u32::MAX].map(|rank| {
        (
            rank,
            net.recv_begin(1, navette_core::Source::Rank(rank), TagMatch::any()),
        )
    });
    let tagged = |net: &mut Net, rank: u32| {
        let dest = net.alloc(1, vec![0; 8]);
        let req = net.engines[1].recv_tagged(
            common::CH,
            navette_core::Source::Rank(rank),
            TagMatch::any(),
            dest,
            &mut net.mems[1],
        );
        (rank, req)
    };
    let quiet = [tagged(&mut net, 1), tagged(&mut net, 2)];
    // A message no posted receive takes stays unexpected on the channel.
    let src = net.alloc(0, b"unexpected".to_vec());
    let out = net.begin(0, 1, 7);
    net.engines[0].send_tagged(out, src);
    net.run();
    let busy = [tagged(&mut net, 1), tagged(&mut net, 3)];
    net.collect();
    for (rank, req) in begun.into_iter().chain(quiet).chain(busy) {
        let expected = if rank == 1 {
            from_self.clone()
        } else {
            not_in_job(rank)
        };
        assert_eq!(net.err(1, req), expected, "a receive from rank {rank}");
    }
    let dest = net.alloc(1, vec![0; 16]);
    let any = net.engines[1].recv_tagged(
        common::CH,
        navette_core::Source::Any,
        TagMatch::any(),
        dest,
        &mut net.mems[1],
    );
    net.collect();
    assert_eq!(net.ok(1, any).peer, 0);
}

/// A tagged receive given up (`recv_tagged_cancel`): not yet matched, it
/// completes Cancelled and the message goes to the next receive; matched
/// by a rendezvous still under way, that message is dropped as it comes,
/// nothing lands in the memory given up, and the gate goes on.
#[test]
fn cancelled_tagged_receive() {
    // Unmatched, inline and promoted (posted behind an unexpected message).
    for behind_unexpected in [false, true] {
        let mut net = Net::new(2, 1, caps(4096, 1000));
        if behind_unexpected {
            net.send(0, 1, 9, &pieces(&[4], 1));
            net.run();
        }
        let (recv, dest) = recv_tagged_3(&mut net, 100);
        assert!(net.engines[1].recv_tagged_cancel(common::CH, recv));
        net.collect();
        assert_eq!(net.err(1, recv), RequestError::Cancelled);
        send_tagged_3(&mut net, vec![7; 50]);
        net.run();
        assert!(net.read(1, dest).iter().all(|&b| b == 0));
        let (again, next) = recv_tagged_3(&mut net, 100);
        net.run();
        assert_eq!(net.ok(1, again).len, 50);
        assert!(net.read(1, next)[..50].iter().all(|&b| b == 7));
    }
    // Matched by a rendezvous whose data has not come.
    let mut net = Net::new(2, 1, caps(0, 1000));
    let (recv, dest) = recv_tagged_3(&mut net, 200);
    let sent = send_tagged_3(&mut net, vec![1; 200]);
    net.transmit();
    // The request to send reaches the receiver, which matches it.
    net.deliver_one(0);
    assert!(!net.engines[1].recv_tagged_cancel(common::CH, recv));
    // Its owner takes its memory back (as a node releases the receive's
    // registration under the same lock): the data that comes is dropped.
    let given_up = net.mems[1].remove(dest.handle);
    assert!(given_up.is_some_and(|b| b.iter().all(|&x| x == 0)));
    net.collect();
    assert_eq!(net.err(1, recv), RequestError::Cancelled);
    net.run();
    assert!(!net.pending(0, sent), "the sender is done");
    assert!(net.errors.is_empty(), "{:?}", net.errors);
    gate_still_works(&mut net, 4);
}

/// Rank 1's tagged receive from rank 0 with tag 3 into `len` bytes: its
/// request and memory.
fn recv_tagged_3(net: &mut Net, len: usize) -> (navette_core::ReqId, navette_core::MemRef) {
    let dest = net.alloc(1, vec![0; len]);
    let recv = net.engines[1].recv_tagged(
        common::CH,
        from(0),
        TagMatch::exact(3),
        dest,
        &mut net.mems[1],
    );
    (recv, dest)
}

/// Rank 0's tagged send of `data` to rank 1 with tag 3: its request.
fn send_tagged_3(net: &mut Net, data: Vec<u8>) -> navette_core::ReqId {
    let src = net.alloc(0, data);
    let out = net.begin(0, 1, 3);
    net.engines[0].send_tagged(out, src)
}

/// A send that finds no rail says why: to this engine's own rank, to a
/// rank past the job's size, or (a rank of the job) to a peer lost.
#[test]
fn a_send_with_no_rail_says_why() {
    let mut net = Net::new(3, 1, caps(4096, 1000));
    let refused = |net: &mut Net, peer| {
        net.engines[0]
            .send_begin(common::CH, peer, 1)
            .expect_err("no rail leads there")
    };
    assert_eq!(refused(&mut net, 0), UsageError::SendToSelf(0));
    for peer in [3, 4, u32::MAX] {
        assert_eq!(
            refused(&mut net, peer),
            UsageError::NotInJob {
                rank: peer,
                size: 3
            }
        );
    }
    let rail = net.rails_from(0, 1)[0];
    net.engines[0].close_rail(rail);
    assert_eq!(refused(&mut net, 1), UsageError::NoRail(1));
    assert!(net.engines[0].send_begin(common::CH, 2, 1).is_ok());
    assert_eq!(
        UsageError::NotInJob { rank: 3, size: 3 }.to_string(),
        "rank 3 is not in the job of 3 ranks"
    );
    assert!(
        UsageError::SendToSelf(0)
            .to_string()
            .starts_with("sending to oneself (rank 0) is not supported: "),
        "{}",
        UsageError::SendToSelf(0)
    );
    // An engine not told the job's size tells only its own rank apart.
    let mut alone = navette_core::Engine::new(EngineConfig::default());
    assert_eq!(
        alone.send_begin(common::CH, 7, 1).expect_err("no rail"),
        UsageError::NoRail(7)
    );
    assert_eq!(
        alone.send_begin(common::CH, 0, 1).expect_err("no rail"),
        UsageError::SendToSelf(0)
    );
}
