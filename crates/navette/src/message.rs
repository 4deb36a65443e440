//! Madeleine messages: incremental packing and unpacking.
//!
//! # Modes as lifetimes
//!
//! - [`Packing::pack`] with SAFER copies at once (small pieces into the
//!   message itself, up to 64 bytes in all, so that a message of small
//!   headers packs with no allocation); with LATER or CHEAPER the
//!   slice stays borrowed by the message (`'a`) until [`Packing::end_packing`]
//!   returns. A small CHEAPER piece is copied when it is submitted (the
//!   engine's choice), unless the message leaves at once (see below); a
//!   large one is sent from the caller's memory.
//! - Pieces leave at `end_packing`: a message of small pieces then goes in
//!   one packet — over shared memory, written straight into the peer's
//!   ring when its rail is idle, with no request at all, its CHEAPER pieces
//!   and LATER slices read where they are.
//! - [`Packing::pack_later`] takes cells: the caller may still change the
//!   bytes until `end_packing`, which reads them.
//! - [`Unpacking::unpack_express`] fills its destination before returning;
//!   the borrow ends with the call.
//! - [`Unpacking::unpack_cheaper`] keeps the destination borrowed until
//!   [`Unpacking::end_unpacking`], when the data lands — by rendezvous,
//!   straight into it.
//! - A message whose pieces have all arrived eager by its first unpack
//!   (the usual small message: one packet) is taken out of the engine
//!   whole ([`navette_core::WholeMessage`]); each piece is then copied to
//!   its destination at its unpack, CHEAPER ones included, with no lock,
//!   request or completion, and checked against the sender's sizes and
//!   modes with the same errors.
//! - A message begun before it came, when nothing posted or unexpected
//!   could come before it on its channel, waits outside the engine (see
//!   `lean_whole.rs`): if it comes in one packet, its pieces all
//!   eager, it is taken whole as it lands, with no receive message,
//!   posted entry or request; otherwise its receive is posted as usual,
//!   at the packet that needs it, when an EXPRESS unpack stops spinning,
//!   or at once by a CHEAPER unpack (which never waits).
//!
//! Caller memory is lent to the engine only inside a blocking call
//! (`end_packing`, `unpack_express`, `end_unpacking`, an RPC's
//! `call_wait` or reply), so dropping or leaking a message or a request
//! can never leave the engine with a dangling buffer. An RPC call that
//! returns at once ([`Node::call`]) copies what it would have lent, as it
//! is submitted; [`Packing::pack_bytes`] hands over shared bytes instead,
//! which the engine keeps until they have left.
//! Dropping an unfinished message abandons it: the peer's matching side
//! gets an error instead of waiting forever.

use std::borrow::Borrow;
use std::cell::Cell;
use std::sync::Arc;

use bytes::Bytes;
use smallvec::SmallVec;

use navette_core::{
    ChannelId, MemRef, NowPiece, OutMsg, PieceSpec, Rank, RecvNow, RecvPiece, ReqId, Source,
    Status, TagMatch, WholeMessage,
};

use crate::lean_whole::{Settled, WholeFor};
use crate::node::{LentMemory, Registration, State};
use crate::{Error, Gate, Node, ReceiveMode, RecvFrom, Result, SendMode};
use navette_wire::{PieceFlags, PieceTable};

/// A message being packed; see the [module docs](self).
#[derive(Debug)]
pub struct Packing<'n, 'a> {
    core: PackingCore<'n>,
    held: Option<OutPiece<'a>>,
    /// The pieces before the one held, and whether each is the last. Kept
    /// inline: a small message packs with no allocation.
    deferred: SmallVec<[(OutPiece<'a>, bool); INLINE_PIECES]>,
    /// The copies of small SAFER pieces ([`OutData::Inline`]), kept in the
    /// message itself for the same reason: the first `copied` bytes.
    copies: [u8; INLINE_COPIES],
    copied: usize,
}

/// Pieces a message holds before it allocates (a header or two and a
/// body: an RPC's call is three). Kept small, as the copies below: a
/// `Packing` moves by value, and each move copies it whole.
const INLINE_PIECES: usize = 4;
/// Most pieces of a message the drivers send at once.
const MOST_AT_ONCE: usize = navette_core::MOST_PIECES_AT_ONCE;

/// Bytes of SAFER copies a message holds before it allocates.
const INLINE_COPIES: usize = 64;

/// The part of a packing message that owns engine state; dropping it
/// abandons the message. It borrows no user memory, so user buffers may be
/// declared after the message.
#[derive(Debug)]
struct PackingCore<'n> {
    node: &'n Node,
    /// `None` once the message left, failed or was abandoned.
    out: Option<Out>,
    submitted: Vec<ReqId>,
    copy_below: usize,
    /// Something was packed (set when the message is dropped unfinished).
    packed: bool,
    /// Bytes of SAFER copies made for pieces that never left (set when the
    /// message is dropped unfinished): they count among Navette's copies.
    copied_unsent: usize,
    /// An RPC call or reply: small, it leaves as one tagged piece holding
    /// its pieces' table (see [`Packing::try_send_table`]).
    table: bool,
    /// An RPC call's reply receive, armed before the call can leave.
    reply: Option<ReplyArm>,
    /// Borrowed pieces may be lent to the engine past the message's end
    /// ([`Packing::end_later`]); `false` for a call that returns at once,
    /// whose caller could leak its request and end the borrow while the
    /// engine still reads: such a piece is copied instead (see
    /// [`Packing::copy_what_it_would_lend`]).
    lend: bool,
}

/// The reply receive of an RPC call. It must be made before the call
/// leaves: a reply that came before it would be unexpected, which the RPC
/// layer takes for a late one. It is made under the lock that numbers the
/// call, or that writes it at once ([`Out::Deferred`]).
#[derive(Debug)]
pub(crate) enum ReplyArm {
    /// Not made yet: the receive of the reply.
    Pending(RecvNow),
    /// It waits outside the engine, in the reply's slot
    /// ([`WholeFor::Reply`]).
    Lean,
    /// Posted as this engine receive (watched), read as an RPC message.
    Posted(ReqId),
}

impl ReplyArm {
    /// Makes a pending receive, under the lock of `state`, which `core`
    /// holds: whether the driver has work then (a posted receive: mark the
    /// node and wake the driver once the lock is released).
    fn arm(&mut self, state: &mut State, core: &crate::node::NodeCore) -> bool {
        let Self::Pending(want) = *self else {
            return false;
        };
        if state.await_whole(WholeFor::Reply, want, &core.lean_whole_settled) {
            *self = Self::Lean;
            return false;
        }
        *self = Self::Posted(post_recv(state, want, core));
        true
    }
}

/// Where a packing message stands with the engine.
#[derive(Debug)]
enum Out {
    /// Numbered: the engine's open message.
    Begun(OutMsg),
    /// Not numbered yet: an RPC call or reply (any other message is
    /// numbered as it begins, by [`number`]). It takes its number as the
    /// driver writes it as one tagged piece, under the lock that writes it
    /// ([`Packing::try_send_table`]), or from [`PackingCore::begun`] if it
    /// goes another way: the lock that numbering it as it begins would
    /// take is spared. Its CHEAPER pieces are packed as borrowed until
    /// then, when the rendezvous threshold is known.
    Deferred(Gate, u64),
}

#[derive(Debug)]
enum OutData<'a> {
    /// A SAFER piece copied into a buffer of its own.
    Copy(Vec<u8>),
    /// A small SAFER piece copied into the message's own `copies`, at
    /// this offset and length: read there if the message leaves at once,
    /// copied into a buffer of its own before it is submitted otherwise.
    Inline(usize, usize),
    /// A CHEAPER piece below the rendezvous threshold: read where it is if
    /// the message leaves at once, copied into a buffer of its own before
    /// it is submitted otherwise.
    Small(&'a [u8]),
    Borrowed(&'a [u8]),
    Cells(&'a [Cell<u8>]),
    /// A CHEAPER piece the message owns a share of ([`Packing::pack_bytes`]):
    /// read where it is, never copied, kept by the engine until sent.
    Shared(Bytes),
}

/// A piece as it is handed to the engine on the usual path.
struct Submit<'a> {
    data: Handed<'a>,
    modes: (SendMode, ReceiveMode),
    last: bool,
}

/// The bytes of a piece handed to the engine.
enum Handed<'a> {
    /// A copy, which the engine frees once sent, and the bytes the message
    /// layer copied to make it (twice its length for a SAFER piece first
    /// copied into the message itself).
    Owned(Vec<u8>, usize),
    /// The caller's memory, lent until sent.
    Lent(&'a [u8]),
    Cells(&'a [Cell<u8>]),
    /// Bytes the engine keeps a share of until sent.
    Shared(Bytes),
}

#[derive(Debug)]
struct OutPiece<'a> {
    data: OutData<'a>,
    send: SendMode,
    recv: ReceiveMode,
}

/// Bytes of an RPC call or reply (its pieces' table and data) up to which
/// it leaves as one tagged piece ([`Packing::try_send_table`]). Set when
/// the pieces were put together in a buffer first, whose copy cost more
/// than the tagged path saved above it; not measured again since they are
/// copied straight into the packet (`d063a58`). Below a table's longest
/// piece in any case.
const TABLE_MOST_BYTES: usize = 4 << 10;
const _: () = assert!(TABLE_MOST_BYTES <= navette_wire::TABLE_MOST_PIECE_LEN);

impl Node {
    /// Starts a message to `gate` with `tag`. The reserved channel
    /// [`ChannelId::RPC`] is refused ([`crate::UsageError::ReservedChannel`]).
    pub fn begin_packing<'a>(&self, gate: Gate, tag: u64) -> Result<Packing<'_, 'a>> {
        crate::node::user_channel(gate.channel)?;
        self.core().running()?;
        // As for an RPC (`with_rpc_packing`).
        self.ready_to_push(gate.peer);
        let (out, copy_below) = number(self, gate, tag, &mut None)?;
        Ok(Packing::new(self, gate, Out::Begun(out), copy_below, None))
    }

    /// Runs `pack` on a new RPC call or reply to `to`, on the reserved
    /// channel, and drops the message after it (one that did not end is
    /// abandoned then); a call's `reply` receive is armed before the call
    /// can leave ([`ReplyArm`]). It takes no lock: the message is numbered,
    /// and the reply armed, under the lock that writes it at once (over
    /// shm and tcp alike), or as it goes the usual way ([`Out::Deferred`]).
    /// Over tcp that is one lock fewer per call and reply, about 190
    /// instructions on each side (callgrind, RPC of 1 KiB). By closure: the
    /// message (hundreds of bytes) is used where it is made, where a
    /// returned `Result<Packing>` would be copied out by its caller's `?`.
    /// Numbered later, it begins with no CHEAPER piece copied: the size
    /// below which they are is known once numbered ([`PackingCore::begun`]).
    pub(crate) fn with_rpc_packing<'n, 'a, R>(
        &'n self,
        to: Rank,
        tag: u64,
        reply: Option<RecvNow>,
        pack: impl FnOnce(&mut Packing<'n, 'a>) -> R,
    ) -> R {
        // The call or reply is written into `to`'s ring at the end, most
        // often at once: its first line is asked for now (see
        // `Driver::ready_to_push`).
        self.ready_to_push(to);
        let gate = Gate::new(ChannelId::RPC, to);
        let out = Out::Deferred(gate, tag);
        let reply = reply.map(ReplyArm::Pending);
        pack(&mut Packing::new(self, gate, out, 0, reply))
    }

    /// Starts receiving a message from `from` whose tag matches `tag`. The
    /// reserved channel [`ChannelId::RPC`] is refused
    /// ([`crate::UsageError::ReservedChannel`]), and so are a rank outside
    /// the job ([`crate::UsageError::NotInJob`]) and this rank itself
    /// ([`crate::UsageError::RecvFromSelf`]).
    pub fn begin_unpacking<'a>(
        &self,
        from: impl Into<RecvFrom>,
        tag: impl Into<TagMatch>,
    ) -> Result<Unpacking<'_, 'a>> {
        let from = from.into();
        self.core().user_source(from)?;
        Ok(self.begin_unpacking_on(from, tag.into()))
    }

