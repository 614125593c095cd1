//! Placement of work on the Node's cores: fewest runs first, ties
//! round-robin, cancels to the owner until it reports the stream done.

use proto::Envelope;
use proto::v1::{CancelKind, CancelRequest, RunRequest, WindowUpdate, envelope::Msg};

use super::*;

/// The clock for routes that do not read it.
fn now() -> u64 {
    0
}

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
    assert_eq!(router.route(&run(1, "r1"), now), Route::Core(0));
    assert_eq!(
        router.route(&run(3, "r3"), now),
        Route::Core(0),
        "1 <= 0 + 1"
    );
    assert_eq!(
        router.route(&run(5, "r5"), now),
        Route::Core(1),
        "2 > 0 + 1"
    );
    assert_eq!(router.load(), [2, 1]);
    router.stream_done(1);
    assert_eq!(router.route(&run(7, "r7"), now), Route::Core(0));
    assert_eq!(router.route(&run(9, "r9"), now), Route::Core(0));
    assert_eq!(router.route(&run(11, "r11"), now), Route::Core(1));
    assert_eq!(router.load(), [3, 2]);
    assert_eq!(Router::new(1, 0).route(&run(1, "r1"), now), Route::Core(0));
}

#[test]
fn concurrent_runs_spread_and_done_runs_free_their_core() {
    let mut router = Router::new(2, 0);
    assert_eq!(router.route(&run(1, "r1"), now), Route::Core(0));
    assert_eq!(router.route(&run(3, "r3"), now), Route::Core(1));
    assert_eq!(router.route(&run(5, "r5"), now), Route::Core(0));
    assert_eq!(router.load(), [2, 1]);
    // A command goes where the fewest runs are.
    assert_eq!(router.route(&command(7), now), Route::Core(1));
    router.stream_done(1);
    router.stream_done(5);
    assert_eq!(router.load(), [0, 1]);
    assert_eq!(router.route(&run(9, "r9"), now), Route::Core(0));
}

#[test]
fn a_cancel_goes_to_the_owner_until_the_stream_is_done() {
    let mut router = Router::new(2, 0);
    router.route(&run(1, "r1"), now);
    assert_eq!(router.route(&run(3, "r3"), now), Route::Core(1));
    let on_stream = cancel(3, CancelKind::CancelRun, "");
    assert_eq!(router.route(&on_stream, now), Route::Core(1));
    // By run id, on another stream.
    let by_id = cancel(11, CancelKind::CancelRun, "r3");
    assert_eq!(router.route(&by_id, now), Route::Core(1));
    // Flow control follows the stream too.
    let window = Envelope {
        stream_id: 3,
        msg: Some(Msg::WindowUpdate(WindowUpdate::default())),
    };
    assert_eq!(router.route(&window, now), Route::Core(1));
    router.stream_done(3);
    assert_eq!(router.route(&on_stream, now), Route::CancelNotFound);
    assert_eq!(router.route(&by_id, now), Route::CancelNotFound);
    assert_eq!(router.route(&window, now), Route::Drop);
    assert_eq!(
        router.route(&cancel(99, CancelKind::CancelRun, ""), now),
        Route::CancelNotFound
    );
}

#[test]
fn a_duplicate_run_goes_to_the_owner_and_keeps_the_stream_owned() {
    let mut router = Router::new(2, 0);
    assert_eq!(router.route(&run(1, "r1"), now), Route::Core(0));
    // The owner refuses the duplicate and reports it done: the first run
    // still owns the stream.
    assert_eq!(router.route(&run(1, "r1"), now), Route::Core(0));
    router.stream_done(1);
    assert_eq!(
        router.route(&cancel(1, CancelKind::CancelRun, ""), now),
        Route::Core(0)
    );
    router.stream_done(1);
    assert_eq!(
        router.route(&cancel(1, CancelKind::CancelRun, ""), now),
        Route::CancelNotFound
    );
    assert_eq!(router.load(), [0, 0]);
}

#[test]
fn terminates_spread_like_new_work() {
    let mut router = Router::new(2, 0);
    let terminate = cancel(5, CancelKind::TerminateSession, "");
    assert_eq!(router.route(&terminate, now), Route::Core(0));
    assert_eq!(router.route(&terminate, now), Route::Core(1));
}

fn window(stream_id: u64, increment: u32) -> Envelope {
    Envelope {
        stream_id,
        msg: Some(Msg::WindowUpdate(WindowUpdate { increment })),
    }
}

