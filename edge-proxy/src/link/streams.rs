//! The streams open on one node connection: who receives each stream's
//! frames, and when a stream ends.
//!
//! A stream is opened by the Edge (a run, a node command, a session
//! terminate) with a fresh id from the process-wide [`StreamIds`], taken by
//! whoever opens it on whichever core: never 0 (the connection's own
//! stream), never reused, so unique on every connection. The opener knows
//! the id at once and need not wait for the connection's core to answer;
//! that core only says when it could not open the stream
//! ([`StreamItem::NotSent`]). Every frame the node sends on that id goes to the stream's
//! [`StreamSink`] in arrival order, which is the node's send order (one TCP
//! connection). The stream's entry is removed at its terminal frame, so
//! nothing after a terminal is ever delivered; when the connection ends,
//! every open stream gets exactly one [`StreamItem::Lost`] instead.
//!
//! Sans-IO: no sockets, no clock. The connection driver owns one table.
//!
//! A stream's channel ([`stream_channel`]) allocates per queued item and
//! keeps nothing at rest beyond its small shared state: a stream that idles
//! for minutes (a model thinking) holds no block of item slots. A frame
//! travels by value: the envelope's large variants are boxed (`proto`'s
//! build script), so a [`Msg`] is ~70 bytes and the node the channel keeps
//! for the next item costs an open stream about that (a `Msg` of ~0.3 KB,
//! before, had to travel boxed: a second allocation a frame); a channel
//! with a preallocated block (tokio's: 32 slots) cost ~9 KB.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use foldhash::HashMap;
use framing::link::CloseReason;
use futures_channel::mpsc::{UnboundedReceiver, UnboundedSender, unbounded};
use proto::Envelope;
use proto::v1::provider_tunnel_frame::Frame as TunnelFrame;
use proto::v1::{RunEventKind, envelope::Msg};

use tokio::sync::mpsc::error::TryRecvError;

/// What a stream is, which decides its terminal frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// A normalized run: ends at a `complete`, `error` or `cancelled` event.
    Run,
    /// A node command: ends at the response with `final = true`.
    Command,
    /// A session terminate: ends at its `CancelResponse`.
    Cancel,
    /// A raw provider tunnel: ends at its `end` or `error` frame.
    Tunnel,
}

impl StreamKind {
    /// Whether `msg` is a frame this kind of stream may carry, and if so
    /// whether it is the terminal one. `None`: not this stream's frame.
    fn accepts(self, msg: &Msg) -> Option<bool> {
        match (self, msg) {
            (Self::Run, Msg::RunEvent(event)) => Some(matches!(
                event.kind(),
                RunEventKind::Complete | RunEventKind::Error | RunEventKind::Cancelled
            )),
            // The answer to a CANCEL_RUN sent on the run's own stream.
            (Self::Run, Msg::CancelResponse(_)) => Some(false),
            (Self::Command, Msg::NodeCommandResponse(response)) => Some(response.r#final),
            (Self::Cancel, Msg::CancelResponse(_)) => Some(true),
            (Self::Tunnel, Msg::ProviderTunnelFrame(frame)) => Some(match &frame.frame {
                Some(TunnelFrame::End(_) | TunnelFrame::Error(_)) => true,
                Some(TunnelFrame::Batch(batch)) => batch.end.is_some(),
                _ => false,
            }),
            (Self::Tunnel, Msg::CancelResponse(_)) => Some(false),
            _ => None,
        }
    }
}

/// One item a stream's receiver gets.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamItem {
    /// A frame the node sent on the stream (see the module docs).
    Frame(Msg),
    /// The connection ended before the stream's terminal: no more frames.
    Lost(CloseReason),
    /// The stream was never opened: its connection was no longer current
    /// or ready when the open reached its core, and nothing was sent.
    NotSent,
}

/// Stream ids for one Edge process (see the module docs): 1, 2, 3… from
/// any thread.
#[derive(Debug)]
pub struct StreamIds(AtomicU64);

