use framing::link::{CloseReason, HeartbeatConfig};
use proto::Envelope;
use proto::v1::{
    HeartbeatPing, HeartbeatPong, NodeConfigPayload, NodeReadyRequest, RegisterRejectReason,
    RegisterRequest, envelope::Msg,
};

use super::*;
use crate::events::LifecycleEvent;
use crate::registry::{ConnRegistrar, NodeDirectory, NodeRegistry};

/// Tokens `tok-<id>` authenticate node `<id>`; node `broken` has no payload.
struct Dir;

impl NodeDirectory for Dir {
    fn authenticate(&self, token: &str) -> Option<String> {
        token.strip_prefix("tok-").map(str::to_owned)
    }

    fn build_payload(
        &self,
        node_id: &str,
        _peer_max_frame_len: u32,
    ) -> Result<NodeConfigPayload, String> {
        if node_id == "broken" {
            return Err("no providers".into());
        }
        Ok(NodeConfigPayload {
            revision: 1,
            ..Default::default()
        })
    }
}

const CFG: SessionConfig = SessionConfig {
    register_timeout_ms: 10_000,
    heartbeat: HeartbeatConfig {
        interval_ms: 30_000,
        wait_ms: 45_000,
    },
};

fn env(stream_id: u64, msg: Msg) -> Envelope {
    Envelope {
        stream_id,
        msg: Some(msg),
    }
}

fn register(token: &str) -> Envelope {
    env(
        0,
        Msg::RegisterRequest(Box::new(RegisterRequest {
            token: token.into(),
            ..Default::default()
        })),
    )
}

fn drain(s: &mut EdgeSession) -> Vec<Output> {
    std::iter::from_fn(|| s.poll_output()).collect()
}

fn conn(registry: &NodeRegistry<Dir>) -> ConnRegistrar<'_, Dir> {
    ConnRegistrar {
        registry,
        home_core: 0,
        connected_since_unix_ms: 0,
    }
}

/// A session that has registered and become ready as node `a`.
fn ready_session(registry: &NodeRegistry<Dir>) -> EdgeSession {
    let mut s = EdgeSession::new(CFG, 0);
    s.handle_envelope(register("tok-a"), 0, &conn(registry));
    s.handle_envelope(
        env(0, Msg::NodeReadyRequest(NodeReadyRequest::default())),
        1,
        &conn(registry),
    );
    drain(&mut s);
    assert!(s.is_ready());
    s
}

#[test]
fn happy_handshake_registers_then_readies() {
    let registry = NodeRegistry::new(Dir);
    let mut s = EdgeSession::new(CFG, 0);
    s.handle_envelope(register("tok-a"), 5, &conn(&registry));
    let out = drain(&mut s);
    let Output::Send(Envelope {
        msg: Some(Msg::RegisterResponse(resp)),
        ..
    }) = &out[0]
    else {
        panic!("{out:?}")
    };
    assert!(resp.accepted);
    assert_eq!((resp.node_id.as_str(), resp.generation), ("a", 1));
    assert!(resp.config.is_some());
    assert_eq!(
        out[1],
        Output::Event(LifecycleEvent::Registered {
            node_id: "a".into(),
            generation: 1
        })
    );
    assert_eq!(
        registry.dispatchable("a"),
        None,
        "not dispatchable before NodeReady"
    );

    s.handle_envelope(
        env(0, Msg::NodeReadyRequest(NodeReadyRequest::default())),
        6,
        &conn(&registry),
    );
    let out = drain(&mut s);
    assert!(
        matches!(&out[0], Output::Send(Envelope { msg: Some(Msg::NodeReadyResponse(r)), .. }) if r.accepted)
    );
    assert_eq!(
        out[1],
        Output::Event(LifecycleEvent::Ready {
            node_id: "a".into(),
            generation: 1
        })
    );
    assert_eq!(registry.dispatchable("a"), Some((1, 0)));
}

