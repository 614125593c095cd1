//! [`FairQueue`]: a link writer's queue of [`Outgoing`] commands, one queue
//! per stream, taken in turn so that no stream's frames wait behind another
//! stream's window.
//!
//! # Why
//! Every stream of a link shares one TCP connection. With one FIFO for all
//! of them, a stream's first frame (a tunnel's status and headers, a chat's
//! only token) queues behind everything the busy streams were allowed to send
//! before it: up to a window each. On a slow or congested link that is
//! seconds of someone else's body. Heartbeats already overtake the queue
//! ([`jumps_the_queue`](crate::link::jumps_the_queue)); this is the same
//! courtesy for every stream, by scheduling rather than by priority.
//!
//! # How: deficit round robin with a turn for newcomers
//! The schedule is fq_codel's (RFC 8290 §4.2, without the dropping):
//! - each stream has its own FIFO and a *deficit* of bytes it may still send
//!   in its current turn ([`QUANTUM`] per turn);
//! - a stream with nothing queued that gets a command joins the **new** list;
//!   streams that have used a turn wait in the **old** list; the new list is
//!   served first;
//! - a stream whose deficit is spent gets a fresh [`QUANTUM`] and goes to the
//!   back of the old list;
//! - a stream that runs empty leaves at once (fq_codel parks it in the old
//!   list first, so that a flow cannot stay ahead by coming and going; the
//!   streams here are the writer's own (the Node's answers, the Edge's
//!   requests and credit), not flows a stranger opens, and a parked stream
//!   would stay listed for as long as newcomers keep the old list waiting).
//!
//! So a sparse stream (a token now and then, a small answer's head, body and
//! end) is served at the next command the writer takes, whatever the bulk
//! streams hold queued, and busy streams share the rest byte for byte.
//!
//! # Invariants (property-tested)
//! - Every command pushed is popped exactly once, unless its stream was
//!   withdrawn first ([`Outgoing::Withdraw`]); one stream's commands come
//!   out in the order they went in.
//! - [`Outgoing::Close`] comes out last, after every command pushed before it;
//!   commands pushed after it are dropped (as [`WriteBatch`] drops them).
//!
//! [`WriteBatch`]: crate::write_batch::WriteBatch

use std::collections::VecDeque;

use foldhash::HashMap;

use crate::link::Outgoing;

/// Bytes a stream may send in one turn before the next stream's turn.
pub const QUANTUM: i64 = 16 * 1024;

/// Most emptied per-stream queues kept for reuse (so a stream that comes
/// and goes does not allocate each time).
const SPARE_QUEUES: usize = 64;

/// One stream's queue and its place in the schedule.
#[derive(Debug, Default)]
struct Flow {
    queue: VecDeque<Outgoing>,
    /// Bytes it may still send in its current turn.
    deficit: i64,
}

/// Per-stream queues of link commands, taken in turn; see the module docs.
#[derive(Debug, Default)]
pub struct FairQueue {
    flows: HashMap<u64, Flow>,
    /// Streams that joined with nothing queued, served first.
    new: VecDeque<u64>,
    /// Streams that have used a turn.
    old: VecDeque<u64>,
    /// Commands queued, over all streams.
    len: usize,
    /// A [`Outgoing::Close`] was pushed: it comes out once the rest has.
    closing: bool,
    /// The close has been popped.
    closed: bool,
    spare: Vec<VecDeque<Outgoing>>,
}

