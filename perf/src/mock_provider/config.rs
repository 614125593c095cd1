//! The mock provider's configuration: knob defaults and static facts.

use super::knobs::Knobs;

/// How a mock provider instance behaves unless a request says otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MockConfig {
    /// Knob defaults; each request may override them (see [`Knobs`]).
    pub knobs: Knobs,
    /// Model names listed by `GET /v1/models`, `GET /api/tags` and `GET /api/ps`
    /// (what the Node's exact-target health probe looks for). Generation
    /// routes accept any model and echo it back. The default lists
    /// `mock-model` and `m`, the short target the e2e stacks configure.
    pub models: Vec<String>,
    /// Whether `GET /health` starts out answering 503.
    pub unhealthy: bool,
}

impl Default for MockConfig {
    fn default() -> Self {
        Self {
            knobs: Knobs::default(),
            models: vec!["mock-model".to_owned(), "m".to_owned()],
            unhealthy: false,
        }
    }
}
