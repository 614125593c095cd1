//! Keeps the Node linked to the Edge: reconnects after every close with
//! capped exponential backoff and full jitter, and stops for good only when
//! the Edge says retrying cannot help (unknown token).
//!
//! | outcome of a connection                  | next step                               |
//! |------------------------------------------|-----------------------------------------|
//! | ready for at least [`STABLE_AFTER_MS`]   | reconnect after the base delay          |
//! | anything else (dial failed, rejected as duplicate, heartbeat timeout, …) | reconnect after `min(cap, base·2^n)`, jittered |
//! | rejected permanently (`unknown_token`)   | stop with [`SupervisorExit::PermanentRejection`] |

use std::time::Duration;

use framing::link::{CloseReason, reject_reason_name};
use proto::v1::RegisterRejectReason;

use super::client::{ConnectionEnd, LinkClientConfig, run_connection};
use crate::runs::{Cores, serve_core};
use framing::timer::CoreTimers;

/// First reconnect delay, in ms.
pub const BACKOFF_BASE_MS: u64 = 200;
/// Largest reconnect delay, in ms.
pub const BACKOFF_CAP_MS: u64 = 30_000;
/// A connection ready this long resets the backoff, in ms.
pub const STABLE_AFTER_MS: u64 = 10_000;

/// Capped exponential backoff with full jitter (delay uniform in
/// `[0, min(cap, base·2^attempt)]`, never below 1/4 of it so a flapping Edge
/// is not hammered).
#[derive(Debug, Clone)]
pub struct Backoff {
    base_ms: u64,
    cap_ms: u64,
    attempt: u32,
    rng: fastrand::Rng,
}

impl Backoff {
    /// A backoff between `base_ms` and `cap_ms`, jitter seeded by `seed`.
    pub fn new(base_ms: u64, cap_ms: u64, seed: u64) -> Self {
        Self {
            base_ms: base_ms.max(1),
            cap_ms: cap_ms.max(base_ms.max(1)),
            attempt: 0,
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// The delay before the next attempt; each call widens the window.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = self
            .base_ms
            .saturating_mul(1u64 << self.attempt.min(20))
            .min(self.cap_ms);
        self.attempt = self.attempt.saturating_add(1);
        Duration::from_millis(self.rng.u64(ceiling / 4..=ceiling))
    }

    /// Back to the base delay (after a stable connection).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// Attempts since the last reset.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

/// Why the supervisor stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SupervisorExit {
    /// The Edge refused the token (or identity): retrying cannot help.
    PermanentRejection {
        /// The Edge's reason.
        reason: RegisterRejectReason,
        /// The Edge's detail.
        message: String,
    },
    /// `max_connections` connections were made (tests).
    ConnectionLimit,
    /// An operator drain ended the link ([`crate::drain`]); no reconnect.
    Drained,
}

/// Runs connections forever (or until `max_connections`, for tests),
/// reconnecting with backoff, on one core: the calling runtime serves the
/// link and the runs. `on_end` sees every connection's end.
pub async fn supervise(
    config: &LinkClientConfig,
    max_connections: Option<u64>,
    on_end: impl FnMut(&ConnectionEnd),
) -> SupervisorExit {
    let (cores, mut inboxes) = Cores::new(1);
    // Ends when `cores` (the last sender) is dropped, on return.
    monoio::spawn(serve_core(inboxes.remove(0), config.runner.clone()));
    supervise_cores(config, &cores, max_connections, on_end).await
}

/// [`supervise`] on the link core of a thread-per-core Node: work goes to
/// `cores`, whose inboxes the caller serves (core 0's on this runtime, with
/// [`serve_core`], the others on their own threads).
pub async fn supervise_cores(
    config: &LinkClientConfig,
    cores: &Cores,
    max_connections: Option<u64>,
    mut on_end: impl FnMut(&ConnectionEnd),
) -> SupervisorExit {
    let seed = config
        .session
        .instance_id
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
    let mut backoff = Backoff::new(BACKOFF_BASE_MS, BACKOFF_CAP_MS, seed);
    let mut made = 0u64;
    // The link core's timer wheel, kept across connections; its ticker runs
    // until the supervisor returns.
    let timers = CoreTimers::new(&config.clock, config.tick_ms);
    monoio::spawn(std::rc::Rc::clone(&timers).run(monoio::time::sleep));
    let _stop = StopOnDrop(&timers);
    loop {
        let started = std::time::Instant::now();
        let end = run_connection(config, &timers, cores).await;
        made += 1;
        log_end(config, &end);
        on_end(&end);
        if crate::drain::node_drain().is_draining() {
            return SupervisorExit::Drained;
        }
        if let Some(rejected) = end.rejected.as_ref().filter(|r| r.permanent) {
            tracing::error!(
                event = "node_rejected",
                reason = reject_reason_name(rejected.reason),
                message = %rejected.message,
                "the edge refused this node permanently; not reconnecting"
            );
            return SupervisorExit::PermanentRejection {
                reason: rejected.reason,
                message: rejected.message.clone(),
            };
        }
        if max_connections.is_some_and(|max| made >= max) {
            return SupervisorExit::ConnectionLimit;
        }
        if end.was_ready && started.elapsed() >= Duration::from_millis(STABLE_AFTER_MS) {
            backoff.reset();
        }
        let delay = backoff.next_delay();
        tracing::info!(
            event = "node_reconnecting",
            attempt = backoff.attempt(),
            delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            edge = %config.edge,
            "node_reconnecting"
        );
        monoio::select! {
            () = monoio::time::sleep(delay) => {}
            () = crate::drain::node_drain().wait() => return SupervisorExit::Drained,
        }
    }
}

/// Stops the ticker when the supervisor returns (or its future is dropped).
struct StopOnDrop<'a>(&'a CoreTimers);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

