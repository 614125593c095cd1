//! Operating a running Edge: graceful drain on `SIGTERM`/`SIGINT`
//! ([`drain`]) and `edge.yaml` reload on `SIGHUP` ([`reload`]); the
//! signals themselves ([`signals`]). `docs/operations.md` is the operator's
//! view.

pub mod drain;
pub mod reload;
#[allow(unsafe_code)]
pub mod signals;
#[cfg(test)]
mod tests;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use framing::link::CloseReason;

use self::drain::{DrainPlan, DrainReport, DrainStep};
use crate::link::inbox::CoreMsg;
use crate::server::EdgeServer;

/// How often the drain looks at the in-flight count.
const DRAIN_POLL: Duration = Duration::from_millis(20);

/// After the node links close, how long the drain waits for their streams'
/// terminals to reach the handlers (each ends at once on the disconnect).
const CLOSE_WAIT: Duration = Duration::from_secs(3);

/// Drains `server` (see [`drain`]): blocks until it is drained and returns
/// what happened. Logs `edge_draining` and `edge_drained`. The caller exits.
pub fn drain_server(server: &EdgeServer, grace_ms: u64) -> DrainReport {
    let in_flight = || server.drain.in_flight();
    server.drain.begin();
    server.metrics.ops.draining.store(true, Ordering::Relaxed);
    server.registry.refuse_registrations();
    let start = Instant::now();
    let in_flight_at_start = in_flight();
    tracing::info!(
        event = "edge_draining",
        in_flight = in_flight_at_start,
        grace_ms,
        nodes = server.registry.live_count(),
        "edge_draining"
    );
    let plan = DrainPlan {
        started_ms: 0,
        grace_ms,
    };
    let grace_exceeded = loop {
        let now_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX);
        match plan.step(now_ms, in_flight()) {
            DrainStep::Wait => std::thread::sleep(DRAIN_POLL),
            DrainStep::Close { grace_exceeded } => break grace_exceeded,
        }
    };
    let in_flight_at_close = in_flight();
    let links_closed = disconnect_all(server, CloseReason::Shutdown);
    let closing = Instant::now();
    while (in_flight() > 0 || server.registry.live_count() > 0) && closing.elapsed() < CLOSE_WAIT {
        std::thread::sleep(DRAIN_POLL);
    }
    let report = DrainReport {
        in_flight_at_start,
        in_flight_at_close,
        in_flight_at_end: in_flight(),
        grace_exceeded,
        links_closed,
    };
    tracing::info!(
        event = "edge_drained",
        in_flight_at_start = report.in_flight_at_start,
        in_flight_at_close = report.in_flight_at_close,
        in_flight = report.in_flight_at_end,
        grace_exceeded = report.grace_exceeded,
        links_closed = report.links_closed,
        elapsed_ms = u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
        "edge_drained"
    );
    report
}

/// Closes every live node link with `reason`; returns how many were asked.
fn disconnect_all(server: &EdgeServer, reason: CloseReason) -> usize {
    let mut asked = 0;
    for status in server.registry.status() {
        if disconnect(
            server,
            &status.node_id,
            status.generation,
            status.home_core,
            reason,
        ) {
            asked += 1;
        }
    }
    asked
}

/// Asks the home core of `(node_id, generation)` to close it with `reason`.
fn disconnect(
    server: &EdgeServer,
    node_id: &str,
    generation: u64,
    home_core: usize,
    reason: CloseReason,
) -> bool {
    server.core_inboxes.get(home_core).is_some_and(|inbox| {
        inbox
            .send(CoreMsg::Disconnect {
                node_id: node_id.to_owned(),
                generation,
                reason,
            })
            .is_ok()
    })
}