impl FairQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `command` on `stream_id` (0 for the link's own messages).
    /// [`Outgoing::Close`] is kept for last, whatever its stream; anything
    /// pushed after it is dropped.
    pub fn push(&mut self, stream_id: u64, command: Outgoing) {
        if self.closing {
            return;
        }
        if matches!(command, Outgoing::Close) {
            self.closing = true;
            return;
        }
        if matches!(command, Outgoing::Withdraw) {
            drop(self.withdraw(stream_id));
            return;
        }
        self.len += 1;
        if let Some(flow) = self.flows.get_mut(&stream_id) {
            flow.queue.push_back(command);
            return;
        }
        let mut queue = self.spare.pop().unwrap_or_default();
        queue.push_back(command);
        self.flows.insert(
            stream_id,
            Flow {
                queue,
                deficit: QUANTUM,
            },
        );
        self.new.push_back(stream_id);
    }

    /// The next command in the schedule, `None` when nothing is queued.
    pub fn pop(&mut self) -> Option<Outgoing> {
        loop {
            let (from_new, id) = match (self.new.front(), self.old.front()) {
                (Some(&id), _) => (true, id),
                (None, Some(&id)) => (false, id),
                (None, None) => return self.pop_close(),
            };
            let Some(flow) = self.flows.get_mut(&id).filter(|f| !f.queue.is_empty()) else {
                // Not reachable: a listed stream has its flow, and leaves
                // the lists when it runs empty.
                self.list(from_new).pop_front();
                self.flows.remove(&id);
                continue;
            };
            if flow.deficit <= 0 {
                flow.deficit += QUANTUM;
                self.list(from_new).pop_front();
                self.old.push_back(id);
                continue;
            }
            if let Some(command) = flow.queue.pop_front() {
                flow.deficit -= wire_len(&command) as i64;
                self.len -= 1;
                if flow.queue.is_empty() {
                    self.list(from_new).pop_front();
                    if let Some(flow) = self.flows.remove(&id)
                        && self.spare.len() < SPARE_QUEUES
                    {
                        self.spare.push(flow.queue);
                    }
                }
                return Some(command);
            }
        }
    }

    /// Takes out what `stream_id` has queued ([`Outgoing::Withdraw`]), in
    /// order; the stream leaves the schedule.
    pub fn withdraw(&mut self, stream_id: u64) -> VecDeque<Outgoing> {
        let Some(flow) = self.flows.remove(&stream_id) else {
            return VecDeque::new();
        };
        self.len -= flow.queue.len();
        self.new.retain(|&id| id != stream_id);
        self.old.retain(|&id| id != stream_id);
        flow.queue
    }

    /// Commands queued (a pending close not counted).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether [`pop`](Self::pop) has nothing more to give.
    pub fn is_empty(&self) -> bool {
        self.len == 0 && (!self.closing || self.closed)
    }

    fn list(&mut self, new: bool) -> &mut VecDeque<u64> {
        if new { &mut self.new } else { &mut self.old }
    }

    fn pop_close(&mut self) -> Option<Outgoing> {
        if self.closing && !self.closed {
            self.closed = true;
            return Some(Outgoing::Close);
        }
        None
    }
}

