use framing::link::{CloseReason, HeartbeatConfig};
use proto::Envelope;
use proto::v1::{
    HeartbeatPing, HeartbeatPong, NodeConfigPayload, NodeReadyResponse, RegisterRejectReason,
    RegisterResponse, envelope::Msg,
};

use super::*;

fn config() -> NodeSessionConfig {
    NodeSessionConfig {
        token: "secret".into(),
        instance_id: "i-1".into(),
        max_frame_len: 1 << 20,
        handshake_timeout_ms: 10_000,
        heartbeat: HeartbeatConfig::default(),
    }
}

fn env(stream_id: u64, msg: Msg) -> Envelope {
    Envelope {
        stream_id,
        msg: Some(msg),
    }
}

fn drain(s: &mut NodeSession) -> Vec<NodeOutput> {
    std::iter::from_fn(|| s.poll_output()).collect()
}

fn accepted() -> Envelope {
    env(
        0,
        Msg::RegisterResponse(Box::new(RegisterResponse {
            accepted: true,
            node_id: "node-1".into(),
            generation: 4,
            config: Some(NodeConfigPayload {
                revision: 9,
                ..Default::default()
            }),
            ..Default::default()
        })),
    )
}

fn ready_session() -> NodeSession {
    let mut s = NodeSession::new(config(), 0);
    s.handle_envelope(accepted(), 1);
    s.handle_envelope(
        env(
            0,
            Msg::NodeReadyResponse(NodeReadyResponse {
                accepted: true,
                message: String::new(),
            }),
        ),
        2,
    );
    drain(&mut s);
    assert!(s.is_ready());
    s
}

#[test]
fn registers_then_readies() {
    let mut s = NodeSession::new(config(), 0);
    let out = drain(&mut s);
    assert!(matches!(
        &out[..],
        [NodeOutput::Send(Envelope { stream_id: 0, msg: Some(Msg::RegisterRequest(r)) })]
            if r.token == "secret" && r.instance_id == "i-1" && r.max_frame_len == 1 << 20
                // Its link reader gathers a long request sent in pieces.
                && r.reassembles_pieces
    ));
    s.handle_envelope(accepted(), 5);
    let out = drain(&mut s);
    assert!(
        matches!(&out[0], NodeOutput::Registered { node_id, generation: 4, config } if node_id == "node-1" && config.revision == 9)
    );
    assert!(matches!(
        &out[1],
        NodeOutput::Send(Envelope { msg: Some(Msg::NodeReadyRequest(r)), .. }) if r.config_revision == 9
    ));
    assert!(!s.is_ready());
    s.handle_envelope(
        env(
            0,
            Msg::NodeReadyResponse(NodeReadyResponse {
                accepted: true,
                message: String::new(),
            }),
        ),
        6,
    );
    assert_eq!(drain(&mut s), vec![NodeOutput::Ready]);
}

#[test]
fn unknown_token_is_a_permanent_rejection_duplicate_is_not() {
    for (reason, permanent) in [
        (RegisterRejectReason::UnknownToken, true),
        (RegisterRejectReason::DuplicateConnection, false),
        (RegisterRejectReason::ConfigBuildFailed, false),
    ] {
        let mut s = NodeSession::new(config(), 0);
        drain(&mut s);
        s.handle_envelope(
            env(
                0,
                Msg::RegisterResponse(Box::new(RegisterResponse {
                    accepted: false,
                    reject_reason: reason as i32,
                    message: "no".into(),
                    ..Default::default()
                })),
            ),
            1,
        );
        let out = drain(&mut s);
        assert_eq!(
            out,
            vec![
                NodeOutput::Rejected {
                    reason,
                    message: "no".into(),
                    permanent
                },
                NodeOutput::Close(CloseReason::Rejected)
            ]
        );
    }
}

#[test]
fn handshake_deadline() {
    let mut s = NodeSession::new(config(), 0);
    drain(&mut s);
    assert_eq!(s.poll_timeout(), Some(10_000));
    s.handle_timeout(9_999);
    assert!(drain(&mut s).is_empty());
    s.handle_timeout(10_000);
    assert_eq!(
        drain(&mut s),
        vec![NodeOutput::Close(CloseReason::RegisterTimeout)]
    );
}

#[test]
fn work_before_ready_is_a_violation_and_after_is_delivered() {
    let mut s = NodeSession::new(config(), 0);
    s.handle_envelope(accepted(), 1);
    drain(&mut s);
    s.handle_envelope(env(3, Msg::RunRequest(Box::default())), 2);
    assert_eq!(
        drain(&mut s),
        vec![NodeOutput::Close(CloseReason::ProtocolViolation)]
    );

    let mut s = ready_session();
    s.handle_envelope(env(3, Msg::RunRequest(Box::default())), 3);
    assert!(matches!(drain(&mut s).as_slice(), [NodeOutput::Deliver(_)]));
}

#[test]
fn heartbeat_both_ways() {
    let mut s = ready_session();
    s.handle_envelope(env(0, Msg::HeartbeatPing(HeartbeatPing { seq: 3 })), 10);
    assert!(matches!(
        drain(&mut s).as_slice(),
        [NodeOutput::Send(Envelope {
            msg: Some(Msg::HeartbeatPong(HeartbeatPong { seq: 3 })),
            ..
        })]
    ));
    s.handle_timeout(30_001);
    assert!(matches!(
        drain(&mut s).as_slice(),
        [NodeOutput::Send(Envelope {
            msg: Some(Msg::HeartbeatPing(HeartbeatPing { seq: 1 })),
            ..
        })]
    ));
    s.handle_timeout(75_000);
    assert!(drain(&mut s).is_empty());
    s.handle_timeout(75_001);
    assert_eq!(
        drain(&mut s),
        vec![NodeOutput::Close(CloseReason::HeartbeatTimeout)]
    );
    s.handle_closed(CloseReason::PeerClosed);
    assert!(drain(&mut s).is_empty(), "closed once");
}