    /// [`Self::begin_unpacking`] of an RPC call or reply from `source`, on
    /// the reserved channel.
    pub(crate) fn begin_rpc_unpacking<'a>(
        &self,
        source: Source,
        tag: TagMatch,
    ) -> Unpacking<'_, 'a> {
        let from = RecvFrom {
            channel: ChannelId::RPC,
            source,
        };
        self.begin_unpacking_on(from, tag).into_rpc()
    }

    /// [`Self::begin_unpacking`] on any channel, the reserved one included.
    fn begin_unpacking_on<'a>(&self, from: RecvFrom, tag: TagMatch) -> Unpacking<'_, 'a> {
        let core = self.core();
        let settled = &core.lean_whole_settled;
        let mut state = core.lock();
        // The RPC channel's receives are the engine's: RPC has its own
        // receives outside the engine there, and reads the engine's keys
        // of these (`Unpacking::match_request`).
        let want = RecvNow {
            channel: from.channel,
            source: from.source,
            tag,
        };
        if from.channel != ChannelId::RPC {
            if state.await_whole(WholeFor::Message, want, settled) {
                // Nothing for the driver to do: no mark, no wake-up.
                crate::node::unlock(state);
                return Unpacking::outside(self);
            }
            // A message that came before its receive, whole or for its
            // tail, leaves the engine here: no receive message, match or
            // request. Only where no receive waits outside the engine on
            // its channel, which would come first.
            if !state.waits_outside_on(from.channel)
                && let Some(whole) =
                    state
                        .engine
                        .take_unexpected_with_tail(from.channel, from.source, tag)
            {
                crate::node::unlock(state);
                return Unpacking::from_whole(self, whole);
            }
        }
        let key = post_recv(&mut state, want, core);
        self.unlock_with_work(state);
        Unpacking::from_posted(self, key)
    }
}

/// Under the node's lock, unpacks the tail of `whole` (at its tail) into
/// `dest` (lent by the caller): the request that completes when its data
/// is there, watched.
fn unpack_tail(
    s: &mut State,
    whole: &mut WholeMessage,
    dest: MemRef,
    send: SendMode,
    recv: ReceiveMode,
) -> Result<ReqId> {
    let unpacked = s.engine.unpack_whole_tail(whole, dest, send, recv);
    let req = unpacked.expect("the message is at its tail")?;
    s.watch(req, None);
    Ok(req)
}

/// Posts the engine's receive of a message `want` describes (watched),
/// after the receives waiting outside the engine on its channel; the
/// driver then has work (mark the node and wake it once the lock is
/// released).
fn post_recv(state: &mut State, want: RecvNow, core: &crate::node::NodeCore) -> ReqId {
    state.before_posting(want.channel, core);
    let key = state.engine.recv_begin(want.channel, want.source, want.tag);
    state.watch(key, None);
    key
}

impl<'n, 'a> Packing<'n, 'a> {
    /// A message to `gate`, nothing packed yet; CHEAPER pieces below
    /// `copy_below` bytes are copied if they are submitted.
    fn new(
        node: &'n Node,
        gate: Gate,
        out: Out,
        copy_below: usize,
        reply: Option<ReplyArm>,
    ) -> Self {
        Packing {
            core: PackingCore {
                node,
                out: Some(out),
                submitted: Vec::new(),
                copy_below,
                packed: false,
                copied_unsent: 0,
                table: gate.channel == ChannelId::RPC,
                reply,
                lend: true,
            },
            held: None,
            deferred: SmallVec::new(),
            copies: [0; INLINE_COPIES],
            copied: 0,
        }
    }

