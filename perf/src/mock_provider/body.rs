//! The response body: a whole buffer, or a scripted stream of events.
//!
//! A stream is a [`Script`]: fixed events ([`Step::Event`]), runs of token
//! events generated lazily from a template ([`Step::Tokens`]), and fixed
//! events that count as one token each ([`Step::Counted`], e.g. Ollama pull
//! progress lines, so `delay-*`, `stall-after` and `abort-after` apply to
//! them). The body walks
//! the script when hyper polls it, so a billion-token stream costs no memory,
//! and without a delay knob no timer is ever created.
//!
//! ```text
//!  Prefill ──(prefill-ms elapsed)──► Running ──(script empty)──► Done
//!                                     │  ▲ per-token delay (one reused timer)
//!                                     │  └─┘
//!                    stall-after hit ─┤──► Stalled (Pending forever, no waker)
//!                    abort-after hit ─┴──► AbortFlush ──► Aborted (body error:
//!                                          hyper drops the connection)
//! ```
//!
//! Dropping a stream that is not `Done`/`Aborted` means hyper gave up on it
//! (the client went away): [`Stats`] counts it as `streams_client_gone`
//! and reports a [`StreamCut`] (with the instant its connection's socket
//! saw the client go, when the body was [attached](MockBody::attach)).

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use hyper::body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

use super::cut::{ConnWatch, StreamCut};
use super::knobs::Knobs;
use super::stamp::monotonic_ns;
use super::stats::Stats;
use super::text::{EventBuf, Token, decimal, pad};

/// A run of `count` token events built from a template:
/// `prefix` + token text + padding + `mid` [+ sequence number + `seq_end`]
/// [+ send stamp + `stamp_end`].
#[derive(Debug)]
pub(crate) struct TokenRun {
    pub(crate) token: Token,
    pub(crate) count: u64,
    pub(crate) prefix: Bytes,
    pub(crate) mid: Bytes,
    /// For the Responses API: the first `sequence_number` of the run, and
    /// the bytes that close the event after the number.
    pub(crate) seq: Option<(u64, Bytes)>,
    pub(crate) pad: usize,
    /// `stamp` knob: after everything else, the `CLOCK_MONOTONIC`
    /// nanoseconds at which the event is produced, then these bytes (see
    /// [`stamp`](super::stamp)).
    pub(crate) stamp: Option<Bytes>,
}

/// One step of a script.
#[derive(Debug)]
pub(crate) enum Step {
    Event(Box<EventBuf>),
    Tokens(TokenRun),
    /// A fixed event paced and counted like one token.
    Counted(Box<EventBuf>),
}

/// The events of one streaming response, in order.
#[derive(Debug, Default)]
pub(crate) struct Script {
    steps: VecDeque<Step>,
}

impl Script {
    pub(crate) fn event(&mut self, e: EventBuf) -> &mut Self {
        self.steps.push_back(Step::Event(Box::new(e)));
        self
    }

    pub(crate) fn bytes(&mut self, b: Bytes) -> &mut Self {
        self.event(EventBuf::from_bytes(b))
    }

    /// A fixed event that counts as one token (delay, stall, abort).
    pub(crate) fn counted(&mut self, b: Bytes) -> &mut Self {
        self.steps
            .push_back(Step::Counted(Box::new(EventBuf::from_bytes(b))));
        self
    }

    pub(crate) fn tokens(&mut self, run: TokenRun) -> &mut Self {
        if run.count > 0 {
            self.steps.push_back(Step::Tokens(run));
        }
        self
    }
}

/// Number of events a run of `tokens` tokens takes at `chunk` tokens an event.
pub(crate) fn event_count(tokens: u64, chunk: u32) -> u64 {
    tokens.div_ceil(u64::from(chunk))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Prefill,
    Running,
    Stalled,
    AbortFlush,
    Aborted,
    Done,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    Stall,
    Abort,
}

