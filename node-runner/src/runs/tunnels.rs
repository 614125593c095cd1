//! Raw provider tunnels on the run manager (F16): admission, the stream's
//! credit window, cancel, and the frames to the Edge.
//!
//! A tunnel is admitted like a run — the adapter must exist, be usable and
//! have capacity (shared by runs and tunnels of that adapter) — and then
//! [`run_tunnel`](crate::tunnel::run_tunnel) relays the provider's
//! response. Non-body frames are encoded on this core; body slices go to
//! the link writer as their own slices, never copied
//! ([`Outbox::send_body`]). The stream's
//! `WindowUpdate`s feed its [`Credit`]; `CANCEL_RUN` or the link's end
//! cancels it.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use framing::frame::TunnelHead;
use proto::v1::provider_tunnel_frame::Frame;
use proto::v1::{
    FailureCode, FailureSide, ProviderTunnelFrame, ProviderTunnelRequest, TunnelEnd, envelope::Msg,
};

use super::{ActiveRun, Outbox, Outcome, RunManager, unix_ms};
use crate::adapter::failure;
use crate::store::{RunInfo, Transition};
use crate::tunnel::{
    Credit, TunnelOutcome, TunnelSink, TunnelTarget, head_apart, last_apart, prepare,
    run_tunnel_watched,
};

/// Upper bound on the spawned task of one tunnel, in bytes (checked in
/// debug builds): it lives as long as the stream, so every idle stream
/// pays it. The tunnel's state machine is boxed apart
/// ([`TUNNEL_FUTURE_BUDGET`]); inline, the compiler laid it out twice (a
/// 32 KB task before issue 8's follow-up, see `bench-results/profiles.md`),
/// and the checked request and the watchdog it hands over are boxed until
/// then (160 B in a release build; 848 B with the request and watchdog
/// inline).
const TUNNEL_TASK_BUDGET: usize = 512;

/// Upper bound on one tunnel's state machine (`run_tunnel_watched`), in
/// bytes (checked in debug builds): the provider connect/request, the
/// stall evidence, the unwatched deadline's `Sleep` and the TLS read are
/// boxed inside it, nothing is laid out twice, and the request is let go
/// of once prepared (only its usage flags stay), so what stays is the
/// relay of an open response (1,808 B in a release build; 2,096 B while
/// the request was held by value).
const TUNNEL_FUTURE_BUDGET: usize = 3 * 1024;

/// Sends a tunnel's frames to the Edge, until the connection closed.
struct FrameSink<'a> {
    outbox: &'a Outbox,
    stream_id: u64,
    closed: &'a Cell<bool>,
    /// The Edge takes frames that are ready together as one `batch` frame
    /// ([`TunnelLimits::batches`](crate::tunnel::TunnelLimits)).
    batches: bool,
    /// With batches: the tunnel's head, held until what goes with it is
    /// known — the first body frame, the end, or the relay's first wait
    /// ([`TunnelSink::flush`]), whichever comes first.
    head: Option<TunnelHead>,
}

impl TunnelSink for FrameSink<'_> {
    fn frame(&mut self, frame: ProviderTunnelFrame) {
        self.flush();
        if !self.closed.get() {
            self.outbox
                .send_msg(self.stream_id, Msg::ProviderTunnelFrame(frame));
        }
    }

    fn headers(&mut self, headers: &[(&[u8], &[u8])]) {
        if !self.closed.get() {
            self.outbox.send_tunnel_headers(self.stream_id, headers);
        }
    }

    fn body(&mut self, body: Bytes, more: Vec<Bytes>) {
        if self.closed.get() {
            return;
        }
        match self.head.take() {
            Some(head) => {
                self.outbox.send_tunnel_batch(
                    self.stream_id,
                    Some(&head),
                    Some((body, more)),
                    None,
                );
            }
            None => {
                self.outbox.send_body(self.stream_id, body, more);
            }
        }
    }

    fn head(&mut self, code: u32, headers: &[(&[u8], &[u8])]) {
        if self.batches {
            self.head = Some(self.outbox.tunnel_head(code, headers));
        } else {
            head_apart(self, code, headers);
        }
    }

    fn last(&mut self, body: Option<(Bytes, Vec<Bytes>)>, end: TunnelEnd) {
        if !self.batches || (self.head.is_none() && body.is_none()) {
            return last_apart(self, body, end);
        }
        if !self.closed.get() {
            let head = self.head.take();
            self.outbox
                .send_tunnel_batch(self.stream_id, head.as_ref(), body, Some(&end));
        }
    }

    fn flush(&mut self) {
        if let Some(head) = self.head.take()
            && !self.closed.get()
        {
            self.outbox
                .send_tunnel_batch(self.stream_id, Some(&head), None, None);
        }
    }
}

