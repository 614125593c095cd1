//! The dispatcher's run ids and a run stream's credit grants.

use super::*;
use crate::link::streams::{StreamItem, stream_channel};
use crate::runtime::{IoDriver, block_on};
use proto::v1::{RunEvent, RunEventKind, WindowUpdate};

fn event(seq: u64, kind: RunEventKind, text: &str) -> StreamItem {
    let mut event = RunEvent {
        seq,
        text: text.into(),
        ..RunEvent::default()
    };
    event.set_kind(kind);
    StreamItem::Frame(Box::new(Msg::RunEvent(event)))
}

/// The credit a run stream has granted so far (its window updates).
fn granted(inbox: &mut tokio::sync::mpsc::UnboundedReceiver<CoreMsg>) -> Vec<u32> {
    let mut out = Vec::new();
    while let Ok(msg) = inbox.try_recv() {
        if let CoreMsg::Send {
            stream_id: 7,
            msg: Msg::WindowUpdate(WindowUpdate { increment }),
            ..
        } = msg
        {
            out.push(increment);
        }
    }
    out
}

#[test]
fn a_run_stream_grants_what_it_handed_out_when_asked_for_more() {
    let (sink, rx) = stream_channel();
    let (inbox, mut sent) = tokio::sync::mpsc::unbounded_channel();
    let mut stream = RunStream {
        handle: StreamHandle {
            node_id: "n1".into(),
            generation: 1,
            stream_id: 7,
            rx,
            inbox,
            ended: false,
        },
        run_id: "r".into(),
        last_seq: 0,
        taken: 0,
    };
    sink.send(event(1, RunEventKind::Delta, "abc"));
    sink.send(event(2, RunEventKind::Delta, "de"));
    block_on(IoDriver::Epoll, async {
        assert!(stream.next().await.is_some());
        assert!(stream.try_next().is_some());
        assert_eq!(
            granted(&mut sent),
            Vec::<u32>::new(),
            "nothing before the caller asks again: the batch is not written"
        );
        sink.send(event(3, RunEventKind::Delta, ""));
        assert!(stream.next().await.is_some());
        assert_eq!(
            granted(&mut sent),
            vec![2 * proto::RUN_EVENT_CREDIT_BASE + 5],
            "both events of the written batch, in one update"
        );
        sink.send(event(4, RunEventKind::Complete, ""));
        assert!(stream.next().await.is_some(), "the terminal");
        assert_eq!(granted(&mut sent), vec![proto::RUN_EVENT_CREDIT_BASE]);
        assert!(stream.next().await.is_none());
        assert_eq!(
            granted(&mut sent),
            Vec::<u32>::new(),
            "nothing after the terminal: the run is over"
        );
    })
    .unwrap();
}

#[test]
fn run_ids_count_up_and_the_longest_fits() {
    let ids = RunIds::new();
    let prefix = format!("{:x}", ids.prefix);
    assert_eq!(&*ids.next(), format!("run-{prefix}-1"));
    assert_eq!(&*ids.next(), format!("run-{prefix}-2"));
    let longest = RunIds {
        prefix: u64::MAX,
        next: AtomicU64::new(u64::MAX),
    };
    assert_eq!(
        &*longest.next(),
        format!("run-ffffffffffffffff-{}", u64::MAX)
    );
}
