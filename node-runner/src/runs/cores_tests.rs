//! Placement of work on the Node's cores: fewest runs first, ties
//! round-robin, cancels to the owner until it reports the stream done.

use proto::Envelope;
use proto::v1::{CancelKind, CancelRequest, RunRequest, WindowUpdate, envelope::Msg};

use super::*;

fn run(stream_id: u64, run_id: &str) -> Envelope {
    Envelope {
        stream_id,
        msg: Some(Msg::RunRequest(Box::new(RunRequest {
            run_id: run_id.into(),
            ..RunRequest::default()
        }))),
    }
}

fn cancel(stream_id: u64, kind: CancelKind, run_id: &str) -> Envelope {
    let mut request = CancelRequest {
        run_id: run_id.into(),
        ..CancelRequest::default()
    };
    request.set_kind(kind);
    Envelope {
        stream_id,
        msg: Some(Msg::CancelRequest(Box::new(request))),
    }
}

fn command(stream_id: u64) -> Envelope {
    Envelope {
        stream_id,
        msg: Some(Msg::NodeCommandRequest(Box::default())),
    }
}

#[test]
fn pick_core_takes_the_least_loaded_and_round_robins_ties() {
    let mut cursor = 0;
    assert_eq!(pick_core(&[0, 0, 0], &mut cursor, 0), 0);
    assert_eq!(pick_core(&[0, 0, 0], &mut cursor, 0), 1);
    assert_eq!(pick_core(&[0, 0, 0], &mut cursor, 0), 2);
    assert_eq!(pick_core(&[0, 0, 0], &mut cursor, 0), 0);
    // The least loaded wins wherever the cursor is.
    assert_eq!(pick_core(&[3, 1, 2], &mut cursor, 0), 1);
    // Ties among the least loaded only: the first at or after the cursor.
    let mut cursor = 2;
    assert_eq!(pick_core(&[1, 0, 5, 0], &mut cursor, 0), 3);
    assert_eq!(pick_core(&[1, 0, 5, 0], &mut cursor, 0), 1);
    // One core: always it.
    let mut cursor = 0;
    assert_eq!(pick_core(&[7], &mut cursor, 0), 0);
    assert_eq!(pick_core(&[], &mut cursor, 0), 0);
}

#[test]
fn the_link_core_takes_work_within_its_slack_then_the_least_loaded_does() {
    let mut cursor = 0;
    // Within the slack the link core is preferred, even over idle cores.
    assert_eq!(pick_core(&[0, 0, 0], &mut cursor, 2), 0);
    assert_eq!(pick_core(&[2, 0, 0], &mut cursor, 2), 0);
    // Past it, the least loaded, round-robin as before.
    assert_eq!(pick_core(&[3, 0, 0], &mut cursor, 2), 1);
    assert_eq!(pick_core(&[3, 0, 0], &mut cursor, 2), 2);
    assert_eq!(pick_core(&[3, 1, 1], &mut cursor, 2), 0);
    assert_eq!(pick_core(&[u32::MAX, u32::MAX], &mut cursor, 2), 0);

    let mut router = Router::new(2, 1);
    assert_eq!(router.route(&run(1, "r1")), Route::Core(0));
    assert_eq!(router.route(&run(3, "r3")), Route::Core(0), "1 <= 0 + 1");
    assert_eq!(router.route(&run(5, "r5")), Route::Core(1), "2 > 0 + 1");
    assert_eq!(router.load(), [2, 1]);
    router.stream_done(1);
    assert_eq!(router.route(&run(7, "r7")), Route::Core(0));
    assert_eq!(router.route(&run(9, "r9")), Route::Core(0));
    assert_eq!(router.route(&run(11, "r11")), Route::Core(1));
    assert_eq!(router.load(), [3, 2]);
    assert_eq!(Router::new(1, 0).route(&run(1, "r1")), Route::Core(0));
}

#[test]
fn concurrent_runs_spread_and_done_runs_free_their_core() {
    let mut router = Router::new(2, 0);
    assert_eq!(router.route(&run(1, "r1")), Route::Core(0));
    assert_eq!(router.route(&run(3, "r3")), Route::Core(1));
    assert_eq!(router.route(&run(5, "r5")), Route::Core(0));
    assert_eq!(router.load(), [2, 1]);
    // A command goes where the fewest runs are.
    assert_eq!(router.route(&command(7)), Route::Core(1));
    router.stream_done(1);
    router.stream_done(5);
    assert_eq!(router.load(), [0, 1]);
    assert_eq!(router.route(&run(9, "r9")), Route::Core(0));
}

#[test]
fn a_cancel_goes_to_the_owner_until_the_stream_is_done() {
    let mut router = Router::new(2, 0);
    router.route(&run(1, "r1"));
    assert_eq!(router.route(&run(3, "r3")), Route::Core(1));
    let on_stream = cancel(3, CancelKind::CancelRun, "");
    assert_eq!(router.route(&on_stream), Route::Core(1));
    // By run id, on another stream.
    let by_id = cancel(11, CancelKind::CancelRun, "r3");
    assert_eq!(router.route(&by_id), Route::Core(1));
    // Flow control follows the stream too.
    let window = Envelope {
        stream_id: 3,
        msg: Some(Msg::WindowUpdate(WindowUpdate::default())),
    };
    assert_eq!(router.route(&window), Route::Core(1));
    router.stream_done(3);
    assert_eq!(router.route(&on_stream), Route::CancelNotFound);
    assert_eq!(router.route(&by_id), Route::CancelNotFound);
    assert_eq!(router.route(&window), Route::Drop);
    assert_eq!(
        router.route(&cancel(99, CancelKind::CancelRun, "")),
        Route::CancelNotFound
    );
}

#[test]
fn a_duplicate_run_goes_to_the_owner_and_keeps_the_stream_owned() {
    let mut router = Router::new(2, 0);
    assert_eq!(router.route(&run(1, "r1")), Route::Core(0));
    // The owner refuses the duplicate and reports it done: the first run
    // still owns the stream.
    assert_eq!(router.route(&run(1, "r1")), Route::Core(0));
    router.stream_done(1);
    assert_eq!(
        router.route(&cancel(1, CancelKind::CancelRun, "")),
        Route::Core(0)
    );
    router.stream_done(1);
    assert_eq!(
        router.route(&cancel(1, CancelKind::CancelRun, "")),
        Route::CancelNotFound
    );
    assert_eq!(router.load(), [0, 0]);
}

#[test]
fn terminates_spread_like_new_work() {
    let mut router = Router::new(2, 0);
    let terminate = cancel(5, CancelKind::TerminateSession, "");
    assert_eq!(router.route(&terminate), Route::Core(0));
    assert_eq!(router.route(&terminate), Route::Core(1));
}
