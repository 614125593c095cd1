//! [`StoreWriter`]: run-store writes off the event path.
//!
//! The run manager calls [`StoreHandle::record`] with a [`StoreUpdate`]; that
//! is one send on a bounded queue and never blocks. A dedicated OS
//! thread (not one of monoio's cores) owns the [`RunStore`]: it takes
//! everything queued (up to [`WriterConfig::max_batch`]) and writes it in one
//! LMDB transaction, merging each update into the stored record with
//! [`RunRecord::apply`].
//!
//! # The trade-off: drop, never block
//!
//! If the queue is full (the disk or the store thread is slower than runs
//! arrive), `record` drops the update, counts it in
//! [`WriterStats::dropped_full`] and returns `false`. Streaming never waits
//! for bookkeeping; the price is that a record may miss a step (for example
//! stay `running` if its terminal was dropped).
//! Every update carries the run's [`RunInfo`], so a dropped `Queued` never
//! loses the record itself: a later step creates it.
//!
//! The store thread runs under `SCHED_IDLE` by default
//! ([`WriterConfig::priority`], [`super::priority`]): the threads that carry
//! requests always take the CPU first, so a commit's burst never delays one;
//! the same trade-off applies when the CPU stays busy for long.
//!
//! [`StoreWriter::flush`] waits until everything queued before it is
//! committed (for tests and shutdown). Dropping the [`StoreWriter`] flushes
//! and joins the thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::JoinHandle;
use std::time::Duration;

use foldhash::{HashMap, HashMapExt};

use super::StoreError;
use super::lmdb::{Place, RunStore};
use super::priority::StorePriority;
use super::record::{RunInfo, RunRecord, Transition};

/// Default queue capacity (updates waiting for the store thread): ~1.2 s of
/// a saturated node's updates (27k small requests/s on the 2-vCPU bench
/// box, two updates each), so a store thread held off the CPU by a burst
/// of requests catches up instead of dropping. The queue holds only what
/// waits (~100 bytes an update), nothing when the store keeps up.
pub const DEFAULT_QUEUE_CAPACITY: usize = 65_536;

/// Default most updates written in one transaction.
pub const DEFAULT_MAX_BATCH: usize = 1024;

/// Default time a batch gathers after its first update (see [`WriterConfig`]).
///
/// A commit costs the store thread 100–150 µs of CPU whatever it carries
/// (its page writes and data sync, on the 2-vCPU bench VM;
/// `cargo bench -p node-runner --bench run_store`), against ~3 µs a run.
/// At 20 ms a Node at 200 small requests/s spent 50–55 µs of store CPU a
/// request, at 1,000/s 14–15, at 5,000/s 4.4; at 100 ms 10–15, 4–5 and 2.2
/// (`bench-results/run-store.md`). The price: a record shows up to 100 ms
/// after its step, and a killed Node loses at most that long's updates.
pub const DEFAULT_COMMIT_INTERVAL: Duration = Duration::from_millis(100);

/// How a [`StoreWriter`] queues and batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterConfig {
    /// Bound of the update queue; updates past it are dropped (at least 1).
    pub queue_capacity: usize,
    /// Most updates written in one transaction (at least 1).
    pub max_batch: usize,
    /// How long a batch gathers after its first update before it is
    /// committed, so also the least time between two commits (but for a
    /// backlog past a full batch, written at once); zero commits as soon as
    /// anything is queued. A short run's start and end, which arrive within
    /// it, share one transaction and one sync, so at a low request rate a
    /// request costs one sync, not two.
    pub commit_interval: Duration,
    /// How the store thread is scheduled against the threads that carry
    /// requests (default [`StorePriority::Idle`]: it never delays them).
    pub priority: StorePriority,
}

impl Default for WriterConfig {
    fn default() -> WriterConfig {
        WriterConfig {
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            max_batch: DEFAULT_MAX_BATCH,
            commit_interval: DEFAULT_COMMIT_INTERVAL,
            priority: StorePriority::default(),
        }
    }
}