/// Events smaller than this may be coalesced with the ones after them.
const BATCH_SMALL_EVENT: usize = 4 * 1024;
/// Largest coalesced chunk: small events due at once (no delay knob) go out
/// together, so a 20-event stream costs one `writev`, not three.
const BATCH_BYTES: usize = 32 * 1024;

/// The streaming half of [`MockBody`].
#[derive(Debug)]
struct Stream {
    script: Script,
    state: State,
    chunk: u32,
    token_delay: Duration,
    prefill: Duration,
    /// Stop (stall or abort) once this many tokens were sent.
    cut: Option<(u64, Cut)>,
    sent: u64,
    /// The token schedule: when the next token event is due.
    due: Option<Instant>,
    /// Whether the delay of the front token event has been waited for.
    delay_paid: bool,
    sleep: Option<Pin<Box<Sleep>>>,
    waiting: bool,
    /// Arena for `sequence_number` and send-stamp digits.
    digits: BytesMut,
    /// An event produced while batching that did not fit the batch.
    stash: Option<EventBuf>,
    stats: Arc<Stats>,
    /// The connection this stream is written to, if attached.
    conn: Option<Arc<ConnWatch>>,
}

/// The error a body returns to make hyper drop the connection (`abort-after`).
#[derive(Debug)]
pub struct MockAbort;

impl std::fmt::Display for MockAbort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("mock abort-after: dropping the connection mid-stream")
    }
}

impl std::error::Error for MockAbort {}

/// The body of every mock response.
#[derive(Debug)]
pub struct MockBody(Inner);

#[derive(Debug)]
enum Inner {
    Full(Option<Bytes>),
    Stream(Box<Stream>),
}

impl MockBody {
    /// A complete body.
    pub fn full(b: impl Into<Bytes>) -> Self {
        let b = b.into();
        Self(Inner::Full((!b.is_empty()).then_some(b)))
    }

    /// A streaming body following `script` under the stream knobs of `knobs`.
    pub(crate) fn stream(script: Script, knobs: &Knobs, stats: Arc<Stats>) -> Self {
        Stats::bump(&stats.streams_started);
        let cut = match (knobs.stall_after, knobs.abort_after) {
            (Some(s), Some(a)) if a < s => Some((u64::from(a), Cut::Abort)),
            (Some(s), _) => Some((u64::from(s), Cut::Stall)),
            (None, Some(a)) => Some((u64::from(a), Cut::Abort)),
            (None, None) => None,
        };
        Self(Inner::Stream(Box::new(Stream {
            script,
            state: State::Prefill,
            chunk: knobs.chunk_size.max(1),
            token_delay: knobs.token_delay,
            prefill: knobs.prefill,
            cut,
            sent: 0,
            due: None,
            delay_paid: false,
            sleep: None,
            waiting: false,
            digits: BytesMut::new(),
            stash: None,
            stats,
            conn: None,
        })))
    }

    /// Ties a streaming body to the connection it is written on, so a cut
    /// reports when that connection saw its peer go. No-op on a full body.
    pub(crate) fn attach(&mut self, conn: &Arc<ConnWatch>) {
        if let Inner::Stream(s) = &mut self.0 {
            s.conn = Some(conn.clone());
        }
    }
}

impl Stream {
    fn arm(&mut self, at: Instant) {
        match &mut self.sleep {
            Some(s) => s.as_mut().reset(at),
            None => self.sleep = Some(Box::pin(tokio::time::sleep_until(at))),
        }
        self.waiting = true;
    }

    /// Starts the per-token delay of the next `k` tokens unless already
    /// paid; true when the caller must wait for the timer first.
    fn delay_pending(&mut self, k: u64) -> bool {
        if self.token_delay.is_zero() || self.delay_paid {
            return false;
        }
        let base = self.due.unwrap_or_else(Instant::now);
        let at = base + self.token_delay * k as u32;
        self.due = Some(at);
        self.delay_paid = true;
        if at > Instant::now() {
            self.arm(at);
            return true;
        }
        false
    }

    fn finish(&mut self) {
        self.state = State::Done;
        Stats::bump(&self.stats.streams_completed);
    }

