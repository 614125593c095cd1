//! Exactly-once release under racing ends, and what evidence may never
//! leak into metrics or logs.

use std::io::Write;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use proto::v1::{
    CapabilitiesResult, NodeCommandKind, NodeCommandResponse, ProviderHealth, TargetHealth,
};

use super::Preference;
use super::tests::{World, stall};

/// Coordinators, each with its own three racers.
const PIPELINES: usize = 2;
/// Requests per coordinator (10 000 in all).
const ITERATIONS: usize = 5_000;

/// Each request leases a slot and hands it to three racers that end it at
/// once: the node's terminal, a link-lost synthesized terminal
/// (disconnect), and a stall terminal that first goes through the handoff.
/// Exactly one of them drops the lease; outstanding never exceeds capacity
/// (checked by every thread after each step) and returns to 0. No barriers:
/// the coordinator leases again as soon as a slot is free, so racers of
/// different requests overlap too.
#[test]
fn release_is_exactly_once_under_racing_terminal_disconnect_and_stall() {
    type Slot = Arc<Mutex<Option<super::Lease>>>;
    let w = Arc::new(World::new());
    let over_capacity = Arc::new(AtomicU32::new(0));
    let check = |w: &World, over: &AtomicU32| {
        for p in w.pools.providers() {
            if p.outstanding() > p.max_concurrency {
                over.fetch_add(1, Ordering::Relaxed);
            }
        }
    };
    let seq = Arc::new(AtomicU64::new(0));
    let releases = Arc::new(AtomicU64::new(0));
    let handoffs = Arc::new(AtomicU64::new(0));
    let mut threads = Vec::new();
    for _ in 0..PIPELINES {
        let mut senders = Vec::new();
        for racer in 0..3 {
            let (tx, rx) = std::sync::mpsc::channel::<Slot>();
            senders.push(tx);
            let (w, over) = (Arc::clone(&w), Arc::clone(&over_capacity));
            let (seq, releases, handoffs) = (
                Arc::clone(&seq),
                Arc::clone(&releases),
                Arc::clone(&handoffs),
            );
            threads.push(std::thread::spawn(move || {
                for slot in rx {
                    let mut held = slot.lock().unwrap();
                    if racer == 2
                        && let Some(lease) = held.as_ref()
                    {
                        let node = lease.provider().node_id.clone();
                        let n = seq.fetch_add(1, Ordering::Relaxed) + 1;
                        let evidence = stall(ProviderHealth::Available, Some(n));
                        let reception = (&*node, lease.generation());
                        if w.pools.handoff_stall(lease, reception, &evidence).is_some() {
                            handoffs.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    // Whoever takes it drops it: the one release.
                    let lease = held.take();
                    drop(held);
                    if let Some(lease) = lease {
                        drop(lease);
                        releases.fetch_add(1, Ordering::Relaxed);
                    }
                    check(&w, &over);
                }
            }));
        }
        let (w, over) = (Arc::clone(&w), Arc::clone(&over_capacity));
        threads.push(std::thread::spawn(move || {
            for _ in 0..ITERATIONS {
                let lease = loop {
                    match w.lease(&Preference::default()) {
                        Ok(lease) => break lease,
                        // All four slots held by requests still racing.
                        Err(_) => std::thread::yield_now(),
                    }
                };
                check(&w, &over);
                let slot: Slot = Arc::new(Mutex::new(Some(lease)));
                for tx in &senders {
                    tx.send(Arc::clone(&slot)).unwrap();
                }
            }
        }));
    }
    for thread in threads {
        thread.join().unwrap();
    }
    let total = (PIPELINES * ITERATIONS) as u64;
    assert_eq!(releases.load(Ordering::Relaxed), total);
    assert!(handoffs.load(Ordering::Relaxed) <= total);
    assert_eq!(over_capacity.load(Ordering::Relaxed), 0);
    assert_eq!(w.pools.outstanding(), 0);
    // Available evidence never lowered anything.
    assert!(w.eligible("a") && w.eligible("b"));
}

const SENTINEL_SECRET: &str = "sk-live-SENTINEL-9f2c";
const SENTINEL_PROMPT: &str = "PROMPT-SENTINEL tell me the launch codes";

/// A shared buffer the log subscriber writes to.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn evidence_text_never_reaches_metrics_or_logs() {
    let w = World::new();
    let g1 = w.registry.dispatchable("n1").unwrap().0;
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        let lease = w.lease(&Preference::default()).unwrap();
        let mut evidence = stall(ProviderHealth::Unavailable, Some(1));
        evidence.message = format!("{SENTINEL_SECRET} {SENTINEL_PROMPT}");
        w.pools
            .handoff_stall(&lease, ("n1", g1), &evidence)
            .expect("validated");
        // Mismatched and stale evidence is logged too, just as safely.
        assert!(
            w.pools
                .handoff_stall(&lease, ("n2", 1), &evidence)
                .is_none()
        );
        let mut probe = TargetHealth {
            adapter: "a".into(),
            target: "m".into(),
            health_observation_seq: 2,
            ..TargetHealth::default()
        };
        probe.set_status(ProviderHealth::Available);
        let mut response = NodeCommandResponse {
            ok: true,
            r#final: true,
            capabilities: Some(CapabilitiesResult {
                probe: Some(probe),
                ..CapabilitiesResult::default()
            }),
            ..NodeCommandResponse::default()
        };
        response.set_kind(NodeCommandKind::Capabilities);
        let mut bad = response.clone();
        bad.ok = false;
        bad.failure = Some(evidence.clone());
        w.pools.apply_capabilities("a", ("n1", g1), &[bad]);
        w.pools.apply_capabilities("a", ("n1", g1), &[response]);
    });
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert_eq!(
        logs.matches("edge_provider_health_observation").count(),
        4 * 2,
        "one event per observation (event field and message): {logs}"
    );
    assert!(logs.contains("outcome=\"lowered\"") || logs.contains("outcome=lowered"));
    let mut metrics = String::new();
    w.pools.health_metrics().render(&mut metrics);
    for text in [&logs, &metrics] {
        assert!(!text.contains("SENTINEL"), "{text}");
        assert!(!text.contains("launch codes"));
    }
    assert!(metrics.contains(
        "iop_edge_provider_health_transitions_total{provider=\"a\",from=\"unavailable\",to=\"available\"} 1"
    ));
}
