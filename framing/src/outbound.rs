//! [`Outbound`]: what a link writer sends next, and how much at once.
//!
//! Both ends of a link write the same way (the Edge its requests, credit and
//! cancels; the Node its answers); only the channels they drain differ, so
//! the order lives here, sans-IO, and each writer supplies its channels as
//! closures:
//! 1. heartbeats first ([`jumps_the_queue`](crate::link::jumps_the_queue));
//! 2. while the writer keeps up, commands in the order they came, as many as
//!    a [`WriteBatch`] takes: order cannot matter when a write takes all;
//! 3. what a full batch leaves waits in a [`FairQueue`], and while anything
//!    waits there every new command joins it, so the streams take turns.
//!
//! Each batch's size follows the last write ([`WriteBatch::paced`]): small
//! while the peer or the network is behind, so that what arrives meanwhile
//! waits behind little.
//!
//! # Invariants
//! - Every command is written exactly once, unless its stream withdrew it
//!   first ([`Outgoing::Withdraw`]); one stream's commands in the order they
//!   came; a close last ([`FairQueue`], [`WriteBatch`]).
//! - A withdrawal that drops a stream's request, or a piece of it, names the
//!   stream ([`Outbound::take_withdrawn`]): the peer never got the request
//!   whole.

use bytes::Bytes;

use crate::fair_queue::FairQueue;
use crate::frame::message_field;
use crate::link::Outgoing;
use crate::write_batch::{WriteBatch, WriteSlices};
use proto::{ENVELOPE_PIECE_FIELD, ENVELOPE_RUN_REQUEST_FIELD, ENVELOPE_TUNNEL_REQUEST_FIELD};

/// A link writer's queue and batch; see the module docs.
#[derive(Debug)]
pub struct Outbound {
    batch: WriteBatch,
    queue: FairQueue,
    /// Streams whose withdrawal dropped their request or a piece of it.
    withdrawn: Vec<u64>,
}

impl Default for Outbound {
    fn default() -> Self {
        Self::new()
    }
}

impl Outbound {
    /// Nothing queued; the first batch is small (a link starts careful).
    pub fn new() -> Self {
        let mut batch = WriteBatch::new();
        batch.paced(false);
        Self {
            batch,
            queue: FairQueue::new(),
            withdrawn: Vec::new(),
        }
    }

