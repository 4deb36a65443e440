//! Messages taken whole: a receive whose every piece has arrived eager may
//! leave the engine at once, and be unpacked with no receive message,
//! request, pairing or completion per piece.
//!
//! A small Madeleine message usually arrives in one packet (its sender
//! writes it whole when the rail is idle), before its receiver unpacks the
//! first piece. Unpacked the usual way, each piece is then posted, paired,
//! copied and completed under the node's lock. Taken whole, the pieces move
//! to the receiver in one step ([`Engine::take_matched_whole`],
//! [`Engine::take_unexpected_whole`]), and [`WholeMessage::unpack`] checks
//! each one against the receiver's sizes and modes exactly as pairing does,
//! with the same errors.
//!
//! A matched message whose last piece is a rendezvous request, every
//! other piece eager, may leave the engine the same way
//! ([`Engine::take_matched_with_tail`]): its eager pieces are unpacked
//! from it with no lock, and its *tail*, the large piece whose data is
//! still at the sender, goes back to the engine once, with its
//! destination ([`Engine::unpack_whole_tail`]), which asks for the data
//! or hands the driver a read at once. The usual large Madeleine message
//! (a small head, then a large body) then costs its receiver one request,
//! not a receive message, a posted entry, a pairing and a completion per
//! piece and an end request.

use std::cell::Cell;
use std::collections::VecDeque;

use navette_wire::{PieceFlags, PieceTable, ReceiveMode, SendMode};

use super::incoming::Incoming;
use super::now::WholePieces;
use super::piece::{Body, Piece};
use super::recv::{RecvPiece, check_piece};
use super::{Engine, GateId};
use crate::{ChannelId, MemRef, PiecesSent, ReqId, RequestError, Source, Status, TagMatch};

/// A whole message out of the engine, to unpack piece by piece in the
/// order it was packed.
///
/// One pointer: it moves cheaply from the engine to the caller's hands
/// (inside an RPC's reply, for one). Its box is recycled: dropped, it is
/// kept by its thread for the next whole message, with its buffers (up to
/// 64 KiB copied, 1 MiB handed over by a driver), so that a thread that
/// takes and drops whole messages (an RPC client waiting for its replies,
/// a server serving calls) allocates nothing for them.
#[derive(Debug)]
pub struct WholeMessage(Recycled);

/// What a [`WholeMessage`] holds.
#[derive(Debug)]
struct Whole {
    status: Status,
    /// The pieces as the engine kept them, each in a buffer of its own
    /// (empty for a message received at once).
    kept: VecDeque<Piece<Vec<u8>>>,
    /// The pieces of a message received at once
    /// ([`Engine::recv_whole_now`]), back to back (empty otherwise).
    packed: Packed,
    unpacked: u32,
    failed: Option<RequestError>,
    /// Its last piece, if the sender kept its data (see [`Tail`]), until
    /// it is unpacked or refused.
    tail: Option<Tail>,
}

/// The last piece of a message taken whole whose data is still at the
/// sender: its rendezvous request, which the sender waits to have
/// answered. Only the engine may answer it ([`Engine::unpack_whole_tail`],
/// [`Engine::refuse_whole_tail`]).
#[derive(Clone, Copy, Debug)]
struct Tail {
    gate: GateId,
    flags: PieceFlags,
    send_id: u32,
    len: u64,
    readable: bool,
    /// Passed over by the unpacking as this piece ([`WholeMessage::defer_tail`]),
    /// its destination to come.
    deferred: Option<u32>,
}

impl Tail {
    /// The piece as the engine kept it.
    fn piece(&self) -> Piece<&'static [u8]> {
        Piece {
            flags: self.flags,
            body: Body::Rdv {
                send_id: self.send_id,
                len: self.len,
                readable: self.readable,
            },
        }
    }
}

/// The pieces of a message received at once, and each piece's flags and
/// where its data lies; `next` is the next piece to unpack. Their data is
/// either copied back to back into `data`, or, with `in_frame`, lies in
/// `frame`: the very buffer the packet was received in, handed over by its
/// driver ([`Engine::recv_whole_now_in`]).
#[derive(Debug, Default)]
struct Packed {
    data: Vec<u8>,
    /// A driver's buffer, kept at the length the driver gave it (its
    /// bytes past the packet mean nothing), so that it can go back to a
    /// driver as it came.
    frame: Vec<u8>,
    in_frame: bool,
    /// Each piece's flags, and the offset and length of its data in
    /// `data` or `frame` (32 bits each: the entry moves on every piece).
    pieces: Vec<(PieceFlags, u32, u32)>,
    next: usize,
}

/// Bytes of data a new [`Whole`] makes room for at least: the usual RPC
/// call or reply (a header or two and a small body). Its buffers are plain
/// vectors rather than inline arrays: the box is recycled with them, and
/// landing a message of three pieces then takes 640 instructions instead
/// of 820 (callgrind, RPC of 0 bytes over shm).
const PACKED_ROOM: usize = 192;

/// A spare [`Whole`] does not keep a copy buffer larger than this.
const KEEP_DATA: usize = 64 << 10;
/// Nor a driver's buffer larger than this.
const KEEP_FRAME: usize = 1 << 20;