#[test]
fn unknown_token_is_rejected_and_closed() {
    let registry = NodeRegistry::new(Dir);
    let mut s = EdgeSession::new(CFG, 0);
    s.handle_envelope(register("nope"), 0, &conn(&registry));
    let out = drain(&mut s);
    assert!(matches!(
        &out[0],
        Output::Send(Envelope { msg: Some(Msg::RegisterResponse(r)), .. })
            if !r.accepted && r.reject_reason == RegisterRejectReason::UnknownToken as i32
    ));
    assert_eq!(
        out[1],
        Output::Event(LifecycleEvent::Rejected {
            node_id: None,
            reason: RegisterRejectReason::UnknownToken
        })
    );
    assert_eq!(out[2], Output::Close(CloseReason::Rejected));
    assert_eq!(registry.live_count(), 0);
}

#[test]
fn duplicate_connection_is_rejected_and_the_first_stays() {
    let registry = NodeRegistry::new(Dir);
    let first = ready_session(&registry);
    let mut second = EdgeSession::new(CFG, 0);
    second.handle_envelope(register("tok-a"), 0, &conn(&registry));
    let out = drain(&mut second);
    assert!(matches!(
        &out[0],
        Output::Send(Envelope { msg: Some(Msg::RegisterResponse(r)), .. })
            if r.reject_reason == RegisterRejectReason::DuplicateConnection as i32
    ));
    assert_eq!(out.last(), Some(&Output::Close(CloseReason::Rejected)));
    assert!(first.is_ready());
    assert_eq!(registry.dispatchable("a"), Some((1, 0)));
}

#[test]
fn config_build_failure_is_rejected_without_claiming_a_generation() {
    let registry = NodeRegistry::new(Dir);
    let mut s = EdgeSession::new(CFG, 0);
    s.handle_envelope(register("tok-broken"), 0, &conn(&registry));
    let out = drain(&mut s);
    assert!(matches!(
        &out[0],
        Output::Send(Envelope { msg: Some(Msg::RegisterResponse(r)), .. })
            if r.reject_reason == RegisterRejectReason::ConfigBuildFailed as i32
                && r.message.contains("no providers")
    ));
    assert_eq!(registry.live_count(), 0);
}

#[test]
fn anything_before_register_is_a_protocol_violation() {
    let registry = NodeRegistry::new(Dir);
    for msg in [
        Msg::NodeReadyRequest(NodeReadyRequest::default()),
        Msg::HeartbeatPing(HeartbeatPing { seq: 1 }),
        Msg::RunEvent(Box::default()),
    ] {
        let mut s = EdgeSession::new(CFG, 0);
        s.handle_envelope(env(0, msg), 0, &conn(&registry));
        assert_eq!(
            drain(&mut s),
            vec![Output::Close(CloseReason::ProtocolViolation)]
        );
    }
    // Register on a non-zero stream is a violation too.
    let mut s = EdgeSession::new(CFG, 0);
    let mut reg = register("tok-a");
    reg.stream_id = 3;
    s.handle_envelope(reg, 0, &conn(&registry));
    assert_eq!(
        drain(&mut s),
        vec![Output::Close(CloseReason::ProtocolViolation)]
    );
    assert_eq!(registry.live_count(), 0);
}

#[test]
fn registration_deadline_closes_a_silent_connection() {
    let registry = NodeRegistry::new(Dir);
    let mut s = EdgeSession::new(CFG, 1_000);
    assert_eq!(s.poll_timeout(), Some(11_000));
    s.handle_timeout(10_999, &conn(&registry));
    assert!(drain(&mut s).is_empty());
    s.handle_timeout(11_000, &conn(&registry));
    assert_eq!(
        drain(&mut s),
        vec![Output::Close(CloseReason::RegisterTimeout)]
    );
}

#[test]
fn heartbeat_timeout_closes_and_fences_the_generation() {
    let registry = NodeRegistry::new(Dir);
    let mut s = ready_session(&registry);
    s.handle_timeout(30_000, &conn(&registry));
    assert!(matches!(
        drain(&mut s).as_slice(),
        [Output::Send(Envelope {
            msg: Some(Msg::HeartbeatPing(HeartbeatPing { seq: 1 })),
            ..
        })]
    ));
    s.handle_timeout(74_999, &conn(&registry));
    assert!(drain(&mut s).is_empty());
    s.handle_timeout(75_000, &conn(&registry));
    assert_eq!(
        drain(&mut s),
        vec![
            Output::Event(LifecycleEvent::Disconnected {
                node_id: "a".into(),
                generation: 1,
                reason: CloseReason::HeartbeatTimeout
            }),
            Output::Close(CloseReason::HeartbeatTimeout)
        ]
    );
    assert_eq!(registry.dispatchable("a"), None);

    // The node reconnects: generation 2; a late release of generation 1 does nothing.
    let _again = ready_session(&registry);
    assert_eq!(registry.dispatchable("a"), Some((2, 0)));
    registry.release("a", 1);
    assert_eq!(registry.dispatchable("a"), Some((2, 0)));
}

