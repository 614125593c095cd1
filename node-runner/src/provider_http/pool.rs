//! The keep-alive pool's bookkeeping: sans-IO and clock-free, generic over
//! the connection type so its rules are tested without sockets.
//!
//! # Rules
//! - Keyed by [`PoolKey`] (scheme, host, port), so a TLS connection and a
//!   plain one are never mixed; a core owns its pool, nothing is shared
//!   between cores.
//! - [`Pool::checkout`] hands out the most recently parked connection (LIFO:
//!   the one least likely to have been closed by the server) and drops every
//!   connection idle for [`PoolConfig::idle_timeout_ms`] or longer.
//! - [`Pool::checkin`] parks a connection with its idle-since time; when the
//!   key already holds [`PoolConfig::max_idle_per_host`] connections the
//!   oldest is dropped. A limit of 0 disables pooling.
//! - A key's queue stays when it empties (the next check-in reuses it);
//!   [`Pool::evict_expired`] lets empty ones go.
//! - Only the client decides *whether* a connection may be parked (the
//!   previous response fully read, keep-alive on both sides, no stray bytes);
//!   this module only keeps count and time.

use std::collections::VecDeque;

use foldhash::HashMap;

use super::request::Scheme;

/// Default [`PoolConfig::max_idle_per_host`].
pub const DEFAULT_MAX_IDLE_PER_HOST: usize = 32;

/// Default [`PoolConfig::idle_timeout_ms`]: below uvicorn's (vLLM's server)
/// 5 s keep-alive timeout, so we usually drop a connection before the server
/// does and rarely hit the stale-connection race.
pub const DEFAULT_IDLE_TIMEOUT_MS: u64 = 4_000;

/// Bounds of the idle pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Most idle connections kept per (scheme, host, port); 0 disables reuse.
    pub max_idle_per_host: usize,
    /// A connection idle this long (ms) is closed instead of reused.
    pub idle_timeout_ms: u64,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            max_idle_per_host: DEFAULT_MAX_IDLE_PER_HOST,
            idle_timeout_ms: DEFAULT_IDLE_TIMEOUT_MS,
        }
    }
}

/// What a pooled connection is keyed by.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PoolKey {
    /// Plain TCP or TLS.
    pub scheme: Scheme,
    /// The host as written in the base URL (lower-cased).
    pub host: std::sync::Arc<str>,
    /// The TCP port.
    pub port: u16,
}

#[derive(Debug)]
struct Idle<C> {
    conn: C,
    since_ms: u64,
}

/// Idle connections per key, oldest first.
#[derive(Debug)]
pub struct Pool<C> {
    config: PoolConfig,
    idle: HashMap<PoolKey, VecDeque<Idle<C>>>,
}

impl<C> Pool<C> {
    /// An empty pool.
    pub fn new(config: PoolConfig) -> Self {
        Self {
            config,
            idle: HashMap::default(),
        }
    }

    /// The pool's bounds.
    pub fn config(&self) -> &PoolConfig {
        &self.config
    }

    /// The most recently parked connection for `key` that is not expired at
    /// `now_ms`; expired ones are dropped on the way.
    pub fn checkout(&mut self, key: &PoolKey, now_ms: u64) -> Option<C> {
        let timeout = self.config.idle_timeout_ms;
        let queue = self.idle.get_mut(key)?;
        // Oldest first: everything expired sits at the front.
        while queue
            .front()
            .is_some_and(|idle| now_ms.saturating_sub(idle.since_ms) >= timeout)
        {
            queue.pop_front();
        }
        // An emptied key keeps its queue: the connection is parked again
        // when its answer is read, and a queue made anew each time was an
        // allocation and two map updates a request
        // (`bench-results/profiles.md`, round 50). A pool has a key per
        // provider host, so what stays is bounded.
        queue.pop_back().map(|idle| idle.conn)
    }

    /// Parks `conn` as idle since `now_ms`. Returns false when it was not
    /// kept (pooling disabled); a full key drops its oldest connection.
    pub fn checkin(&mut self, key: PoolKey, conn: C, now_ms: u64) -> bool {
        let max = self.config.max_idle_per_host;
        if max == 0 {
            return false;
        }
        let queue = self.idle.entry(key).or_default();
        while queue.len() >= max {
            queue.pop_front();
        }
        queue.push_back(Idle {
            conn,
            since_ms: now_ms,
        });
        true
    }

