//! `edge.yaml` reload on `SIGHUP`.
//!
//! The new file is parsed and validated exactly as at start. An invalid
//! file changes nothing: the old config keeps serving and
//! `edge_config_reload_rejected` names the failing field. A valid one is
//! applied:
//!
//! - **Tokens and payloads**: the registry's directory is replaced, so the
//!   next registration authenticates with the new tokens and gets the new
//!   payload.
//! - **Model groups and providers**: the pools are rebuilt
//!   ([`crate::pool::Pools::reload`]). Unchanged providers keep their load
//!   and health overlay; leases already taken finish and release into the
//!   provider they were taken on; queued requests re-resolve.
//! - **Removed nodes** are disconnected (close reason `shutdown`), which
//!   ends their in-flight work with a clean terminal error.
//! - **Changed nodes** whose providers are the same adapters in the same
//!   order stay connected: their rebuilt payload is pushed on the live link
//!   (`NodeConfigUpdate`); the Node applies it to new work, in-flight work
//!   keeps its adapter. Edge-side settings (capacity, stall and request
//!   timeouts, groups) apply to the next admission at once. A changed node
//!   whose provider set changed (added, removed, reordered) is disconnected
//!   (`shutdown`) and re-registers with the new payload.
//! - `listen` and `workers` need a restart; a change is logged and ignored.
//!
//! `/metrics` follows: token counters re-labelled for the new pairs
//! (kept pairs keep counting), `iop_edge_config_reloads_total{result}`.
//! `edge_config_reloaded` logs the counts.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::Ordering;

use framing::link::CloseReason;
use proto::v1::NodeConfigUpdate;
use proto::v1::envelope::Msg;

use crate::config::EdgeConfig;
use crate::link::inbox::CoreMsg;
use crate::server::EdgeServer;

/// What a reload changes, by id (sorted).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigDiff {
    /// Node ids only in the new config.
    pub nodes_added: Vec<String>,
    /// Node ids in both whose providers differ.
    pub nodes_changed: Vec<String>,
    /// Of `nodes_changed`, those whose provider set (adapter names, in
    /// order) differs: they must re-register.
    pub nodes_reshaped: Vec<String>,
    /// Node ids only in the old config.
    pub nodes_removed: Vec<String>,
    /// Model group names only in the new config.
    pub groups_added: Vec<String>,
    /// Model group names in both whose target, providers or weights differ.
    pub groups_changed: Vec<String>,
    /// Model group names only in the old config.
    pub groups_removed: Vec<String>,
    /// `listen` or `workers` changed (needs a restart; ignored).
    pub restart_only_changed: bool,
}

impl ConfigDiff {
    /// The differences from `old` to `new`.
    pub fn between(old: &EdgeConfig, new: &EdgeConfig) -> Self {
        let old_nodes: BTreeSet<&str> = old.nodes().into_iter().map(|n| n.id.as_str()).collect();
        let new_nodes: BTreeSet<&str> = new.nodes().into_iter().map(|n| n.id.as_str()).collect();
        let nodes_changed: Vec<String> = old_nodes
            .intersection(&new_nodes)
            .filter(|id| {
                let a = old.nodes().get(id).map(|n| &n.providers);
                let b = new.nodes().get(id).map(|n| &n.providers);
                a != b
            })
            .map(|id| (*id).to_owned())
            .collect();
        let adapters = |config: &EdgeConfig, id: &str| -> Vec<String> {
            config.nodes().get(id).map_or_else(Vec::new, |n| {
                n.providers.iter().map(|p| p.adapter.clone()).collect()
            })
        };
        let nodes_reshaped = nodes_changed
            .iter()
            .filter(|id| adapters(old, id) != adapters(new, id))
            .cloned()
            .collect();
        let old_groups: BTreeSet<&str> =
            old.model_groups().iter().map(|g| g.name.as_str()).collect();
        let new_groups: BTreeSet<&str> =
            new.model_groups().iter().map(|g| g.name.as_str()).collect();
        let groups_changed = old_groups
            .intersection(&new_groups)
            .filter(|name| old.model_group(name) != new.model_group(name))
            .map(|name| (*name).to_owned())
            .collect();
        Self {
            nodes_added: owned(new_nodes.difference(&old_nodes)),
            nodes_changed,
            nodes_reshaped,
            nodes_removed: owned(old_nodes.difference(&new_nodes)),
            groups_added: owned(new_groups.difference(&old_groups)),
            groups_changed,
            groups_removed: owned(old_groups.difference(&new_groups)),
            restart_only_changed: old.listen() != new.listen() || old.workers() != new.workers(),
        }
    }
}

fn owned<'a>(ids: impl Iterator<Item = &'a &'a str>) -> Vec<String> {
    ids.map(|id| (*id).to_owned()).collect()
}

