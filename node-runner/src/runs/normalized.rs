//! A normalized run on one core: validation, admission (F9), the
//! adapter's call and its relay under the stall watchdog (F21–F23), and
//! the run's end (its terminal, the store record, the done report). The
//! raw tunnel's start is in `tunnels`; both share `admit`, `watchdog` and
//! `finish`.

use super::*;

impl RunManager {
    pub(super) fn start_run(self: &Rc<Self>, stream_id: u64, mut request: RunRequest) {
        let admitted = self.admit(stream_id, &request).and_then(|admitted| {
            // F29: opened after admission, right before the adapter's call;
            // a refusal drops the capacity unit.
            let credential = self.open_lease(&leases::LeasedRequest {
                adapter: &request.adapter,
                target: &request.target,
                slot: &request.run_id,
                api: None,
                sealed: &request.credential_lease,
            })?;
            Ok((admitted, credential))
        });
        // The run's record takes its names from the request, which reads
        // them no more (the target is the adapter call's too).
        let info = Arc::new(RunInfo {
            run_id: std::mem::take(&mut request.run_id),
            adapter: std::mem::take(&mut request.adapter),
            target: request.target.clone(),
            session_id: (!request.session_id.is_empty()).then(|| request.session_id.clone()),
            background: request.background,
            created_at_ms: unix_ms(),
        });
        let ((adapter, lease, hard_timeout_ms, stall_timeout_ms), credential) = match admitted {
            Ok(admitted) => admitted,
            Err(refusal) => {
                tracing::debug!(
                    event = "run_refused",
                    core = self.core,
                    run_id = %info.run_id,
                    stream_id,
                    code = refusal.code().as_str_name(),
                    "run_refused"
                );
                self.record(
                    &info,
                    Transition::Rejected {
                        at_ms: unix_ms(),
                        error: refusal.message.clone(),
                    },
                );
                let event = RuntimeEvent::Error(refusal).into_run_event(1);
                self.outbox.send_run_event(stream_id, &event);
                let _ = self.done.send(stream_id);
                return;
            }
        };
        tracing::debug!(
            event = "run_started",
            core = self.core,
            run_id = %info.run_id,
            stream_id,
            adapter = %info.adapter,
            "run_started"
        );
        let (cancel_tx, cancel_rx) = local_sync::oneshot::channel();
        // The run's window (RunRequest.initial_window, 0 = the config's):
        // the Edge grants it back as its client takes the events.
        let credit =
            crate::tunnel::Credit::new(self.tunnel_limits.window_for(request.initial_window));
        self.runs.borrow_mut().insert(
            stream_id,
            ActiveRun {
                info: Arc::clone(&info),
                cancel: Some(cancel_tx),
                credit: Some(credit.clone()),
            },
        );
        self.record(&info, Transition::Started { at_ms: unix_ms() });
        let spec = ExecuteSpec {
            target: request.target,
            input: request.input.unwrap_or_default(),
            session_id: request.session_id,
            stall_timeout_ms,
            credential,
        };
        let watchdog = self.watchdog(
            StallKind::Run,
            &adapter,
            &info,
            stall_timeout_ms,
            spec.credential.clone(),
        );
        // The adapter's call and the relay are built here and boxed apart
        // from the task, which then holds two pointers: what a future
        // captures stays in its layout for its whole life, and the task
        // lives as long as the run (every quiet stream pays it). The call
        // owns the adapter and the spec; the relay frees it once it
        // returned (see `relay_watched`).
        let timers = Rc::clone(&self.timers);
        let stop = move || async move {
            let cancelled = async {
                let _ = cancel_rx.await;
                Stop::Cancelled
            };
            match hard_timeout_ms {
                0 => cancelled.await,
                ms => timers
                    .timeout(ms, cancelled)
                    .await
                    .unwrap_or(Stop::HardTimeout(ms)),
            }
        };
        let merge_deltas = request.merge_deltas;
        let open =
            Box::pin(async move { adapter.execute(spec).await.merging_deltas(merge_deltas) });
        let emitter = Rc::clone(self);
        let relay = Box::pin(relay_credited(
            open,
            stop,
            Some(watchdog),
            Some(credit),
            move |event| {
                if !emitter.closed.get() {
                    emitter.outbox.send_run_event(stream_id, &event);
                }
            },
        ));
        debug_assert!(
            std::mem::size_of_val(&*relay) <= RUN_RELAY_BUDGET,
            "a run's relay grew to {} B",
            std::mem::size_of_val(&*relay)
        );
        let manager = Rc::clone(self);
        let task = async move {
            let keep_alive = {
                let (outcome, rest) = relay.await;
                manager.finish(stream_id, &info, &outcome, lease);
                // Read the provider body's end so the connection is pooled
                // (boxed: the source's read is large and over at once; and
                // built in this block, so `rest` is not held across it).
                rest.map(|mut rest| {
                    Box::pin(async move {
                        let _ = EventSource::next(&mut rest).await;
                    })
                })
            };
            if let Some(keep_alive) = keep_alive {
                keep_alive.await;
            }
        };
        debug_assert!(
            std::mem::size_of_val(&task) <= RUN_TASK_BUDGET,
            "a run's task grew to {} B",
            std::mem::size_of_val(&task)
        );
        monoio::spawn(task);
    }