    /// Whether commands wait their turn: the writer has work in hand and
    /// must fill the next batch without waiting on its channel.
    pub fn has_waiting(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Fills the next batch: `waited` (what the writer's wait on its
    /// channel gave, if it waited), then heartbeats from `urgent`, then
    /// either arrival order from `arrivals` or, while commands wait, their
    /// turns. What the batch has no room for joins the turns. Returns
    /// whether a close was taken (write the batch, then shut down).
    pub fn fill(
        &mut self,
        waited: Option<Outgoing>,
        mut urgent: impl FnMut() -> Option<Bytes>,
        mut arrivals: impl FnMut() -> Option<(u64, Outgoing)>,
    ) -> bool {
        let in_turn = self.has_waiting();
        if in_turn {
            while let Some((stream_id, command)) = arrivals() {
                self.hold(stream_id, command);
            }
        }
        let queue = &mut self.queue;
        let mut next = || {
            urgent().map(Outgoing::Frame).or_else(|| {
                if in_turn {
                    queue.pop()
                } else {
                    arrivals().map(|(_, command)| command)
                }
            })
        };
        let close = match waited.or_else(&mut next) {
            Some(first) => self.batch.fill(first, next),
            None => false,
        };
        while let Some((stream_id, command)) = arrivals() {
            self.hold(stream_id, command);
        }
        close
    }

    /// Streams whose [`Outgoing::Withdraw`] dropped their request, or a
    /// piece of it, since the last call: the peer never gets that request
    /// whole (nor acts on it), so the writer's owner ends those streams
    /// itself.
    pub fn take_withdrawn(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.withdrawn)
    }

    /// Queues one command for its turn; a withdrawal takes the stream's
    /// queued commands out instead, at once
    /// ([`take_withdrawn`](Self::take_withdrawn)). [`fill`](Self::fill)
    /// queues what its batch has no room for this way; a writer calls it
    /// for what comes while a batch is being written (a write the peer is
    /// slow to take), so a stream that leaves is not held until it ends.
    pub fn hold(&mut self, stream_id: u64, command: Outgoing) {
        if !matches!(command, Outgoing::Withdraw) {
            return self.queue.push(stream_id, command);
        }
        if self.queue.withdraw(stream_id).iter().any(carries_request) {
            self.withdrawn.push(stream_id);
        }
    }

    /// The batch to write, `None` when it is empty.
    pub fn take(&mut self) -> Option<WriteSlices> {
        (!self.batch.is_empty()).then(|| self.batch.take())
    }

    /// Takes back a batch [`take`](Self::take) handed out, once written
    /// (see [`WriteBatch::recycle`]).
    pub fn recycle(&mut self, done: WriteSlices) {
        self.batch.recycle(done);
    }

    /// How the last write went: `whole` when the kernel took every write at
    /// once (see [`WriteBatch::paced`]).
    pub fn paced(&mut self, whole: bool) {
        self.batch.paced(whole);
    }
}

/// Whether `command` is a stream's request or a piece of one: dropped, the
/// peer never gets that request whole.
fn carries_request(command: &Outgoing) -> bool {
    let head = match command {
        Outgoing::Frame(frame) => &frame[..],
        Outgoing::Body(frame) => &frame.head[..],
        Outgoing::Close | Outgoing::Withdraw => return false,
    };
    matches!(
        message_field(head),
        Some(ENVELOPE_RUN_REQUEST_FIELD | ENVELOPE_TUNNEL_REQUEST_FIELD | ENVELOPE_PIECE_FIELD)
    )
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;
    use crate::write_batch::BEHIND_BATCH_BYTES;

    fn frame(stream: u8, len: usize) -> Outgoing {
        Outgoing::Frame(Bytes::from(vec![stream; len]))
    }

    /// The stream of each frame of a batch, from the byte frames are made of.
    fn streams_of(slices: &WriteSlices, len: usize) -> Vec<u8> {
        let bytes: Vec<u8> = slices.slices().iter().flat_map(|s| s.to_vec()).collect();
        bytes.chunks(len).map(|c| c[0]).collect()
    }

    #[test]
    fn arrival_order_while_it_keeps_up_then_turns_for_what_a_full_batch_left() {
        let mut out = Outbound::new();
        // Stream 1 queues 40 frames of 4 KiB (160 KiB, more than the first
        // 64 KiB batch takes), then stream 2 one frame.
        let mut channel: VecDeque<(u64, Outgoing)> = (0..40).map(|_| (1, frame(1, 4096))).collect();
        channel.push_back((2, frame(2, 4096)));
        let close = out.fill(None, || None, || channel.pop_front());
        assert!(!close);
        let first = out.take().expect("a batch");
        assert_eq!(first.len(), BEHIND_BATCH_BYTES, "a careful first batch");
        assert!(streams_of(&first, 4096).iter().all(|&s| s == 1));
        assert!(out.has_waiting(), "the rest waits its turn");
        assert!(channel.is_empty());
        out.paced(false);
        // Stream 2 goes at its turn: after one turn of stream 1 (a
        // quantum, 16 KiB), not after its other 24 frames.
        out.fill(None, || None, || channel.pop_front());
        let second = out.take().expect("a batch");
        let turn = crate::fair_queue::QUANTUM as usize / 4096;
        assert_eq!(streams_of(&second, 4096)[..=turn], [1, 1, 1, 1, 2]);
    }

    #[test]
    fn a_withdrawal_drops_what_waits_and_names_a_request_left_unfinished() {
        let mut encoder = crate::frame::FrameEncoder::default();
        let request = encoder
            .encode_tunnel_body(7, Bytes::from(vec![7; 300_000]))
            .unwrap();
        let whole = [request.head.clone(), request.body.clone()];
        let pieces = encoder.encode_pieces(7, whole, 64 * 1024).unwrap();
        let mut out = Outbound::new();
        let mut channel: VecDeque<(u64, Outgoing)> =
            pieces.into_iter().map(|p| (7, Outgoing::Body(p))).collect();
        channel.push_back((9, frame(9, 100)));
        // The first batch takes a piece; the rest waits its turn.
        out.fill(None, || None, || channel.pop_front());
        let first = out.take().expect("a batch");
        assert!(first.len() <= BEHIND_BATCH_BYTES + 100);
        assert!(out.has_waiting());
        // Stream 7 is cancelled: its other pieces are never written.
        channel.push_back((7, Outgoing::Withdraw));
        out.fill(None, || None, || channel.pop_front());
        assert_eq!(out.take_withdrawn(), [7]);
        let second = out.take().expect("stream 9's frame");
        assert_eq!(second.len(), 100);
        assert!(!out.has_waiting());
        // Commands held while a batch is being written: a withdrawal among
        // them applies at once, before the next fill.
        let pieces = crate::frame::FrameEncoder::default()
            .encode_pieces(12, [Bytes::from(vec![1; 200_000])], 64 * 1024)
            .unwrap();
        for piece in pieces {
            out.hold(12, Outgoing::Body(piece));
        }
        assert!(out.has_waiting());
        out.hold(12, Outgoing::Withdraw);
        assert_eq!(out.take_withdrawn(), [12]);
        assert!(!out.has_waiting(), "the withdrawn pieces are gone");
        // A withdrawal with nothing queued, or only credit, names nothing;
        // one that drops a whole request names its stream.
        let mut encoder = crate::frame::FrameEncoder::default();
        let mut envelope = |stream_id, msg| {
            let frame = encoder.encode(&proto::Envelope {
                stream_id,
                msg: Some(msg),
            });
            Outgoing::Frame(frame.unwrap())
        };
        let credit = proto::v1::WindowUpdate { increment: 1 };
        let request = proto::v1::RunRequest::default();
        channel.push_back((8, frame(8, 200_000)));
        channel.push_back((9, envelope(9, proto::Msg::WindowUpdate(credit))));
        channel.push_back((10, envelope(10, proto::Msg::RunRequest(Box::new(request)))));
        out.fill(None, || None, || channel.pop_front());
        assert!(out.has_waiting(), "stream 8's frame filled the batch");
        channel.push_back((9, Outgoing::Withdraw));
        channel.push_back((10, Outgoing::Withdraw));
        channel.push_back((11, Outgoing::Withdraw));
        out.fill(None, || None, || channel.pop_front());
        assert_eq!(out.take_withdrawn(), [10]);
    }

    #[test]
    fn heartbeats_go_first_and_a_close_last() {
        let mut out = Outbound::new();
        let mut channel: VecDeque<(u64, Outgoing)> =
            VecDeque::from([(1, frame(1, 10)), (0, Outgoing::Close)]);
        let mut pings = VecDeque::from([Bytes::from_static(&[9; 10])]);
        let close = out.fill(
            Some(frame(3, 10)),
            || pings.pop_front(),
            || channel.pop_front(),
        );
        assert!(close);
        let batch = out.take().expect("a batch");
        assert_eq!(streams_of(&batch, 10), [3, 9, 1]);
        assert!(!out.has_waiting());
        assert!(out.take().is_none());
    }
}