thread_local! {
    /// The box of the last whole message this thread dropped: the next
    /// one reuses it, with its buffers (up to [`KEEP_DATA`] and
    /// [`KEEP_FRAME`]). A message is usually taken and unpacked by the
    /// same thread (an RPC client waiting for its reply, a server serving
    /// calls), so a round trip allocates nothing. Per thread rather than
    /// in the engine: a message is dropped outside the node's lock.
    static SPARE: Cell<Option<Box<Whole>>> = const { Cell::new(None) };
}

/// A boxed [`Whole`] that goes back to its thread's spare when dropped.
#[derive(Debug)]
struct Recycled(Option<Box<Whole>>);

impl Recycled {
    /// An empty message from `status`, with room for `len` data bytes
    /// copied: the spare if this thread has one.
    fn new(status: Status, len: usize) -> Self {
        let whole = match SPARE.take() {
            Some(spare) => Self::reuse(spare, status),
            None => Box::new(Whole {
                status,
                kept: VecDeque::new(),
                packed: Packed {
                    data: Vec::with_capacity(len.max(PACKED_ROOM)),
                    pieces: Vec::with_capacity(ARRIVE_MOST),
                    ..Packed::default()
                },
                unpacked: 0,
                failed: None,
                tail: None,
            }),
        };
        let mut whole = Self(Some(whole));
        whole.packed.data.reserve(len);
        whole
    }

    /// `spare` emptied for a message from `status` (its buffers kept).
    fn reuse(mut spare: Box<Whole>, status: Status) -> Box<Whole> {
        spare.status = status;
        spare.packed.data.clear();
        spare.packed.in_frame = false;
        spare.packed.pieces.clear();
        spare.packed.next = 0;
        spare.unpacked = 0;
        spare.tail = None;
        spare
    }
}

impl std::ops::Deref for Recycled {
    type Target = Whole;

    fn deref(&self) -> &Whole {
        self.0
            .as_deref()
            .expect("a Recycled holds its box until dropped")
    }
}

impl std::ops::DerefMut for Recycled {
    fn deref_mut(&mut self) -> &mut Whole {
        self.0
            .as_deref_mut()
            .expect("a Recycled holds its box until dropped")
    }
}

impl Drop for Recycled {
    fn drop(&mut self) {
        let Some(mut whole) = self.0.take() else {
            return;
        };
        let packed = &mut whole.packed;
        if packed.data.capacity() > KEEP_DATA {
            packed.data = Vec::new();
        }
        if packed.frame.capacity() > KEEP_FRAME {
            packed.frame = Vec::new();
        }
        // Kept pieces and a failure own allocations of their own: freed
        // now, not kept with the spare (a message received at once has
        // neither: nothing to drop then).
        if whole.kept.capacity() != 0 {
            whole.kept = VecDeque::new();
        }
        if whole.failed.is_some() {
            whole.failed = None;
        }
        // `try_with`: while the thread exits, its spare may be gone. A
        // spare holding a driver's buffer is worth more than one without
        // (two messages alive at once, one of them copied).
        let _ = SPARE.try_with(|spare| {
            let keep = match spare.take() {
                Some(old) if whole.packed.frame.is_empty() && !old.packed.frame.is_empty() => old,
                _ => whole,
            };
            spare.set(Some(keep));
        });
    }
}

impl Whole {
    /// Checks the next piece, the `index`th, against `spec` and copies it
    /// into `dest`; `None` if no piece is left.
    fn unpack_next(
        &mut self,
        index: u32,
        spec: &RecvPiece,
        dest: &mut [u8],
    ) -> Option<Result<(), RequestError>> {
        if let Some(piece) = self.kept.pop_front() {
            let checked = check_piece(index, spec, piece.flags, piece.len());
            return Some(checked.map(|()| {
                let Body::Eager(data) = &piece.body else {
                    unreachable!("a whole message is eager");
                };
                dest.copy_from_slice(data);
            }));
        }
        let packed = &mut self.packed;
        let (flags, offset, len) = *packed.pieces.get(packed.next)?;
        packed.next += 1;
        let checked = check_piece(index, spec, flags, u64::from(len));
        let at = offset as usize..offset as usize + len as usize;
        // The ranges were read off the very data they index.
        let data = if packed.in_frame {
            &packed.frame[at]
        } else {
            &packed.data[at]
        };
        Some(checked.map(|()| dest.copy_from_slice(data)))
    }

    /// Whether every eager piece was unpacked.
    fn eager_done(&self) -> bool {
        self.kept.is_empty() && self.packed.next == self.packed.pieces.len()
    }

    /// Whether every piece was unpacked.
    fn is_empty(&self) -> bool {
        self.eager_done() && self.tail.is_none()
    }
}