    /// The stall watchdog of a run or tunnel on `adapter` (F21): the
    /// effective timeout, the exact-target probe of `run`'s target under the
    /// adapter's probe bound, and this connection's observation sequence
    /// (F23). The probe carries the request's opened `credential` (F29),
    /// dropped with the watchdog when the request ends.
    pub(super) fn watchdog(
        &self,
        kind: StallKind,
        adapter: &Rc<AnyAdapter>,
        run: &Arc<RunInfo>,
        stall_timeout_ms: u64,
        credential: Option<crate::lease::OpenedCredential>,
    ) -> Watchdog<TargetHealth> {
        Watchdog {
            timers: Rc::clone(&self.timers),
            kind,
            timeout_ms: stall_timeout_ms,
            grace: CLOSE_GRACE,
            probe_timeout: adapter.config().health_timeout(),
            health: TargetHealth {
                adapter: Rc::clone(adapter),
                run: Arc::clone(run),
                shared: Arc::clone(&self.shared),
                credential,
            },
        }
    }

    /// Checks a run against the adapter table and its capacity (F9, F20);
    /// on success the run holds one unit of its adapter's capacity.
    pub(super) fn admit(
        &self,
        stream_id: u64,
        request: &RunRequest,
    ) -> Result<(Rc<AnyAdapter>, Lease, u64, u64), proto::v1::ExecutionFailure> {
        let refuse = |code, message: String| Err(failure(code, FailureSide::Client, message));
        if self.runs.borrow().contains_key(&stream_id) {
            return refuse(
                FailureCode::InvalidRequest,
                format!("stream {stream_id} already carries a run"),
            );
        }
        let Some(slot) = self.slots.get(&request.adapter) else {
            return refuse(
                FailureCode::UnknownAdapter,
                format!("no adapter named {:?} on this node", request.adapter),
            );
        };
        let adapter = match &slot.adapter {
            Ok(adapter) => adapter,
            Err(why) => {
                return Err(failure(
                    FailureCode::Internal,
                    FailureSide::Node,
                    format!("adapter {:?} is misconfigured: {why}", request.adapter),
                ));
            }
        };
        // The config's own list, not `capabilities()`: that is a copy (its
        // targets a `Vec` of `String`s) for the wire, two or more
        // allocations a run.
        adapter
            .config()
            .check_serves(&request.adapter, &request.target)?;
        let stall_timeout_ms = match request.response_stall_timeout_ms {
            0 => DEFAULT_STALL_TIMEOUT_MS,
            ms if ms > MAX_STALL_TIMEOUT_MS => {
                return refuse(
                    FailureCode::InvalidRequest,
                    format!(
                        "response_stall_timeout_ms {ms} is over the maximum {MAX_STALL_TIMEOUT_MS}"
                    ),
                );
            }
            ms => ms,
        };
        let Some(lease) = self.shared.try_lease(slot.index) else {
            return Err(failure(
                FailureCode::OverCapacity,
                FailureSide::Node,
                format!(
                    "adapter {:?} is at its max_concurrency of {}",
                    request.adapter, slot.max_concurrency
                ),
            ));
        };
        let hard_timeout_ms = match request.hard_timeout_ms {
            0 => slot.request_timeout_ms,
            ms => ms,
        };
        Ok((Rc::clone(adapter), lease, hard_timeout_ms, stall_timeout_ms))
    }

    /// Returns the run's capacity, reports its stream done and records its
    /// end.
    pub(super) fn finish(
        &self,
        stream_id: u64,
        info: &Arc<RunInfo>,
        outcome: &Outcome,
        lease: Lease,
    ) {
        self.runs.borrow_mut().remove(&stream_id);
        drop(lease);
        let _ = self.done.send(stream_id);
        tracing::debug!(
            event = "run_ended",
            core = self.core,
            run_id = %info.run_id,
            stream_id,
            outcome = match outcome {
                Outcome::Completed => "completed",
                Outcome::Failed(_) => "failed",
                Outcome::Cancelled if self.closed.get() => "link_closed",
                Outcome::Cancelled => "cancelled",
            },
            "run_ended"
        );
        let at_ms = unix_ms();
        let transition = match outcome {
            Outcome::Completed => Transition::Completed { at_ms },
            Outcome::Failed(error) => Transition::Failed {
                at_ms,
                error: error.clone(),
            },
            Outcome::Cancelled if self.closed.get() => Transition::Failed {
                at_ms,
                error: "the edge link closed during the run".into(),
            },
            Outcome::Cancelled => Transition::Cancelled { at_ms },
        };
        self.record(info, transition);
    }
}