/// One step of one run, for the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreUpdate {
    /// The run (shared by all its updates: cloning is a refcount bump).
    pub run: Arc<RunInfo>,
    /// What happened.
    pub transition: Transition,
}

/// Counters of a [`StoreWriter`], read with [`StoreHandle::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// Updates accepted into the queue.
    pub queued: u64,
    /// Updates dropped because the queue was full.
    pub dropped_full: u64,
    /// Updates dropped because the writer had shut down.
    pub dropped_closed: u64,
    /// Updates written in a committed transaction.
    pub written: u64,
    /// Updates skipped because their record is invalid (e.g. over-long run id).
    pub invalid: u64,
    /// Committed transactions.
    pub batches: u64,
    /// Transactions that failed (their updates are lost; logged).
    pub write_errors: u64,
    /// Updates lost with a failed transaction.
    pub failed: u64,
}

#[derive(Debug, Default)]
struct Counters {
    queued: AtomicU64,
    dropped_full: AtomicU64,
    dropped_closed: AtomicU64,
    written: AtomicU64,
    invalid: AtomicU64,
    batches: AtomicU64,
    write_errors: AtomicU64,
    failed: AtomicU64,
    /// Updates sent and not yet taken by the store thread: the queue's
    /// length, held within [`WriterConfig::queue_capacity`] by `record`.
    in_queue: AtomicUsize,
}

impl Counters {
    fn bump(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    fn snapshot(&self) -> WriterStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        WriterStats {
            queued: get(&self.queued),
            dropped_full: get(&self.dropped_full),
            dropped_closed: get(&self.dropped_closed),
            written: get(&self.written),
            invalid: get(&self.invalid),
            batches: get(&self.batches),
            write_errors: get(&self.write_errors),
            failed: get(&self.failed),
        }
    }
}

#[derive(Debug)]
enum Msg {
    Update(StoreUpdate),
    Flush(SyncSender<()>),
    Shutdown,
}

/// A cheap, cloneable, `Send` handle for recording run updates.
#[derive(Debug, Clone)]
pub struct StoreHandle {
    /// Unbounded by itself (it allocates as it fills, so an idle queue
    /// costs nothing); `record` bounds it with `counters.in_queue`.
    tx: Sender<Msg>,
    capacity: usize,
    counters: Arc<Counters>,
    /// The store thread, unparked by a flush so it does not wait out a
    /// commit interval.
    thread: std::thread::Thread,
}

impl StoreHandle {
    /// Queues `update` without blocking. Returns `false` (and counts it) if
    /// it was dropped because the queue is full or the writer is gone.
    pub fn record(&self, update: StoreUpdate) -> bool {
        let in_queue = &self.counters.in_queue;
        if in_queue.fetch_add(1, Ordering::Relaxed) >= self.capacity {
            in_queue.fetch_sub(1, Ordering::Relaxed);
            Counters::bump(&self.counters.dropped_full, 1);
            return false;
        }
        match self.tx.send(Msg::Update(update)) {
            Ok(()) => {
                Counters::bump(&self.counters.queued, 1);
                true
            }
            Err(_) => {
                in_queue.fetch_sub(1, Ordering::Relaxed);
                Counters::bump(&self.counters.dropped_closed, 1);
                false
            }
        }
    }

    /// Blocks until every update queued before this call is committed (or
    /// failed). Not for the event path.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.request_flush()?
            .recv()
            .map_err(|_| StoreError::WriterClosed)
    }

    /// Queues a flush and wakes the store thread; the receiver gets `()`
    /// once everything queued before it is committed (or failed).
    pub(crate) fn request_flush(&self) -> Result<Receiver<()>, StoreError> {
        let (ack_tx, ack_rx) = mpsc::sync_channel(1);
        self.tx
            .send(Msg::Flush(ack_tx))
            .map_err(|_| StoreError::WriterClosed)?;
        self.thread.unpark();
        Ok(ack_rx)
    }

    /// The writer's counters now.
    pub fn stats(&self) -> WriterStats {
        self.counters.snapshot()
    }
}

/// Owns the store thread. Dropping it writes what is queued and joins.
#[derive(Debug)]
pub struct StoreWriter {
    handle: StoreHandle,
    thread: Option<JoinHandle<()>>,
}

