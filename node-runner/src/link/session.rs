//! The Node's side of its link to the Edge, sans-IO.
//!
//! ```text
//!  new ──Send(Register)──▶ Registering ──RegisterResponse ok──▶ AwaitReady ──NodeReadyResponse ok──▶ Ready
//!                              │ rejected ─▶ Rejected{permanent?} + Close(rejected)
//!                              │ deadline ─▶ Close(register_timeout)        heartbeat / violation / close ─▶ Closed
//! ```
//!
//! Time is an input (`now` in ms). The driver pumps [`NodeSession::poll_output`]
//! after every input and arms one timer at [`NodeSession::poll_timeout`].

use std::collections::VecDeque;

use framing::frame::FrameError;
use framing::link::{CloseReason, Heartbeat, HeartbeatAction, HeartbeatConfig};
use proto::Envelope;
use proto::v1::{
    HeartbeatPing, HeartbeatPong, NodeConfigPayload, NodeReadyRequest, RegisterRejectReason,
    RegisterRequest, RegisterResponse, envelope::Msg,
};

/// Timings and identity of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSessionConfig {
    /// The node's secret token.
    pub token: String,
    /// Random id of this process, stable across reconnects.
    pub instance_id: String,
    /// Largest frame this Node accepts, announced to the Edge.
    pub max_frame_len: u32,
    /// How long registration and readiness may take, in ms.
    pub handshake_timeout_ms: u64,
    /// Heartbeat timings (30 s / 45 s in production).
    pub heartbeat: HeartbeatConfig,
}

/// One output of the session, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeOutput {
    /// Write this envelope to the Edge.
    Send(Envelope),
    /// The Edge accepted the registration: apply this config.
    Registered {
        /// The node id from the Edge's record.
        node_id: String,
        /// This connection's generation.
        generation: u64,
        /// The node's serving configuration.
        config: NodeConfigPayload,
    },
    /// Readiness completed: the Edge may now send work.
    Ready,
    /// The Edge refused the registration.
    Rejected {
        /// The closed-set reason.
        reason: RegisterRejectReason,
        /// The Edge's detail.
        message: String,
        /// Whether retrying cannot help (unknown token, identity mismatch):
        /// the supervisor stops instead of hammering the Edge.
        permanent: bool,
    },
    /// A work frame for the run manager / tunnel handler / commands.
    Deliver(Envelope),
    /// Flush what was sent before, then close the connection.
    Close(CloseReason),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Registering { deadline: u64 },
    AwaitReady { deadline: u64 },
    Ready,
    Closed,
}

/// The Node's link state for one connection (see the module docs).
#[derive(Debug)]
pub struct NodeSession {
    config: NodeSessionConfig,
    state: State,
    heartbeat: Option<Heartbeat>,
    out: VecDeque<NodeOutput>,
}

impl NodeSession {
    /// A session for a connection established at `now`; its first output is
    /// the `RegisterRequest`.
    pub fn new(config: NodeSessionConfig, now: u64) -> Self {
        Self::with_lease_key(config, now, None)
    }

    /// As [`new`](Self::new), registering `lease_public_key` (F29: the
    /// Node's X25519 key that credential leases are sealed to).
    pub fn with_lease_key(
        config: NodeSessionConfig,
        now: u64,
        lease_public_key: Option<[u8; 32]>,
    ) -> Self {
        let register = Msg::RegisterRequest(Box::new(RegisterRequest {
            token: config.token.clone(),
            node_version: env!("CARGO_PKG_VERSION").into(),
            instance_id: config.instance_id.clone(),
            max_frame_len: config.max_frame_len,
            lease_public_key: lease_public_key
                .map(|key| bytes::Bytes::copy_from_slice(&key))
                .unwrap_or_default(),
            // The link reader's FrameDecoder gathers pieces.
            reassembles_pieces: true,
            // adapter::request_body writes escaped texts as they are.
            pastes_escaped_content: true,
        }));
        let deadline = now.saturating_add(config.handshake_timeout_ms);
        let mut session = Self {
            config,
            state: State::Registering { deadline },
            heartbeat: None,
            out: VecDeque::new(),
        };
        session.send(register);
        session
    }

    /// Whether readiness completed on this connection.
    pub fn is_ready(&self) -> bool {
        self.state == State::Ready
    }

    /// Whether the session has ended.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// Round-trip time of the last answered heartbeat, in ms.
    pub fn last_rtt_ms(&self) -> Option<u64> {
        self.heartbeat.as_ref().and_then(Heartbeat::last_rtt_ms)
    }

