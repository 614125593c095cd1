//! The commit point of one attempt (sans-IO): what has reached the client,
//! and so what a failure may still do.
//!
//! - **Tunnel** ([`TunnelCommit`]): the provider's status and headers are
//!   held — small `Bytes` values, never the body — until its first body
//!   byte, and written together with it. Before that, nothing is
//!   committed; a head-only response commits at its `end`.
//! - **Normalized** ([`run_event_commits`]): a streamed run commits at its
//!   first output (a delta or `complete`); `start` and `usage` write
//!   nothing.

use proto::v1::{Header, RunEventKind};

/// A provider head held back until the commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HeldHead {
    /// The status to answer (502 when the provider's was missing or bad).
    pub(crate) status: u16,
    /// The relayed header fields, in the provider's order: the `headers`
    /// frame's own vector, filtered in place (no copy of the fields).
    pub(crate) fields: Vec<Header>,
    /// The body's length, when `sized`.
    length: u32,
    /// The provider framed the body with a `Content-Length` and it is
    /// relayed so (see [`TunnelCommit::headers`]); otherwise the Edge
    /// frames the body itself (chunked). A `u32` and a flag, not an
    /// `Option<u64>`, so a held head stays 32 bytes: it is part of every
    /// tunnelled stream's task, which a bigger one pushed over a 128-byte
    /// step of the connection's task (issue 8: 10k open streams).
    sized: bool,
}

impl HeldHead {
    /// The body's length when it is relayed under it.
    pub(crate) fn length(&self) -> Option<u64> {
        self.sized.then_some(u64::from(self.length))
    }
}

/// What to do at a tunnel's `end` frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EndStep {
    /// No head ever came: answer an error instead.
    Headless,
    /// Nothing committed yet: write this head, then end the body.
    CommitThenFinish(HeldHead),
    /// Already committed: end the body.
    Finish,
}

/// How a failed attempt's response ends for the client, once the gate
/// decided not to re-admit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FailureEnding {
    /// Nothing committed: an HTTP error answer.
    HttpError,
    /// An event stream was committed: one SSE error event, then a clean
    /// end (stalls only; see the tunnel module docs).
    ErrorEvent,
    /// A non-event body was committed: cut it (no last chunk, close).
    Cut,
}

/// The commit state of one tunnel attempt (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct TunnelCommit {
    status: u16,
    held: Option<HeldHead>,
    committed: bool,
    event_stream: bool,
}

impl TunnelCommit {
    /// The provider's `status` frame.
    pub(crate) fn status(&mut self, code: u32) {
        self.status = u16::try_from(code).unwrap_or(502);
    }

    /// The provider's `headers` frame (already filtered to the relayed
    /// fields) and its `Content-Length`: held until the commit.
    ///
    /// The length is kept, to be the client's, for a body that is not an
    /// event stream (a stall there ends with an appended error event, which
    /// a fixed length has no room for), whose status allows one (not 1xx,
    /// 204 or 304), and that is under 4 GiB (a larger one is chunked). The
    /// Node sends one only when its body frames add up to it (it drops it
    /// from a body it may cut), and the Edge's responder cuts the answer if
    /// they do not.
    pub(crate) fn headers(&mut self, fields: Vec<Header>, length: Option<u64>) {
        let status = if (100..=999).contains(&self.status) {
            self.status
        } else {
            502
        };
        self.event_stream = fields.iter().any(|h| {
            h.name.eq_ignore_ascii_case(b"content-type")
                && h.value.starts_with(b"text/event-stream")
        });
        let has_body = status >= 200 && status != 204 && status != 304;
        let length = length
            .filter(|_| has_body && !self.event_stream)
            .and_then(|length| u32::try_from(length).ok());
        self.held = Some(HeldHead {
            status,
            fields,
            length: length.unwrap_or(0),
            sized: length.is_some(),
        });
    }

    /// A body frame arrived: the head to write before it when this byte
    /// is the commit (a 502 head-less one if the provider sent none).
    pub(crate) fn body(&mut self) -> Option<HeldHead> {
        if self.committed {
            return None;
        }
        self.committed = true;
        Some(self.held.take().unwrap_or(HeldHead {
            status: 502,
            fields: Vec::new(),
            length: 0,
            sized: false,
        }))
    }

    /// The `end` frame arrived.
    pub(crate) fn end(&mut self) -> EndStep {
        if self.committed {
            return EndStep::Finish;
        }
        match self.held.take() {
            Some(head) => {
                self.committed = true;
                EndStep::CommitThenFinish(head)
            }
            None => EndStep::Headless,
        }
    }

    /// Whether anything reached the client.
    pub(crate) fn committed(&self) -> bool {
        self.committed
    }

    /// The status answered (0 before any `status` frame).
    pub(crate) fn answered_status(&self) -> u16 {
        self.status
    }

    /// How a stall the gate did not re-admit ends the response.
    pub(crate) fn stall_ending(&self) -> FailureEnding {
        match (self.committed, self.event_stream) {
            (false, _) => FailureEnding::HttpError,
            (true, true) => FailureEnding::ErrorEvent,
            (true, false) => FailureEnding::Cut,
        }
    }

