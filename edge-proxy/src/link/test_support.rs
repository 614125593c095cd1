//! What the link's in-process tests share: a directory whose tokens are the
//! node ids ([`Dir`]), and the shared state of a core with no sockets.

use std::sync::Arc;

use super::session::SessionConfig;
use super::{LinkServerConfig, LinkShared};
use crate::events::EventBus;
use crate::registry::NodeRegistry;
pub(super) use crate::registry::TokenIsNodeId as Dir;

/// A core's shared state over `registry`, with default timings.
pub(super) fn link_shared(registry: &Arc<NodeRegistry<Dir>>) -> Arc<LinkShared<Dir>> {
    Arc::new(LinkShared {
        registry: Arc::clone(registry),
        bus: EventBus::new(),
        config: LinkServerConfig {
            session: SessionConfig {
                register_timeout_ms: 1_000,
                heartbeat: Default::default(),
            },
            max_frame_len: 1 << 20,
            piece_len: 64 * 1024,
            tick_ms: 10,
        },
        clock: Default::default(),
        security: Default::default(),
    })
}