impl WholeMessage {
    /// The message of `pieces` (each one's flags and data), its data
    /// copied back to back.
    pub(super) fn packed<'a>(
        status: Status,
        pieces: impl Iterator<Item = (PieceFlags, &'a [u8])>,
    ) -> Self {
        let mut whole = Recycled::new(status, status.len);
        let packed = &mut whole.packed;
        for (flags, data) in pieces {
            // Below `u32::MAX`: a piece's length is a `u32` on the wire,
            // and a whole message comes in one packet.
            let at = packed.data.len() as u32;
            packed.data.extend_from_slice(data);
            packed.pieces.push((flags, at, data.len() as u32));
        }
        Self(whole)
    }

    /// The message whose `pieces` lie in `buf` from `start` on, keeping
    /// `buf` itself, if this thread has a spare message: the spare's
    /// driver buffer, which an earlier message was handed over, takes
    /// `buf`'s place (its bytes mean nothing; a buffer of `buf`'s length is
    /// made the first time). `None`, changing nothing, if this thread has
    /// no spare: its messages are dropped elsewhere (a progress thread's),
    /// where no driver would get its buffers back; a copy costs less then.
    pub(super) fn handed_over(
        status: Status,
        buf: &mut Vec<u8>,
        start: usize,
        pieces: &WholePieces,
    ) -> Option<Self> {
        let mut whole = Recycled(Some(Recycled::reuse(SPARE.take()?, status)));
        let packed = &mut whole.packed;
        let back = match std::mem::take(&mut packed.frame) {
            spare if spare.is_empty() => vec![0; buf.len()],
            spare => spare,
        };
        packed.frame = std::mem::replace(buf, back);
        packed.in_frame = true;
        for &(flags, offset, len) in pieces {
            // The packet lies in the first 2^32 bytes of `buf`: checked
            // when the driver's packet was taken.
            packed
                .pieces
                .push((flags, (start + offset as usize) as u32, len));
        }
        Some(Self(whole))
    }

    /// The message made of the pieces the engine kept.
    fn kept(status: Status, pieces: VecDeque<Piece<Vec<u8>>>) -> Self {
        let mut whole = Recycled::new(status, 0);
        whole.kept = pieces;
        Self(whole)
    }

    /// The sender, the tag, and the total length of the pieces.
    pub fn status(&self) -> Status {
        self.0.status
    }

    /// Whether the next piece is the message's tail: its last piece, whose
    /// data is still at the sender, which only
    /// [`Engine::unpack_whole_tail`] unpacks.
    #[inline]
    pub fn at_tail(&self) -> bool {
        self.0.tail.is_some_and(|t| t.deferred.is_none()) && self.0.eager_done()
    }

    /// Passes over the tail ([`Self::at_tail`]) as the next piece, of
    /// `len` bytes with these modes, its destination to come: the pieces
    /// unpacked after it are counted after it, and
    /// [`Engine::unpack_deferred_tail`] unpacks it later, as the piece it
    /// was. The tail is checked now, as pairing checks a deferred piece:
    /// if it does not match (or an earlier piece failed), the message
    /// fails, the error is returned, and the tail is left pending for the
    /// caller to refuse at once ([`Engine::refuse_whole_tail`]). `None` if
    /// the message is not at its tail (nothing changes).
    pub fn defer_tail(
        &mut self,
        len: usize,
        send: SendMode,
        recv: ReceiveMode,
    ) -> Option<Result<(), RequestError>> {
        if !self.at_tail() {
            return None;
        }
        let Whole {
            tail,
            failed,
            unpacked,
            ..
        } = &mut *self.0;
        let tail = tail.as_mut()?;
        let index = *unpacked;
        *unpacked += 1;
        if let Some(err) = failed {
            return Some(Err(RequestError::MessageFailed(Box::new(err.clone()))));
        }
        let spec = RecvPiece {
            dest: None,
            len,
            send,
            recv,
            exact: true,
        };
        if let Err(err) = check_piece(index, &spec, tail.flags, tail.len) {
            *failed = Some(err.clone());
            return Some(Err(err));
        }
        tail.deferred = Some(index);
        Some(Ok(()))
    }

    /// Fails the message with `err` (its data did not all come), unless it
    /// failed already: its end reports the first failure.
    pub fn fail(&mut self, err: RequestError) {
        self.0.failed.get_or_insert(err);
    }

    /// Whether the message's tail is neither unpacked nor refused yet: its
    /// sender waits for an answer, which [`Engine::unpack_whole_tail`] or
    /// [`Engine::refuse_whole_tail`] gives. A message dropped or ended
    /// with its tail pending leaves its sender waiting.
    #[inline]
    pub fn tail_pending(&self) -> bool {
        self.0.tail.is_some()
    }

    /// Copies the next piece into `dest`, after checking that the sender
    /// packed it with `dest`'s length and these modes. After a failure,
    /// every later piece fails with [`RequestError::MessageFailed`]. The
    /// tail ([`Self::at_tail`]) is not unpacked here: past the eager
    /// pieces, this fails as a piece too many would.
    pub fn unpack(
        &mut self,
        dest: &mut [u8],
        send: SendMode,
        recv: ReceiveMode,
    ) -> Result<(), RequestError> {
        let whole = &mut *self.0;
        if let Some(err) = &whole.failed {
            return Err(RequestError::MessageFailed(Box::new(err.clone())));
        }
        let index = whole.unpacked;
        let spec = RecvPiece {
            dest: None,
            len: dest.len(),
            send,
            recv,
            exact: true,
        };
        let Some(unpacked) = whole.unpack_next(index, &spec, dest) else {
            let err = RequestError::PieceCountMismatch {
                sent: PiecesSent::Exactly(index),
                unpacked: index + 1,
            };
            whole.failed = Some(err.clone());
            return Err(RequestError::MessageFailed(Box::new(err)));
        };
        whole.unpacked += 1;
        if let Err(err) = &unpacked {
            whole.failed = Some(err.clone());
        }
        unpacked
    }

