//! Send stamps (`stamp` knob): the mock writes into each streamed token
//! event the `CLOCK_MONOTONIC` time at which it produced that event, so a
//! client that reads the same clock on arrival gets each event's one-way
//! latency (arrival − stamp) without relying on the mock's pacing timer.
//!
//! `CLOCK_MONOTONIC` is one clock for every thread and process of a
//! machine, so the mock and a client may run in different processes; a
//! relay that passes the provider's bytes untouched (IOP's raw tunnel)
//! keeps the stamp.
//!
//! In a chat completion chunk the stamp is a field of the choice, after
//! `finish_reason`: `…,"finish_reason":null,"mock_sent_ns":123456789}]}`.

/// The JSON member name (quoted, with its colon) that precedes a stamp.
pub const STAMP_FIELD: &str = "\"mock_sent_ns\":";

/// Most digits a stamp can have (`u64::MAX` has 20).
pub(crate) const STAMP_MAX_DIGITS: usize = 20;

/// Nanoseconds on `CLOCK_MONOTONIC` (since an unspecified start, usually
/// boot): comparable between threads and processes of one machine.
///
/// # Panics
/// If `clock_gettime` fails, which it cannot for `CLOCK_MONOTONIC` on
/// Linux.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable `timespec` that lives across the
    // call, and `CLOCK_MONOTONIC` is a clock id every Linux kernel knows;
    // the call writes only `ts`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// The stamp in an event's data: the decimal digits after the first
/// [`STAMP_FIELD`]. `None` when the data has no stamp or its digits do not
/// make a `u64`.
pub fn parse_stamp(data: &[u8]) -> Option<u64> {
    let field = STAMP_FIELD.as_bytes();
    let at = data.windows(field.len()).position(|w| w == field)? + field.len();
    let digits = &data[at..];
    let len = digits.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&digits[..len]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use std::pin::Pin;
    use std::task::{Context, Poll, Waker};
    use std::time::Instant;

    use bytes::Buf as _;
    use hyper::body::Body as _;

    use super::super::openai::chat_completions;
    use super::super::server::Ctx;
    use super::super::{Knobs, MockConfig};
    use super::*;

    /// The whole SSE body of a streamed chat completion under `knobs`.
    fn chat_stream(knobs: &Knobs) -> Vec<u8> {
        let ctx = Ctx::new(MockConfig::default());
        let request = br#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;
        let mut body = chat_completions(&ctx, knobs, request)
            .expect("a stream")
            .resp
            .into_body();
        let mut cx = Context::from_waker(Waker::noop());
        let mut out = Vec::new();
        loop {
            match Pin::new(&mut body).poll_frame(&mut cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    let mut data = frame.into_data().expect("a data frame");
                    out.extend_from_slice(&data.copy_to_bytes(data.remaining()));
                }
                Poll::Ready(None) => return out,
                other => panic!("an undelayed stream ends at once: {other:?}"),
            }
        }
    }

    #[test]
    fn stamped_token_events_carry_nondecreasing_send_times() {
        let knobs = Knobs {
            tokens: 50,
            event_bytes: 128,
            stamp: true,
            ..Knobs::default()
        };
        let before = monotonic_ns();
        let sse = chat_stream(&knobs);
        let after = monotonic_ns();
        let text = String::from_utf8(sse).expect("utf-8");
        let events: Vec<&str> = text.split_terminator("\n\n").collect();
        assert_eq!(events.len(), 50 + 3, "role, 50 tokens, finish, [DONE]");
        let mut last = before;
        for event in &events[1..51] {
            let data = event.strip_prefix("data: ").expect("a data line");
            let chunk: serde_json::Value = serde_json::from_str(data).expect("valid JSON");
            assert_eq!(chunk["choices"][0]["delta"]["content"], "tok ");
            let stamp = parse_stamp(data.as_bytes()).expect("a stamp");
            assert_eq!(chunk["choices"][0]["mock_sent_ns"], stamp);
            assert!(
                stamp >= last && stamp <= after,
                "{last} <= {stamp} <= {after}"
            );
            last = stamp;
        }
        for event in [events[0], events[51], events[52]] {
            assert_eq!(parse_stamp(event.as_bytes()), None, "{event}");
        }
        // Without the knob no event has a stamp.
        let plain = chat_stream(&Knobs {
            stamp: false,
            ..knobs
        });
        assert!(
            !plain
                .windows(STAMP_FIELD.len())
                .any(|w| w == STAMP_FIELD.as_bytes())
        );
    }

    #[test]
    fn monotonic_readings_never_decrease_and_track_instant() {
        let started = Instant::now();
        let first = monotonic_ns();
        let mut last = first;
        for _ in 0..10_000 {
            let now = monotonic_ns();
            assert!(now >= last, "{now} < {last}");
            last = now;
        }
        assert!(first > 0);
        // The same clock as `Instant` on Linux: what passed on one has
        // passed on the other (no sleeping: just the loop's own time).
        let took = started.elapsed().as_nanos() as u64;
        assert!(last - first <= took, "{} > {took}", last - first);
    }

    #[test]
    fn a_stamp_parses_from_event_data() {
        let data = br#"{"choices":[{"finish_reason":null,"mock_sent_ns":1234567890123}]}"#;
        assert_eq!(parse_stamp(data), Some(1_234_567_890_123));
        assert_eq!(parse_stamp(b"{\"choices\":[]}"), None);
        assert_eq!(parse_stamp(b"\"mock_sent_ns\":}"), None);
        assert_eq!(
            parse_stamp(b"\"mock_sent_ns\":99999999999999999999999"),
            None
        );
    }
}
