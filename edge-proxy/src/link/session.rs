//! The Edge's side of one node connection, sans-IO.
//!
//! Inputs are decoded envelopes, frame errors, the peer's close and the time;
//! outputs are envelopes to send, lifecycle events, envelopes to deliver to
//! the dispatch layer, and at most one close. The driver in `conn.rs` pumps
//! it; tests drive it directly with a manual `now`.
//!
//! ```text
//!            RegisterRequest ok            NodeReadyRequest ok
//! AwaitRegister ───────────────▶ Registered ──────────────────▶ Ready
//!      │ deadline / bad frame / reject   │ any violation, heartbeat      │
//!      └────────────────────────────────┴──────── timeout, peer close ──┴──▶ Closed(reason)
//! ```
//!
//! Invariants:
//! - Nothing but `RegisterRequest` (on stream 0) is accepted before
//!   registration; anything else closes with `protocol_violation`.
//! - Only `Ready` delivers work frames; the registrar learns of readiness
//!   exactly once and of the end of an accepted generation exactly once.
//! - After `Closed` every input is ignored and no output but the queued ones
//!   is produced.

use std::collections::VecDeque;

use framing::frame::FrameError;
use framing::link::{CloseReason, Heartbeat, HeartbeatAction, HeartbeatConfig};
use proto::Envelope;
use proto::v1::{
    HeartbeatPing, HeartbeatPong, NodeConfigPayload, NodeReadyResponse, RegisterRejectReason,
    RegisterRequest, RegisterResponse, envelope::Msg,
};

use crate::events::LifecycleEvent;

/// Timings of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionConfig {
    /// A new connection must send `RegisterRequest` within this, in ms.
    pub register_timeout_ms: u64,
    /// Heartbeat timings (30 s / 45 s in production).
    pub heartbeat: HeartbeatConfig,
}

/// What registering a node produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Accepted {
    /// The node's id from its record.
    pub node_id: String,
    /// The new connection's generation (strictly increasing per node).
    pub generation: u64,
    /// The config payload for the node.
    pub config: NodeConfigPayload,
}

/// Why registering a node failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// The node, when the token identified one.
    pub node_id: Option<String>,
    /// The closed-set reason sent to the node.
    pub reason: RegisterRejectReason,
    /// Detail for the node's log. Never contains the token.
    pub message: String,
}

/// The registry operations a session needs: token lookup, generation
/// allocation and duplicate detection, readiness, and release.
pub trait Registrar {
    /// Authenticates `request`, claims the node's live slot and builds its
    /// config payload; or says why not. On success the caller owns the
    /// generation until it calls [`release`](Self::release).
    fn register(&self, request: &RegisterRequest) -> Result<Accepted, Rejection>;
    /// Marks `(node_id, generation)` ready (dispatchable). False when that
    /// generation is no longer current.
    fn ready(&self, node_id: &str, generation: u64) -> bool;
    /// Ends `(node_id, generation)`: fenced from now on.
    fn release(&self, node_id: &str, generation: u64, reason: CloseReason);
    /// `(node_id, generation)` announced a drain (`NodeDrainNotice`): no
    /// new work goes to it; its open streams continue.
    fn draining(&self, node_id: &str, generation: u64) {
        let _ = (node_id, generation);
    }
}

/// One output of the session, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// Write this envelope to the node.
    Send(Envelope),
    /// Publish this lifecycle event.
    Event(LifecycleEvent),
    /// A work frame (run event, tunnel frame, command/cancel response) from
    /// the current ready generation, for the dispatch layer.
    Deliver(Envelope),
    /// Flush what was sent before, then close the connection.
    Close(CloseReason),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    AwaitRegister { deadline: u64 },
    Registered { node_id: String, generation: u64 },
    Ready { node_id: String, generation: u64 },
    Closed,
}

/// The Edge's state for one node connection (see the module docs).
#[derive(Debug)]
pub struct EdgeSession {
    config: SessionConfig,
    state: State,
    heartbeat: Option<Heartbeat>,
    out: VecDeque<Output>,
    /// The largest frame the node takes, when it said it gathers
    /// `EnvelopePiece` frames.
    gathers_up_to: Option<usize>,
    /// Whether the node said it writes JSON-escaped texts as they are.
    pastes_escaped: bool,
}