    /// If this message is one tagged piece, nothing of it unpacked, makes
    /// it the message of the pieces its data holds as a table
    /// ([`navette_wire::PieceTable`]), their data left where it lies: the
    /// whole message a small RPC call or reply carries on the tagged path.
    /// Returns whether it did. A malformed table fails the message: its
    /// unpacks and end report [`RequestError::Malformed`]. Only for a
    /// channel where every tagged message is such a table (RPC's): on
    /// another, it would misread a user's bytes.
    pub fn unfold_table(&mut self) -> bool {
        match self.unfold() {
            Ok(unfolded) => unfolded,
            Err(err) => {
                self.0.failed = Some(err);
                false
            }
        }
    }

    /// [`Self::unfold_table`], its failure returned.
    fn unfold(&mut self) -> Result<bool, RequestError> {
        let whole = &mut *self.0;
        if whole.unpacked != 0 || whole.failed.is_some() || whole.tail.is_some() {
            return Ok(false);
        }
        // A piece the engine kept moves into the packed form first.
        if whole.kept.len() == 1 && whole.packed.pieces.is_empty() {
            if !whole.kept[0].flags.tagged() {
                return Ok(false);
            }
            let Some(Piece {
                flags,
                body: Body::Eager(data),
            }) = whole.kept.pop_front()
            else {
                unreachable!("a whole message is eager");
            };
            let packed = &mut whole.packed;
            // Below `u32::MAX`: it came in one packet.
            packed.pieces.push((flags, 0, data.len() as u32));
            packed.data = data;
            packed.in_frame = false;
            packed.next = 0;
        }
        let Packed {
            data,
            frame,
            in_frame,
            pieces,
            next,
        } = &mut whole.packed;
        let &[(flags, offset, len)] = pieces.as_slice() else {
            return Ok(false);
        };
        if !flags.tagged() || *next != 0 {
            return Ok(false);
        }
        let bytes = if *in_frame { &*frame } else { &*data };
        // The range was read off the very data it indexes.
        let bytes = &bytes[offset as usize..offset as usize + len as usize];
        let table = PieceTable::parse(bytes).map_err(RequestError::Malformed)?;
        // Offsets stay below `offset + len`, a `u32`.
        let mut at = offset + table.table_len() as u32;
        pieces.clear();
        for (flags, len) in table.pieces() {
            pieces.push((flags, at, len));
            at += len;
        }
        whole.status.len = len as usize - table.table_len();
        Ok(true)
    }

    /// Ends the message: fails if a piece failed or the sender packed more
    /// pieces than were unpacked; else the sender, tag and total length. A
    /// tail still pending must be refused first
    /// ([`Engine::refuse_whole_tail`]): its sender waits for the answer.
    pub fn end(mut self) -> Result<Status, RequestError> {
        let whole = &mut *self.0;
        if let Some(err) = whole.failed.take() {
            return Err(err);
        }
        if !whole.is_empty() {
            return Err(RequestError::PieceCountMismatch {
                sent: PiecesSent::MoreThan(whole.unpacked),
                unpacked: whole.unpacked,
            });
        }
        Ok(whole.status)
    }
}

impl Engine {
    /// Takes the receive message `key` whole if it is matched, nothing was
    /// unpacked from it yet, and every one of its pieces has arrived eager
    /// (none aborted): the message leaves the engine and `key` names
    /// nothing any more (its match request has completed: the caller
    /// forgets it). Otherwise `None`, and nothing changes.
    pub fn take_matched_whole(&mut self, key: ReqId) -> Option<WholeMessage> {
        self.take_matched(key, false)
    }

    /// [`Self::take_matched_whole`], but its last piece may also be a
    /// rendezvous request: the message's tail, which
    /// [`Self::unpack_whole_tail`] unpacks (or
    /// [`Self::refuse_whole_tail`] refuses). The caller must do one or the
    /// other before it drops the message: its sender waits for the answer.
    pub fn take_matched_with_tail(&mut self, key: ReqId) -> Option<WholeMessage> {
        self.take_matched(key, true)
    }

    fn take_matched(&mut self, key: ReqId, tail_ok: bool) -> Option<WholeMessage> {
        let m = self.recv_msgs.get(&key)?;
        let bound = m.bound?;
        let untouched = m.failed.is_none()
            && m.end.is_none()
            && m.posted.is_empty()
            && m.paired == 0
            && m.outstanding == 0;
        let whole = is_whole(&m.arrived) || (tail_ok && is_whole_with_tail(&m.arrived));
        if !untouched || !whole {
            return None;
        }
        let mut m = self.recv_msgs.remove(&key).expect("looked up above");
        let status = Status {
            peer: bound.peer,
            tag: bound.tag,
            len: 0,
        };
        let arrived = std::mem::take(&mut m.arrived);
        self.spare.keep(m);
        Some(self.hand_over(bound.gate, status, arrived))
    }