    /// Packs `data` with the given modes (see the [module docs](self)).
    pub fn pack(&mut self, data: &'a [u8], send: SendMode, recv: ReceiveMode) -> Result<()> {
        let data = match send {
            SendMode::Safer => self.copy(data),
            SendMode::Cheaper if data.len() < self.core.copy_below => OutData::Small(data),
            SendMode::Cheaper | SendMode::Later => OutData::Borrowed(data),
        };
        self.push(OutPiece { data, send, recv });
        Ok(())
    }

    /// Packs a copy of `data` (SAFER), which may be any short-lived slice.
    pub fn pack_safer(&mut self, data: &[u8], recv: ReceiveMode) -> Result<()> {
        let data = self.copy(data);
        self.push(OutPiece {
            data,
            send: SendMode::Safer,
            recv,
        });
        Ok(())
    }

    /// Packs `data` CHEAPER from bytes the message shares: never copied by
    /// Navette, whatever its length (a large piece leaves by rendezvous,
    /// straight from them), and kept alive by the engine until it has left,
    /// however the message or its request ends. The way to send large
    /// arguments from a call that returns at once ([`Node::call`]) without
    /// a copy.
    pub fn pack_bytes(&mut self, data: impl Into<Bytes>, recv: ReceiveMode) -> Result<()> {
        self.push(OutPiece {
            data: OutData::Shared(data.into()),
            send: SendMode::Cheaper,
            recv,
        });
        Ok(())
    }

    /// Packs `data` LATER: it is read when the message ends, so the caller
    /// may still change it through the cells until then.
    pub fn pack_later(&mut self, data: &'a [Cell<u8>], recv: ReceiveMode) -> Result<()> {
        self.push(OutPiece {
            data: OutData::Cells(data),
            send: SendMode::Later,
            recv,
        });
        Ok(())
    }