    /// Drops every connection idle for the timeout or longer at `now_ms`.
    pub fn evict_expired(&mut self, now_ms: u64) {
        let timeout = self.config.idle_timeout_ms;
        self.idle.retain(|_, queue| {
            queue.retain(|idle| now_ms.saturating_sub(idle.since_ms) < timeout);
            !queue.is_empty()
        });
    }

    /// Idle connections parked for `key`.
    pub fn idle_count(&self, key: &PoolKey) -> usize {
        self.idle.get(key).map_or(0, VecDeque::len)
    }

    /// Idle connections over all keys.
    pub fn total_idle(&self) -> usize {
        self.idle.values().map(VecDeque::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(port: u16) -> PoolKey {
        PoolKey {
            scheme: Scheme::Http,
            host: "127.0.0.1".into(),
            port,
        }
    }

    #[test]
    fn tls_and_plain_connections_to_one_host_and_port_are_kept_apart() {
        let mut p = pool(4, 1_000);
        let tls = PoolKey {
            scheme: Scheme::Https,
            ..key(1)
        };
        p.checkin(key(1), 1, 0);
        assert_eq!(p.checkout(&tls, 1), None);
        p.checkin(tls.clone(), 2, 0);
        assert_eq!(p.checkout(&key(1), 1), Some(1));
        assert_eq!(p.checkout(&key(1), 1), None);
        assert_eq!(p.checkout(&tls, 1), Some(2));
    }

    fn pool(max: usize, timeout: u64) -> Pool<u32> {
        Pool::new(PoolConfig {
            max_idle_per_host: max,
            idle_timeout_ms: timeout,
        })
    }

    #[test]
    fn checkout_is_lifo_per_key() {
        let mut p = pool(4, 1_000);
        assert!(p.checkin(key(1), 10, 0));
        assert!(p.checkin(key(1), 11, 5));
        assert!(p.checkin(key(2), 20, 5));
        assert_eq!(p.checkout(&key(1), 10), Some(11));
        assert_eq!(p.checkout(&key(1), 10), Some(10));
        assert_eq!(p.checkout(&key(1), 10), None);
        assert_eq!(p.idle_count(&key(2)), 1);
    }

    #[test]
    fn idle_timeout_at_the_bound_and_one_before() {
        let mut p = pool(4, 100);
        p.checkin(key(1), 1, 1_000);
        assert_eq!(p.checkout(&key(1), 1_099), Some(1));
        p.checkin(key(1), 1, 1_000);
        assert_eq!(p.checkout(&key(1), 1_100), None);
        assert_eq!(p.total_idle(), 0);
    }

    #[test]
    fn full_key_drops_the_oldest() {
        let mut p = pool(2, 1_000);
        p.checkin(key(1), 1, 0);
        p.checkin(key(1), 2, 1);
        assert_eq!(p.idle_count(&key(1)), 2);
        p.checkin(key(1), 3, 2);
        assert_eq!(p.idle_count(&key(1)), 2);
        assert_eq!(p.checkout(&key(1), 3), Some(3));
        assert_eq!(p.checkout(&key(1), 3), Some(2));
    }

    #[test]
    fn zero_limit_disables_pooling() {
        let mut p = pool(0, 1_000);
        assert!(!p.checkin(key(1), 1, 0));
        assert_eq!(p.checkout(&key(1), 0), None);
    }

    #[test]
    fn an_emptied_key_keeps_its_queue_until_evicted() {
        let mut p = pool(4, 100);
        p.checkin(key(1), 1, 0);
        assert_eq!(p.checkout(&key(1), 10), Some(1));
        let kept = p.idle.get(&key(1)).expect("the emptied queue stays");
        assert!(kept.is_empty() && kept.capacity() > 0);
        assert_eq!(p.total_idle(), 0);
        p.checkin(key(1), 2, 20);
        assert_eq!(p.checkout(&key(1), 30), Some(2));
        p.evict_expired(40);
        assert!(p.idle.is_empty(), "an empty queue goes at eviction");
    }

    #[test]
    fn evict_expired_keeps_the_fresh() {
        let mut p = pool(4, 100);
        p.checkin(key(1), 1, 0);
        p.checkin(key(1), 2, 50);
        p.checkin(key(2), 3, 0);
        p.evict_expired(120);
        assert_eq!(p.idle_count(&key(1)), 1);
        assert_eq!(p.idle_count(&key(2)), 0);
        assert_eq!(p.checkout(&key(1), 120), Some(2));
    }
}