impl EdgeSession {
    /// A session for a connection accepted at `now`.
    pub fn new(config: SessionConfig, now: u64) -> Self {
        Self {
            config,
            state: State::AwaitRegister {
                deadline: now.saturating_add(config.register_timeout_ms),
            },
            heartbeat: None,
            out: VecDeque::new(),
            gathers_up_to: None,
            pastes_escaped: false,
        }
    }

    /// When the registered node gathers a large frame sent in pieces
    /// (`RegisterRequest.reassembles_pieces`), the largest frame it takes
    /// (`usize::MAX` when it named none); `None` for a node that did not
    /// say so, which gets whole frames.
    pub fn gathers_pieces_up_to(&self) -> Option<usize> {
        self.gathers_up_to
    }

    /// Whether the registered node writes a run's JSON-escaped texts as
    /// they are (`RegisterRequest.pastes_escaped_content`); a node that
    /// did not say so gets plain texts.
    pub fn pastes_escaped_content(&self) -> bool {
        self.pastes_escaped
    }

    /// The registered node and its generation, once registered.
    pub fn node(&self) -> Option<(&str, u64)> {
        match &self.state {
            State::Registered {
                node_id,
                generation,
            }
            | State::Ready {
                node_id,
                generation,
            } => Some((node_id, *generation)),
            _ => None,
        }
    }

    /// Whether the node completed readiness on this connection.
    pub fn is_ready(&self) -> bool {
        matches!(self.state, State::Ready { .. })
    }

    /// Whether the session has ended.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }

    /// Round-trip time of the last answered heartbeat, in ms.
    pub fn last_rtt_ms(&self) -> Option<u64> {
        self.heartbeat.as_ref().and_then(Heartbeat::last_rtt_ms)
    }

    /// Handles one decoded envelope from the node.
    pub fn handle_envelope(&mut self, envelope: Envelope, now: u64, registrar: &impl Registrar) {
        let Some(msg) = envelope.msg.as_ref() else {
            return self.close(CloseReason::ProtocolViolation, registrar);
        };
        match (&self.state, msg) {
            (State::Closed, _) => {}
            (State::AwaitRegister { .. }, Msg::RegisterRequest(request))
                if envelope.stream_id == 0 =>
            {
                self.register(request, now, registrar);
            }
            (State::AwaitRegister { .. }, _) => {
                self.close(CloseReason::ProtocolViolation, registrar)
            }
            (_, Msg::HeartbeatPing(HeartbeatPing { seq })) => {
                let pong = Msg::HeartbeatPong(HeartbeatPong { seq: *seq });
                self.send(pong);
            }
            (_, Msg::HeartbeatPong(HeartbeatPong { seq })) => {
                if let Some(hb) = self.heartbeat.as_mut() {
                    hb.on_pong(*seq, now);
                }
            }
            (
                State::Registered {
                    node_id,
                    generation,
                },
                Msg::NodeReadyRequest(_),
            ) => {
                let (node_id, generation) = (node_id.clone(), *generation);
                if registrar.ready(&node_id, generation) {
                    self.send(Msg::NodeReadyResponse(NodeReadyResponse {
                        accepted: true,
                        message: String::new(),
                    }));
                    self.out.push_back(Output::Event(LifecycleEvent::Ready {
                        node_id: node_id.clone(),
                        generation,
                    }));
                    self.state = State::Ready {
                        node_id,
                        generation,
                    };
                } else {
                    // The generation was fenced under us (a newer one won).
                    self.send(Msg::NodeReadyResponse(NodeReadyResponse {
                        accepted: false,
                        message: "connection generation is no longer current".into(),
                    }));
                    self.close(CloseReason::ProtocolViolation, registrar);
                }
            }
            (
                State::Ready { .. },
                Msg::RunEvent(_)
                | Msg::ProviderTunnelFrame(_)
                | Msg::NodeCommandResponse(_)
                | Msg::CancelResponse(_)
                | Msg::WindowUpdate(_),
            ) if envelope.stream_id != 0 => self.out.push_back(Output::Deliver(envelope)),
            (
                State::Ready {
                    node_id,
                    generation,
                },
                Msg::NodeDrainNotice(notice),
            ) if envelope.stream_id == 0 => {
                tracing::info!(
                    event = "node_draining",
                    node_id = %node_id,
                    generation = *generation,
                    grace_ms = notice.grace_ms,
                    in_flight = notice.in_flight,
                    "node_draining"
                );
                registrar.draining(node_id, *generation);
            }
            _ => self.close(CloseReason::ProtocolViolation, registrar),
        }
    }

