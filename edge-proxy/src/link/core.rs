//! One core's share of the node socket: its connections, their timers (one
//! entry each on the core's [`CoreTimers`], whose ticker drives them), and
//! the inbox through which other cores open streams on its connections.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use foldhash::HashMap;
use framing::frame::FrameEncoder;
use framing::timer::{CoreTimers, TimerKey};

use super::LinkShared;
use super::conn::Conn;
use super::inbox::CoreMsg;
use super::streams::StreamItem;
use crate::health::shard::OverlayShard;
use crate::registry::NodeDirectory;

/// Per-core state shared by the core's connection tasks (never across cores).
pub(crate) struct Core<D> {
    pub(crate) id: usize,
    pub(crate) shared: Arc<LinkShared<D>>,
    /// The connections' timers and the core's clock. The ticker sleeps
    /// until the next expiry (nothing here stamps the coarse clock), at most
    /// a tick with a manual clock.
    pub(crate) timers: Rc<CoreTimers<Conn<D>>>,
    /// Encodes every control frame this core sends: one scratch block per
    /// core, not per connection.
    pub(crate) encoder: RefCell<FrameEncoder>,
    /// The ready connection of each node homed here, by node id.
    ready: RefCell<HashMap<String, Rc<Conn<D>>>>,
    /// The runtime health overlay of the providers homed here: this core
    /// is its only writer.
    overlays: RefCell<OverlayShard>,
}

impl<D: NodeDirectory + 'static> Core<D> {
    pub(crate) fn new(id: usize, shared: Arc<LinkShared<D>>) -> Rc<Self> {
        let timers = CoreTimers::new(&shared.clock, shared.config.tick_ms);
        let encoder = RefCell::new(FrameEncoder::new(shared.config.max_frame_len));
        Rc::new(Self {
            id,
            shared,
            timers,
            encoder,
            ready: RefCell::new(HashMap::default()),
            overlays: RefCell::new(OverlayShard::new()),
        })
    }

    /// `conn` completed readiness as `node_id`: streams may open on it.
    pub(crate) fn add_ready(&self, node_id: &str, conn: &Rc<Conn<D>>) {
        self.ready
            .borrow_mut()
            .insert(node_id.to_owned(), Rc::clone(conn));
    }

    /// `node_id`'s connection of `generation` ended.
    pub(crate) fn remove_ready(&self, node_id: &str, generation: u64) {
        let mut ready = self.ready.borrow_mut();
        if ready
            .get(node_id)
            .is_some_and(|conn| conn.generation() == Some(generation))
        {
            ready.remove(node_id);
        }
    }

    /// The ready connection of exactly `(node_id, generation)`.
    fn current(&self, node_id: &str, generation: u64) -> Option<Rc<Conn<D>>> {
        self.ready
            .borrow()
            .get(node_id)
            .filter(|conn| conn.generation() == Some(generation))
            .cloned()
    }

    /// Serves this core's inbox forever.
    pub(crate) async fn run_inbox(
        self: Rc<Self>,
        mut inbox: tokio::sync::mpsc::UnboundedReceiver<CoreMsg>,
    ) {
        while let Some(msg) = inbox.recv().await {
            self.handle(msg);
        }
    }

    pub(super) fn handle(&self, msg: CoreMsg) {
        match msg {
            CoreMsg::Open {
                node_id,
                generation,
                stream_id,
                kind,
                run_id,
                msg,
                sink,
            } => {
                let opened = match self.current(&node_id, generation) {
                    Some(conn) => conn.open_stream(stream_id, kind, run_id, msg, sink),
                    None => Err(sink),
                };
                if let Err(sink) = opened {
                    let _ = sink.send(StreamItem::NotSent);
                }
            }
            CoreMsg::Send {
                node_id,
                generation,
                stream_id,
                msg,
            } => {
                if let Some(conn) = self.current(&node_id, generation) {
                    conn.send_on(stream_id, msg);
                }
            }
            CoreMsg::Close {
                node_id,
                generation,
                stream_id,
            } => {
                if let Some(conn) = self.current(&node_id, generation) {
                    conn.close_stream(stream_id);
                }
            }
            CoreMsg::Disconnect {
                node_id,
                generation,
                reason,
            } => {
                if let Some(conn) = self.current(&node_id, generation) {
                    conn.disconnect(reason);
                }
            }
            CoreMsg::Health(update) => {
                let holds = self.current(update.node_id(), update.generation).is_some();
                self.overlays.borrow_mut().receive(holds, &update);
            }
        }
    }

    /// Arms, moves or disarms a connection's single timer entry.
    pub(crate) fn arm(
        &self,
        conn: &Rc<Conn<D>>,
        key: Option<TimerKey>,
        deadline: Option<u64>,
    ) -> Option<TimerKey> {
        self.timers.arm(key, deadline, || Rc::clone(conn))
    }
}