fn log_end(config: &LinkClientConfig, end: &ConnectionEnd) {
    let (node_id, generation) = end.registered.clone().unwrap_or_default();
    match (&end.rejected, end.registered.is_some()) {
        // A permanent rejection is logged once, as an error, by `supervise`.
        (Some(rejected), _) if rejected.permanent => {}
        (Some(rejected), _) => tracing::warn!(
            event = "node_rejected",
            reason = reject_reason_name(rejected.reason),
            message = %rejected.message,
            edge = %config.edge,
            "node_rejected"
        ),
        (None, true) => tracing::info!(
            event = "node_disconnected",
            node_id = %node_id,
            generation,
            reason = end.reason.as_str(),
            "node_disconnected"
        ),
        (None, false) if end.reason == CloseReason::IoError => {
            tracing::info!(event = "node_dial_failed", edge = %config.edge, "node_dial_failed");
        }
        (None, false) => tracing::info!(
            event = "node_disconnected",
            reason = end.reason.as_str(),
            edge = %config.edge,
            "node_disconnected"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_caps_and_resets() {
        let mut b = Backoff::new(100, 1_000, 7);
        let ceilings = [100, 200, 400, 800, 1_000, 1_000];
        for ceiling in ceilings {
            let d = b.next_delay().as_millis() as u64;
            assert!(
                (ceiling / 4..=ceiling).contains(&d),
                "{d} not in [{}, {ceiling}]",
                ceiling / 4
            );
        }
        b.reset();
        assert!(b.next_delay().as_millis() <= 100);
    }

    #[test]
    fn jitter_differs_between_instances() {
        let a: Vec<_> = (0..8)
            .map({
                let mut b = Backoff::new(100, 30_000, 1);
                move |_| b.next_delay()
            })
            .collect();
        let b: Vec<_> = (0..8)
            .map({
                let mut b = Backoff::new(100, 30_000, 2);
                move |_| b.next_delay()
            })
            .collect();
        assert_ne!(a, b);
    }
}
