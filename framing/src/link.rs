//! Sans-IO pieces of the Edge–Node link that both sides share: the heartbeat
//! state machine and the closed set of close reasons.
//!
//! # Heartbeat (F5)
//! Both sides ping every [`HEARTBEAT_INTERVAL_MS`] (30 s) and close the link
//! when a ping has gone unanswered for [`HEARTBEAT_WAIT_MS`] (45 s), with
//! [`CloseReason::HeartbeatTimeout`]. The values are transport constants, not
//! wire fields; only tests and profiles override them ([`HeartbeatConfig`]).
//!
//! At most one ping is outstanding. The next ping is due one interval after
//! the previous one was sent, but never while one is still unanswered, so a
//! slow peer is timed from its *oldest* unanswered ping:
//!
//! ```text
//!  t=0 connect ── 30 s ──▶ ping #1 ── pong ──▶ … ping #2 at 60 s …
//!                          └── no pong by 30 s + 45 s = 75 s ──▶ TimedOut
//! ```
//!
//! Only a pong answering the outstanding ping counts. Long prefill and
//! backpressured streams do not trip it: pings and pongs are small control
//! frames ([`jumps_the_queue`]) that drivers write ahead of queued body
//! frames, at the next frame boundary of the write in progress
//! ([`WriteSlices::overtake`](crate::write_batch::WriteSlices::overtake)),
//! and the drivers keep the kernel's unsent queue short
//! ([`UNSENT_LOW_WATER`]), so what waits ahead of a pong on a slow link is
//! bounded by bytes, not by the streams' windows.
//!
//! Time is an input: every method takes `now` in milliseconds from the
//! caller's clock (the per-core timer wheel's clock in production, a manual
//! clock in tests). Nothing here reads a clock.

use std::fmt;

use bytes::Bytes;
use proto::v1::RegisterRejectReason;
use proto::v1::envelope::Msg;

use crate::frame::BodyFrame;

pub use crate::timer::{HEARTBEAT_INTERVAL_MS, HEARTBEAT_WAIT_MS};

/// The `TCP_NOTSENT_LOWAT` of a link socket, in bytes: the kernel holds at
/// most about this much not yet sent, so a heartbeat frame never queues
/// behind megabytes of socket buffer on a slow link; the rest waits in user
/// space, where heartbeats overtake it.
pub const UNSENT_LOW_WATER: u32 = 16 * 1024;

/// Whether a frame carrying `msg` goes ahead of the frames already queued
/// on the link (heartbeat pings and pongs: their delay is what the peer
/// measures the link by).
pub fn jumps_the_queue(msg: &Msg) -> bool {
    matches!(msg, Msg::HeartbeatPing(_) | Msg::HeartbeatPong(_))
}

/// Heartbeat timings. Production uses [`HeartbeatConfig::default`]; only
/// tests and explicit profiles change it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatConfig {
    /// Time from one ping to the next, in ms.
    pub interval_ms: u64,
    /// Time a ping may stay unanswered before the link is closed, in ms.
    pub wait_ms: u64,
}

impl Default for HeartbeatConfig {
    fn default() -> Self {
        Self {
            interval_ms: HEARTBEAT_INTERVAL_MS,
            wait_ms: HEARTBEAT_WAIT_MS,
        }
    }
}

/// What the driver must do after [`Heartbeat::poll`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatAction {
    /// Nothing is due before [`Heartbeat::next_deadline`].
    Idle,
    /// Send `HeartbeatPing { seq }` now.
    SendPing(u64),
    /// The outstanding ping went unanswered for the wait: close the link with
    /// [`CloseReason::HeartbeatTimeout`].
    TimedOut,
}

/// One side's heartbeat state for one connection (see the module docs).
#[derive(Debug, Clone)]
pub struct Heartbeat {
    config: HeartbeatConfig,
    /// When the next ping is due (when none is outstanding).
    next_ping_at: u64,
    /// The unanswered ping: its seq and when it was sent.
    outstanding: Option<(u64, u64)>,
    last_seq: u64,
    last_rtt_ms: Option<u64>,
    timed_out: bool,
}