    /// Whether [`Stream::poll_event`] would return an event right away,
    /// without a timer, a stall/abort point or the end of the script.
    fn event_ready_now(&self) -> bool {
        self.state == State::Running
            && !self.waiting
            && self.stash.is_none()
            && self.cut.is_none_or(|(at, _)| self.sent < at)
            && match self.script.steps.front() {
                Some(Step::Event(_)) => true,
                Some(Step::Tokens(_) | Step::Counted(_)) => self.token_delay.is_zero(),
                None => false,
            }
    }

    /// The next HTTP chunk: one event, or — when events are small and due
    /// now — several coalesced (see [`BATCH_BYTES`]).
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<EventBuf, MockAbort>>> {
        let first = match ready!(self.poll_event(cx)) {
            Some(Ok(e)) if e.remaining() < BATCH_SMALL_EVENT && self.event_ready_now() => e,
            other => return Poll::Ready(other),
        };
        let mut batch = BytesMut::with_capacity(BATCH_BYTES);
        batch.put(first);
        while batch.len() < BATCH_BYTES && self.event_ready_now() {
            match self.poll_event(cx) {
                Poll::Ready(Some(Ok(e)))
                    if e.remaining() < BATCH_SMALL_EVENT
                        && batch.len() + e.remaining() <= BATCH_BYTES =>
                {
                    batch.put(e)
                }
                Poll::Ready(Some(Ok(e))) => {
                    self.stash = Some(e);
                    break;
                }
                // `event_ready_now` rules these out.
                _ => unreachable!("poll_event was not ready after event_ready_now"),
            }
        }
        Poll::Ready(Some(Ok(EventBuf::from_bytes(batch.freeze()))))
    }