    /// Unpacks the tail of `whole` ([`WholeMessage::at_tail`]) into `dest`,
    /// after checking it against `dest`'s length and these modes as
    /// [`WholeMessage::unpack`] checks an eager piece: asks the sender for
    /// its data, or, if it is readable, hands the driver a read at once.
    /// Returns the request that completes when the data is in `dest`, or
    /// the piece's error (the tail is then refused, its sender told; the
    /// message fails as [`WholeMessage::unpack`] fails it). `None` if the
    /// message is not at its tail (nothing changes).
    pub fn unpack_whole_tail(
        &mut self,
        whole: &mut WholeMessage,
        dest: MemRef,
        send: SendMode,
        recv: ReceiveMode,
    ) -> Option<Result<ReqId, RequestError>> {
        if !whole.at_tail() {
            return None;
        }
        let index = whole.0.unpacked;
        whole.0.unpacked += 1;
        let spec = RecvPiece {
            dest: Some(dest),
            len: dest.len,
            send,
            recv,
            exact: true,
        };
        Some(self.start_tail(whole, dest, |tail| {
            check_piece(index, &spec, tail.flags, tail.len)
        }))
    }

    /// [`Self::unpack_whole_tail`] for a tail passed over
    /// ([`WholeMessage::defer_tail`], which checked its modes and length):
    /// `dest` must be as long as the length checked then. `None` if the
    /// message has no tail passed over (nothing changes).
    pub fn unpack_deferred_tail(
        &mut self,
        whole: &mut WholeMessage,
        dest: MemRef,
    ) -> Option<Result<ReqId, RequestError>> {
        let index = whole.0.tail.and_then(|t| t.deferred)?;
        Some(self.start_tail(whole, dest, |tail| {
            if dest.len as u64 == tail.len {
                Ok(())
            } else {
                Err(RequestError::SizeMismatch {
                    piece: index,
                    sent: tail.len,
                    posted: dest.len as u64,
                })
            }
        }))
    }

    /// Starts receiving the tail of `whole` into `dest` if `check` accepts
    /// it (and its peer is still there, and no earlier piece failed);
    /// otherwise refuses it and fails the message.
    fn start_tail(
        &mut self,
        whole: &mut WholeMessage,
        dest: MemRef,
        check: impl FnOnce(&Tail) -> Result<(), RequestError>,
    ) -> Result<ReqId, RequestError> {
        let w = &mut *whole.0;
        let peer = w.status.peer;
        let Some(tail) = w.tail.take() else {
            // Checked by both callers: a caller bug, failed as a piece
            // too many.
            return Err(RequestError::PieceCountMismatch {
                sent: PiecesSent::Exactly(w.unpacked),
                unpacked: w.unpacked,
            });
        };
        if !self.is_reachable(peer) {
            // Lost since the message left the engine: the data never
            // comes, and nobody waits for an answer.
            let err = RequestError::PeerUnreachable { peer };
            let failed = w.failed.get_or_insert(err);
            return Err(RequestError::MessageFailed(Box::new(failed.clone())));
        }
        if let Some(err) = &w.failed {
            self.reject(tail.gate, &tail.piece());
            return Err(RequestError::MessageFailed(Box::new(err.clone())));
        }
        if let Err(err) = check(&tail) {
            self.reject(tail.gate, &tail.piece());
            w.failed = Some(err.clone());
            return Err(err);
        }
        let status = Status {
            len: dest.len,
            ..w.status
        };
        let req = self.new_req();
        // No receive message holds the piece: its request stands for it
        // where the transfer names one (and names none).
        self.start_rdv_recv(
            tail.gate,
            req,
            req,
            dest,
            tail.send_id,
            tail.readable,
            status,
        );
        Ok(req)
    }

    /// Refuses the tail of `whole` if it is still pending
    /// ([`WholeMessage::tail_pending`]): its sender is told, as for a
    /// rendezvous piece of an abandoned message, and the message then ends
    /// as one whose sender packed more pieces than were unpacked.
    pub fn refuse_whole_tail(&mut self, whole: &mut WholeMessage) {
        let w = &mut *whole.0;
        let Some(tail) = w.tail.take() else {
            return;
        };
        // A lost peer waits for nothing.
        if self.is_reachable(w.status.peer) {
            self.reject(tail.gate, &tail.piece());
        }
        w.failed.get_or_insert(RequestError::PieceCountMismatch {
            sent: PiecesSent::MoreThan(w.unpacked),
            unpacked: w.unpacked,
        });
    }

    /// Takes whole the first unexpected message on `channel` that a receive
    /// from `source` with `tag` would match, if every one of its pieces has
    /// arrived eager (none aborted). If that message is not whole yet,
    /// `None` (no later message is taken before it), and nothing changes.
    pub fn take_unexpected_whole(
        &mut self,
        channel: ChannelId,
        source: Source,
        tag: TagMatch,
    ) -> Option<WholeMessage> {
        self.take_unexpected(channel, source, tag, false)
    }