impl StreamIds {
    /// Ids from 1.
    pub fn new() -> Self {
        Self(AtomicU64::new(1))
    }

    /// A fresh id.
    pub fn next(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

impl Default for StreamIds {
    fn default() -> Self {
        Self::new()
    }
}

/// Where a stream's items go (any thread); see [`stream_channel`].
#[derive(Debug, Clone)]
pub struct StreamSink(UnboundedSender<StreamItem>);

impl StreamSink {
    /// Queues `item`; `false` when the receiver is gone.
    pub fn send(&self, item: StreamItem) -> bool {
        self.0.unbounded_send(item).is_ok()
    }
}

/// The caller's end of a stream's channel (any thread).
#[derive(Debug)]
pub struct StreamReceiver(UnboundedReceiver<StreamItem>);

impl StreamReceiver {
    /// The next item; `None` once every sink is gone and nothing is queued.
    pub async fn recv(&mut self) -> Option<StreamItem> {
        self.0.recv().await.ok()
    }

    /// The next item if one is queued, without waiting; the errors are
    /// tokio's (as for the other channels): `Empty`, or `Disconnected`
    /// once every sink is gone and nothing is queued.
    pub fn try_recv(&mut self) -> Result<StreamItem, TryRecvError> {
        self.0.try_recv().map_err(|error| match error {
            futures_channel::mpsc::TryRecvError::Empty => TryRecvError::Empty,
            futures_channel::mpsc::TryRecvError::Closed => TryRecvError::Disconnected,
        })
    }
}

/// A stream's channel: unbounded (the node's window bounds what is in
/// flight), one allocation per queued item, no preallocated slots (see the
/// module docs).
pub fn stream_channel() -> (StreamSink, StreamReceiver) {
    let (tx, rx) = unbounded();
    (StreamSink(tx), StreamReceiver(rx))
}

#[derive(Debug)]
struct Entry {
    kind: StreamKind,
    sink: StreamSink,
    run_id: Option<Arc<str>>,
}

/// What [`StreamTable::deliver`] did with a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivered {
    /// Passed on; the stream stays open.
    Open {
        /// The run this stream carries, for the event bus.
        run_id: Option<Arc<str>>,
    },
    /// Passed on, and it was the terminal: the stream is closed.
    Terminal {
        /// The run this stream carried, for the event bus.
        run_id: Option<Arc<str>>,
    },
    /// No open stream has this id (it ended, or was never opened): dropped.
    UnknownStream,
    /// The frame's type does not belong on this stream: dropped.
    WrongType,
}

/// The open streams of one connection (see the module docs).
#[derive(Debug, Default)]
pub struct StreamTable {
    open: HashMap<u64, Entry>,
}

impl StreamTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens stream `stream_id`. An id that is 0 or already open is
    /// refused, and the sink given back.
    pub fn open(
        &mut self,
        stream_id: u64,
        kind: StreamKind,
        sink: StreamSink,
        run_id: Option<Arc<str>>,
    ) -> Result<(), StreamSink> {
        if stream_id == 0 || self.open.contains_key(&stream_id) {
            return Err(sink);
        }
        self.open.insert(stream_id, Entry { kind, sink, run_id });
        Ok(())
    }

    /// Passes a frame from the node to its stream.
    pub fn deliver(&mut self, envelope: Envelope) -> Delivered {
        let Some(msg) = envelope.msg else {
            return Delivered::WrongType;
        };
        let Some(entry) = self.open.get(&envelope.stream_id) else {
            return Delivered::UnknownStream;
        };
        let Some(terminal) = entry.kind.accepts(&msg) else {
            return Delivered::WrongType;
        };
        let run_id = entry.run_id.clone();
        // A receiver that went away only means nobody listens any more; the
        // entry still ends at the terminal.
        let _ = entry.sink.send(StreamItem::Frame(msg));
        if terminal {
            self.open.remove(&envelope.stream_id);
            Delivered::Terminal { run_id }
        } else {
            Delivered::Open { run_id }
        }
    }

