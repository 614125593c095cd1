//! Operator actions on a live link connection: the drain
//! ([`crate::drain`]) and an edge.yaml reload's refreshed payload
//! (`NodeConfigUpdate`).

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use framing::link::CloseReason;
use proto::v1::NodeConfigPayload;
use proto::v1::envelope::Msg;

use super::Link;
use crate::runs::CoreMsg;

/// How often a draining connection looks at its in-flight count.
const DRAIN_POLL: Duration = Duration::from_millis(20);

/// Waits for an operator drain ([`crate::drain`]) for as long as the
/// connection lasts, then drains it.
pub(super) async fn drain_watch(
    link: std::rc::Weak<Link>,
    ended: local_sync::oneshot::Receiver<()>,
) {
    monoio::select! {
        () = crate::drain::node_drain().wait() => {}
        _ = ended => return,
    }
    if let Some(link) = link.upgrade() {
        link.drain().await;
    }
}

impl Link {
    /// Applies an edge.yaml reload's payload to this generation without
    /// reconnecting: every core builds new adapters for new work; runs in
    /// flight keep theirs. Only a payload with the same providers (adapter
    /// names, in order) applies in place — admission is indexed by them —
    /// anything else waits for the next registration.
    pub(super) fn refresh(&self, config: NodeConfigPayload) {
        let Some(generation) = self.shared.borrow().as_ref().map(|s| s.generation()) else {
            return;
        };
        let adapters = |c: &NodeConfigPayload| -> Vec<String> {
            c.providers.iter().map(|p| p.adapter.clone()).collect()
        };
        let same_shape = self
            .end
            .borrow()
            .config
            .as_ref()
            .is_some_and(|old| adapters(old) == adapters(&config));
        if !same_shape {
            tracing::warn!(
                event = "node_config_refresh_deferred",
                generation,
                "the refreshed config changes the provider set; it applies at the next registration"
            );
            return;
        }
        if let Some(leases) = &self.leases {
            leases.revoke(&config.lease_revocations);
        }
        let payload = Arc::new(config.clone());
        self.cores.broadcast(|| CoreMsg::Refresh {
            generation,
            payload: Arc::clone(&payload),
        });
        tracing::info!(
            event = "node_config_refreshed",
            generation,
            revision = config.revision,
            providers = config.providers.len(),
            "node_config_refreshed"
        );
        self.end.borrow_mut().config = Some(config);
    }

    /// Runs and tunnels in flight on this connection, over every core.
    fn in_flight(&self) -> u64 {
        self.router
            .borrow()
            .load()
            .iter()
            .map(|&n| u64::from(n))
            .sum()
    }

    /// The operator drain of this connection: tell the Edge (it stops
    /// dispatching here), let in-flight work finish within the grace, then
    /// close with `shutdown`. Logs `node_draining` and `node_drained`.
    async fn drain(self: Rc<Self>) {
        use crate::drain::{DrainStep, node_drain, step};
        let grace_ms = node_drain().grace_ms();
        let started = std::time::Instant::now();
        let at_start = self.in_flight();
        tracing::info!(
            event = "node_draining",
            in_flight = at_start,
            grace_ms,
            "node_draining"
        );
        if self.end.borrow().was_ready {
            let notice = proto::v1::NodeDrainNotice {
                grace_ms,
                in_flight: u32::try_from(at_start).unwrap_or(u32::MAX),
            };
            self.outbox.send_msg(0, Msg::NodeDrainNotice(notice));
        }
        let grace_exceeded = loop {
            if self.session.borrow().is_closed() {
                break false;
            }
            let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            match step(elapsed_ms, grace_ms, self.in_flight()) {
                DrainStep::Wait => monoio::time::sleep(DRAIN_POLL).await,
                DrainStep::Close { grace_exceeded } => break grace_exceeded,
            }
        };
        tracing::info!(
            event = "node_drained",
            in_flight_at_start = at_start,
            in_flight = self.in_flight(),
            grace_exceeded,
            elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "node_drained"
        );
        self.session
            .borrow_mut()
            .handle_closed(CloseReason::Shutdown);
        self.pump();
        self.rearm();
    }
}