    /// A SAFER copy of `data`: in the message's own bytes while they
    /// hold it, in a buffer of its own otherwise.
    fn copy(&mut self, data: &[u8]) -> OutData<'a> {
        let start = self.copied;
        let Some(room) = self.copies.get_mut(start..start + data.len()) else {
            return OutData::Copy(data.to_vec());
        };
        room.copy_from_slice(data);
        self.copied += data.len();
        OutData::Inline(start, data.len())
    }

    /// The previous piece is kept with the others once the next one shows
    /// it was not the last.
    fn push(&mut self, piece: OutPiece<'a>) {
        if let Some(previous) = self.held.replace(piece) {
            self.deferred.push((previous, false));
        }
    }

    /// Sends the whole message at once if the driver can (all in one
    /// packet of an idle rail, every piece contiguous): `Some` when it has
    /// left or failed. Pieces are read where they are, borrowed ones
    /// included: they have left before `end_packing` returns.
    fn try_send_now(&mut self) -> Option<Result<()>> {
        let (pieces, count) = Self::now_pieces(&self.deferred, &self.copies)?;
        // A small RPC message goes as one tagged piece where the driver
        // sends one at once (`Driver::send_parts_now`: shm, tcp).
        if self.core.table
            && let Some(sent) = Self::try_send_table(&mut self.core, &pieces[..count])
        {
            return Some(sent);
        }
        let core = &mut self.core;
        let node = core.node.core();
        let out = match core.begun()? {
            Ok(out) => out,
            Err(err) => return Some(Err(err)),
        };
        node.driver().send_message_now(node, out, &pieces[..count])
    }

    /// The message's pieces as the drivers take them at once, and their
    /// count: `None` if there are too many, or LATER ones (read only as
    /// they leave).
    #[inline(always)]
    fn now_pieces<'p>(
        deferred: &'p [(OutPiece<'a>, bool)],
        copies: &'p [u8],
    ) -> Option<([NowPiece<'p>; MOST_AT_ONCE], usize)> {
        let count = deferred.len();
        if count > MOST_AT_ONCE {
            return None;
        }
        let mut pieces = [NowPiece {
            data: &[],
            send: SendMode::Safer,
            recv: ReceiveMode::Express,
        }; MOST_AT_ONCE];
        for (now, (piece, _)) in pieces.iter_mut().zip(deferred) {
            let data = match &piece.data {
                OutData::Copy(buf) => buf.as_slice(),
                &OutData::Inline(start, len) => &copies[start..start + len],
                OutData::Small(data) | OutData::Borrowed(data) => data,
                OutData::Shared(bytes) => bytes.as_ref(),
                OutData::Cells(_) => return None,
            };
            *now = NowPiece {
                data,
                send: piece.send,
                recv: piece.recv,
            };
        }
        Some((pieces, count))
    }

    /// Sends the usual large message (small pieces, then one large piece
    /// lent from the caller's memory) at once where the driver can: its
    /// packet, with the large piece as a request the receiver answers
    /// once it has read the data from where it lies, leaves without the
    /// window's round (`Driver::send_readable_now`: shm). The large piece
    /// is lent as it leaves, and its request waited for as any submitted
    /// piece's. `None` to submit the pieces the usual way.
    #[inline(never)]
    fn try_send_readable_now(&mut self) -> Option<Result<Sent<'n, 'a>>> {
        let (
            OutPiece {
                data: OutData::Borrowed(large),
                ..
            },
            _,
        ) = self.deferred.last()?
        else {
            return None;
        };
        // A message that may not lend (one whose request may be leaked)
        // copies its large pieces as they are submitted.
        if !self.core.lend {
            return None;
        }
        let large_len = large.len();
        let (pieces, count) = Self::now_pieces(&self.deferred, &self.copies)?;
        let core = &mut self.core;
        let node = core.node;
        if let Err(err) = core.begun()? {
            return Some(Err(err));
        }
        // A small last piece (borrowed before the message was numbered)
        // is no rendezvous: no lock taken to hear the driver say so.
        if large_len < core.copy_below {
            return None;
        }
        let Some(Out::Begun(out)) = core.out.as_mut() else {
            unreachable!("numbered above")
        };
        let n = node.core();
        let (req, range) = match n.driver().send_readable_now(n, out, &pieces[..count])? {
            Ok(sent) => sent,
            Err(err) => return Some(Err(err)),
        };
        // Owned at once: the region is released however this ends.
        let registration = node.registration(range);
        debug_assert_eq!(range.len, large_len, "the large piece is the one lent");
        Some(Ok(Sent {
            node,
            pieces: smallvec::smallvec![req],
            lent: smallvec::smallvec![(registration, req)],
        }))
    }

    /// Sends a small RPC call or reply at once as one tagged piece whose
    /// data is its pieces' table ([`PieceTable`]) then their data, which
    /// the receiving RPC layer unfolds ([`WholeMessage::unfold_table`]):
    /// a tagged message's send and landing cost about half those of a
    /// message of several pieces (`docs/profiling.md`). The table is made
    /// here, and it and the pieces are copied straight into the packet.
    /// `None` if it is larger than [`TABLE_MOST_BYTES`] or cannot leave at
    /// once (it then goes the usual way, and is read as usual).
    fn try_send_table(core: &mut PackingCore<'_>, pieces: &[NowPiece<'_>]) -> Option<Result<()>> {
        const MOST: usize = navette_core::MOST_PIECES_AT_ONCE;
        let count = pieces.len();
        let table_len = PieceTable::len_for(count);
        let data: usize = pieces.iter().map(|p| p.data.len()).sum();
        if count > MOST || table_len + data > TABLE_MOST_BYTES {
            return None;
        }
        // Only a message not numbered yet, which the driver numbers as it
        // writes it: every RPC message begins deferred, and nothing of it
        // was submitted before its end.
        let &Out::Deferred(gate, tag) = core.out.as_ref()? else {
            return None;
        };
        let mut table = [0u8; PieceTable::len_for(MOST)];
        let entries = pieces.iter().enumerate().map(|(i, p)| {
            let flags = PieceFlags::new(i == 0, i + 1 == count, p.send, p.recv);
            // Below `TABLE_MOST_BYTES`, below a table's longest piece.
            (flags, p.data.len() as u16)
        });
        PieceTable::write(&mut table[..table_len], entries);
        let mut parts: [&[u8]; MOST + 1] = [&[]; MOST + 1];
        parts[0] = &table[..table_len];
        for (part, piece) in parts[1..].iter_mut().zip(pieces) {
            *part = piece.data;
        }
        let n: &Node = core.node;
        let node = n.core();
        let reply = &mut core.reply;
        let mut work = false;
        let sent = node
            .driver()
            .send_parts_now(node, gate, tag, &parts[..=count], &mut |port| {
                if let Some(reply) = reply.as_mut() {
                    work = reply.arm(port.state(), node);
                }
            });
        if work {
            node.mark_dirty();
            n.wake_driver();
        }
        Some(sent?.map(|_| ()))
    }

    /// Makes the message copy, as it is submitted, the borrowed pieces it
    /// would lend to the engine past its end (CHEAPER ones above the
    /// rendezvous threshold, LATER ones): for a call that returns before
    /// they have left. Its request may be leaked (`mem::forget`), which
    /// ends their borrow with nothing run; the engine must then read
    /// nothing of the caller's. Pieces sent at once, before the message
    /// ends, are still read where they are.
    pub(crate) fn copy_what_it_would_lend(&mut self) {
        self.core.lend = false;
    }

    /// What became of an RPC call's reply receive ([`ReplyArm`]): armed
    /// once the call left (or is on its way), still pending if it did not
    /// begin. Taken once, by the call.
    pub(crate) fn take_reply(&mut self) -> Option<ReplyArm> {
        self.core.reply.take()
    }

    /// Sends what remains and waits until every piece has left the caller's
    /// memory; the first failed piece's error is returned.
    pub fn end_packing(mut self) -> Result<()> {
        self.end_later()?.wait()
    }

    /// Submits what remains without waiting: the returned [`Sent`] keeps
    /// the borrowed pieces lent until it is waited for (or dropped).
    ///
    /// By reference, not by value: a `Packing` is a few hundred bytes,
    /// which a move would copy on every message's path. The caller drops
    /// it afterwards: a message that failed to end is then abandoned, one
    /// that ended leaves nothing to abandon.
    pub(crate) fn end_later(&mut self) -> Result<Sent<'n, 'a>> {
        let Some(last) = self.held.take() else {
            return Err(Error::EmptyMessage);
        };
        self.deferred.push((last, true));
        let node = self.core.node;
        if let Some(sent) = self.try_send_now() {
            self.core.out = None;
            sent?;
            return Ok(Sent {
                node,
                pieces: SmallVec::new(),
                lent: SmallVec::new(),
            });
        }
        if let Some(sent) = self.try_send_readable_now() {
            self.core.out = None;
            return sent;
        }
        self.submit_all()
    }

    /// [`Self::end_later`] for a message that cannot leave at once: its
    /// pieces are submitted to the engine. Out of line, so that one sent
    /// at once costs none of it.
    #[inline(never)]
    fn submit_all(&mut self) -> Result<Sent<'n, 'a>> {
        let node = self.core.node;
        self.core.begun().expect("an ending message is open")?;
        let copy_below = self.core.copy_below;
        let may_lend = self.core.lend;
        let mut lent: SmallVec<[(Registration<'a>, ReqId); 1]> = SmallVec::new();
        // Small pieces are copied now, before the lock is taken.
        let copies = &self.copies;
        let submits: SmallVec<[Submit<'a>; INLINE_PIECES]> = std::mem::take(&mut self.deferred)
            .into_iter()
            .map(|(piece, last)| Submit {
                data: match piece.data {
                    OutData::Copy(buf) => {
                        let len = buf.len();
                        Handed::Owned(buf, len)
                    }
                    OutData::Inline(start, len) => {
                        Handed::Owned(copies[start..start + len].to_vec(), 2 * len)
                    }
                    // Lent unless small (packed before the threshold was
                    // known, `Out::Deferred`) or the message may not lend.
                    OutData::Borrowed(data)
                        if may_lend
                            && (piece.send != SendMode::Cheaper || data.len() >= copy_below) =>
                    {
                        Handed::Lent(data)
                    }
                    OutData::Small(data) | OutData::Borrowed(data) => {
                        Handed::Owned(data.to_vec(), data.len())
                    }
                    OutData::Cells(data) if may_lend => Handed::Cells(data),
                    OutData::Cells(data) => {
                        let copy: Vec<u8> = data.iter().map(Cell::get).collect();
                        let len = copy.len();
                        Handed::Owned(copy, len)
                    }
                    OutData::Shared(bytes) => Handed::Shared(bytes),
                },
                modes: (piece.send, piece.recv),
                last,
            })
            .collect();
        let core = &mut self.core;
        node.with_state(|s| {
            let Some(Out::Begun(out)) = core.out.as_mut() else {
                unreachable!("numbered above")
            };
            for Submit { data, modes, last } in submits {
                let (range, registration) = match data {
                    Handed::Owned(buf, copied) => {
                        s.engine.count_send_copy(out, copied);
                        (s.mem.insert_owned(buf), None)
                    }
                    Handed::Shared(bytes) => (s.mem.insert_shared(bytes), None),
                    Handed::Lent(data) => lend(node.lend(s, data)),
                    Handed::Cells(data) => lend(node.lend_cells(s, data)),
                };
                let owned = registration.is_none();
                let req = submit(s, out, range, modes, last, owned);
                core.submitted.push(req);
                if let Some(registration) = registration {
                    lent.push((registration, req));
                }
            }
        });
        core.out = None;
        Ok(Sent {
            node,
            pieces: std::mem::take(&mut core.submitted).into(),
            lent,
        })
    }
}

/// A packed message whose pieces are submitted, some perhaps still being
/// sent from the caller's memory, which stays lent until [`Sent::wait`]
/// returns. Dropping it gives that memory back at once: pieces not sent
/// yet still leave, from a copy made then
/// ([`Registration::give_back_sending`]), so that the receiver gets the
/// whole message.
#[derive(Debug)]
pub(crate) struct Sent<'n, 'a> {
    node: &'n Node,
    /// Inline, as the usual large message's one request and one region
    /// (sent at once, `Packing::try_send_readable_now`): no allocation.
    /// One of each inline, no more: a `Sent` moves within the values
    /// that hold it (an RPC's call), whose moves grow with it.
    pieces: SmallVec<[ReqId; 1]>,
    /// The caller's memory lent, each with the piece sent from it.
    lent: SmallVec<[(Registration<'a>, ReqId); 1]>,
}

impl<'n> Sent<'n, '_> {
    /// Waits until every piece has left the caller's memory; the first
    /// failed piece's error is returned.
    pub(crate) fn wait(self) -> Result<()> {
        self.wait_until(None).map(drop)
    }

    /// [`Self::wait`], giving up at `deadline` (if any): then `Ok(false)`,
    /// and the memory is given back as the value drops (the pieces still
    /// sending from it go on from copies).
    pub(crate) fn wait_until(self, deadline: Option<std::time::Instant>) -> Result<bool> {
        if self.pieces.is_empty() && self.lent.is_empty() {
            // Sent at once.
            return Ok(true);
        }
        self.wait_submitted(deadline)
    }

    /// The same pieces, borrowing nothing: `None` (the value then drops,
    /// the pieces going on from copies) if some of the caller's memory is
    /// lent, which a message told to copy it
    /// ([`Packing::copy_what_it_would_lend`]) never does.
    pub(crate) fn unlent(mut self) -> Option<Sent<'n, 'static>> {
        if !self.lent.is_empty() {
            return None;
        }
        Some(Sent {
            node: self.node,
            pieces: std::mem::take(&mut self.pieces),
            lent: SmallVec::new(),
        })
    }

    /// Forgets the pieces and gives the memory lent back, the pieces still
    /// sending from it going on from copies (as the value drops).
    #[inline(never)]
    fn release(&mut self) {
        let pieces = std::mem::take(&mut self.pieces);
        let lent = std::mem::take(&mut self.lent);
        self.node.with_state(|s| {
            lent.into_iter()
                .for_each(|(r, piece)| r.give_back_sending(s, piece));
            pieces.into_iter().for_each(|r| s.detach(r));
        });
    }

    /// [`Self::wait_until`] for pieces submitted to the engine: out of
    /// line, so that a message sent at once costs only the check above.
    #[inline(never)]
    fn wait_submitted(mut self, deadline: Option<std::time::Instant>) -> Result<bool> {
        let pieces = std::mem::take(&mut self.pieces);
        let mut lent = Some(std::mem::take(&mut self.lent));
        let what = || format!("{} pieces to leave", pieces.len());
        let waited = self.node.wait_until(&what, |state| {
            if let Some(outcomes) = state.take_all(&pieces) {
                lent.take()
                    .into_iter()
                    .flatten()
                    .for_each(|(r, _)| r.release(state));
                return Some(Some(outcomes));
            }
            let late = deadline.is_some_and(|at| std::time::Instant::now() >= at);
            late.then_some(None)
        });
        match waited {
            Ok(Some(outcomes)) => outcomes
                .into_iter()
                .try_for_each(|o| o.map(drop))
                .map(|()| true),
            gave_up => {
                // Gave up (at `deadline`, or a stall): the pieces are
                // forgotten and the memory given back as the value drops.
                self.pieces = pieces;
                self.lent = lent.unwrap_or_default();
                gave_up.map(|_| false)
            }
        }
    }

    /// For a future: whether every piece has left (then as [`Self::wait`]
    /// would return); if not, after a round of progress, `waker` is woken
    /// when the first one still pending does.
    pub(crate) fn poll(&mut self, waker: &std::task::Waker) -> Option<Result<()>> {
        loop {
            let mut state = self.node.core().lock();
            if let Some(outcomes) = state.take_all(&self.pieces) {
                self.pieces.clear();
                self.lent.drain(..).for_each(|(r, _)| r.release(&mut state));
                crate::node::unlock(state);
                return Some(outcomes.into_iter().try_for_each(|o| o.map(drop)));
            }
            let pending = self.pieces.iter().copied().find(|&r| !state.is_done(r));
            crate::node::unlock(state);
            let pending = pending.expect("not all pieces are complete");
            match self.node.poll_id(pending, waker) {
                Ok(false) => return None,
                Ok(true) => {}
                Err(err) => return Some(Err(err)),
            }
        }
    }
}

impl Drop for Sent<'_, '_> {
    fn drop(&mut self) {
        // A message sent at once (the usual small one) has nothing to
        // release: no lock, nothing out of line.
        if !self.pieces.is_empty() || !self.lent.is_empty() {
            self.release();
        }
    }
}

/// Hands one piece to the engine and tracks its request; an `owned` range
/// is freed when the request completes.
fn submit(
    s: &mut State,
    out: &mut OutMsg,
    data: MemRef,
    (send, recv): (SendMode, ReceiveMode),
    last: bool,
    owned: bool,
) -> ReqId {
    let spec = PieceSpec {
        data,
        send,
        recv,
        last,
    };
    let req = s.engine.send_piece(out, spec);
    s.watch(req, owned.then_some(data.handle));
    req
}

fn lend<'a>(
    (range, registration): (MemRef, Registration<'a>),
) -> (MemRef, Option<Registration<'a>>) {
    (range, Some(registration))
}

impl Drop for Packing<'_, '_> {
    fn drop(&mut self) {
        // Pieces leave at `end_packing`, so an abandoned message may have
        // sent nothing: if anything was packed, `PackingCore` then sends an
        // empty aborted message in its place, so that the receiver gets an
        // error rather than waiting for it.
        if self.core.out.is_none() {
            // It left (or failed as it did): nothing to abandon.
            return;
        }
        self.core.packed |= self.held.is_some() || !self.deferred.is_empty();
        // The SAFER copies of its pieces were made all the same (those of
        // a message that left were counted as it did).
        let unsent = self.held.iter().chain(self.deferred.iter().map(|(p, _)| p));
        self.core.copied_unsent = unsent
            .map(|piece| match &piece.data {
                OutData::Copy(buf) => buf.len(),
                OutData::Inline(_, len) => *len,
                _ => 0,
            })
            .sum();
    }
}

impl PackingCore<'_> {
    /// The engine's open message, numbered now if it was not
    /// ([`Out::Deferred`]); `None` once the message left or failed, an
    /// error (the message then ends) if it cannot begin.
    fn begun(&mut self) -> Option<Result<&mut OutMsg>> {
        if let Some(Out::Deferred(gate, tag)) = self.out {
            match number(self.node, gate, tag, &mut self.reply) {
                Ok((out, copy_below)) => {
                    self.out = Some(Out::Begun(out));
                    self.copy_below = copy_below;
                }
                Err(err) => {
                    self.out = None;
                    return Some(Err(err));
                }
            }
        }
        match self.out.as_mut()? {
            Out::Begun(out) => Some(Ok(out)),
            Out::Deferred(..) => unreachable!("numbered above"),
        }
    }
}

/// Numbers a message to `gate` with `tag` and arms its `reply` receive if
/// any, under one lock: the engine's message and the size below which its
/// CHEAPER pieces are copied.
fn number(
    node: &Node,
    gate: Gate,
    tag: u64,
    reply: &mut Option<ReplyArm>,
) -> Result<(OutMsg, usize)> {
    let core = node.core();
    let mut state = core.lock();
    let begun = state
        .engine
        .send_begin(gate.channel, gate.peer, tag)
        .map(|out| (out, state.engine.rdv_threshold(gate.peer)));
    let work = begun.is_ok()
        && reply
            .as_mut()
            .is_some_and(|reply| reply.arm(&mut state, core));
    // Numbering alone gives the driver nothing to send: no mark, no
    // wake-up (whose fence costs on every message).
    crate::node::unlock(state);
    if work {
        core.mark_dirty();
        node.wake_driver();
    }
    Ok(begun?)
}

impl Drop for PackingCore<'_> {
    fn drop(&mut self) {
        // A call abandoned before it left has no reply to wait for (the
        // call took one it armed).
        self.reply = None;
        if !self.packed && matches!(self.out, Some(Out::Deferred(..))) {
            // Never numbered, nothing packed: nothing to abandon.
            return;
        }
        if !matches!(self.begun(), Some(Ok(_))) {
            return;
        }
        let Some(Out::Begun(out)) = self.out.take() else {
            unreachable!("numbered above")
        };
        let submitted = std::mem::take(&mut self.submitted);
        let (packed, copied) = (self.packed, self.copied_unsent);
        self.node.with_state(|s| {
            s.engine.count_send_copy(&out, copied);
            if packed {
                s.engine.send_abort_unsent(out);
            } else {
                s.engine.send_abort(out);
            }
            submitted.into_iter().for_each(|r| s.detach(r));
        });
    }
}

/// `result` as the reader is told it: its piece numbers and counts those
/// of a reader who never sees the message's first `hidden` pieces (see
/// `UnpackingCore::hidden`).
#[inline(always)]
fn told<T>(hidden: u32, result: Result<T>) -> Result<T> {
    match result {
        Err(Error::Request(err)) if hidden > 0 => Err(Error::Request(err.hiding_pieces(hidden))),
        other => other,
    }
}

/// A message being unpacked; see the [module docs](self).
#[derive(Debug)]
pub struct Unpacking<'n, 'a> {
    core: UnpackingCore<&'n Node>,
    cheaper: Cheaper<'a>,
}

/// Where the CHEAPER pieces of a message go, filled at the end: posted
/// pieces of a message in the engine, or the tail of a message taken
/// whole (never both: a message is taken whole before its first piece).
/// One field of one vector's size: an [`Unpacking`] moves whole from call
/// to call (an RPC's reply, say), and at more than 128 bytes each move
/// becomes a `memcpy` call.
#[derive(Debug)]
enum Cheaper<'a> {
    /// Posted pieces: each one's request and destination.
    Posted(Vec<(ReqId, &'a mut [u8])>),
    /// The tail, passed over ([`WholeMessage::defer_tail`]): its data is
    /// asked for (or read) at the end, as a CHEAPER piece's of the usual
    /// path.
    Tail(&'a mut [u8]),
}

impl Default for Cheaper<'_> {
    fn default() -> Self {
        Self::Posted(Vec::new())
    }
}

impl Cheaper<'_> {
    fn is_empty(&self) -> bool {
        matches!(self, Self::Posted(posted) if posted.is_empty())
    }
}

/// The part of an unpacking message that owns engine state; dropping it
/// abandons the message. Its node is borrowed by an [`Unpacking`], owned
/// by a [`Parked`] message.
#[derive(Debug)]
struct UnpackingCore<N: Borrow<Node>> {
    node: N,
    /// Its receive waits outside the engine, in the begun message's slot
    /// ([`WholeFor::Message`]): `key`, `matched` and `whole` mean nothing
    /// until it settles ([`UnpackingCore::come_in`]).
    outside: bool,
    key: ReqId,
    matched: Option<Status>,
    pieces: Vec<ReqId>,
    /// An RPC call or reply: taken whole, a lone tagged piece is its
    /// pieces' table, unfolded ([`WholeMessage::unfold_table`]).
    table: bool,
    /// The engine holds the message's state (else it was finished,
    /// parked, or taken whole).
    open: bool,
    /// The message, taken out of the engine whole (see
    /// [`UnpackingCore::take_whole`]).
    whole: Option<WholeMessage>,
    /// Whether taking it whole was tried: only before the first piece.
    tried_whole: bool,
    /// Pieces the reader never sees, read before it by the library (an
    /// RPC's header): its errors number pieces from the one after.
    hidden: u32,
}

impl<N: Borrow<Node>> UnpackingCore<N> {
    /// The same message, held through `node` (a handle on the same node);
    /// this one is left holding nothing.
    fn move_to<M: Borrow<Node>>(&mut self, node: M) -> UnpackingCore<M> {
        debug_assert!(Arc::ptr_eq(node.borrow().core(), self.node.borrow().core()));
        UnpackingCore {
            node,
            outside: std::mem::replace(&mut self.outside, false),
            key: self.key,
            matched: self.matched,
            pieces: std::mem::take(&mut self.pieces),
            open: std::mem::replace(&mut self.open, false),
            whole: self.whole.take(),
            tried_whole: self.tried_whole,
            hidden: self.hidden,
            table: self.table,
        }
    }

    /// Brings a receive waiting outside the engine in: spins until it
    /// settles, or posts it at the end of the spin phase (see
    /// [`Node::spin_whole`]). Then the message is whole, or the engine's.
    fn come_in(&mut self) -> Result<()> {
        if !self.outside {
            return Ok(());
        }
        let settled = self
            .node
            .borrow()
            .spin_whole(WholeFor::Message, || false, &|| {
                format!("the {}", WholeFor::Message.kind())
            })?;
        if let Some(settled) = settled {
            self.settle(settled);
        }
        Ok(())
    }

    /// Posts a receive still waiting outside the engine (or takes its
    /// message, if it came): for what must not wait (a CHEAPER piece) or
    /// needs the engine's key at once (parking).
    fn post_outside(&mut self) {
        if !self.outside {
            return;
        }
        if let Some(settled) = self.node.borrow().settle_whole(WholeFor::Message, true) {
            self.settle(settled);
        }
    }

    /// Gives up a receive waiting outside the engine: whether its message
    /// may still come (then to a later receive, or unexpected, as for an
    /// abandoned receive that was not matched).
    fn drop_outside(&mut self) -> bool {
        std::mem::replace(&mut self.outside, false)
            && self.node.borrow().drop_whole(WholeFor::Message)
    }

    fn settle(&mut self, settled: Settled) {
        self.outside = false;
        match settled {
            Settled::Landed(whole) => {
                self.matched = Some(Status {
                    len: 0,
                    ..whole.status()
                });
                self.whole = Some(whole);
                self.tried_whole = true;
            }
            Settled::Posted(key) => {
                self.key = key;
                self.open = true;
            }
        }
    }

    /// Copies the next piece of a message taken whole into `dest`; `None`
    /// if the message was not taken whole, or if that piece is its tail
    /// ([`Self::at_tail`]).
    fn unpack_whole(
        &mut self,
        dest: &mut [u8],
        send: SendMode,
        recv: ReceiveMode,
    ) -> Option<Result<()>> {
        let whole = self.whole.as_mut().filter(|w| !w.at_tail())?;
        Some(whole.unpack(dest, send, recv).map_err(Error::from))
    }

    /// Whether the next piece is the tail of the message taken whole: its
    /// last piece, whose data is still at the sender.
    fn at_tail(&self) -> bool {
        self.whole.as_ref().is_some_and(WholeMessage::at_tail)
    }

    /// Takes the message out of the engine whole, under the node's lock,
    /// if every piece of it has arrived eager before the first piece is
    /// unpacked (the usual case of a small message): its pieces are then
    /// unpacked with no lock, request or completion each. Tried once.
    /// Returns whether the message is whole.
    fn take_whole(&mut self, s: &mut State) -> bool {
        if self.whole.is_some() {
            return true;
        }
        if std::mem::replace(&mut self.tried_whole, true) {
            return false;
        }
        // An RPC's table is eager: its messages are taken whole without a
        // tail, as the table's unfolding expects.
        let taken = if self.table {
            s.engine.take_matched_whole(self.key)
        } else {
            s.engine.take_matched_with_tail(self.key)
        };
        let Some(mut whole) = taken else {
            return false;
        };
        if self.table {
            whole.unfold_table();
        }
        // Its match completed: nobody waits for it any more.
        s.detach(self.key);
        self.matched = Some(Status {
            len: 0,
            ..whole.status()
        });
        self.open = false;
        self.whole = Some(whole);
        true
    }
}

impl<'n> Unpacking<'n, '_> {
    /// The message of the engine's receive `key` (from
    /// [`navette_core::Engine::recv_begin`], watched), nothing unpacked yet.
    pub(crate) fn from_posted(node: &'n Node, key: ReqId) -> Self {
        Self {
            core: UnpackingCore {
                node,
                outside: false,
                key,
                matched: None,
                pieces: Vec::new(),
                open: true,
                whole: None,
                tried_whole: false,
                hidden: 0,
                table: false,
            },
            cheaper: Cheaper::default(),
        }
    }

    /// A message taken whole out of the engine (see
    /// [`navette_core::Engine::take_unexpected_whole`]): every piece is
    /// unpacked from it with no lock.
    pub(crate) fn from_whole(node: &'n Node, whole: WholeMessage) -> Self {
        Self {
            core: UnpackingCore {
                node,
                outside: false,
                // The key of a message out of the engine is never used:
                // every method serves it from `whole` first.
                key: ReqId(0),
                matched: Some(Status {
                    len: 0,
                    ..whole.status()
                }),
                pieces: Vec::new(),
                open: false,
                whole: Some(whole),
                tried_whole: true,
                hidden: 0,
                table: false,
            },
            cheaper: Cheaper::default(),
        }
    }

    /// From now on, errors number pieces from the next one: the one piece
    /// read so far was the library's (an RPC's header), which the reader
    /// never saw.
    pub(crate) fn hide_header_piece(&mut self) {
        self.core.hidden = 1;
    }

    /// The same message, read as an RPC call or reply: taken whole, a lone
    /// tagged piece is its pieces' table, unfolded into them (see
    /// [`Packing::try_send_table`]).
    pub(crate) fn into_rpc(mut self) -> Self {
        self.core.table = true;
        if let Some(whole) = &mut self.core.whole {
            whole.unfold_table();
        }
        self
    }

    /// A message whose receive waits outside the engine, in the begun
    /// message's slot (made there by [`Node::begin_unpacking`]).
    fn outside(node: &'n Node) -> Self {
        Self {
            core: UnpackingCore {
                node,
                outside: true,
                // Meaningless until the receive settles (`come_in`).
                key: ReqId(0),
                matched: None,
                pieces: Vec::new(),
                open: false,
                whole: None,
                tried_whole: false,
                hidden: 0,
                table: false,
            },
            cheaper: Cheaper::default(),
        }
    }

    /// Under the node's lock, takes the message whole if it has all
    /// arrived (see [`UnpackingCore::take_whole`]): a waiter that saw the
    /// match saves a lock by taking it at once.
    pub(crate) fn take_whole(&mut self, s: &mut State) {
        if s.is_done(self.core.key) {
            self.core.take_whole(s);
        }
    }
}