impl Heartbeat {
    /// A heartbeat for a connection established at `now`.
    pub fn new(config: HeartbeatConfig, now: u64) -> Self {
        Self {
            config,
            next_ping_at: now.saturating_add(config.interval_ms),
            outstanding: None,
            last_seq: 0,
            last_rtt_ms: None,
            timed_out: false,
        }
    }

    /// The timings in force.
    pub fn config(&self) -> HeartbeatConfig {
        self.config
    }

    /// Advances to `now`: a ping to send, a timeout, or nothing. Once timed
    /// out, it stays timed out.
    pub fn poll(&mut self, now: u64) -> HeartbeatAction {
        if self.timed_out {
            return HeartbeatAction::TimedOut;
        }
        match self.outstanding {
            Some((_, sent_at)) if now >= sent_at.saturating_add(self.config.wait_ms) => {
                self.timed_out = true;
                HeartbeatAction::TimedOut
            }
            Some(_) => HeartbeatAction::Idle,
            None if now >= self.next_ping_at => {
                self.last_seq += 1;
                self.outstanding = Some((self.last_seq, now));
                self.next_ping_at = now.saturating_add(self.config.interval_ms);
                HeartbeatAction::SendPing(self.last_seq)
            }
            None => HeartbeatAction::Idle,
        }
    }

    /// Records a pong. Returns whether it answered the outstanding ping; a
    /// stale or unknown seq changes nothing.
    pub fn on_pong(&mut self, seq: u64, now: u64) -> bool {
        match self.outstanding {
            Some((expected, sent_at)) if expected == seq && !self.timed_out => {
                self.outstanding = None;
                self.last_rtt_ms = Some(now.saturating_sub(sent_at));
                true
            }
            _ => false,
        }
    }

    /// When [`poll`](Self::poll) next has something to do, in ms.
    pub fn next_deadline(&self) -> u64 {
        match self.outstanding {
            Some((_, sent_at)) => sent_at.saturating_add(self.config.wait_ms),
            None => self.next_ping_at,
        }
    }

    /// Round-trip time of the last answered ping, in ms.
    pub fn last_rtt_ms(&self) -> Option<u64> {
        self.last_rtt_ms
    }
}

/// Why a link connection ended. A closed set: it is logged as the `reason`
/// field of `node_disconnected` and used as a metric label.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// No pong within the heartbeat wait (F5).
    HeartbeatTimeout,
    /// The peer closed the connection cleanly.
    PeerClosed,
    /// The connection failed with an I/O error (reset, broken pipe, …).
    IoError,
    /// A frame was oversize, malformed or truncated.
    FrameError,
    /// A valid frame arrived that the current state does not allow
    /// (e.g. anything before `RegisterRequest`).
    ProtocolViolation,
    /// No `RegisterRequest` (or response) within the registration deadline.
    RegisterTimeout,
    /// Registration was refused (F3).
    Rejected,
    /// This side is shutting down.
    Shutdown,
}

impl CloseReason {
    /// The stable snake_case name used in logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::HeartbeatTimeout => "heartbeat_timeout",
            Self::PeerClosed => "peer_closed",
            Self::IoError => "io_error",
            Self::FrameError => "frame_error",
            Self::ProtocolViolation => "protocol_violation",
            Self::RegisterTimeout => "register_timeout",
            Self::Rejected => "rejected",
            Self::Shutdown => "shutdown",
        }
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a link driver's writer is asked to do, in order.
///
/// Writers batch these with [`WriteBatch`](crate::write_batch::WriteBatch):
/// small frames copied together, bodies as their own slices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outgoing {
    /// Write this encoded frame.
    Frame(Bytes),
    /// Write this tunnel body frame: its head, then its body as its own
    /// slice (see [`FrameEncoder::encode_tunnel_body`](crate::frame::FrameEncoder::encode_tunnel_body)).
    Body(BodyFrame),
    /// Flush what came before, then shut the connection down.
    Close,
    /// Its stream was cancelled: what is still queued of it (the rest of a
    /// long request's pieces, credit) is of no use and is dropped, not
    /// written; what a batch already holds is written. See
    /// [`Outbound::take_withdrawn`](crate::outbound::Outbound::take_withdrawn).
    Withdraw,
}