    /// Handles a frame the codec refused: the link's framing is lost.
    pub fn handle_frame_error(&mut self, _error: &FrameError, registrar: &impl Registrar) {
        self.close(CloseReason::FrameError, registrar);
    }

    /// Handles the end of the connection seen by the driver (`PeerClosed`,
    /// `IoError`) or asked for by the process (`Shutdown`).
    pub fn handle_closed(&mut self, reason: CloseReason, registrar: &impl Registrar) {
        self.close(reason, registrar);
    }

    /// Advances timers to `now`: registration deadline, heartbeat pings and
    /// the heartbeat wait.
    pub fn handle_timeout(&mut self, now: u64, registrar: &impl Registrar) {
        match self.state {
            State::Closed => {}
            State::AwaitRegister { deadline } => {
                if now >= deadline {
                    self.close(CloseReason::RegisterTimeout, registrar);
                }
            }
            State::Registered { .. } | State::Ready { .. } => {
                let Some(hb) = self.heartbeat.as_mut() else {
                    return;
                };
                match hb.poll(now) {
                    HeartbeatAction::Idle => {}
                    HeartbeatAction::SendPing(seq) => {
                        self.send(Msg::HeartbeatPing(HeartbeatPing { seq }))
                    }
                    HeartbeatAction::TimedOut => {
                        self.close(CloseReason::HeartbeatTimeout, registrar)
                    }
                }
            }
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) next has work, in ms.
    pub fn poll_timeout(&self) -> Option<u64> {
        match &self.state {
            State::Closed => None,
            State::AwaitRegister { deadline } => Some(*deadline),
            State::Registered { .. } | State::Ready { .. } => {
                self.heartbeat.as_ref().map(Heartbeat::next_deadline)
            }
        }
    }

    /// The next output, in order.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    fn register(&mut self, request: &RegisterRequest, now: u64, registrar: &impl Registrar) {
        match registrar.register(request) {
            Ok(Accepted {
                node_id,
                generation,
                config,
            }) => {
                self.send(Msg::RegisterResponse(Box::new(RegisterResponse {
                    accepted: true,
                    node_id: node_id.clone(),
                    generation,
                    config: Some(config),
                    ..Default::default()
                })));
                self.out
                    .push_back(Output::Event(LifecycleEvent::Registered {
                        node_id: node_id.clone(),
                        generation,
                    }));
                self.heartbeat = Some(Heartbeat::new(self.config.heartbeat, now));
                self.pastes_escaped = request.pastes_escaped_content;
                self.gathers_up_to =
                    request
                        .reassembles_pieces
                        .then_some(match request.max_frame_len {
                            0 => usize::MAX,
                            max => max as usize,
                        });
                self.state = State::Registered {
                    node_id,
                    generation,
                };
            }
            Err(Rejection {
                node_id,
                reason,
                message,
            }) => {
                self.send(Msg::RegisterResponse(Box::new(RegisterResponse {
                    accepted: false,
                    reject_reason: reason as i32,
                    message,
                    ..Default::default()
                })));
                self.out
                    .push_back(Output::Event(LifecycleEvent::Rejected { node_id, reason }));
                self.close(CloseReason::Rejected, registrar);
            }
        }
    }

    fn send(&mut self, msg: Msg) {
        self.out.push_back(Output::Send(Envelope {
            stream_id: 0,
            msg: Some(msg),
        }));
    }

    fn close(&mut self, reason: CloseReason, registrar: &impl Registrar) {
        match std::mem::replace(&mut self.state, State::Closed) {
            State::Closed => return,
            State::Registered {
                node_id,
                generation,
            }
            | State::Ready {
                node_id,
                generation,
            } => {
                registrar.release(&node_id, generation, reason);
                self.out
                    .push_back(Output::Event(LifecycleEvent::Disconnected {
                        node_id,
                        generation,
                        reason,
                    }));
            }
            State::AwaitRegister { .. } => {}
        }
        self.heartbeat = None;
        self.out.push_back(Output::Close(reason));
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