    /// [`Self::take_unexpected_whole`], but its last piece may also be a
    /// rendezvous request: the message's tail, as
    /// [`Self::take_matched_with_tail`]'s (the caller must unpack or
    /// refuse it).
    pub fn take_unexpected_with_tail(
        &mut self,
        channel: ChannelId,
        source: Source,
        tag: TagMatch,
    ) -> Option<WholeMessage> {
        self.take_unexpected(channel, source, tag, true)
    }

    fn take_unexpected(
        &mut self,
        channel: ChannelId,
        source: Source,
        tag: TagMatch,
        tail_ok: bool,
    ) -> Option<WholeMessage> {
        let i = self.unexpected_index(channel, source, tag)?;
        let ch = self.channels.get_mut(&channel)?;
        let (gate, msg) = ch.unexpected[i];
        match self.gates[gate.0].incoming.get(&msg) {
            Some(Incoming::Unmatched {
                arrived,
                last_seen: true,
                ..
            }) if is_whole(arrived) || (tail_ok && is_whole_with_tail(arrived)) => {}
            _ => return None,
        }
        ch.unexpected.remove(i);
        let g = &mut self.gates[gate.0];
        let Some(Incoming::Unmatched { tag, arrived, .. }) = g.incoming.remove(&msg) else {
            unreachable!("checked above");
        };
        let status = Status {
            peer: g.peer,
            tag,
            len: 0,
        };
        Some(self.hand_over(gate, status, arrived))
    }

    /// The pieces of a message taken whole, released from the engine's
    /// buffer, a last rendezvous piece as its tail. The copy of the eager
    /// pieces into the receiver's memory is counted now.
    fn hand_over(
        &mut self,
        gate: GateId,
        mut status: Status,
        mut pieces: VecDeque<Piece<Vec<u8>>>,
    ) -> WholeMessage {
        let tail = match pieces.back().map(|p| (p.flags, &p.body)) {
            Some((
                flags,
                &Body::Rdv {
                    send_id,
                    len,
                    readable,
                },
            )) => {
                let tail = Tail {
                    gate,
                    flags,
                    send_id,
                    len,
                    readable,
                    deferred: None,
                };
                if let Some(piece) = pieces.pop_back() {
                    self.release_bytes(piece.held());
                }
                Some(tail)
            }
            _ => None,
        };
        let (held, len) = pieces
            .iter()
            .fold((0, 0), |(h, l), p| (h + p.held(), l + p.data_len()));
        self.release_bytes(held);
        self.copied(gate, len);
        self.gates[gate.0].stats.messages_whole += 1;
        status.len = len;
        let mut whole = WholeMessage::kept(status, pieces);
        if let Some(tail) = tail {
            // Saturating: a peer may announce any length up to the limits;
            // no receiver's memory holds that much, so its unpack fails.
            let len = usize::try_from(tail.len).unwrap_or(usize::MAX);
            whole.0.status.len = whole.0.status.len.saturating_add(len);
            whole.0.tail = Some(tail);
        }
        whole
    }
}