    /// Forgets a stream whose receiver is gone; returns its kind and run
    /// id if it was open (the caller may then cancel the run on the node).
    pub fn close(&mut self, stream_id: u64) -> Option<(StreamKind, Option<Arc<str>>)> {
        self.open
            .remove(&stream_id)
            .map(|entry| (entry.kind, entry.run_id))
    }

    /// The connection ended: every open stream gets `Lost(reason)` once.
    pub fn fail_all(&mut self, reason: CloseReason) -> usize {
        let count = self.open.len();
        for (_, entry) in self.open.drain() {
            let _ = entry.sink.send(StreamItem::Lost(reason));
        }
        count
    }

    /// Whether `stream_id` is open.
    pub fn is_open(&self, stream_id: u64) -> bool {
        self.open.contains_key(&stream_id)
    }

    /// The kind of `stream_id`, while it is open.
    pub fn kind(&self, stream_id: u64) -> Option<StreamKind> {
        self.open.get(&stream_id).map(|entry| entry.kind)
    }

    /// Number of open streams.
    pub fn len(&self) -> usize {
        self.open.len()
    }

    /// Whether no stream is open.
    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use proto::v1::{
        CancelResponse, NodeCommandResponse, ProviderTunnelFrame, RunEvent, TunnelBatch, TunnelEnd,
    };

    use super::*;

    fn event(stream_id: u64, kind: RunEventKind) -> Envelope {
        let mut event = RunEvent::default();
        event.set_kind(kind);
        Envelope {
            stream_id,
            msg: Some(Msg::RunEvent(Box::new(event))),
        }
    }

    fn drain(rx: &mut StreamReceiver) -> Vec<StreamItem> {
        std::iter::from_fn(|| rx.try_recv().ok()).collect()
    }

    /// Opens a stream with the next id of `ids`.
    fn open(
        table: &mut StreamTable,
        ids: &StreamIds,
        kind: StreamKind,
        sink: StreamSink,
        run_id: Option<Arc<str>>,
    ) -> u64 {
        let id = ids.next();
        table
            .open(id, kind, sink, run_id)
            .expect("a fresh id opens");
        id
    }