/// Bytes `command` puts on the wire.
fn wire_len(command: &Outgoing) -> usize {
    match command {
        Outgoing::Frame(frame) => frame.len(),
        Outgoing::Body(frame) => frame.len(),
        Outgoing::Close | Outgoing::Withdraw => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use proptest::prelude::*;

    /// A frame of `len` bytes that names its stream and number.
    fn frame(stream: u64, n: u32, len: usize) -> Outgoing {
        let mut bytes = vec![0u8; len.max(12)];
        bytes[..8].copy_from_slice(&stream.to_le_bytes());
        bytes[8..12].copy_from_slice(&n.to_le_bytes());
        Outgoing::Frame(Bytes::from(bytes))
    }

    fn label(command: &Outgoing) -> (u64, u32) {
        let Outgoing::Frame(bytes) = command else {
            panic!("not a frame: {command:?}");
        };
        (
            u64::from_le_bytes(bytes[..8].try_into().unwrap()),
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()),
        )
    }

    fn drain(queue: &mut FairQueue) -> Vec<Outgoing> {
        std::iter::from_fn(|| queue.pop()).collect()
    }

    #[test]
    fn a_sparse_stream_goes_ahead_of_the_bulk_streams_backlog() {
        let mut queue = FairQueue::new();
        // Two bulk streams with a window each queued (16 frames of 16 KiB).
        for n in 0..16 {
            queue.push(1, frame(1, n, 16 * 1024));
            queue.push(2, frame(2, n, 16 * 1024));
        }
        // The writer has taken a few.
        for _ in 0..3 {
            queue.pop().unwrap();
        }
        // A new stream's head arrives: it is the very next command.
        queue.push(3, frame(3, 0, 40));
        assert_eq!(label(&queue.pop().unwrap()), (3, 0));
        // The bulk streams alternate, each in order.
        let rest: Vec<_> = drain(&mut queue).iter().map(label).collect();
        assert_eq!(rest.len(), 29);
        for pair in rest.windows(2) {
            assert_ne!(pair[0].0, pair[1].0, "turns alternate: {rest:?}");
        }
    }

    #[test]
    fn busy_streams_share_by_bytes_not_by_frames() {
        let mut queue = FairQueue::new();
        // Stream 1 sends 64 KiB frames, stream 2 4 KiB ones.
        for n in 0..8 {
            queue.push(1, frame(1, n, 64 * 1024));
        }
        for n in 0..128 {
            queue.push(2, frame(2, n, 4 * 1024));
        }
        let mut bytes = [0usize; 3];
        for _ in 0..64 {
            let command = queue.pop().unwrap();
            bytes[label(&command).0 as usize] += wire_len(&command);
        }
        // Within a turn of each other.
        let (a, b) = (bytes[1] as i64, bytes[2] as i64);
        assert!((a - b).abs() <= 64 * 1024 + QUANTUM, "{a} against {b}");
    }

    #[test]
    fn close_comes_last_and_drops_what_follows() {
        let mut queue = FairQueue::new();
        queue.push(1, frame(1, 0, 10));
        queue.push(0, Outgoing::Close);
        queue.push(2, frame(2, 0, 10));
        assert!(!queue.is_empty());
        assert_eq!(label(&queue.pop().unwrap()), (1, 0));
        assert_eq!(queue.pop(), Some(Outgoing::Close));
        assert!(queue.is_empty());
        assert_eq!(queue.pop(), None);
    }

    #[test]
    fn a_withdrawn_stream_leaves_with_what_it_had_queued() {
        let mut queue = FairQueue::new();
        for n in 0..8 {
            queue.push(1, frame(1, n, 64 * 1024));
            queue.push(2, frame(2, n, 100));
        }
        assert_eq!(label(&queue.pop().unwrap()), (1, 0));
        let taken: Vec<_> = queue.withdraw(1).iter().map(label).collect();
        assert_eq!(taken, (1..8).map(|n| (1, n)).collect::<Vec<_>>());
        assert_eq!(queue.len(), 8, "stream 2's eight");
        let rest: Vec<_> = drain(&mut queue).iter().map(label).collect();
        assert_eq!(rest, (0..8).map(|n| (2, n)).collect::<Vec<_>>());
        // A withdrawn stream that comes back is a new stream; withdrawing
        // one with nothing queued changes nothing.
        queue.push(1, frame(1, 9, 10));
        queue.push(3, Outgoing::Withdraw);
        assert_eq!(label(&queue.pop().unwrap()), (1, 9));
        assert!(queue.is_empty());
    }

    #[test]
    fn a_stream_that_comes_and_goes_reuses_its_queue() {
        let mut queue = FairQueue::new();
        for n in 0..1000 {
            queue.push(n, frame(n, 0, 10));
            assert_eq!(label(&queue.pop().unwrap()), (n, 0));
        }
        assert!(queue.is_empty());
        // Each emptied stream left, its queue kept for the next.
        assert!(queue.flows.len() <= 2, "{}", queue.flows.len());
        assert!(queue.spare.len() <= SPARE_QUEUES);
    }

    proptest! {
        /// Every command comes out once, each stream's in order, the close
        /// last; at no point does a stream with nothing queued block another.
        #[test]
        fn every_command_comes_out_once_and_in_stream_order(
            ops in proptest::collection::vec((0u64..6, 1usize..70_000, 0u8..4), 1..300),
            close_at in proptest::option::of(0usize..300),
        ) {
            let mut queue = FairQueue::new();
            let mut pushed: HashMap<u64, Vec<u32>> = HashMap::default();
            let mut popped: HashMap<u64, Vec<u32>> = HashMap::default();
            let mut closed_pushed = false;
            let mut saw_close = false;
            for (i, (stream, len, pops)) in ops.iter().enumerate() {
                if close_at == Some(i) {
                    queue.push(0, Outgoing::Close);
                    closed_pushed = true;
                }
                let numbers = pushed.entry(*stream).or_default();
                let n = numbers.len() as u32;
                if !closed_pushed {
                    // After the close a push is dropped: not expected out.
                    numbers.push(n);
                }
                queue.push(*stream, frame(*stream, n, *len));
                for _ in 0..*pops {
                    match queue.pop() {
                        Some(Outgoing::Close) => {
                            saw_close = true;
                            prop_assert_eq!(queue.len(), 0);
                        }
                        Some(command) => {
                            prop_assert!(!saw_close);
                            let (s, n) = label(&command);
                            popped.entry(s).or_default().push(n);
                        }
                        None => prop_assert_eq!(queue.len(), 0),
                    }
                }
            }
            for command in drain(&mut queue) {
                if command == Outgoing::Close {
                    prop_assert!(!saw_close);
                    saw_close = true;
                    continue;
                }
                prop_assert!(!saw_close);
                let (s, n) = label(&command);
                popped.entry(s).or_default().push(n);
            }
            prop_assert_eq!(saw_close, closed_pushed);
            prop_assert!(queue.is_empty());
            pushed.retain(|_, v| !v.is_empty());
            prop_assert_eq!(popped, pushed);
        }
    }
}
