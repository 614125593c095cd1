//! What a quiet normalized run keeps (issue 8: memory per stream): the
//! relay lets go of the provider call that opened the run once it has
//! returned. Manual clock, no sleeps (see `stall_tests`).

use std::cell::Cell;
use std::future::{self, Future};
use std::rc::Rc;

use proto::v1::ProviderHealth;

use super::stall_tests::{Scripted, scripted, start_delta};
use super::{Stop, relay_credited, relay_watched};
use crate::adapter::RuntimeEvent;
use crate::stall::Watchdog;
use crate::stall::testkit::{FakeHealth, Harness, block_on, settle};
use crate::tunnel::Credit;

/// Resolves to its source at once but, unlike an async block, keeps what
/// it holds until it is dropped: a finished provider call kept alive.
struct OpenedCall {
    source: Option<Scripted>,
    _held: Rc<()>,
}

impl Future for OpenedCall {
    type Output = Scripted;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Scripted> {
        std::task::Poll::Ready(self.source.take().expect("polled once"))
    }
}

#[test]
fn a_streaming_run_frees_its_finished_provider_call() {
    block_on(async {
        let h = Harness::new();
        let held = Rc::new(());
        let open = OpenedCall {
            source: Some(scripted(&h, start_delta())),
            _held: Rc::clone(&held),
        };
        let events = Rc::new(Cell::new(0));
        let seen = Rc::clone(&events);
        let relay = monoio::spawn(relay_watched(
            Box::pin(open),
            future::pending::<Stop>,
            None::<Watchdog<FakeHealth>>,
            move |_| seen.set(seen.get() + 1),
        ));
        settle().await;
        // The run streams on (its source hangs after two events); the
        // call that opened it is gone.
        assert_eq!(events.get(), 2);
        assert_eq!(
            Rc::strong_count(&held),
            1,
            "the finished call is still held"
        );
        drop(relay);
    });
}

/// A run under flow control sends while it has credit, then waits for a
/// grant without reading its source; while it waits it never stalls.
#[test]
fn a_run_out_of_credit_waits_for_a_grant_and_is_not_stalled_meanwhile() {
    block_on(async {
        let h = Harness::new();
        // Ten deltas due at once, each costing 36 + 64 = 100 of credit.
        let deltas = (0..10)
            .map(|_| (0, RuntimeEvent::Delta("x".repeat(36))))
            .collect();
        let credit = Credit::new(250);
        let granter = credit.clone();
        let sent = Rc::new(Cell::new(0));
        let seen = Rc::clone(&sent);
        let watchdog = h.watchdog(1_000, FakeHealth::new(&h, ProviderHealth::Available));
        let relay = monoio::spawn(relay_credited(
            Box::pin(future::ready(scripted(&h, deltas))),
            future::pending::<Stop>,
            Some(watchdog),
            Some(credit),
            move |_| seen.set(seen.get() + 1),
        ));
        settle().await;
        assert_eq!(sent.get(), 3, "250 of credit: 150, 50, then -50 left");
        // Ten stall timeouts later the run still waits: held, not stalled.
        h.advance(10_000).await;
        assert_eq!(sent.get(), 3);
        granter.grant(50);
        settle().await;
        assert_eq!(sent.get(), 3, "the overdraft is repaid first");
        granter.grant(61);
        settle().await;
        assert_eq!(sent.get(), 3, "61 back: under a quarter of the window");
        granter.grant(1);
        settle().await;
        assert_eq!(sent.get(), 4, "62 back: it resumes, and overdraws again");
        granter.grant(10_000);
        settle().await;
        assert_eq!(sent.get(), 10, "the rest once the client took them");
        drop(relay);
    });
}