/// What became of an EXPRESS piece under the lock.
enum Express<'a> {
    /// The piece had arrived and landed (or failed).
    Landed(Result<()>),
    /// The piece is posted, its destination lent.
    Waiting(ReqId, Registration<'a>),
}

impl<'a> Unpacking<'_, 'a> {
    /// Unpacks the next piece with the given modes: EXPRESS as
    /// [`Self::unpack_express`], CHEAPER as [`Self::unpack_cheaper`].
    pub fn unpack(&mut self, dest: &'a mut [u8], send: SendMode, recv: ReceiveMode) -> Result<()> {
        match recv {
            ReceiveMode::Express => self.unpack_express(dest, send),
            ReceiveMode::Cheaper => self.unpack_cheaper(dest, send),
        }
    }

    /// Unpacks the next piece into `dest` and returns once it is there.
    pub fn unpack_express(&mut self, dest: &mut [u8], send: SendMode) -> Result<()> {
        let unpacked = self.unpack_express_any(dest, send);
        told(self.core.hidden, unpacked)
    }

    #[inline(always)]
    fn unpack_express_any(&mut self, dest: &mut [u8], send: SendMode) -> Result<()> {
        self.core.come_in()?;
        if let Some(landed) = self.core.unpack_whole(dest, send, ReceiveMode::Express) {
            return landed;
        }
        self.unpack_express_posted(dest, send)
    }

    /// [`Self::unpack_express`] for a message not taken whole (yet): out
    /// of line, so that a whole message's piece costs no more than its
    /// copy and checks.
    #[inline(never)]
    fn unpack_express_posted(&mut self, dest: &mut [u8], send: SendMode) -> Result<()> {
        if !self.core.tried_whole && self.core.matched.is_none() {
            // The piece cannot land before the match: wait for it here,
            // so that a message that came whole is taken whole. A failed
            // match fails the piece below, as it would have.
            self.await_match()?;
            if let Some(landed) = self.core.unpack_whole(dest, send, ReceiveMode::Express) {
                return landed;
            }
        }
        let node = self.core.node;
        let key = self.core.key;
        let len = dest.len();
        let core = &mut self.core;
        // Whether the piece is the tail of the message taken whole.
        let mut tail = false;
        let posted = node.with_state(|s| {
            let taken = core.take_whole(s);
            if taken && let Some(landed) = core.unpack_whole(dest, send, ReceiveMode::Express) {
                return Ok(Express::Landed(landed));
            }
            tail = taken;
            let (range, lent) = node.lend_mut(s, dest);
            let req = if let Some(whole) = core.whole.as_mut() {
                // Taken whole, at its tail.
                unpack_tail(s, whole, range, send, ReceiveMode::Express)
            } else {
                let spec = RecvPiece {
                    dest: Some(range),
                    len,
                    send,
                    recv: ReceiveMode::Express,
                    exact: true,
                };
                let State { engine, mem, .. } = &mut *s;
                engine.recv_piece(key, spec, mem).map_err(Error::from)
            };
            let req = match req {
                Ok(req) => req,
                Err(err) => {
                    lent.release(s);
                    return Err(err);
                }
            };
            if !taken {
                s.watch(req, None);
            }
            // A piece that has arrived lands at once: its outcome is
            // taken under this lock, with no wait.
            s.collect();
            match s.take(req) {
                Some((landed, _)) => {
                    lent.release(s);
                    Ok(Express::Landed(landed.map(drop)))
                }
                None => Ok(Express::Waiting(req, lent)),
            }
        });
        let landed = match posted? {
            Express::Landed(landed) => landed,
            Express::Waiting(req, lent) => {
                let landed = node.wait_releasing(req, lent).map(drop);
                if tail && matches!(landed, Err(Error::Stalled { .. })) {
                    // Not waited for any more: forgotten, as `end_tail`
                    // forgets a CHEAPER tail's.
                    node.with_state(|s| s.detach(req));
                }
                landed
            }
        };
        // The message taken whole ends as its tail did (the usual path
        // fails the message with its piece).
        if tail
            && let Err(Error::Request(err)) = &landed
            && let Some(whole) = &mut self.core.whole
        {
            whole.fail(err.clone());
        }
        landed
    }

    /// Unpacks the next piece into `dest`, which stays borrowed until
    /// [`Self::end_unpacking`], when the data is guaranteed to be there.
    pub fn unpack_cheaper(&mut self, dest: &'a mut [u8], send: SendMode) -> Result<()> {
        let unpacked = self.unpack_cheaper_any(dest, send);
        told(self.core.hidden, unpacked)
    }

    #[inline(always)]
    fn unpack_cheaper_any(&mut self, dest: &'a mut [u8], send: SendMode) -> Result<()> {
        // It returns at once: a message that has not come yet is posted,
        // and its pieces land as usual (by `end_unpacking`).
        self.core.post_outside();
        if let Some(landed) = self.core.unpack_whole(dest, send, ReceiveMode::Cheaper) {
            return landed;
        }
        if self.core.at_tail() {
            return self.unpack_tail_cheaper(dest, send);
        }
        let key = self.core.key;
        let spec = RecvPiece {
            dest: None,
            len: dest.len(),
            send,
            recv: ReceiveMode::Cheaper,
            exact: true,
        };
        let core = &mut self.core;
        let req = core.node.with_state(|s| {
            if core.take_whole(s) {
                return Ok(None);
            }
            let State { engine, mem, .. } = &mut *s;
            let req = engine.recv_piece(key, spec, mem)?;
            s.watch(req, None);
            Ok::<_, Error>(Some(req))
        })?;
        let Some(req) = req else {
            // Taken whole: the data is here already, or comes to `dest`.
            if let Some(landed) = self.core.unpack_whole(dest, send, ReceiveMode::Cheaper) {
                return landed;
            }
            return self.unpack_tail_cheaper(dest, send);
        };
        self.core.pieces.push(req);
        if let Cheaper::Posted(posted) = &mut self.cheaper {
            posted.push((req, dest));
        }
        Ok(())
    }

    /// [`Self::unpack_cheaper`] of the tail of a message taken whole
    /// ([`UnpackingCore::at_tail`]): passed over, its data asked for (or
    /// read) into `dest` by [`Self::end_unpacking`], as the usual path
    /// lends a CHEAPER piece's memory only there.
    fn unpack_tail_cheaper(&mut self, dest: &'a mut [u8], send: SendMode) -> Result<()> {
        let Some(whole) = &mut self.core.whole else {
            return Ok(());
        };
        match whole.defer_tail(dest.len(), send, ReceiveMode::Cheaper) {
            Some(Ok(())) => self.cheaper = Cheaper::Tail(dest),
            // The message failed here, as pairing fails it: its sender is
            // told at once, and the error comes at the end, as a CHEAPER
            // piece's does on the usual path.
            Some(Err(_)) => {
                let node = self.core.node;
                node.with_state(|s| s.engine.refuse_whole_tail(whole));
            }
            None => {}
        }
        Ok(())
    }

    /// Waits until the message is matched; returns its sender and tag. A
    /// failed match stays failed: asked again, the same error.
    pub fn status(&mut self) -> Result<Status> {
        let status = self.status_any();
        told(self.core.hidden, status)
    }

    fn status_any(&mut self) -> Result<Status> {
        self.core.come_in()?;
        if let Some(status) = self.core.matched {
            return Ok(status);
        }
        let key = self.core.key;
        let matched = self
            .core
            .node
            .wait_until(&|| format!("the match of {key}"), |s| {
                let outcome = s.outcome(key)?.clone();
                if outcome.is_ok() {
                    s.take(key);
                }
                Some(outcome)
            })??;
        self.core.matched = Some(matched);
        Ok(matched)
    }

    /// Waits until the message is matched (or its match failed, the
    /// outcome left in place), and takes it whole under the same lock if
    /// it has all arrived.
    fn await_match(&mut self) -> Result<()> {
        let node = self.core.node;
        let key = self.core.key;
        let core = &mut self.core;
        node.wait_until(&|| format!("the match of {key}"), |s| {
            if !s.is_done(key) {
                return None;
            }
            core.take_whole(s);
            Some(())
        })
    }

    /// Lands every CHEAPER piece and checks that the sender packed exactly
    /// the pieces unpacked. Returns the sender, tag and total length.
    pub fn end_unpacking(self) -> Result<Status> {
        let hidden = self.core.hidden;
        let ended = self.end_unpacking_any();
        told(hidden, ended)
    }

    #[inline(always)]
    fn end_unpacking_any(mut self) -> Result<Status> {
        self.core.come_in()?;
        match self.core.whole.take() {
            Some(whole) if !whole.tail_pending() => Ok(whole.end()?),
            Some(whole) => self.end_tail(whole),
            None => self.end_posted(),
        }
    }

    /// [`Self::end_unpacking`] for a message taken whole with its tail
    /// pending: asks for (or reads) the tail's data into the memory its
    /// CHEAPER unpack gave, and waits for it; a tail not unpacked is
    /// refused (its sender waits for the answer).
    #[inline(never)]
    fn end_tail(mut self, mut whole: WholeMessage) -> Result<Status> {
        let node = self.core.node;
        let cheaper = std::mem::take(&mut self.cheaper);
        let started = node.with_state(|s| {
            let Cheaper::Tail(dest) = cheaper else {
                s.engine.refuse_whole_tail(&mut whole);
                return None;
            };
            let (range, lent) = node.lend_mut(s, dest);
            let Some(unpacked) = s.engine.unpack_deferred_tail(&mut whole, range) else {
                // (Passed over when `cheaper` became its destination.)
                lent.release(s);
                s.engine.refuse_whole_tail(&mut whole);
                return None;
            };
            if let Ok(req) = unpacked {
                s.watch(req, None);
            }
            match unpacked.map_err(Error::from) {
                Ok(req) => Some(Ok((req, lent))),
                Err(err) => {
                    lent.release(s);
                    Some(Err(err))
                }
            }
        });
        let landed = match started {
            Some(Ok((req, lent))) => {
                let landed = node.wait_releasing(req, lent);
                if matches!(landed, Err(Error::Stalled { .. })) {
                    // Not waited for any more: forgotten.
                    node.with_state(|s| s.detach(req));
                }
                landed.map(drop)
            }
            Some(Err(err)) => Err(err),
            None => Ok(()),
        };
        let status = whole.end()?;
        landed.map(|()| status)
    }

    /// [`Self::end_unpacking`] for a message not taken whole: out of line,
    /// as [`Self::unpack_express_posted`].
    #[inline(never)]
    fn end_posted(mut self) -> Result<Status> {
        let node = self.core.node;
        let key = self.core.key;
        let mut lent = LentMemory::new();
        // (A tail is only ever passed over in a message taken whole.)
        let cheaper = match std::mem::take(&mut self.cheaper) {
            Cheaper::Posted(posted) => posted,
            Cheaper::Tail(_) => Vec::new(),
        };
        let end = node.with_state(|s| {
            if self.core.matched.is_none() {
                s.detach(key);
            }
            for (req, dest) in cheaper {
                let (range, registration) = node.lend_mut(s, dest);
                lent.push(registration);
                let State { engine, mem, .. } = &mut *s;
                engine.recv_fill(key, req, range, mem)?;
            }
            let end = s.engine.recv_end(key)?;
            s.watch(end, None);
            Ok::<_, Error>(end)
        });
        self.core.open = false;
        let end = match end {
            Ok(end) => end,
            Err(err) => {
                node.with_state(|s| s.engine.recv_abandon(key));
                node.with_state(|s| lent.into_iter().for_each(|r| r.release(s)));
                return Err(err);
            }
        };
        let mut ids = std::mem::take(&mut self.core.pieces);
        ids.push(end);
        let mut outcomes = node.wait_ids_releasing(&ids, lent)?;
        let end_outcome = outcomes.pop().expect("the end request is last");
        let status = end_outcome?;
        outcomes.into_iter().try_for_each(|o| o.map(drop))?;
        Ok(status)
    }
}