/// Whether `eager` (decoded, in order) are exactly one whole message: its
/// first to its last piece, in sequence, none aborted.
#[inline]
pub(super) fn is_one_message(eager: &[navette_wire::Eager<'_>]) -> bool {
    let pieces = eager.iter().map(|e| PieceKey::of(&e.header));
    is_one_sequence(pieces, eager.len())
}

/// [`is_one_message`] for `eager` then `request`: the message's last
/// piece a rendezvous request.
fn is_one_message_then(
    eager: &[navette_wire::Eager<'_>],
    request: &navette_wire::RdvRequest,
) -> bool {
    let request = PieceKey {
        channel: request.channel,
        msg: request.msg,
        tag: request.tag,
        seq: request.seq,
        flags: request.flags,
    };
    let pieces = eager.iter().map(|e| PieceKey::of(&e.header));
    is_one_sequence(pieces.chain([request]), eager.len() + 1)
}

/// What places a sequenced piece in its message.
#[derive(Clone, Copy)]
struct PieceKey {
    channel: u16,
    msg: u32,
    tag: u64,
    seq: u32,
    flags: PieceFlags,
}

impl PieceKey {
    #[inline]
    fn of(h: &navette_wire::EagerHeader) -> Self {
        Self {
            channel: h.channel,
            msg: h.msg,
            tag: h.tag,
            seq: h.seq,
            flags: h.flags,
        }
    }
}

/// Whether the `count` `pieces` are one whole message: its first to its
/// last piece, in sequence, none aborted.
#[inline]
fn is_one_sequence(mut pieces: impl Iterator<Item = PieceKey>, count: usize) -> bool {
    let Some(first) = pieces.next() else {
        return false;
    };
    let one = |i: usize, p: PieceKey| {
        p.channel == first.channel
            && p.msg == first.msg
            && p.tag == first.tag
            && p.seq == first.seq.wrapping_add(i as u32)
            && p.flags.first() == (i == 0)
            && p.flags.last() == (i + 1 == count)
            && !p.flags.aborted()
    };
    one(0, first) && pieces.enumerate().all(|(i, p)| one(i + 1, p))
}

/// Whether `pieces` are a whole message: its last piece among them, and
/// every one eager and not aborted.
fn is_whole(pieces: &VecDeque<Piece<Vec<u8>>>) -> bool {
    pieces.back().is_some_and(|p| p.flags.last())
        && pieces.iter().all(|p| !p.is_rdv() && !p.flags.aborted())
}

/// Whether `pieces` are a whole message but for its last piece's data: its
/// last piece a rendezvous request, every other one eager, none aborted.
fn is_whole_with_tail(pieces: &VecDeque<Piece<Vec<u8>>>) -> bool {
    pieces
        .back()
        .is_some_and(|p| p.flags.last() && p.is_rdv() && !p.flags.aborted())
        && pieces
            .iter()
            .rev()
            .skip(1)
            .all(|p| !p.is_rdv() && !p.flags.aborted())
}

use super::now::MOST_PIECES_AT_ONCE as ARRIVE_MOST;

impl Engine {
    /// Handles in one step a packet whose chunks, `eager` (decoded, in
    /// order), are exactly one whole message of 2 to [`ARRIVE_MOST`] eager
    /// pieces from `peer`: it is bound at once to the receive that waits
    /// for it (nothing unpacked yet), or queued whole as unexpected — as
    /// piece by piece would have left it, without a lookup per piece.
    /// Returns `false`, having changed nothing, for any other packet (the
    /// usual path then handles it).
    pub(super) fn arrive_whole(
        &mut self,
        peer: crate::Rank,
        eager: &[navette_wire::Eager<'_>],
        mem: &mut dyn crate::Memory,
    ) -> bool {
        // A one-piece message gains nothing here (the usual path binds it
        // in one step too); packets of several one-piece messages are told
        // apart at their first chunk.
        if !(2..=ARRIVE_MOST).contains(&eager.len()) || !is_one_message(eager) {
            return false;
        }
        self.arrive_one(peer, eager, None, mem)
    }

    /// [`Self::arrive_whole`] for a packet of 1 to [`ARRIVE_MOST`] eager
    /// pieces then one rendezvous request, `request`, that are exactly one
    /// whole message (the usual large message: its last piece's data
    /// stays at the sender): bound or queued as its chunks one by one
    /// would have left it, the request marked readable only where this
    /// side reads too.
    pub(super) fn arrive_whole_with_request(
        &mut self,
        peer: crate::Rank,
        eager: &[navette_wire::Eager<'_>],
        request: &navette_wire::RdvRequest,
        mem: &mut dyn crate::Memory,
    ) -> bool {
        if !(1..=ARRIVE_MOST).contains(&eager.len()) || !is_one_message_then(eager, request) {
            return false;
        }
        self.arrive_one(peer, eager, Some(request), mem)
    }

    /// Binds or queues one whole message, checked by the caller: its
    /// `eager` pieces, then `request`'s piece if any.
    fn arrive_one(
        &mut self,
        peer: crate::Rank,
        eager: &[navette_wire::Eager<'_>],
        request: Option<&navette_wire::RdvRequest>,
        mem: &mut dyn crate::Memory,
    ) -> bool {
        let Some(first) = eager.first() else {
            return false;
        };
        let h = first.header;
        let channel = ChannelId(h.channel);
        let gate = self.gate(channel, peer);
        let g = &self.gates[gate.0];
        if !g.reorder.is_next(h.seq) || g.incoming.contains_key(&h.msg) {
            return false;
        }
        // The receive it goes to, looked at before anything changes: only
        // a receive message with nothing unpacked yet is bound here.
        let posted = self.channels.get(&channel).and_then(|ch| {
            let recv_msgs = &self.recv_msgs;
            ch.posted
                .iter()
                .position(|p| p.accepts(recv_msgs, peer, h.tag))
                .map(|i| (i, &ch.posted[i]))
        });
        let key = match posted {
            None => None,
            Some((i, super::recv::Posted::Msg(key)))
                if self.recv_msgs.get(key).is_some_and(|m| m.posted.is_empty()) =>
            {
                Some((i, *key))
            }
            Some(_) => return false,
        };
        let count = eager.len() + usize::from(request.is_some());
        let data_len: usize = eager.iter().map(|e| e.data.len()).sum();
        let held = count * super::piece::PIECE_COST + data_len;
        if !self.may_hold(held) {
            // The usual path reports the overflow.
            return false;
        }
        let mut arrived = self.spare.arrived();
        arrived.extend(eager.iter().map(|e| Piece {
            flags: e.header.flags,
            body: Body::Eager(e.data.to_vec()),
        }));
        if let Some(r) = request {
            let readable = self.keeps_readable(peer, r);
            arrived.push_back(Piece {
                flags: r.flags,
                body: Body::Rdv {
                    send_id: r.send_id,
                    len: r.total_len,
                    readable,
                },
            });
        }
        self.buffered += held;
        let g = &mut self.gates[gate.0];
        g.stats.chunks_received += count as u64;
        g.stats.bytes_copied += data_len as u64;
        for _ in 0..count {
            g.reorder.take_next();
        }
        match key {
            Some((i, key)) => {
                self.channel(channel).posted.remove(i);
                self.bind_arrived(key, gate, h.tag, Some(arrived));
                // A receive ended before anything came learns its count.
                self.pair(key, mem);
            }
            None => self.start_unexpected(gate, h.msg, h.tag, arrived, true),
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: Status = Status {
        peer: 1,
        tag: 9,
        len: 0,
    };

    /// The data of one tagged piece holding the table of `pieces` (each
    /// one's modes and data) and their data.
    fn table_of(pieces: &[(SendMode, ReceiveMode, &[u8])]) -> Vec<u8> {
        let n = pieces.len();
        let mut out = vec![0; PieceTable::len_for(n)];
        let entries = pieces.iter().enumerate().map(|(i, (send, recv, data))| {
            let flags = PieceFlags::new(i == 0, i + 1 == n, *send, *recv);
            (flags, data.len() as u16)
        });
        PieceTable::write(&mut out, entries);
        for (_, _, data) in pieces {
            out.extend_from_slice(data);
        }
        out
    }

    const PIECES: [(SendMode, ReceiveMode, &[u8]); 3] = [
        (SendMode::Safer, ReceiveMode::Express, b"header!!"),
        (SendMode::Cheaper, ReceiveMode::Cheaper, b""),
        (SendMode::Cheaper, ReceiveMode::Cheaper, b"the body"),
    ];

    /// The message of one tagged piece, `data`: packed as a message
    /// received at once is, or kept as the engine keeps one.
    fn lone_tagged(data: Vec<u8>, kept: bool) -> WholeMessage {
        let status = Status {
            len: data.len(),
            ..STATUS
        };
        if kept {
            let piece = Piece {
                flags: PieceFlags::TAGGED,
                body: Body::Eager(data),
            };
            WholeMessage::kept(status, VecDeque::from([piece]))
        } else {
            WholeMessage::packed(status, [(PieceFlags::TAGGED, &data[..])].into_iter())
        }
    }

    #[test]
    fn a_lone_tagged_piece_unfolds_into_the_pieces_of_its_table() {
        for kept in [false, true] {
            let mut whole = lone_tagged(table_of(&PIECES), kept);
            assert!(whole.unfold_table(), "kept {kept}");
            assert_eq!(whole.status().len, 16);
            for (send, recv, data) in PIECES {
                let mut dest = vec![0; data.len()];
                whole.unpack(&mut dest, send, recv).unwrap();
                assert_eq!(dest, data);
            }
            assert_eq!(whole.end().unwrap().len, 16);
        }
    }

    #[test]
    fn unpacks_that_do_not_mirror_the_table_fail_as_usual() {
        let mut whole = lone_tagged(table_of(&PIECES), false);
        assert!(whole.unfold_table());
        let mut dest = [0; 8];
        assert!(matches!(
            whole.unpack(&mut dest, SendMode::Safer, ReceiveMode::Cheaper),
            Err(RequestError::ModeMismatch { piece: 0, .. })
        ));
        let mut whole = lone_tagged(table_of(&PIECES), true);
        assert!(whole.unfold_table());
        whole
            .unpack(&mut dest, SendMode::Safer, ReceiveMode::Express)
            .unwrap();
        assert!(matches!(
            whole.end(),
            Err(RequestError::PieceCountMismatch { .. })
        ));
    }

    #[test]
    fn a_malformed_table_fails_the_message() {
        let mut data = table_of(&PIECES);
        data.pop();
        for kept in [false, true] {
            let mut whole = lone_tagged(data.clone(), kept);
            assert!(!whole.unfold_table());
            let mut dest = [0; 8];
            let unpacked = whole.unpack(&mut dest, SendMode::Safer, ReceiveMode::Express);
            match unpacked {
                Err(RequestError::MessageFailed(err)) => {
                    assert!(matches!(*err, RequestError::Malformed(_)), "{err}");
                }
                other => panic!("expected the malformed table's failure, got {other:?}"),
            }
            assert!(matches!(whole.end(), Err(RequestError::Malformed(_))));
        }
    }

    #[test]
    fn other_messages_are_left_as_they_are() {
        // Pieces of their own: not a table.
        let mut whole = WholeMessage::packed(
            STATUS,
            [(
                PieceFlags::new(true, true, SendMode::Safer, ReceiveMode::Express),
                &b"abc"[..],
            )]
            .into_iter(),
        );
        assert!(!whole.unfold_table());
        let mut dest = [0; 3];
        whole
            .unpack(&mut dest, SendMode::Safer, ReceiveMode::Express)
            .unwrap();
        assert_eq!(&dest, b"abc");
        // A piece already unpacked: left alone.
        let data = table_of(&PIECES);
        let mut whole = lone_tagged(data.clone(), false);
        let mut dest = vec![0; data.len()];
        whole
            .unpack(&mut dest, SendMode::Cheaper, ReceiveMode::Cheaper)
            .unwrap();
        assert!(!whole.unfold_table());
        assert_eq!(dest, data);
    }
}
