//! Shared set-up of the tunnel tests (`tunnel.rs`, `tunnel_flow.rs`): a
//! recording sink, requests, and the same request sent straight to the
//! mock provider for comparison.

#![allow(dead_code, unreachable_pub)]

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use framing::frame::MAX_BODY_PARTS;
use node_runner::adapter::AdapterConfig;
use node_runner::provider_http::{BaseUrl, ProviderClient, ProviderClientConfig, ProviderRequest};
use node_runner::tunnel::{
    Credit, TunnelLimits, TunnelOutcome, TunnelSink, TunnelTarget, run_tunnel,
};
use proto::v1::{
    AdapterKind, FailureCode, Header, ProviderTunnelFrame, ProviderTunnelRequest, Usage,
    provider_tunnel_frame::Frame,
};

/// What the sink saw, in order.
#[derive(Debug, Clone)]
pub(crate) enum Item {
    Frame(Frame),
    Body(Bytes),
}

/// A sink shared with the test while the tunnel runs in a task.
#[derive(Clone, Default)]
pub(crate) struct Recorder {
    pub(crate) items: Rc<RefCell<Vec<Item>>>,
    pub(crate) body_bytes: Rc<Cell<usize>>,
    /// Body frames (each of one or more slices).
    pub(crate) body_frames: Rc<Cell<usize>>,
    /// Keep body slices (off: count only, so buffers are freed at once).
    pub(crate) keep: bool,
}

impl TunnelSink for Recorder {
    fn frame(&mut self, frame: ProviderTunnelFrame) {
        self.items
            .borrow_mut()
            .push(Item::Frame(frame.frame.unwrap()));
    }
    fn body(&mut self, body: Bytes, more: Vec<Bytes>) {
        assert!(more.len() < MAX_BODY_PARTS, "{} slices", more.len() + 1);
        self.body_frames.set(self.body_frames.get() + 1);
        for part in std::iter::once(body).chain(more) {
            assert!(!part.is_empty(), "empty body slice");
            self.body_bytes.set(self.body_bytes.get() + part.len());
            if self.keep {
                self.items.borrow_mut().push(Item::Body(part));
            }
        }
    }
}

impl Recorder {
    pub(crate) fn keeping() -> Self {
        Self {
            keep: true,
            ..Self::default()
        }
    }

    pub(crate) fn body(&self) -> Vec<u8> {
        let items = self.items.borrow();
        items
            .iter()
            .filter_map(|i| match i {
                Item::Body(b) => Some(&b[..]),
                Item::Frame(_) => None,
            })
            .flatten()
            .copied()
            .collect()
    }

    pub(crate) fn frames(&self) -> Vec<Frame> {
        let items = self.items.borrow();
        items
            .iter()
            .filter_map(|i| match i {
                Item::Frame(f) => Some(f.clone()),
                Item::Body(_) => None,
            })
            .collect()
    }

    /// Checks the order: status, headers, bodies and usage, one terminal
    /// last; returns the status and the terminal.
    pub(crate) fn shape(&self) -> (Option<u32>, Frame) {
        let items = self.items.borrow();
        let terminal = |f: &Frame| matches!(f, Frame::End(_) | Frame::Error(_));
        let frames: Vec<&Frame> = items
            .iter()
            .filter_map(|i| match i {
                Item::Frame(f) => Some(f),
                Item::Body(_) => None,
            })
            .collect();
        assert_eq!(
            frames.iter().filter(|f| terminal(f)).count(),
            1,
            "{frames:?}"
        );
        assert!(
            matches!(items.last(), Some(Item::Frame(f)) if terminal(f)),
            "terminal last"
        );
        let status = match frames.first() {
            Some(Frame::Status(s)) => {
                assert!(
                    matches!(frames.get(1), Some(Frame::Headers(_))),
                    "{frames:?}"
                );
                assert!(matches!(items.get(1), Some(Item::Frame(Frame::Headers(_)))));
                Some(s.code)
            }
            _ => {
                assert_eq!(items.len(), 1, "no status: a lone terminal");
                None
            }
        };
        (status, (*frames.last().unwrap()).clone())
    }
}

pub(crate) fn target_config(base: &BaseUrl, knobs: &[(&str, &str)]) -> AdapterConfig {
    let mut config = AdapterConfig::new("a", base.clone());
    config.targets = vec!["m".into()];
    config.supports_tunnel = true;
    config.headers = knobs
        .iter()
        .map(|(k, v)| (format!("x-mock-{k}").into(), v.to_string().into()))
        .collect();
    config
}

pub(crate) fn client() -> ProviderClient {
    ProviderClient::new(ProviderClientConfig::default())
}

