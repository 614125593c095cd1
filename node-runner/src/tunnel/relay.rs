//! The relay of one admitted tunnel: the provider request sent, its answer
//! relayed frame by frame within the stream's credit, and the terminal
//! (see the module docs of [`super`] for the frames and their order).

use bytes::Bytes;
use framing::frame::MAX_BODY_PARTS;
use proto::v1::{TunnelEnd, provider_tunnel_frame::Frame};

use super::request::Prepared;
use super::response_head::{Tap, choose_tap, relayed_headers};
use super::sse_tap::Seen;
use super::{Credit, TunnelOutcome, TunnelSink, closed, fail, frame};
use crate::adapter::transport_failure;
use crate::provider_http::ProviderClient;
use crate::stall::CloseSignal;

/// The relay of one admitted request; owns the sink until the terminal.
pub(super) struct Relay<'a, S> {
    pub(super) sink: &'a mut S,
    pub(super) credit: &'a Credit,
    pub(super) max_chunk: usize,
    /// Asked after a stall claim: every provider await gives way to it.
    pub(super) close: &'a CloseSignal,
}

impl<S: TunnelSink> Relay<'_, S> {
    /// Sends the request, relays the answer, and returns the outcome; the
    /// terminal frame is the last thing it gives the sink.
    pub(super) async fn run(self, client: &ProviderClient, prepared: Prepared) -> TunnelOutcome {
        let Self {
            sink,
            credit,
            max_chunk,
            close,
        } = self;
        // Boxed: connect, TLS and the request write are live only until
        // the head arrives; inline they would size the whole idle stream.
        let wants = prepared.wants;
        let request_sent = Box::pin(client.request(prepared.request));
        let mut response = match close.or_close(request_sent).await {
            Some(Ok(response)) => response,
            Some(Err(error)) => return fail(sink, transport_failure(&error)),
            None => return closed(),
        };
        let status = response.status();
        let mut tap = choose_tap(&response, wants);
        let cuts = matches!(tap, Tap::Sse(_)) && wants.strip_usage_event;
        sink.head(
            u32::from(status),
            &relayed_headers(response.headers(), cuts),
        );
        let mut send = Sender {
            sink,
            credit,
            max_chunk,
            first: None,
            more: Vec::new(),
            len: 0,
        };
        let mut out = Vec::new();
        let mut seen = Seen::default();
        loop {
            // What the last read brought is taken without waiting, and its
            // pieces gathered into one frame; the frame goes out before the
            // next read.
            let next = match response.next_chunk_now() {
                Some(next) => Some(next),
                None => {
                    send.flush();
                    // Read only with credit: a spent window pauses this
                    // provider. Pinned here and lent to `or_close`: passed
                    // by value, it would be laid out twice in this (idle
                    // stream's) future.
                    let read = std::pin::pin!(async {
                        wait_credit(credit, send.sink).await;
                        response.next_chunk().await
                    });
                    close.or_close(read).await
                }
            };
            let Some(next) = next else {
                drop(response);
                return closed();
            };
            match (next, &mut tap) {
                (Some(Ok(chunk)), Tap::Plain) => send.body(chunk).await,
                (Some(Ok(chunk)), Tap::Json(json)) => {
                    json.feed(&chunk);
                    send.body(chunk).await;
                }
                (Some(Ok(chunk)), Tap::Sse(sse)) => {
                    sse.feed(chunk, &mut out, &mut seen);
                    for piece in out.drain(..) {
                        send.body(piece).await;
                    }
                    for usage in seen.usage_events.drain(..) {
                        send.flushed().frame(frame(Frame::Usage(usage)));
                    }
                }
                (Some(Err(error)), _) => {
                    // What was read so far goes out before the error.
                    if let Tap::Sse(sse) = &mut tap {
                        sse.finish(&mut out);
                        for piece in out.drain(..) {
                            send.body(piece).await;
                        }
                    }
                    drop(response);
                    return fail(send.flushed(), transport_failure(&error));
                }
                (None, _) => break,
            }
        }
        let usage = match &mut tap {
            Tap::Plain => None,
            Tap::Json(json) => json.finish(),
            Tap::Sse(sse) => {
                sse.finish(&mut out);
                for piece in out.drain(..) {
                    send.body(piece).await;
                }
                sse.last_usage()
            }
        };
        drop(response);
        send.finish(TunnelEnd { usage });
        TunnelOutcome::Completed { status, usage }
    }
}

/// Waits for credit, holding the stall watchdog meanwhile.
async fn wait_credit(credit: &Credit, sink: &mut impl TunnelSink) {
    if credit.available() > 0 {
        return;
    }
    sink.hold(true);
    credit.ready().await;
    sink.hold(false);
}

/// Hands body bytes to the sink in frames that fit the credit and the
/// chunk limit. Pieces given one after another without a wait in between
/// (the chunks of one provider read) are gathered into one frame of
/// several slices, sent when it is full or by [`Sender::flush`]; credit is
/// spent as a piece is gathered.
///
/// Nothing stays gathered across a wait: [`body`](Self::body) flushes
/// before it waits for credit, and the relay flushes before each read and
/// before any other frame (through [`flushed`](Self::flushed)), so a
/// cancel (which can only land at a wait) never drops gathered bytes, and
/// no byte waits for a later one.
struct Sender<'a, S> {
    sink: &'a mut S,
    credit: &'a Credit,
    max_chunk: usize,
    /// The frame being gathered: its first slice, the others, their bytes.
    first: Option<Bytes>,
    more: Vec<Bytes>,
    len: usize,
}

impl<S: TunnelSink> Sender<'_, S> {
    async fn body(&mut self, mut bytes: Bytes) {
        while !bytes.is_empty() {
            if self.credit.available() == 0 {
                self.flush();
                wait_credit(self.credit, self.sink).await;
            }
            let credit = usize::try_from(self.credit.available()).unwrap_or(usize::MAX);
            // `len < max_chunk` holds between calls (a full frame is sent).
            let n = bytes.len().min(self.max_chunk - self.len).min(credit);
            // `split_to` shares the buffer: no copy, also for the whole.
            let piece = bytes.split_to(n);
            self.credit.spend(n);
            self.len += n;
            match self.first {
                None => self.first = Some(piece),
                Some(_) => self.more.push(piece),
            }
            if self.len >= self.max_chunk || self.more.len() + 1 >= MAX_BODY_PARTS {
                self.flush();
            }
        }
    }

    /// The sink, once the frame being gathered is sent: every other frame
    /// goes through here, so it follows the body bytes before it.
    fn flushed(&mut self) -> &mut S {
        self.flush();
        self.sink
    }

    /// Sends the terminal `end`, with the frame being gathered (the bytes
    /// of the read that ended the body), if any: the sink may send both as
    /// one frame ([`TunnelSink::last`]).
    fn finish(self, end: TunnelEnd) {
        let body = self.first.map(|first| (first, self.more));
        self.sink.last(body, end);
    }

    /// Sends the frame being gathered, if any, and whatever the sink
    /// holds: every wait comes after a flush.
    fn flush(&mut self) {
        if let Some(first) = self.first.take() {
            self.len = 0;
            self.sink.body(first, std::mem::take(&mut self.more));
        }
        self.sink.flush();
    }
}