impl StoreWriter {
    /// Starts the store thread, which takes ownership of `store`.
    pub fn spawn(store: RunStore, config: WriterConfig) -> std::io::Result<StoreWriter> {
        StoreWriter::spawn_gated(store, config, None)
    }

    /// As [`StoreWriter::spawn`], but the thread waits for `gate` before it
    /// takes anything from the queue (tests fill the queue deterministically).
    pub(crate) fn spawn_gated(
        store: RunStore,
        config: WriterConfig,
        gate: Option<Receiver<()>>,
    ) -> std::io::Result<StoreWriter> {
        let (tx, rx) = mpsc::channel();
        let counters = Arc::new(Counters::default());
        let thread_counters = Arc::clone(&counters);
        let thread = std::thread::Builder::new()
            .name("iop-run-store".into())
            .spawn(move || {
                if let Err(error) = config.priority.apply_to_this_thread() {
                    tracing::warn!(
                        event = "run_store_priority_unchanged",
                        priority = config.priority.as_str(),
                        %error,
                        "run_store_priority_unchanged"
                    );
                }
                if let Some(gate) = gate {
                    let _ = gate.recv();
                }
                run(&store, &rx, &thread_counters, config);
            })?;
        Ok(StoreWriter {
            handle: StoreHandle {
                tx,
                capacity: config.queue_capacity.max(1),
                counters,
                thread: thread.thread().clone(),
            },
            thread: Some(thread),
        })
    }

    /// A handle for the run manager.
    pub fn handle(&self) -> StoreHandle {
        self.handle.clone()
    }

    /// See [`StoreHandle::record`].
    pub fn record(&self, update: StoreUpdate) -> bool {
        self.handle.record(update)
    }

    /// See [`StoreHandle::flush`].
    pub fn flush(&self) -> Result<(), StoreError> {
        self.handle.flush()
    }

    /// The writer's counters now.
    pub fn stats(&self) -> WriterStats {
        self.handle.stats()
    }
}

