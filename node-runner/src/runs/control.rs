//! A core's answers to control frames: `CANCEL_RUN` (F12), a session
//! terminate (F13) and node commands (F14).

use super::*;

impl RunManager {
    pub(super) fn cancel_run(&self, stream_id: u64, request: &CancelRequest) {
        let mut runs = self.runs.borrow_mut();
        // The Edge sends CANCEL_RUN on the run's own stream; a cancel on
        // another stream names the run by id.
        let run = match runs.get_mut(&stream_id) {
            Some(run) => Some(run),
            None => runs
                .values_mut()
                .find(|run| !request.run_id.is_empty() && run.info.run_id == request.run_id),
        };
        let status = match run.and_then(|run| run.cancel.take()) {
            Some(cancel) => {
                let _ = cancel.send(());
                CancelStatus::Done
            }
            None => CancelStatus::NotFound,
        };
        drop(runs);
        self.answer_cancel(stream_id, CancelKind::CancelRun, status, String::new());
    }

    pub(super) fn terminate(self: &Rc<Self>, stream_id: u64, request: CancelRequest) {
        let Some(slot) = self.slots.get(&request.adapter) else {
            return self.answer_cancel(
                stream_id,
                CancelKind::TerminateSession,
                CancelStatus::Failed,
                format!("no adapter named {:?} on this node", request.adapter),
            );
        };
        let adapter = match &slot.adapter {
            Ok(adapter) => adapter.clone(),
            Err(why) => {
                return self.answer_cancel(
                    stream_id,
                    CancelKind::TerminateSession,
                    CancelStatus::Failed,
                    why.clone(),
                );
            }
        };
        let manager = Rc::clone(self);
        monoio::spawn(async move {
            let result = adapter
                .terminate_session(&request.target, &request.session_id)
                .await;
            let (status, message) = match result {
                Ok(()) => (CancelStatus::Done, String::new()),
                Err(TerminateError::Unsupported) => (
                    CancelStatus::Unsupported,
                    "adapter does not support session terminate".into(),
                ),
                Err(TerminateError::Failed(failure)) => (CancelStatus::Failed, failure.message),
            };
            manager.answer_cancel(stream_id, CancelKind::TerminateSession, status, message);
        });
    }

    /// Runs a node command (F14) on its own task; its responses go out as
    /// they come (an Ollama pull streams progress).
    pub(super) fn command(self: &Rc<Self>, stream_id: u64, request: NodeCommandRequest) {
        tracing::debug!(
            event = "command_started",
            core = self.core,
            stream_id,
            kind = request.kind().as_str_name(),
            "command_started"
        );
        let manager = Rc::clone(self);
        monoio::spawn(async move {
            let active_runs = |name: &str| manager.active_on(name);
            let next_health_seq = || manager.shared.next_health_seq();
            let transport = manager.shared.transport(manager.closed.get());
            let ctx = CommandContext {
                adapters: &manager.named,
                active_runs: &active_runs,
                transport,
                next_health_seq: &next_health_seq,
                client: manager.client.clone(),
                limits: CommandLimits::default(),
            };
            let mut emit = |response: proto::v1::NodeCommandResponse| {
                if !manager.closed.get() {
                    manager
                        .outbox
                        .send_msg(stream_id, Msg::NodeCommandResponse(Box::new(response)));
                }
            };
            // F29: a probe's lease opens with exactly a run's rules.
            let open_lease = |probe: &crate::commands::ProbeLease<'_>| {
                manager.open_lease(&leases::LeasedRequest {
                    adapter: probe.adapter,
                    target: probe.target,
                    slot: probe.slot,
                    api: Some(crate::commands::PROBE_ROUTE),
                    sealed: probe.sealed,
                })
            };
            run_command_leased(&ctx, &open_lease, request, &mut emit).await;
        });
    }

    pub(super) fn answer_cancel(
        &self,
        stream_id: u64,
        kind: CancelKind,
        status: CancelStatus,
        message: String,
    ) {
        if self.closed.get() {
            return;
        }
        let mut response = CancelResponse {
            message,
            ..CancelResponse::default()
        };
        response.set_kind(kind);
        response.set_status(status);
        self.outbox
            .send_msg(stream_id, Msg::CancelResponse(response));
    }
}