impl RunManager {
    /// Admits and starts one tunnel on `stream_id`.
    pub(super) fn start_tunnel(
        self: &Rc<Self>,
        stream_id: u64,
        mut request: Box<ProviderTunnelRequest>,
    ) {
        let created_at_ms = unix_ms();
        // Checked and turned into the provider request here, not in the
        // task: the tunnel request then goes, and its names move into the
        // run's record rather than being copied there. `prepare`'s refusal
        // is the tunnel's `error` terminal, sent by the task.
        let admitted = self.admit_tunnel(stream_id, &request).and_then(
            |(adapter, request_timeout_ms, lease)| {
                // F29: the lease opens only now, after admission and right
                // before the provider call; a refusal drops the capacity unit.
                let credential = self.open_lease(&super::leases::LeasedRequest {
                    adapter: &request.adapter,
                    target: &request.target,
                    slot: &request.tunnel_id,
                    api: Some(crate::lease::api_of_path(&request.path)),
                    sealed: &request.credential_lease,
                })?;
                if let Some(credential) = &credential {
                    super::leases::set_header(&mut request.headers, credential);
                }
                let target = TunnelTarget::of(&adapter, request_timeout_ms);
                let prepared = Box::new(prepare(Some(target), &mut request));
                Ok((adapter, lease, credential, prepared))
            },
        );
        let initial_window = request.initial_window;
        let info = Arc::new(RunInfo {
            run_id: std::mem::take(&mut request.tunnel_id),
            adapter: std::mem::take(&mut request.adapter),
            target: std::mem::take(&mut request.target),
            session_id: None,
            background: false,
            created_at_ms,
        });
        drop(request);
        let (adapter, lease, credential, prepared) = match admitted {
            Ok(admitted) => admitted,
            Err(refusal) => {
                self.record(
                    &info,
                    Transition::Rejected {
                        at_ms: unix_ms(),
                        error: refusal.message.clone(),
                    },
                );
                let frame = ProviderTunnelFrame {
                    frame: Some(Frame::Error(refusal)),
                };
                self.outbox
                    .send_msg(stream_id, Msg::ProviderTunnelFrame(frame));
                let _ = self.done.send(stream_id);
                return;
            }
        };
        let credit = Credit::new(self.tunnel_limits.window_for(initial_window));
        let (cancel_tx, cancel_rx) = local_sync::oneshot::channel::<()>();
        self.runs.borrow_mut().insert(
            stream_id,
            ActiveRun {
                info: Arc::clone(&info),
                cancel: Some(cancel_tx),
                credit: Some(credit.clone()),
            },
        );
        self.record(&info, Transition::Started { at_ms: unix_ms() });
        // A refused request ends before its watchdog is armed: the default
        // only fills the place.
        let stall_timeout_ms = match &*prepared {
            Ok(prepared) => prepared.stall_timeout_ms,
            Err(_) => crate::tunnel::DEFAULT_STALL_TIMEOUT_MS,
        };
        let watchdog = self.watchdog(
            crate::stall::StallKind::Tunnel,
            &adapter,
            &info,
            stall_timeout_ms,
            credential,
        );
        // Boxed until the tunnel takes it: what the task captures stays in
        // its layout for the stream's whole life.
        let watchdog = Box::new(watchdog);
        let manager = Rc::clone(self);
        let task = async move {
            let mut sink = FrameSink {
                outbox: &manager.outbox,
                stream_id,
                closed: &manager.closed,
                batches: manager.tunnel_limits.batches,
                head: None,
            };
            let cancel = async {
                let _ = cancel_rx.await;
            };
            let limits = manager.tunnel_limits;
            // Boxed apart from this task and built in place: a future held
            // in a local and then awaited is laid out twice.
            let tunnel = Box::pin(run_tunnel_watched(
                &manager.client,
                prepared,
                limits,
                &credit,
                cancel,
                Some(*watchdog),
                &mut sink,
            ));
            debug_assert!(
                std::mem::size_of_val(&*tunnel) <= TUNNEL_FUTURE_BUDGET,
                "the tunnel's future grew to {} B",
                std::mem::size_of_val(&*tunnel)
            );
            let outcome = tunnel.await;
            let outcome = match outcome {
                TunnelOutcome::Completed { .. } => Outcome::Completed,
                TunnelOutcome::Failed(failure) => Outcome::Failed(failure.message),
                TunnelOutcome::Cancelled => Outcome::Cancelled,
            };
            manager.finish(stream_id, &info, &outcome, lease);
        };
        debug_assert!(
            std::mem::size_of_val(&task) <= TUNNEL_TASK_BUDGET,
            "the tunnel's task grew to {} B",
            std::mem::size_of_val(&task)
        );
        monoio::spawn(task);
    }

    /// More credit for a tunnel's body or a run's events (its client
    /// took that much).
    pub(super) fn grant(&self, stream_id: u64, increment: u32) {
        if let Some(credit) = self
            .runs
            .borrow()
            .get(&stream_id)
            .and_then(|run| run.credit.as_ref())
        {
            credit.grant(increment);
        }
    }

    /// The adapter, its hard timeout and a unit of its capacity; or the
    /// typed refusal, before any provider call.
    fn admit_tunnel(
        &self,
        stream_id: u64,
        request: &ProviderTunnelRequest,
    ) -> Result<(Rc<crate::adapter::AnyAdapter>, u64, super::Lease), proto::v1::ExecutionFailure>
    {
        if self.runs.borrow().contains_key(&stream_id) {
            return Err(failure(
                FailureCode::InvalidRequest,
                FailureSide::Client,
                format!("stream {stream_id} already carries a run"),
            ));
        }
        let Some(slot) = self.slots.get(&request.adapter) else {
            return Err(failure(
                FailureCode::UnknownAdapter,
                FailureSide::Client,
                format!("no adapter named {:?} on this node", request.adapter),
            ));
        };
        let adapter = slot.adapter.as_ref().map_err(|why| {
            failure(
                FailureCode::Internal,
                FailureSide::Node,
                format!("adapter {:?} is misconfigured: {why}", request.adapter),
            )
        })?;
        let lease = self.shared.try_lease(slot.index).ok_or_else(|| {
            failure(
                FailureCode::OverCapacity,
                FailureSide::Node,
                format!(
                    "adapter {:?} is at its max_concurrency of {}",
                    request.adapter, slot.max_concurrency
                ),
            )
        })?;
        Ok((Rc::clone(adapter), slot.request_timeout_ms, lease))
    }
}