    /// Handles one decoded envelope from the Edge.
    pub fn handle_envelope(&mut self, envelope: Envelope, now: u64) {
        let Some(msg) = envelope.msg.as_ref() else {
            return self.close(CloseReason::ProtocolViolation);
        };
        match (&self.state, msg) {
            (State::Closed, _) => {}
            (State::Registering { .. }, Msg::RegisterResponse(response))
                if envelope.stream_id == 0 =>
            {
                self.on_register_response(response.as_ref().clone(), now);
            }
            (State::Registering { .. }, _) => self.close(CloseReason::ProtocolViolation),
            (_, Msg::HeartbeatPing(HeartbeatPing { seq })) => {
                self.send(Msg::HeartbeatPong(HeartbeatPong { seq: *seq }));
            }
            (_, Msg::HeartbeatPong(HeartbeatPong { seq })) => {
                if let Some(hb) = self.heartbeat.as_mut() {
                    hb.on_pong(*seq, now);
                }
            }
            (State::AwaitReady { .. }, Msg::NodeReadyResponse(response)) => {
                if response.accepted {
                    self.state = State::Ready;
                    self.out.push_back(NodeOutput::Ready);
                } else {
                    self.close(CloseReason::ProtocolViolation);
                }
            }
            (
                State::Ready,
                Msg::RunRequest(_)
                | Msg::ProviderTunnelRequest(_)
                | Msg::CancelRequest(_)
                | Msg::NodeCommandRequest(_)
                | Msg::WindowUpdate(_),
            ) if envelope.stream_id != 0 => self.out.push_back(NodeOutput::Deliver(envelope)),
            // F29: connection-level revocations, applied by the link.
            (State::Ready, Msg::LeaseRevocations(_)) if envelope.stream_id == 0 => {
                self.out.push_back(NodeOutput::Deliver(envelope));
            }
            // An edge.yaml reload's refreshed payload, applied by the link.
            (State::Ready, Msg::NodeConfigUpdate(_)) if envelope.stream_id == 0 => {
                self.out.push_back(NodeOutput::Deliver(envelope));
            }
            _ => self.close(CloseReason::ProtocolViolation),
        }
    }

    /// Handles a frame the codec refused.
    pub fn handle_frame_error(&mut self, _error: &FrameError) {
        self.close(CloseReason::FrameError);
    }

    /// Handles the end of the connection (`PeerClosed`, `IoError`, `Shutdown`).
    pub fn handle_closed(&mut self, reason: CloseReason) {
        self.close(reason);
    }

    /// Advances timers to `now`.
    pub fn handle_timeout(&mut self, now: u64) {
        match self.state {
            State::Closed => {}
            State::Registering { deadline } | State::AwaitReady { deadline } if now >= deadline => {
                self.close(CloseReason::RegisterTimeout);
            }
            _ => {
                let Some(hb) = self.heartbeat.as_mut() else {
                    return;
                };
                match hb.poll(now) {
                    HeartbeatAction::Idle => {}
                    HeartbeatAction::SendPing(seq) => {
                        self.send(Msg::HeartbeatPing(HeartbeatPing { seq }))
                    }
                    HeartbeatAction::TimedOut => self.close(CloseReason::HeartbeatTimeout),
                }
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has work, in ms.
    pub fn poll_timeout(&self) -> Option<u64> {
        let heartbeat = self.heartbeat.as_ref().map(Heartbeat::next_deadline);
        match self.state {
            State::Closed => None,
            State::Registering { deadline } => Some(deadline),
            State::AwaitReady { deadline } => Some(heartbeat.map_or(deadline, |h| h.min(deadline))),
            State::Ready => heartbeat,
        }
    }

    /// The next output, in order.
    pub fn poll_output(&mut self) -> Option<NodeOutput> {
        self.out.pop_front()
    }

    fn on_register_response(&mut self, response: RegisterResponse, now: u64) {
        if !response.accepted {
            let reason = RegisterRejectReason::try_from(response.reject_reason).unwrap_or_default();
            let permanent = matches!(
                reason,
                RegisterRejectReason::UnknownToken
                    | RegisterRejectReason::IdentityMismatch
                    // F29: this node's lease key is not the pinned one.
                    | RegisterRejectReason::LeaseKeyMismatch
            );
            self.out.push_back(NodeOutput::Rejected {
                reason,
                message: response.message,
                permanent,
            });
            return self.close(CloseReason::Rejected);
        }
        let Some(config) = response.config else {
            return self.close(CloseReason::ProtocolViolation);
        };
        let revision = config.revision;
        self.out.push_back(NodeOutput::Registered {
            node_id: response.node_id,
            generation: response.generation,
            config,
        });
        self.send(Msg::NodeReadyRequest(NodeReadyRequest {
            config_revision: revision,
        }));
        self.heartbeat = Some(Heartbeat::new(self.config.heartbeat, now));
        self.state = State::AwaitReady {
            deadline: now.saturating_add(self.config.handshake_timeout_ms),
        };
    }

    fn send(&mut self, msg: Msg) {
        self.out.push_back(NodeOutput::Send(Envelope {
            stream_id: 0,
            msg: Some(msg),
        }));
    }

    fn close(&mut self, reason: CloseReason) {
        if std::mem::replace(&mut self.state, State::Closed) == State::Closed {
            return;
        }
        self.heartbeat = None;
        self.out.push_back(NodeOutput::Close(reason));
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