    /// How any other failure ends the response: after the commit the body
    /// is cut, so the client sees the break.
    pub(crate) fn failure_ending(&self) -> FailureEnding {
        if self.committed {
            FailureEnding::Cut
        } else {
            FailureEnding::HttpError
        }
    }
}

/// Whether a streamed run's event commits the response (see the module
/// docs). A failed terminal before any output commits nothing: it is
/// answered as an HTTP error (or re-admitted).
pub(crate) fn run_event_commits(kind: RunEventKind) -> bool {
    matches!(
        kind,
        RunEventKind::Delta | RunEventKind::ReasoningDelta | RunEventKind::Complete
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn field(name: &'static str, value: &'static str) -> Header {
        Header {
            name: Bytes::from_static(name.as_bytes()),
            value: Bytes::from_static(value.as_bytes()),
        }
    }

    fn sse_head() -> Vec<Header> {
        vec![field("content-type", "text/event-stream; charset=utf-8")]
    }

    #[test]
    fn the_head_is_held_until_the_first_body_byte() {
        let mut commit = TunnelCommit::default();
        commit.status(200);
        commit.headers(sse_head(), None);
        assert!(!commit.committed(), "a head alone commits nothing");
        assert_eq!(commit.stall_ending(), FailureEnding::HttpError);
        let head = commit.body().expect("the first byte commits");
        assert_eq!(head.status, 200);
        assert_eq!(head.fields, sse_head());
        assert!(commit.committed());
        assert_eq!(commit.body(), None, "only once");
        assert_eq!(commit.end(), EndStep::Finish);
        assert_eq!(commit.answered_status(), 200);
    }

    #[test]
    fn a_head_only_response_commits_at_its_end() {
        let mut commit = TunnelCommit::default();
        commit.status(204);
        commit.headers(Vec::new(), None);
        let EndStep::CommitThenFinish(head) = commit.end() else {
            panic!("the held head is written at the end");
        };
        assert_eq!(head.status, 204);
        assert!(commit.committed());
    }

    #[test]
    fn no_head_is_an_error_and_a_bad_status_is_502() {
        let mut commit = TunnelCommit::default();
        assert_eq!(commit.end(), EndStep::Headless);
        assert!(!commit.committed());
        let mut commit = TunnelCommit::default();
        commit.status(42);
        commit.headers(Vec::new(), None);
        assert_eq!(commit.body().unwrap().status, 502);
        let mut commit = TunnelCommit::default();
        assert_eq!(commit.body().unwrap().status, 502, "a body before any head");
    }

    #[test]
    fn a_stall_after_commit_is_an_event_only_on_an_event_stream() {
        let mut sse = TunnelCommit::default();
        sse.status(200);
        sse.headers(sse_head(), None);
        sse.body();
        assert_eq!(sse.stall_ending(), FailureEnding::ErrorEvent);
        assert_eq!(sse.failure_ending(), FailureEnding::Cut);
        let mut json = TunnelCommit::default();
        json.status(200);
        json.headers(vec![field("Content-Type", "application/json")], None);
        json.body();
        assert_eq!(json.stall_ending(), FailureEnding::Cut);
        let fresh = TunnelCommit::default();
        assert_eq!(fresh.failure_ending(), FailureEnding::HttpError);
    }

    #[test]
    fn a_length_is_kept_only_for_a_body_that_is_not_an_event_stream() {
        let held = |status: u32, fields: Vec<Header>| {
            let mut commit = TunnelCommit::default();
            commit.status(status);
            commit.headers(fields, Some(427));
            commit.body().expect("the first byte commits").length()
        };
        let json = || vec![field("content-type", "application/json")];
        assert_eq!(held(200, json()), Some(427));
        assert_eq!(held(400, json()), Some(427), "an error body keeps it");
        assert_eq!(held(200, Vec::new()), Some(427), "no content type");
        assert_eq!(held(200, sse_head()), None, "an event stream");
        for status in [101, 204, 304] {
            assert_eq!(held(status, json()), None, "{status} has no body");
        }
        assert_eq!(
            held(42, json()),
            Some(427),
            "a 502 for a bad status, its body whole"
        );
        let mut huge = TunnelCommit::default();
        huge.status(200);
        huge.headers(json(), Some(1 << 32));
        assert_eq!(
            huge.body().unwrap().length(),
            None,
            "4 GiB or more is chunked"
        );
        let mut headless = TunnelCommit::default();
        assert_eq!(headless.body().unwrap().length(), None);
    }

    #[test]
    fn a_run_commits_at_its_first_output() {
        for kind in [
            RunEventKind::Delta,
            RunEventKind::ReasoningDelta,
            RunEventKind::Complete,
        ] {
            assert!(run_event_commits(kind), "{kind:?}");
        }
        for kind in [
            RunEventKind::Start,
            RunEventKind::Usage,
            RunEventKind::Unspecified,
            RunEventKind::Error,
            RunEventKind::Cancelled,
        ] {
            assert!(!run_event_commits(kind), "{kind:?}");
        }
    }
}
