//! An open takes its stream id where it is sent and does not wait for the
//! home core; a core that no longer holds the generation ends the stream
//! with one `NODE_DISCONNECTED` terminal saying nothing was sent (no
//! sockets, no sleeps).

use std::sync::Arc;

use proto::v1::{FailureCode, RegisterRequest, RunEventKind, envelope::Msg};
use tokio::sync::mpsc::unbounded_channel;

use super::core::Core;
use super::inbox::{CoreMsg, Opening};
use super::test_support::{Dir, link_shared};
use crate::dispatch::{Dispatcher, SubmitRun};
use crate::registry::NodeRegistry;
use crate::runtime::{IoDriver, block_on};

fn run() -> SubmitRun {
    SubmitRun {
        adapter: "a".into(),
        target: "m".into(),
        ..SubmitRun::default()
    }
}

#[test]
fn an_open_is_sent_with_a_fresh_id_and_a_refused_one_ends_in_one_terminal() {
    let registry = Arc::new(NodeRegistry::new(Dir));
    let request = RegisterRequest {
        token: "n1".into(),
        ..RegisterRequest::default()
    };
    let generation = registry
        .register(&request, 1, 0)
        .expect("register")
        .generation;
    assert!(registry.mark_ready("n1", generation));
    let (core0, mut inbox0) = unbounded_channel();
    let (core1, mut inbox1) = unbounded_channel();
    let dispatcher = Dispatcher::new(Arc::clone(&registry), vec![core0, core1], 4096);

    // Nothing runs core 1 yet: both submits return at once, each with the
    // next id, and their opens wait in core 1's inbox.
    let mut first = block_on(IoDriver::Epoll, dispatcher.submit_run(run()))
        .unwrap()
        .expect("submitted without an answer from the core");
    let whole_answer = SubmitRun {
        merge_deltas: true,
        ..run()
    };
    let second = block_on(IoDriver::Epoll, dispatcher.submit_run(whole_answer))
        .unwrap()
        .expect("submitted");
    assert!(inbox0.try_recv().is_err(), "n1 lives on core 1");
    let open = inbox1.try_recv().expect("the first open");
    let CoreMsg::Open {
        stream_id: 1,
        generation: g,
        msg: Opening::Msg(Msg::RunRequest(ref request)),
        ..
    } = open
    else {
        panic!("the open of the first run, stream 1: {open:?}");
    };
    assert_eq!((g, request.run_id.as_str()), (generation, first.run_id()));
    assert_eq!(
        request.initial_window, 4096,
        "the run names the window its grants are sized for"
    );
    assert_eq!(first.handle.grant_at, 1024, "a quarter of it");
    assert!(
        !request.merge_deltas,
        "a streaming caller's deltas stay apart"
    );
    assert!(
        matches!(
            inbox1.try_recv(),
            Ok(CoreMsg::Open { stream_id: 2, msg: Opening::Msg(Msg::RunRequest(ref r)), .. })
                if r.merge_deltas
        ),
        "the second run's open, stream 2, for a caller of the whole answer"
    );
    drop(second);
    assert!(
        matches!(inbox1.try_recv(), Ok(CoreMsg::Close { stream_id: 2, .. })),
        "a stream dropped before its terminal is closed on its core"
    );

    // Core 1 no longer holds the generation (its connection closed in
    // between): the stream ends with exactly one terminal, and nothing was
    // sent.
    let shared = link_shared(&registry);
    Core::new(1, shared).handle(open);
    let events = block_on(IoDriver::Epoll, async {
        let mut events = Vec::new();
        while let Some(event) = first.next().await {
            events.push(event);
        }
        events
    })
    .unwrap();
    assert_eq!(events.len(), 1, "one terminal: {events:?}");
    let failure = events[0].failure.as_ref().expect("a failure");
    assert_eq!(events[0].kind(), RunEventKind::Error);
    assert_eq!(failure.code(), FailureCode::NodeDisconnected);
    assert!(
        failure.message.contains("before the request was sent"),
        "{}",
        failure.message
    );
    drop(first);
    assert!(inbox1.try_recv().is_err(), "an ended stream sends no close");
}