/// A matched message whose unpacking is under way, held by no thread: how
/// an RPC call moves from the thread that read its header to the handler
/// thread that unpacks the rest. Dropping it abandons the message.
#[derive(Debug)]
pub(crate) struct Parked {
    core: UnpackingCore<Node>,
}

impl Parked {
    /// The node the message belongs to.
    pub(crate) fn node(&self) -> &Node {
        &self.core.node
    }

    /// Goes on unpacking, borrowing `node` (a handle on the same node).
    pub(crate) fn resume<'n, 'a>(mut self, node: &'n Node) -> Unpacking<'n, 'a> {
        Unpacking {
            core: self.core.move_to(node),
            cheaper: Cheaper::default(),
        }
    }
}

impl<'n> Unpacking<'n, '_> {
    /// Parks the message for another thread: only between pieces, with no
    /// CHEAPER piece waiting (none borrows memory).
    pub(crate) fn park(mut self) -> Parked {
        assert!(
            self.cheaper.is_empty(),
            "no CHEAPER piece may wait when a message is parked"
        );
        self.core.post_outside();
        let node = self.core.node.clone();
        Parked {
            core: self.core.move_to(node),
        }
    }

    /// Abandons the message, as dropping it does; returns whether it was
    /// still waiting for its match (decided under the same lock: no
    /// message can match it in between).
    pub(crate) fn abandon(mut self) -> bool {
        let core = &mut self.core;
        if core.outside {
            return core.drop_outside();
        }
        if !std::mem::replace(&mut core.open, false) {
            // Taken whole: matched, and out of the engine.
            return false;
        }
        let (key, pieces) = (core.key, std::mem::take(&mut core.pieces));
        core.node.with_state(|s| {
            let unmatched = s.engine.recv_unmatched(key);
            s.engine.recv_abandon(key);
            s.detach(key);
            pieces.into_iter().for_each(|r| s.detach(r));
            unmatched
        })
    }

    /// The request that completes when the message is matched.
    pub(crate) fn match_request(&self) -> Option<ReqId> {
        // RPC's receives are never outside the engine (`begin_unpacking`).
        debug_assert!(
            !self.core.outside,
            "a receive outside the engine has no request"
        );
        self.core.matched.is_none().then_some(self.core.key)
    }
}

impl<N: Borrow<Node>> Drop for UnpackingCore<N> {
    fn drop(&mut self) {
        self.drop_outside();
        // A tail's sender waits for an answer.
        if let Some(whole) = self.whole.as_mut().filter(|w| w.tail_pending()) {
            let node = self.node.borrow();
            node.with_state(|s| s.engine.refuse_whole_tail(whole));
        }
        if !self.open {
            return;
        }
        let (key, pieces) = (self.key, std::mem::take(&mut self.pieces));
        self.node.borrow().with_state(|s| {
            s.engine.recv_abandon(key);
            s.detach(key);
            pieces.into_iter().for_each(|r| s.detach(r));
        });
    }
}