    /// Produces the next event (`None`: end of stream).
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<EventBuf, MockAbort>>> {
        if let Some(e) = self.stash.take() {
            return Poll::Ready(Some(Ok(e)));
        }
        loop {
            if self.waiting {
                if let Some(s) = &mut self.sleep {
                    ready!(s.as_mut().poll(cx));
                }
                self.waiting = false;
            }
            match self.state {
                State::Prefill => {
                    self.state = State::Running;
                    if !self.prefill.is_zero() {
                        let at = Instant::now() + self.prefill;
                        self.due = Some(at);
                        self.arm(at);
                    }
                    continue;
                }
                State::Running => {}
                State::Stalled => return Poll::Pending,
                State::AbortFlush => {
                    self.state = State::Aborted;
                    Stats::bump(&self.stats.streams_aborted);
                    return Poll::Ready(Some(Err(MockAbort)));
                }
                State::Aborted | State::Done => return Poll::Ready(None),
            }
            if let Some((at, cut)) = self.cut
                && self.sent >= at
            {
                return match cut {
                    Cut::Stall => {
                        self.state = State::Stalled;
                        Stats::bump(&self.stats.streams_stalled);
                        // No waker: only the client leaving wakes this task.
                        Poll::Pending
                    }
                    Cut::Abort => {
                        // Yield once so hyper flushes what it buffered, then fail.
                        self.state = State::AbortFlush;
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                };
            }
            let Some(front) = self.script.steps.front_mut() else {
                self.finish();
                return Poll::Ready(None);
            };
            let event = match front {
                Step::Event(_) => match self.script.steps.pop_front() {
                    Some(Step::Event(e)) => *e,
                    _ => unreachable!("front was an event"),
                },
                Step::Counted(_) => {
                    if self.delay_pending(1) {
                        continue;
                    }
                    self.delay_paid = false;
                    let Some(Step::Counted(e)) = self.script.steps.pop_front() else {
                        unreachable!("front was a counted event")
                    };
                    self.sent += 1;
                    *e
                }
                Step::Tokens(run) => {
                    let mut k = run.count.min(u64::from(self.chunk));
                    if let Some((at, _)) = self.cut {
                        k = k.min(at - self.sent);
                    }
                    if self.delay_pending(k) {
                        continue;
                    }
                    let Some(Step::Tokens(run)) = self.script.steps.front_mut() else {
                        unreachable!("front was a token run")
                    };
                    self.delay_paid = false;
                    let mut e = EventBuf::default();
                    e.push(run.prefix.clone())
                        .push_tokens(run.token, k)
                        .push(pad(run.pad))
                        .push(run.mid.clone());
                    let seq = run.seq.as_mut().map(|(n, end)| {
                        *n += 1;
                        (*n - 1, end.clone())
                    });
                    let stamp_end = run.stamp.clone();
                    run.count -= k;
                    if run.count == 0 {
                        self.script.steps.pop_front();
                    }
                    if let Some((n, end)) = seq {
                        e.push(decimal(&mut self.digits, n)).push(end);
                    }
                    if let Some(end) = stamp_end {
                        e.push(decimal(&mut self.digits, monotonic_ns())).push(end);
                    }
                    self.sent += k;
                    e
                }
            };
            if self.script.steps.is_empty() {
                self.finish();
            }
            return Poll::Ready(Some(Ok(event)));
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !matches!(self.state, State::Done | State::Aborted) {
            Stats::bump(&self.stats.streams_client_gone);
            self.stats.report_cut(StreamCut {
                closed_at: self.conn.as_ref().and_then(|c| c.peer_gone_at()),
                dropped_at: std::time::Instant::now(),
                tokens_sent: self.sent,
            });
        }
    }
}

impl Body for MockBody {
    type Data = EventBuf;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<EventBuf>, Self::Error>>> {
        match &mut self.0 {
            Inner::Full(b) => {
                Poll::Ready(b.take().map(|b| Ok(Frame::data(EventBuf::from_bytes(b)))))
            }
            Inner::Stream(s) => s
                .poll_chunk(cx)
                .map(|e| e.map(|r| r.map(Frame::data).map_err(Into::into))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.0 {
            Inner::Full(b) => b.is_none(),
            Inner::Stream(s) => matches!(s.state, State::Done | State::Aborted),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.0 {
            Inner::Full(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Inner::Stream(_) => SizeHint::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering::Relaxed;
    use std::task::Waker;

    use super::*;

    fn script(tokens: u64) -> Script {
        let mut s = Script::default();
        s.bytes(Bytes::from_static(b"head\n"));
        s.tokens(TokenRun {
            token: Token::Content,
            count: tokens,
            prefix: Bytes::from_static(b"<"),
            mid: Bytes::from_static(b">\n"),
            seq: None,
            pad: 0,
            stamp: None,
        });
        s.bytes(Bytes::from_static(b"end\n"));
        s
    }

    /// Polls until Pending or the end; returns the frames' bytes.
    fn drain(body: &mut MockBody) -> (Vec<Vec<u8>>, Option<bool>) {
        let mut cx = Context::from_waker(Waker::noop());
        let mut frames = Vec::new();
        loop {
            match Pin::new(&mut *body).poll_frame(&mut cx) {
                Poll::Ready(Some(Ok(f))) => {
                    let mut d = f.into_data().unwrap();
                    frames.push(d.copy_to_bytes(d.remaining()).to_vec());
                }
                Poll::Ready(Some(Err(_))) => return (frames, Some(true)),
                Poll::Ready(None) => return (frames, Some(false)),
                Poll::Pending => return (frames, None),
            }
        }
    }

    #[test]
    fn small_events_due_at_once_are_one_chunk() {
        let stats = Arc::new(Stats::new(true));
        let mut b = MockBody::stream(script(3), &Knobs::default(), stats.clone());
        let (frames, end) = drain(&mut b);
        assert_eq!(frames, [b"head\n<tok >\n<tok >\n<tok >\nend\n".to_vec()]);
        assert_eq!(end, Some(false));
        assert!(b.is_end_stream());
        drop(b);
        assert_eq!(stats.streams_completed.load(Relaxed), 1);
        assert_eq!(stats.streams_client_gone(), 0);
    }

    #[test]
    fn stall_stops_exactly_at_n_tokens_and_drop_counts_client_gone() {
        let stats = Arc::new(Stats::new(true));
        let knobs = Knobs {
            stall_after: Some(2),
            chunk_size: 3,
            ..Knobs::default()
        };
        let mut b = MockBody::stream(script(5), &knobs, stats.clone());
        let (frames, end) = drain(&mut b);
        assert_eq!(frames.concat(), b"head\n<tok tok >\n");
        assert_eq!(end, None, "stalled: pending forever");
        assert_eq!(drain(&mut b), (vec![], None));
        drop(b);
        assert_eq!(stats.streams_stalled.load(Relaxed), 1);
        assert_eq!(stats.streams_client_gone(), 1);
    }

    #[test]
    fn an_unfinished_stream_reports_its_cut_to_the_watcher() {
        let stats = Arc::new(Stats::new(true));
        let cuts = stats.watch_cuts();
        let knobs = Knobs {
            stall_after: Some(2),
            ..Knobs::default()
        };
        let conn = Arc::new(ConnWatch::default());
        let mut b = MockBody::stream(script(5), &knobs, stats.clone());
        b.attach(&conn);
        drain(&mut b);
        drop(b);
        let cut = cuts.try_recv().expect("a cut is reported");
        assert_eq!(cut.tokens_sent, 2);
        assert_eq!(cut.closed_at, None, "the socket never saw a close");
        // A finished stream is no cut.
        let mut done = MockBody::stream(script(1), &Knobs::default(), stats);
        done.attach(&conn);
        drain(&mut done);
        drop(done);
        assert!(cuts.try_recv().is_err());
    }

    #[test]
    fn abort_yields_once_then_errors() {
        let stats = Arc::new(Stats::new(true));
        let knobs = Knobs {
            abort_after: Some(1),
            stall_after: Some(4),
            ..Knobs::default()
        };
        let mut b = MockBody::stream(script(5), &knobs, stats.clone());
        let (frames, end) = drain(&mut b);
        assert_eq!(frames.concat(), b"head\n<tok >\n");
        assert_eq!(end, None, "one Pending so hyper flushes first");
        assert_eq!(drain(&mut b), (vec![], Some(true)));
        drop(b);
        assert_eq!(stats.streams_aborted.load(Relaxed), 1);
        assert_eq!(stats.streams_client_gone(), 0);
    }

    #[test]
    fn counted_events_count_as_tokens_for_the_cut() {
        let stats = Arc::new(Stats::new(true));
        let mut s = Script::default();
        s.bytes(Bytes::from_static(b"head\n"));
        for line in [&b"a\n"[..], b"b\n", b"c\n"] {
            s.counted(Bytes::from_static(line));
        }
        let knobs = Knobs {
            stall_after: Some(2),
            ..Knobs::default()
        };
        let mut b = MockBody::stream(s, &knobs, stats.clone());
        let (frames, end) = drain(&mut b);
        assert_eq!(frames.concat(), b"head\na\nb\n");
        assert_eq!(end, None, "stalled after two counted events");
        drop(b);
        assert_eq!(stats.streams_stalled.load(Relaxed), 1);
    }

    #[test]
    fn large_events_are_not_coalesced() {
        let stats = Arc::new(Stats::new(true));
        let mut s = script(0);
        s.tokens(TokenRun {
            token: Token::Content,
            count: 2,
            prefix: Bytes::from_static(b"<"),
            mid: Bytes::from_static(b">\n"),
            seq: None,
            pad: BATCH_SMALL_EVENT,
            stamp: None,
        });
        let mut b = MockBody::stream(s, &Knobs::default(), stats);
        let (frames, _) = drain(&mut b);
        let sizes: Vec<_> = frames.iter().map(Vec::len).collect();
        let big = BATCH_SMALL_EVENT + 7;
        assert_eq!(
            sizes,
            [5 + 4, big, big],
            "head+end batch, then one frame per big event"
        );
    }
}