#[test]
fn pongs_keep_the_link_alive_and_pings_are_answered() {
    let registry = NodeRegistry::new(Dir);
    let mut s = ready_session(&registry);
    let mut now = 0;
    for seq in 1..=10 {
        now += 30_000;
        s.handle_timeout(now, &conn(&registry));
        assert_eq!(drain(&mut s).len(), 1, "one ping");
        s.handle_envelope(
            env(0, Msg::HeartbeatPong(HeartbeatPong { seq })),
            now + 44_000,
            &conn(&registry),
        );
        now += 44_000 - 30_000; // a slow but live peer
    }
    assert!(s.is_ready());
    s.handle_envelope(
        env(0, Msg::HeartbeatPing(HeartbeatPing { seq: 9 })),
        now,
        &conn(&registry),
    );
    assert!(matches!(
        drain(&mut s).as_slice(),
        [Output::Send(Envelope {
            msg: Some(Msg::HeartbeatPong(HeartbeatPong { seq: 9 })),
            ..
        })]
    ));
}

#[test]
fn work_frames_are_delivered_only_when_ready() {
    let registry = NodeRegistry::new(Dir);
    let mut s = EdgeSession::new(CFG, 0);
    s.handle_envelope(register("tok-a"), 0, &conn(&registry));
    drain(&mut s);
    s.handle_envelope(env(5, Msg::RunEvent(Box::default())), 1, &conn(&registry));
    let out = drain(&mut s);
    assert_eq!(
        out.last(),
        Some(&Output::Close(CloseReason::ProtocolViolation))
    );
    assert_eq!(
        registry.live_count(),
        0,
        "the closed generation is released"
    );

    let mut s = ready_session(&registry);
    s.handle_envelope(env(5, Msg::RunEvent(Box::default())), 2, &conn(&registry));
    assert!(matches!(drain(&mut s).as_slice(), [Output::Deliver(_)]));
}

#[test]
fn close_is_reported_once() {
    let registry = NodeRegistry::new(Dir);
    let mut s = ready_session(&registry);
    s.handle_closed(CloseReason::PeerClosed, &conn(&registry));
    s.handle_closed(CloseReason::IoError, &conn(&registry));
    s.handle_timeout(1_000_000, &conn(&registry));
    let out = drain(&mut s);
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!(out[1], Output::Close(CloseReason::PeerClosed));
    assert!(s.is_closed());
}

#[test]
fn a_drain_notice_stops_dispatch_and_keeps_the_connection() {
    let registry = NodeRegistry::new(Dir);
    let mut s = ready_session(&registry);
    assert!(registry.dispatchable("a").is_some());
    let notice = proto::v1::NodeDrainNotice {
        grace_ms: 30_000,
        in_flight: 2,
    };
    s.handle_envelope(env(0, Msg::NodeDrainNotice(notice)), 2, &conn(&registry));
    assert!(drain(&mut s).is_empty(), "no frame, event or close");
    assert!(!s.is_closed());
    assert_eq!(registry.dispatchable("a"), None, "no new work");
    assert_eq!(registry.live_count(), 1, "its streams continue");
    // Frames of open streams are still delivered.
    let event = env(5, Msg::RunEvent(Box::default()));
    s.handle_envelope(event.clone(), 3, &conn(&registry));
    assert_eq!(drain(&mut s), vec![Output::Deliver(event)]);
    // On a work stream it is a protocol violation.
    let notice = proto::v1::NodeDrainNotice::default();
    s.handle_envelope(env(7, Msg::NodeDrainNotice(notice)), 4, &conn(&registry));
    assert!(s.is_closed());
}