/// Grants `stream_id` `total` bytes in 64 KiB updates, `ms_each` apart
/// from `*clock`, which moves on.
fn credit(router: &mut Router, stream_id: u64, total: u64, ms_each: u64, clock: &mut u64) {
    const STEP: u32 = 64 * 1024;
    for _ in 0..total.div_ceil(u64::from(STEP)) {
        *clock += ms_each;
        let at = *clock;
        router.route(&window(stream_id, STEP), || at);
    }
}

#[test]
fn a_bulk_stream_on_the_link_core_sends_new_work_elsewhere_until_it_ends() {
    let mut router = Router::new(2, DEFAULT_LINK_CORE_SLACK);
    let mut clock = 1_000;
    assert_eq!(router.route(&run(1, "bulk"), now), Route::Core(0));
    assert_eq!(router.route(&run(3, "small"), now), Route::Core(0));
    // 1 MiB granted within 100 ms (16 updates, 5 ms apart): bulk.
    credit(&mut router, 1, BULK_CREDIT, 5, &mut clock);
    assert_eq!(router.weight(), [2 + DEFAULT_LINK_CORE_SLACK + 1, 0]);
    assert_eq!(router.load(), [2, 0], "still two runs in flight");
    // New work of any size goes to the idle core now...
    assert_eq!(router.route(&run(5, "next"), now), Route::Core(1));
    assert_eq!(router.route(&command(7), now), Route::Core(1));
    // ...and more credit does not weigh it twice (the command is not a
    // run: it weighs nothing).
    credit(&mut router, 1, BULK_CREDIT, 5, &mut clock);
    assert_eq!(router.weight(), [2 + DEFAULT_LINK_CORE_SLACK + 1, 1]);
    // Once the bulk stream ends, small work comes back to the link core.
    router.stream_done(1);
    assert_eq!(router.weight(), [1, 1]);
    assert_eq!(router.route(&run(9, "after"), now), Route::Core(0));
}

#[test]
fn bulk_streams_spread_over_the_cores_while_small_work_stays_on_the_link_core() {
    let mut router = Router::new(2, DEFAULT_LINK_CORE_SLACK);
    let mut clock = 0;
    for (stream, expect) in [(1, 0), (3, 1), (5, 0), (7, 1)] {
        assert_eq!(router.route(&run(stream, "bulk"), now), Route::Core(expect));
        credit(&mut router, stream, BULK_CREDIT, 1, &mut clock);
    }
    let bulk = DEFAULT_LINK_CORE_SLACK + 2;
    assert_eq!(router.weight(), [2 * bulk, 2 * bulk]);
    // Two small runs: both on the link core, within the slack.
    assert_eq!(router.route(&run(9, "small"), now), Route::Core(0));
    assert_eq!(router.route(&run(11, "small"), now), Route::Core(0));
    assert_eq!(router.load(), [4, 2]);
}

#[test]
fn a_token_stream_never_turns_bulk() {
    let mut router = Router::new(2, DEFAULT_LINK_CORE_SLACK);
    let mut clock = 0;
    assert_eq!(router.route(&run(1, "tokens"), now), Route::Core(0));
    // 4 MiB, but 64 KiB every 10 ms: 6.4 MiB/s, under 10 MiB/s.
    credit(&mut router, 1, 4 * BULK_CREDIT, 10, &mut clock);
    // After a pause, two fast halves with a pause between: never 1 MiB
    // in 100 ms.
    clock += BULK_WITHIN_MS + 1;
    credit(&mut router, 1, BULK_CREDIT / 2, 1, &mut clock);
    clock += BULK_WITHIN_MS + 1;
    credit(&mut router, 1, BULK_CREDIT / 2, 1, &mut clock);
    assert_eq!(router.weight(), [1, 0]);
    assert_eq!(router.route(&run(3, "next"), now), Route::Core(0));
    // Flow control for a stream no one owns reads no clock.
    let never = || -> u64 { panic!("read the clock for a dropped frame") };
    assert_eq!(router.route(&window(99, 1 << 20), never), Route::Drop);
    router.stream_done(1);
    router.stream_done(3);
    assert_eq!(router.weight(), [0, 0]);
}

#[test]
fn slack_zero_counts_a_bulk_run_as_two() {
    let mut router = Router::new(2, 0);
    let mut clock = 0;
    assert_eq!(router.route(&run(1, "bulk"), now), Route::Core(0));
    assert_eq!(router.route(&run(3, "small"), now), Route::Core(1));
    credit(&mut router, 1, BULK_CREDIT, 1, &mut clock);
    assert_eq!(router.weight(), [2, 1]);
    assert_eq!(router.route(&run(5, "small"), now), Route::Core(1));
}
