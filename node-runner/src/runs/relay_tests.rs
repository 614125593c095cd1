//! What a quiet normalized run keeps (issue 8: memory per stream): the
//! relay lets go of the provider call that opened the run once it has
//! returned. Manual clock, no sleeps (see `stall_tests`).

use std::cell::Cell;
use std::future::{self, Future};
use std::rc::Rc;

use super::stall_tests::{Scripted, scripted, start_delta};
use super::{Stop, relay_watched};
use crate::stall::Watchdog;
use crate::stall::testkit::{FakeHealth, Harness, block_on, settle};

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
