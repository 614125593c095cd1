//! [`EventStream`]: the events of one run, parsed from the provider's
//! streamed body as its pieces are read. Nothing after the terminal; the
//! rest of a completed body is drained (bounded) so its keep-alive
//! connection goes back to the pool. With [`EventStream::merging_deltas`],
//! consecutive deltas of one kind that are already held are yielded as one.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::Bytes;

use super::{RuntimeEvent, ollama, openai, status_failure, transport_failure};
use crate::provider_http::{ProviderClient, ProviderError, ProviderRequest, ProviderResponse};
use proto::v1::ExecutionFailure;

/// How a stream's body is parsed.
#[derive(Debug)]
pub(super) enum Parser {
    Sse(openai::SseParser),
    Ndjson(ollama::NdjsonParser),
}

impl Parser {
    /// Parses `chunk`, pushing events; true once a terminal was pushed.
    fn feed(&mut self, chunk: &[u8], out: &mut VecDeque<RuntimeEvent>) -> bool {
        match self {
            Self::Sse(p) => p.feed(chunk, out),
            Self::Ndjson(p) => p.feed(chunk, out),
        }
    }

    /// End of body: pushes the terminal (a truncation error unless the
    /// final unterminated line carries one).
    fn finish(&mut self, out: &mut VecDeque<RuntimeEvent>) {
        match self {
            Self::Sse(p) => p.finish(out),
            Self::Ndjson(p) => p.finish(out),
        }
    }

    /// Takes what [`ProviderResponse::next_chunk`] gave: a piece is
    /// parsed, a failed read becomes the error terminal, the end `finish`.
    fn take(
        &mut self,
        piece: Option<Result<Bytes, ProviderError>>,
        out: &mut VecDeque<RuntimeEvent>,
    ) {
        match piece {
            Some(Ok(chunk)) => {
                self.feed(&chunk, out);
            }
            Some(Err(error)) => out.push_back(RuntimeEvent::Error(transport_failure(&error))),
            None => self.finish(out),
        }
    }
}

/// Makes room in `out` for `additional` more events. A queue without it is
/// replaced by one of the size needed, its few events moved over, rather
/// than grown in place: jemalloc's `realloc` from one small size class to
/// another took ~450 instructions where an allocation and a free take ~60
/// (`bench-results/profiles.md`, round 47).
pub(super) fn make_room(out: &mut VecDeque<RuntimeEvent>, additional: usize) {
    if out.capacity() - out.len() >= additional {
        return;
    }
    let mut roomier = VecDeque::with_capacity(out.len() + additional);
    roomier.extend(out.drain(..));
    *out = roomier;
}

/// The text of `event` if it is a delta of the asked kind (`reasoning` or
/// not).
fn delta_text(event: &RuntimeEvent, reasoning: bool) -> Option<&str> {
    match (event, reasoning) {
        (RuntimeEvent::Delta(text), false) | (RuntimeEvent::ReasoningDelta(text), true) => {
            Some(text)
        }
        _ => None,
    }
}

/// Longest [`EventStream::next`] waits, after a `Complete`, for the rest of
/// the provider's body (the chunked terminator) so the connection can go
/// back to the pool; past it the connection is closed instead.
pub const DRAIN_AFTER_COMPLETE: Duration = Duration::from_millis(100);

/// The events of one run; see the module docs for the contract.
///
/// Call [`EventStream::next`] until `None`: the call after a `Complete`
/// reads what is left of the provider's body (at most
/// [`DRAIN_AFTER_COMPLETE`]) so the keep-alive connection is reused.
/// Stopping at the terminal is correct too; it only costs the connection.
#[derive(Debug)]
pub struct EventStream {
    pending: VecDeque<RuntimeEvent>,
    body: Option<(ProviderResponse, Parser)>,
    /// The response of a completed run, to drain on the next call.
    drain: Option<ProviderResponse>,
    /// Merge the deltas already read (see [`EventStream::merging_deltas`]).
    merge_deltas: bool,
}

impl EventStream {
    /// A stream that is just `Start` then `Error(failure)`.
    pub fn failed(failure: ExecutionFailure) -> Self {
        Self {
            pending: VecDeque::from([RuntimeEvent::Start, RuntimeEvent::Error(failure)]),
            body: None,
            drain: None,
            merge_deltas: false,
        }
    }

    fn streaming(response: ProviderResponse, parser: Parser) -> Self {
        Self {
            pending: VecDeque::from([RuntimeEvent::Start]),
            body: Some((response, parser)),
            drain: None,
            merge_deltas: false,
        }
    }

    /// Sends `request` and streams its body through `parser`.
    pub(super) async fn open(
        client: &ProviderClient,
        request: ProviderRequest,
        parser: Parser,
    ) -> Self {
        match client.request(request).await {
            Err(error) => Self::failed(transport_failure(&error)),
            Ok(response) if !(200..300).contains(&response.status()) => {
                Self::failed(status_failure(response.status()))
            }
            Ok(response) => Self::streaming(response, parser),
        }
    }