impl Drop for StoreWriter {
    fn drop(&mut self) {
        // A blocking send: shutdown waits for the queue, never drops it.
        let _ = self.handle.tx.send(Msg::Shutdown);
        self.handle.thread.unpark();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The store thread: wait for one message; take whatever is queued behind
/// it (up to `max_batch` updates, stopping at a flush or shutdown); if
/// that was an update and nothing stopped it, park for the commit interval
/// to gather what follows (a flush or shutdown unparks it early; a backlog
/// left by a full batch is written at once) and take what came; then write
/// it in one transaction and acknowledge flushes.
///
/// What is queued is taken *before* parking because the unpark of a
/// flush or shutdown can be lost to the channel: its blocking `recv` parks
/// this thread too, and a sender's wake-up and the flush's unpark that
/// both land before the thread runs leave one token, which `recv`
/// consumes. The flush's message was sent before its unpark, so it is then
/// already in the queue, and taking the queue finds it.
fn run(store: &RunStore, rx: &Receiver<Msg>, counters: &Counters, config: WriterConfig) {
    let mut taken = Taken::new(config.max_batch);
    let mut backlog = false;
    loop {
        let Ok(first) = rx.recv() else { return };
        let gathers =
            matches!(first, Msg::Update(_)) && !backlog && !config.commit_interval.is_zero();
        if !taken.take(first, counters) && !taken.take_queued(rx, counters) && gathers {
            // A spurious or early wake only commits sooner.
            std::thread::park_timeout(config.commit_interval);
            taken.take_queued(rx, counters);
        }
        backlog = taken.full();
        if !taken.pending.is_empty() {
            write_batch(store, &taken.pending, counters);
            taken.pending.clear();
        }
        if let Some(ack) = taken.ack.take() {
            let _ = ack.send(());
        }
        if taken.shutdown {
            return;
        }
    }
}

/// What the store thread takes from its queue for one transaction (written
/// through LMDB's [`super::Batch`] by [`write_batch`]).
struct Taken {
    pending: Vec<StoreUpdate>,
    /// A flush to acknowledge once the batch is written.
    ack: Option<SyncSender<()>>,
    shutdown: bool,
    max_batch: usize,
}

impl Taken {
    /// An empty batch of at most `max_batch` updates (at least one).
    fn new(max_batch: usize) -> Self {
        let max_batch = max_batch.max(1);
        Taken {
            pending: Vec::with_capacity(max_batch.min(DEFAULT_MAX_BATCH)),
            ack: None,
            shutdown: false,
            max_batch,
        }
    }

    /// Whether it holds `max_batch` updates.
    fn full(&self) -> bool {
        self.pending.len() >= self.max_batch
    }

    /// Takes `msg`; true once the batch must be written now (a flush, a
    /// shutdown, or `max_batch` updates).
    fn take(&mut self, msg: Msg, counters: &Counters) -> bool {
        match msg {
            Msg::Update(u) => {
                counters.in_queue.fetch_sub(1, Ordering::Relaxed);
                self.pending.push(u);
            }
            Msg::Flush(tx) => self.ack = Some(tx),
            Msg::Shutdown => self.shutdown = true,
        }
        self.ack.is_some() || self.shutdown || self.full()
    }

    /// Takes what is queued, without waiting, until [`Taken::take`] says
    /// the batch is due; returns whether it did.
    fn take_queued(&mut self, rx: &Receiver<Msg>, counters: &Counters) -> bool {
        while let Ok(msg) = rx.try_recv() {
            if self.take(msg, counters) {
                return true;
            }
        }
        false
    }
}

/// Writes `updates` in one transaction. A run's updates in the batch (a
/// short request's queued, running and terminal steps usually arrive
/// together) are merged first: its place is claimed once
/// ([`Batch::claim`]: a new run id is indexed without a lookup first, the
/// common case; a stored run's record is read), every update is applied in
/// order, and it is written once. A run id no record may have (too long,
/// or empty) is skipped, and its updates counted as invalid, before it is
/// claimed.
///
/// [`Batch::claim`]: super::Batch::claim
fn write_batch(store: &RunStore, updates: &[StoreUpdate], counters: &Counters) {
    let result = store.write(|batch| {
        // Runs in first-seen order (a new run's place in the store's order
        // is its first write), each with its place (`None`: skipped as
        // invalid), its merged record and how many updates it took.
        let mut runs: Vec<(Option<Place>, RunRecord, u64)> = Vec::with_capacity(updates.len());
        let mut index: HashMap<&str, usize> = HashMap::with_capacity(updates.len());
        for u in updates {
            let at = match index.get(u.run.run_id.as_str()) {
                Some(&at) => at,
                None => {
                    // Checked before the claim: an id LMDB cannot key (an
                    // empty one) would fail the whole transaction there.
                    let fresh = RunRecord::new(&u.run);
                    let run = if fresh.validate().is_err() {
                        (None, fresh, 0)
                    } else {
                        let (place, stored) = batch.claim(&u.run.run_id)?;
                        (Some(place), stored.unwrap_or(fresh), 0)
                    };
                    runs.push(run);
                    index.insert(&u.run.run_id, runs.len() - 1);
                    runs.len() - 1
                }
            };
            let (_, record, count) = &mut runs[at];
            record.apply(&u.transition);
            *count += 1;
        }
        let mut invalid = 0;
        for (place, record, count) in &runs {
            // Applying steps keeps a valid record valid (an error is bounded
            // as it is applied), so a claimed place is always written.
            match place {
                Some(place) => batch.write(*place, record)?,
                None => invalid += count,
            }
        }
        Ok(invalid)
    });
    match result {
        Ok(invalid) => {
            Counters::bump(&counters.batches, 1);
            Counters::bump(&counters.invalid, invalid);
            Counters::bump(&counters.written, updates.len() as u64 - invalid);
        }
        Err(error) => {
            Counters::bump(&counters.write_errors, 1);
            Counters::bump(&counters.failed, updates.len() as u64);
            tracing::warn!(
                event = "run_store_write_failed",
                updates = updates.len(),
                %error,
                "run_store_write_failed"
            );
        }
    }
}
