//! The in-process event bus (F7): node lifecycle events and run events
//! fanned out to subscribers.
//!
//! Publishing never blocks and never fails the publisher: each subscriber has
//! a bounded buffer ([`EVENT_BUFFER`]); a subscriber that falls behind loses
//! the oldest events and learns how many it lost (`Lagged`), so a slow
//! subscriber can never stall a connection or the data path.

use std::sync::Arc;

use framing::link::CloseReason;
use proto::v1::{RegisterRejectReason, RunEvent};
use tokio::sync::broadcast;

/// Events buffered per subscriber before the oldest are dropped for it.
pub const EVENT_BUFFER: usize = 1024;

/// A node lifecycle event. Field values are ids from config and closed sets:
/// no token, no payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LifecycleEvent {
    /// A node registered; `generation` is its new connection's generation.
    Registered {
        /// Node id from config.
        node_id: String,
        /// The connection's generation.
        generation: u64,
    },
    /// A registration was refused (F3).
    Rejected {
        /// The node, when the token identified one.
        node_id: Option<String>,
        /// Why.
        reason: RegisterRejectReason,
    },
    /// The node completed readiness: its current connection takes work.
    Ready {
        /// Node id from config.
        node_id: String,
        /// The connection's generation.
        generation: u64,
    },
    /// A registered connection ended; its generation is fenced.
    Disconnected {
        /// Node id from config.
        node_id: String,
        /// The fenced generation.
        generation: u64,
        /// Why it ended.
        reason: CloseReason,
    },
}

impl LifecycleEvent {
    /// The fixed event name operators alert on (`node_registered`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Registered { .. } => "node_registered",
            Self::Rejected { .. } => "node_rejected",
            Self::Ready { .. } => "node_ready",
            Self::Disconnected { .. } => "node_disconnected",
        }
    }
}

/// One event of a run, as the Edge received it from the node (F7, F10).
#[derive(Debug, Clone, PartialEq)]
pub struct RunBusEvent {
    /// The Edge-assigned run id.
    pub run_id: Arc<str>,
    /// The node that runs it.
    pub node_id: String,
    /// The node connection's generation.
    pub generation: u64,
    /// The event.
    pub event: RunEvent,
}

/// Fans lifecycle and run events out to subscribers. Cheap to clone; shared
/// by all cores.
#[derive(Debug, Clone)]
pub struct EventBus {
    sender: broadcast::Sender<LifecycleEvent>,
    runs: broadcast::Sender<RunBusEvent>,
}

impl Default for EventBus {
    fn default() -> Self {
        Self::new()
    }
}

impl EventBus {
    /// A bus with [`EVENT_BUFFER`] events of buffer per subscriber.
    pub fn new() -> Self {
        let (sender, _) = broadcast::channel(EVENT_BUFFER);
        let (runs, _) = broadcast::channel(EVENT_BUFFER);
        Self { sender, runs }
    }

    /// Publishes `event` to every current subscriber; never blocks.
    pub fn publish(&self, event: LifecycleEvent) {
        // No subscriber is not an error: events are observations.
        let _ = self.sender.send(event);
    }

    /// A new subscriber, seeing events published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<LifecycleEvent> {
        self.sender.subscribe()
    }

    /// Whether anyone listens to run events: the data path builds a
    /// [`RunBusEvent`] (a copy of the event) only then.
    pub fn wants_run_events(&self) -> bool {
        self.runs.receiver_count() > 0
    }

    /// Publishes a run event to every current run subscriber; never blocks.
    pub fn publish_run(&self, event: RunBusEvent) {
        let _ = self.runs.send(event);
    }

    /// A new run-event subscriber, seeing events published from now on.
    pub fn subscribe_runs(&self) -> broadcast::Receiver<RunBusEvent> {
        self.runs.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_subscriber_loses_old_events_and_never_blocks_the_publisher() {
        let bus = EventBus::new();
        let mut slow = bus.subscribe();
        for generation in 0..(EVENT_BUFFER as u64 + 10) {
            bus.publish(LifecycleEvent::Ready {
                node_id: "n".into(),
                generation,
            });
        }
        assert!(matches!(
            slow.try_recv(),
            Err(broadcast::error::TryRecvError::Lagged(10))
        ));
        assert_eq!(
            slow.try_recv().unwrap(),
            LifecycleEvent::Ready {
                node_id: "n".into(),
                generation: 10
            }
        );
    }

    #[test]
    fn publishing_without_subscribers_is_fine() {
        EventBus::new().publish(LifecycleEvent::Rejected {
            node_id: None,
            reason: RegisterRejectReason::UnknownToken,
        });
    }
}