    /// This stream, merging consecutive deltas of one kind that it already
    /// holds (parsed from one read, or whole in the receive buffer) into one
    /// event, for a caller that reads the whole answer (a non-streaming
    /// client): fewer events a run, the same text. It never waits to merge:
    /// a delta is yielded as soon as the next piece would need a read.
    #[must_use]
    pub fn merging_deltas(mut self, merge: bool) -> Self {
        self.merge_deltas = merge;
        self
    }

    /// The next event; `None` after the terminal.
    pub async fn next(&mut self) -> Option<RuntimeEvent> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                let event = match event {
                    RuntimeEvent::Delta(mut text) if self.merge_deltas => {
                        self.merge_held(&mut text, false);
                        RuntimeEvent::Delta(text)
                    }
                    RuntimeEvent::ReasoningDelta(mut text) if self.merge_deltas => {
                        self.merge_held(&mut text, true);
                        RuntimeEvent::ReasoningDelta(text)
                    }
                    event => event,
                };
                if event.is_terminal() {
                    self.pending.clear();
                    // After an error the response is dropped: a body not
                    // yet ended closes its connection.
                    let body = self.body.take();
                    if let (Some((response, _)), RuntimeEvent::Complete { .. }) = (body, &event) {
                        self.drain = Some(response);
                    }
                }
                return Some(event);
            }
            let Some((response, parser)) = self.body.as_mut() else {
                if let Some(response) = self.drain.take() {
                    // Boxed: its monoio timer (640 B, 128-byte aligned)
                    // would size and align every `next` call, which a
                    // quiet run holds while it waits.
                    Box::pin(drain(response)).await;
                }
                return None;
            };
            let piece = response.next_chunk().await;
            parser.take(piece, &mut self.pending);
        }
    }
}

impl EventStream {
    /// Appends to `text` the deltas of the same kind (`reasoning` or not)
    /// that follow it without a read: those pending, then those parsed from
    /// pieces of the body the receive buffer already holds whole. Stops at
    /// any other event, which stays pending, or where a read would be needed.
    fn merge_held(&mut self, text: &mut String, reasoning: bool) {
        loop {
            let held: usize = self
                .pending
                .iter()
                .map_while(|e| delta_text(e, reasoning))
                .map(str::len)
                .sum();
            framing::room::reserve_str(text, held);
            while let Some(more) = self.pending.front().and_then(|e| delta_text(e, reasoning)) {
                text.push_str(more);
                self.pending.pop_front();
            }
            if !self.pending.is_empty() {
                return;
            }
            let Some((response, parser)) = self.body.as_mut() else {
                return;
            };
            match response.next_chunk_now() {
                Some(piece) => parser.take(piece, &mut self.pending),
                None => return,
            }
        }
    }
}

/// Reads the rest of a completed body (at most 64 KiB) within
/// [`DRAIN_AFTER_COMPLETE`]; dropping `response` then pools its connection
/// if the body ended. Dropping it undrained is correct too; it only costs
/// the connection.
pub(crate) async fn drain(mut response: ProviderResponse) {
    let rest = async {
        let mut left = 64 * 1024usize;
        while let Some(Ok(chunk)) = response.next_chunk().await {
            left = match left.checked_sub(chunk.len()) {
                Some(left) => left,
                None => return,
            };
        }
    };
    let _ = monoio::time::timeout(DRAIN_AFTER_COMPLETE, rest).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(mut stream: EventStream) -> Vec<RuntimeEvent> {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .build()
            .expect("runtime")
            .block_on(async {
                let mut events = Vec::new();
                while let Some(event) = stream.next().await {
                    events.push(event);
                }
                events
            })
    }

    fn held(events: Vec<RuntimeEvent>, merge: bool) -> EventStream {
        EventStream {
            pending: events.into(),
            body: None,
            drain: None,
            merge_deltas: false,
        }
        .merging_deltas(merge)
    }

    #[test]
    fn making_room_keeps_the_events_in_order() {
        use RuntimeEvent::{Delta, Start};
        let mut out = VecDeque::from([Start]);
        out.push_back(Delta("a".into()));
        out.pop_front();
        out.push_back(Delta("b".into()));
        make_room(&mut out, 17);
        assert!(out.capacity() - out.len() >= 17);
        assert_eq!(out, [Delta("a".into()), Delta("b".into())]);
        let room = out.capacity();
        make_room(&mut out, 3);
        assert_eq!(out.capacity(), room, "room enough already: kept as it is");
    }

    #[test]
    fn held_deltas_of_one_kind_merge_and_nothing_else_moves() {
        use RuntimeEvent::{Delta, ReasoningDelta, Start};
        let usage = RuntimeEvent::Usage(proto::v1::Usage::default());
        let complete = RuntimeEvent::Complete {
            finish_reason: "stop".into(),
            usage: None,
        };
        let events = vec![
            Start,
            ReasoningDelta("th".into()),
            ReasoningDelta("ink".into()),
            Delta("Hel".into()),
            Delta("lo".into()),
            Delta(" you".into()),
            usage.clone(),
            Delta("!".into()),
            complete.clone(),
        ];
        assert_eq!(
            all(held(events.clone(), false)),
            events,
            "merging is opt-in"
        );
        assert_eq!(
            all(held(events, true)),
            vec![
                Start,
                ReasoningDelta("think".into()),
                Delta("Hello you".into()),
                usage,
                Delta("!".into()),
                complete,
            ]
        );
    }
}