pub(crate) fn chat_body(stream: bool, include_usage: bool) -> Bytes {
    let options = if include_usage {
        r#","stream_options":{"include_usage":true}"#
    } else {
        ""
    };
    format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"hi there"}}],"stream":{stream}{options}}}"#
    )
    .into()
}

pub(crate) fn tunnel_request(body: Bytes) -> ProviderTunnelRequest {
    ProviderTunnelRequest {
        tunnel_id: "t1".into(),
        adapter: "a".into(),
        target: "m".into(),
        method: "POST".into(),
        path: "/v1/chat/completions".into(),
        headers: vec![Header {
            name: "content-type".into(),
            value: Bytes::from_static(b"application/json"),
        }],
        body,
        ..Default::default()
    }
}

/// Runs one tunnel to its end with an unlimited window.
pub(crate) async fn tunnel(
    config: &AdapterConfig,
    request: ProviderTunnelRequest,
) -> (TunnelOutcome, Recorder) {
    let mut sink = Recorder::keeping();
    let credit = Credit::new(u32::MAX);
    let target = TunnelTarget {
        config,
        kind: AdapterKind::Vllm,
        request_timeout_ms: 0,
    };
    let outcome = run_tunnel(
        &client(),
        Some(target),
        request,
        TunnelLimits::default(),
        &credit,
        std::future::pending(),
        &mut sink,
    )
    .await;
    (outcome, sink)
}

/// The body of the same request sent straight to the provider.
pub(crate) async fn direct(config: &AdapterConfig, body: Bytes) -> (u16, Vec<u8>) {
    let mut request = ProviderRequest::new("POST", config.base.clone(), "/v1/chat/completions")
        .header("content-type", "application/json")
        .body(body);
    for (name, value) in &config.headers {
        request = request.header(name.clone(), value.clone());
    }
    let mut response = client().request(request).await.unwrap();
    let mut out = Vec::new();
    while let Some(chunk) = response.next_chunk().await {
        out.extend_from_slice(&chunk.unwrap());
    }
    (response.status(), out)
}

/// Reads the same request straight from the provider, counting bytes.
pub(crate) async fn direct_count(config: &AdapterConfig, body: Bytes) -> (u16, usize) {
    let mut request = ProviderRequest::new("POST", config.base.clone(), "/v1/chat/completions")
        .header("content-type", "application/json")
        .body(body);
    for (name, value) in &config.headers {
        request = request.header(name.clone(), value.clone());
    }
    let mut response = client().request(request).await.unwrap();
    let mut out = 0;
    while let Some(chunk) = response.next_chunk().await {
        out += chunk.unwrap().len();
    }
    (response.status(), out)
}

/// `bytes` with the per-request values (completion id, creation time)
/// replaced by placeholders.
pub(crate) fn normalize(bytes: &[u8]) -> String {
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = ["chatcmpl-mock-", "\"created\":"]
        .iter()
        .filter_map(|k| rest.find(k).map(|i| (i, k.len())))
        .min()
    {
        let (i, k) = at;
        out.push_str(&rest[..i + k]);
        rest = rest[i + k..].trim_start_matches(|c: char| c.is_ascii_digit());
        out.push('#');
    }
    out.push_str(rest);
    out
}

pub(crate) fn end_usage(terminal: &Frame) -> Option<Usage> {
    match terminal {
        Frame::End(end) => end.usage,
        other => panic!("not an end: {other:?}"),
    }
}

pub(crate) fn error_code(terminal: &Frame) -> FailureCode {
    match terminal {
        Frame::Error(f) => f.code(),
        other => panic!("not an error: {other:?}"),
    }
}

pub(crate) async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        monoio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Spawns a tunnel with its own credit and cancel; returns the sink, the
/// credit, the cancel trigger and the outcome's handle.
pub(crate) fn spawn_tunnel(
    config: AdapterConfig,
    request: ProviderTunnelRequest,
    window: u32,
    sink: Recorder,
) -> (
    Credit,
    local_sync::oneshot::Sender<()>,
    monoio::task::JoinHandle<TunnelOutcome>,
) {
    let credit = Credit::new(window);
    let (cancel, cancelled) = local_sync::oneshot::channel::<()>();
    let task_credit = credit.clone();
    let handle = monoio::spawn(async move {
        let mut sink = sink;
        let target = TunnelTarget {
            config: &config,
            kind: AdapterKind::OpenaiCompat,
            request_timeout_ms: 0,
        };
        let cancel = async {
            let _ = cancelled.await;
        };
        run_tunnel(
            &client(),
            Some(target),
            request,
            TunnelLimits::default(),
            &task_credit,
            cancel,
            &mut sink,
        )
        .await
    });
    (credit, cancel, handle)
}
