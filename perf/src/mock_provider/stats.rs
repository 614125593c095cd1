//! Counters the tests read back through `GET /mock/stats`.
//!
//! All counters are relaxed atomics: they are observations for tests, not
//! synchronisation. `POST /mock/reset` zeroes every counter except the
//! `connections_open` gauge, which tracks live sockets.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc;

use super::cut::StreamCut;

/// The routes the mock counts requests for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `POST /v1/chat/completions`
    ChatCompletions,
    /// `POST /v1/responses`
    Responses,
    /// `GET /v1/models`
    Models,
    /// `GET /health`
    Health,
    /// `POST /api/chat`
    OllamaChat,
    /// `GET /api/tags`
    OllamaTags,
    /// `POST /api/show`
    OllamaShow,
    /// `GET /api/ps`
    OllamaPs,
    /// `POST /api/pull`
    OllamaPull,
    /// Anything under `/mock/`.
    Mock,
    /// No such route (404) or wrong method (405).
    NotFound,
}

impl Route {
    /// Every route, in the order of [`Stats::to_json`].
    pub const ALL: [Route; 11] = [
        Route::ChatCompletions,
        Route::Responses,
        Route::Models,
        Route::Health,
        Route::OllamaChat,
        Route::OllamaTags,
        Route::OllamaShow,
        Route::OllamaPs,
        Route::OllamaPull,
        Route::Mock,
        Route::NotFound,
    ];

    /// The key of this route in the stats JSON.
    pub fn key(self) -> &'static str {
        match self {
            Route::ChatCompletions => "chat_completions",
            Route::Responses => "responses",
            Route::Models => "models",
            Route::Health => "health",
            Route::OllamaChat => "ollama_chat",
            Route::OllamaTags => "ollama_tags",
            Route::OllamaShow => "ollama_show",
            Route::OllamaPs => "ollama_ps",
            Route::OllamaPull => "ollama_pull",
            Route::Mock => "mock",
            Route::NotFound => "not_found",
        }
    }
}

/// Shared counters of one mock provider instance.
#[derive(Debug, Default)]
pub struct Stats {
    requests: [AtomicU64; Route::ALL.len()],
    /// Responses answered with an injected `status` knob.
    pub(crate) injected_errors: AtomicU64,
    /// Requests rejected as malformed (400).
    pub(crate) bad_requests: AtomicU64,
    /// Streaming bodies created (headers sent with a streaming body).
    pub(crate) streams_started: AtomicU64,
    /// Streaming bodies that sent their last byte to hyper.
    pub(crate) streams_completed: AtomicU64,
    /// Streams dropped before their end while the mock still had bytes to
    /// send (the client went away, or its connection was closed).
    pub(crate) streams_client_gone: AtomicU64,
    /// Streams that reached their `stall-after` point.
    pub(crate) streams_stalled: AtomicU64,
    /// Streams cut by the `abort-after` knob.
    pub(crate) streams_aborted: AtomicU64,
    /// Accepted TCP connections.
    pub(crate) connections_total: AtomicU64,
    /// Currently open TCP connections (a gauge; not reset).
    pub(crate) connections_open: AtomicU64,
    /// Whether `/health` answers 200.
    pub(crate) healthy: AtomicBool,
    /// The `Authorization` header of every model request (chat, responses,
    /// Ollama chat), in arrival order; `None` when absent (F29 tests).
    authorizations: Mutex<Vec<Option<String>>>,
    /// Where cut streams are reported ([`Stats::watch_cuts`]); none by default.
    cuts: Mutex<Option<mpsc::Sender<StreamCut>>>,
}

impl Stats {
    pub(crate) fn new(healthy: bool) -> Self {
        let s = Self::default();
        s.healthy.store(healthy, Relaxed);
        s
    }

    pub(crate) fn count(&self, route: Route) {
        self.requests[route as usize].fetch_add(1, Relaxed);
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }

    pub(crate) fn record_authorization(&self, value: Option<&[u8]>) {
        let value = value.map(|v| String::from_utf8_lossy(v).into_owned());
        self.authorizations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(value);
    }

    /// The `Authorization` headers the model routes received since start
    /// or the last reset, in order (`None` = no header).
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.authorizations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reports every stream cut from now on (a client that left
    /// mid-stream; see [`StreamCut`]) to the returned receiver, in the
    /// order the mock dropped them. One watcher at a time: a new call
    /// replaces the previous one. Not touched by [`Stats::reset`].
    pub fn watch_cuts(&self) -> mpsc::Receiver<StreamCut> {
        let (tx, rx) = mpsc::channel();
        *self.cuts.lock().unwrap_or_else(|e| e.into_inner()) = Some(tx);
        rx
    }

    /// Hands `cut` to the watcher, if any (a gone watcher is forgotten).
    pub(crate) fn report_cut(&self, cut: StreamCut) {
        let mut cuts = self.cuts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(tx) = cuts.as_ref()
            && tx.send(cut).is_err()
        {
            *cuts = None;
        }
    }

    /// Requests seen on `route` since start or the last reset.
    pub fn requests(&self, route: Route) -> u64 {
        self.requests[route as usize].load(Relaxed)
    }

    /// Streams whose client went away before the end.
    pub fn streams_client_gone(&self) -> u64 {
        self.streams_client_gone.load(Relaxed)
    }

    /// Currently open connections.
    pub fn connections_open(&self) -> u64 {
        self.connections_open.load(Relaxed)
    }

    /// Whether `/health` currently answers 200.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Relaxed)
    }

    /// Sets what `/health` answers.
    pub fn set_healthy(&self, up: bool) {
        self.healthy.store(up, Relaxed);
    }

    /// Zeroes every counter except the open-connections gauge.
    pub fn reset(&self) {
        self.authorizations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        for c in &self.requests {
            c.store(0, Relaxed);
        }
        for c in [
            &self.injected_errors,
            &self.bad_requests,
            &self.streams_started,
            &self.streams_completed,
            &self.streams_client_gone,
            &self.streams_stalled,
            &self.streams_aborted,
            &self.connections_total,
        ] {
            c.store(0, Relaxed);
        }
    }

    /// The `GET /mock/stats` document.
    pub fn to_json(&self) -> serde_json::Value {
        let mut by_route = serde_json::Map::new();
        let mut total = 0;
        for r in Route::ALL {
            let n = self.requests(r);
            total += n;
            by_route.insert(r.key().to_owned(), n.into());
        }
        let g = |c: &AtomicU64| c.load(Relaxed);
        serde_json::json!({
            "requests_total": total,
            "requests": by_route,
            "injected_errors": g(&self.injected_errors),
            "bad_requests": g(&self.bad_requests),
            "streams_started": g(&self.streams_started),
            "streams_completed": g(&self.streams_completed),
            "streams_client_gone": g(&self.streams_client_gone),
            "streams_stalled": g(&self.streams_stalled),
            "streams_aborted": g(&self.streams_aborted),
            "connections_total": g(&self.connections_total),
            "connections_open": g(&self.connections_open),
            "healthy": self.healthy(),
        })
    }
}