/// Loads `path` and applies it to `server` (see the module docs). Returns
/// the applied diff, or the validation error (the old config stays).
pub fn reload_server(server: &EdgeServer, path: &Path) -> Result<ConfigDiff, String> {
    let origin = path.display().to_string();
    let new = match EdgeConfig::load(path) {
        Ok(config) => config,
        Err(error) => {
            server
                .metrics
                .ops
                .reloads_rejected
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                event = "edge_config_reload_rejected",
                origin = %origin,
                error = %error,
                "edge_config_reload_rejected"
            );
            return Err(error.to_string());
        }
    };
    for warning in new.warnings() {
        tracing::warn!(origin = %origin, "{warning}");
    }
    let old = server.registry.directory();
    let diff = ConfigDiff::between(&old, &new);
    if diff.restart_only_changed {
        tracing::warn!(
            event = "edge_config_restart_required",
            origin = %origin,
            "listen and workers changes take effect at the next start; kept as they are"
        );
    }
    server.pools.reload(&new);
    server.metrics.reload(&new);
    server
        .metrics
        .ops
        .reloads_applied
        .fetch_add(1, Ordering::Relaxed);
    server.registry.replace_directory(new);
    let mut disconnected = 0;
    for status in server.registry.status() {
        if (diff.nodes_removed.contains(&status.node_id)
            || diff.nodes_reshaped.contains(&status.node_id))
            && super::disconnect(
                server,
                &status.node_id,
                status.generation,
                status.home_core,
                CloseReason::Shutdown,
            )
        {
            disconnected += 1;
        }
    }
    let refreshed = push_payloads(server, &diff);
    tracing::info!(
        event = "edge_config_reloaded",
        origin = %origin,
        nodes_added = diff.nodes_added.len(),
        nodes_changed = diff.nodes_changed.len(),
        nodes_removed = diff.nodes_removed.len(),
        groups_added = diff.groups_added.len(),
        groups_changed = diff.groups_changed.len(),
        groups_removed = diff.groups_removed.len(),
        nodes_disconnected = disconnected,
        nodes_refreshed = refreshed,
        "edge_config_reloaded"
    );
    Ok(diff)
}

/// Pushes the rebuilt payload to every changed, connected node whose
/// provider set is unchanged; returns how many were sent one.
fn push_payloads(server: &EdgeServer, diff: &ConfigDiff) -> usize {
    let mut pushed = 0;
    for node_id in &diff.nodes_changed {
        if diff.nodes_reshaped.contains(node_id) {
            continue;
        }
        match server.registry.refreshed_payload(node_id) {
            None => {}
            Some(Err(why)) => tracing::warn!(
                node_id = %node_id,
                error = %why,
                "refreshed payload failed to build; the node keeps its config until it re-registers"
            ),
            Some(Ok((generation, home_core, payload))) => {
                let sent = server.core_inboxes.get(home_core).is_some_and(|inbox| {
                    inbox
                        .send(CoreMsg::Send {
                            node_id: std::sync::Arc::from(node_id.as_str()),
                            generation,
                            stream_id: 0,
                            msg: Msg::NodeConfigUpdate(Box::new(NodeConfigUpdate {
                                config: Some(payload),
                            })),
                        })
                        .is_ok()
                });
                pushed += usize::from(sent);
            }
        }
    }
    pushed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra_node: &str, groups: &str) -> EdgeConfig {
        let text = format!(
            r#"
nodes:
  - id: a
    token: tok-a-0123456789abcdef
    providers:
      - id: pa
        kind: openai_compat
        base_url: http://127.0.0.1:9
        targets: [m]
{extra_node}
model_groups:
{groups}
"#
        );
        EdgeConfig::from_yaml_str(&text, "test").unwrap()
    }

    const NODE_B: &str = r#"  - id: b
    token: tok-b-0123456789abcdef
    providers:
      - id: pb
        kind: openai_compat
        base_url: http://127.0.0.1:9
        targets: [m]"#;

    #[test]
    fn an_identical_config_changes_nothing() {
        let a = config(NODE_B, "  - name: m\n    providers: [pa]");
        let b = config(NODE_B, "  - name: m\n    providers: [pa]");
        assert_eq!(ConfigDiff::between(&a, &b), ConfigDiff::default());
    }

    #[test]
    fn nodes_and_groups_added_changed_removed() {
        let old = config(
            NODE_B,
            "  - name: m\n    providers: [pa]\n  - name: gone\n    target: m\n    providers: [pb]",
        );
        let new = config(
            "",
            "  - name: m\n    providers: [pa]\n  - name: fresh\n    target: m\n    providers: [pa]",
        );
        let diff = ConfigDiff::between(&old, &new);
        assert_eq!(diff.nodes_removed, vec!["b".to_owned()]);
        assert!(diff.nodes_added.is_empty() && diff.nodes_changed.is_empty());
        assert_eq!(diff.groups_added, vec!["fresh".to_owned()]);
        assert_eq!(diff.groups_removed, vec!["gone".to_owned()]);
        assert!(diff.groups_changed.is_empty());
        let back = ConfigDiff::between(&new, &old);
        assert_eq!(back.nodes_added, vec!["b".to_owned()]);
    }

    #[test]
    fn a_changed_provider_setting_changes_its_node() {
        let old = config(NODE_B, "  - name: m\n    providers: [pa, pb]");
        let changed = NODE_B.replace("targets: [m]", "targets: [m]\n        max_concurrency: 3");
        let new = config(&changed, "  - name: m\n    providers: [pb]");
        let diff = ConfigDiff::between(&old, &new);
        assert_eq!(diff.nodes_changed, vec!["b".to_owned()]);
        assert!(
            diff.nodes_reshaped.is_empty(),
            "same adapters: pushed in place"
        );
        assert_eq!(diff.groups_changed, vec!["m".to_owned()]);
        assert!(!diff.restart_only_changed);
    }

    #[test]
    fn an_added_provider_reshapes_its_node() {
        let old = config(NODE_B, "  - name: m\n    providers: [pa]");
        let grown = format!(
            "{NODE_B}\n      - id: pb2\n        kind: openai_compat\n        \
             base_url: http://127.0.0.1:9\n        targets: [m]"
        );
        let new = config(&grown, "  - name: m\n    providers: [pa]");
        let diff = ConfigDiff::between(&old, &new);
        assert_eq!(diff.nodes_changed, vec!["b".to_owned()]);
        assert_eq!(diff.nodes_reshaped, vec!["b".to_owned()]);
    }
}