/// The stable snake_case name of a registration rejection reason, for logs
/// and metrics (`unknown_token`, `duplicate_connection`, …).
pub fn reject_reason_name(reason: RegisterRejectReason) -> &'static str {
    match reason {
        RegisterRejectReason::Unspecified => "unspecified",
        RegisterRejectReason::UnknownToken => "unknown_token",
        RegisterRejectReason::DuplicateConnection => "duplicate_connection",
        RegisterRejectReason::ConfigBuildFailed => "config_build_failed",
        RegisterRejectReason::Unavailable => "unavailable",
        RegisterRejectReason::IdentityMismatch => "identity_mismatch",
        RegisterRejectReason::LeaseKeyMismatch => "lease_key_mismatch",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: HeartbeatConfig = HeartbeatConfig {
        interval_ms: HEARTBEAT_INTERVAL_MS,
        wait_ms: HEARTBEAT_WAIT_MS,
    };

    #[test]
    fn pings_every_interval_while_answered() {
        let mut hb = Heartbeat::new(CFG, 0);
        assert_eq!(hb.poll(29_999), HeartbeatAction::Idle);
        assert_eq!(hb.next_deadline(), 30_000);
        assert_eq!(hb.poll(30_000), HeartbeatAction::SendPing(1));
        assert!(hb.on_pong(1, 30_010));
        assert_eq!(hb.last_rtt_ms(), Some(10));
        assert_eq!(hb.poll(59_999), HeartbeatAction::Idle);
        assert_eq!(hb.poll(60_000), HeartbeatAction::SendPing(2));
    }

    #[test]
    fn unanswered_ping_times_out_after_exactly_the_wait() {
        let mut hb = Heartbeat::new(CFG, 0);
        assert_eq!(hb.poll(30_000), HeartbeatAction::SendPing(1));
        assert_eq!(hb.next_deadline(), 75_000);
        assert_eq!(
            hb.poll(74_999),
            HeartbeatAction::Idle,
            "no second ping while one is outstanding"
        );
        assert_eq!(hb.poll(75_000), HeartbeatAction::TimedOut);
        assert!(
            !hb.on_pong(1, 75_001),
            "a pong after the timeout does not revive the link"
        );
        assert_eq!(hb.poll(80_000), HeartbeatAction::TimedOut);
    }

    #[test]
    fn a_busy_peer_that_answers_late_but_within_the_wait_survives() {
        // A 44.9 s stall on the peer (long prefill stand-in) is not a timeout.
        let mut hb = Heartbeat::new(CFG, 0);
        assert_eq!(hb.poll(30_000), HeartbeatAction::SendPing(1));
        assert!(hb.on_pong(1, 74_900));
        // The next ping was due at 60 s but could not go out while #1 was
        // outstanding: it goes out now, and the link lives on.
        assert_eq!(hb.poll(74_901), HeartbeatAction::SendPing(2));
        assert!(hb.on_pong(2, 74_950));
        assert_eq!(hb.poll(104_900), HeartbeatAction::Idle);
        assert_eq!(hb.poll(104_901), HeartbeatAction::SendPing(3));
    }

    #[test]
    fn stale_and_unknown_pongs_change_nothing() {
        let mut hb = Heartbeat::new(CFG, 0);
        assert!(!hb.on_pong(1, 10), "no ping outstanding");
        assert_eq!(hb.poll(30_000), HeartbeatAction::SendPing(1));
        assert!(!hb.on_pong(7, 30_001));
        assert_eq!(hb.poll(75_000), HeartbeatAction::TimedOut);
    }

    #[test]
    fn close_reasons_have_stable_names() {
        assert_eq!(
            CloseReason::HeartbeatTimeout.to_string(),
            "heartbeat_timeout"
        );
        assert_eq!(
            CloseReason::ProtocolViolation.as_str(),
            "protocol_violation"
        );
    }
}