    #[test]
    fn ids_are_fresh_and_frames_reach_their_stream_until_the_terminal() {
        let mut table = StreamTable::new();
        let ids = StreamIds::new();
        let (tx_a, mut rx_a) = stream_channel();
        let (tx_b, mut rx_b) = stream_channel();
        let a = open(
            &mut table,
            &ids,
            StreamKind::Run,
            tx_a,
            Some("run-a".into()),
        );
        let b = open(&mut table, &ids, StreamKind::Run, tx_b, None);
        assert_eq!((a, b), (1, 2));

        assert!(matches!(
            table.deliver(event(a, RunEventKind::Start)),
            Delivered::Open { .. }
        ));
        assert!(matches!(
            table.deliver(event(a, RunEventKind::Complete)),
            Delivered::Terminal { run_id: Some(id) } if &*id == "run-a"
        ));
        // Nothing after the terminal reaches the receiver.
        assert_eq!(
            table.deliver(event(a, RunEventKind::Delta)),
            Delivered::UnknownStream
        );
        assert_eq!(drain(&mut rx_a).len(), 2);
        assert!(drain(&mut rx_b).is_empty());
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn each_kind_ends_at_its_own_terminal_and_refuses_foreign_frames() {
        let mut table = StreamTable::new();
        let ids = StreamIds::new();
        let (tx, _rx) = stream_channel();
        let cmd = open(&mut table, &ids, StreamKind::Command, tx.clone(), None);
        let not_final = Envelope {
            stream_id: cmd,
            msg: Some(Msg::NodeCommandResponse(Box::default())),
        };
        assert!(matches!(table.deliver(not_final), Delivered::Open { .. }));
        assert_eq!(
            table.deliver(event(cmd, RunEventKind::Complete)),
            Delivered::WrongType
        );
        let last = Envelope {
            stream_id: cmd,
            msg: Some(Msg::NodeCommandResponse(Box::new(NodeCommandResponse {
                r#final: true,
                ..Default::default()
            }))),
        };
        assert!(matches!(table.deliver(last), Delivered::Terminal { .. }));

        let run = open(&mut table, &ids, StreamKind::Run, tx.clone(), None);
        let cancel_answer = Envelope {
            stream_id: run,
            msg: Some(Msg::CancelResponse(CancelResponse::default())),
        };
        assert!(matches!(
            table.deliver(cancel_answer.clone()),
            Delivered::Open { .. }
        ));

        let cancel = open(&mut table, &ids, StreamKind::Cancel, tx.clone(), None);
        let answer = Envelope {
            stream_id: cancel,
            ..cancel_answer
        };
        assert!(matches!(table.deliver(answer), Delivered::Terminal { .. }));

        // A tunnel's batch is its terminal when it holds the `end`.
        let tunnel = open(&mut table, &ids, StreamKind::Tunnel, tx, None);
        let batch = |end: Option<TunnelEnd>| Envelope {
            stream_id: tunnel,
            msg: Some(Msg::ProviderTunnelFrame(ProviderTunnelFrame {
                frame: Some(TunnelFrame::Batch(Box::new(TunnelBatch {
                    end,
                    ..TunnelBatch::default()
                }))),
            })),
        };
        assert!(matches!(table.deliver(batch(None)), Delivered::Open { .. }));
        assert!(matches!(
            table.deliver(batch(Some(TunnelEnd::default()))),
            Delivered::Terminal { .. }
        ));
    }

    /// The channel keeps one node of this size per open stream at rest
    /// (module docs), and every frame is moved by value: the envelope's
    /// large variants stay boxed (`proto`'s build script). A new variant
    /// larger than a body frame must be boxed there too.
    #[test]
    fn a_stream_item_is_small() {
        assert!(std::mem::size_of::<Msg>() <= 72);
        assert!(std::mem::size_of::<StreamItem>() <= 80);
    }

    #[test]
    fn a_stream_channel_reports_empty_then_disconnected_and_a_gone_receiver() {
        let (sink, mut rx) = stream_channel();
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        assert!(sink.send(StreamItem::Lost(CloseReason::HeartbeatTimeout)));
        let second = sink.clone();
        drop(sink);
        assert_eq!(
            rx.try_recv(),
            Ok(StreamItem::Lost(CloseReason::HeartbeatTimeout))
        );
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty), "a sink is left");
        drop(second);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        let (sink, rx) = stream_channel();
        drop(rx);
        assert!(!sink.send(StreamItem::Lost(CloseReason::HeartbeatTimeout)));
    }

    #[test]
    fn a_closed_connection_loses_every_open_stream_exactly_once() {
        let mut table = StreamTable::new();
        let ids = StreamIds::new();
        let (tx, mut rx) = stream_channel();
        let a = open(&mut table, &ids, StreamKind::Run, tx.clone(), None);
        open(&mut table, &ids, StreamKind::Command, tx, None);
        assert_eq!(table.close(a).map(|(kind, _)| kind), Some(StreamKind::Run));
        assert_eq!(table.fail_all(CloseReason::HeartbeatTimeout), 1);
        assert_eq!(table.fail_all(CloseReason::HeartbeatTimeout), 0);
        assert_eq!(
            drain(&mut rx),
            vec![StreamItem::Lost(CloseReason::HeartbeatTimeout)]
        );
        assert!(table.is_empty());
    }

    #[test]
    fn an_id_in_use_or_zero_is_refused_and_the_sink_given_back() {
        let mut table = StreamTable::new();
        let (tx, mut rx) = stream_channel();
        assert!(table.open(7, StreamKind::Run, tx.clone(), None).is_ok());
        let back = table
            .open(7, StreamKind::Tunnel, tx.clone(), None)
            .expect_err("7 is open");
        assert!(back.send(StreamItem::NotSent));
        assert!(table.open(0, StreamKind::Run, tx, None).is_err());
        assert_eq!(drain(&mut rx), vec![StreamItem::NotSent]);
        assert_eq!(table.len(), 1);
    }
}
