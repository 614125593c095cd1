//! The hierarchical wheel itself: a slab of entries, intrusive slot lists,
//! placement, lazy extension and expiry. The contract is in the module docs
//! of [`crate::timer`].

use std::fmt;

mod invariants;

/// Bits of a slot index: each level has `2^6 = 64` slots.
const SLOT_BITS: u32 = 6;
/// Slots per level; one bit each in the level's `u64` occupancy mask.
pub const SLOTS_PER_LEVEL: usize = 1 << SLOT_BITS;
/// Levels of the wheel. Level `l` has slots `64^l` ms wide.
pub const LEVELS: usize = 6;
/// Milliseconds one rotation of the top level covers: `64^6` ms = 2^36 ms,
/// about 795 days. A deadline further out is parked at the top level and
/// re-slotted when its parking slot comes due.
pub const WHEEL_SPAN_MS: u64 = 1 << (SLOT_BITS * LEVELS as u32);
/// Latest time the wheel represents: 2^46 ms, about 2230 years after the
/// clock's origin. Deadlines and `now`s past it are clamped to it, so a
/// timer set to `u64::MAX` means "never".
///
/// It bounds the cost of parked timers: one parked past the span is
/// re-slotted once per [`WHEEL_SPAN_MS`] of wheel time, so at most
/// `2^46 / 2^36 = 1024` times over the wheel's whole life, however far one
/// poll jumps.
pub const MAX_TIME_MS: u64 = 1 << 46;
/// Most timers one wheel can hold: slab indices are `u32` and `u32::MAX`
/// means "no entry". Far past memory (each entry is ~48 bytes + `T`).
pub const MAX_TIMERS: usize = u32::MAX as usize;

/// "No entry" in list links.
const NIL: u32 = u32::MAX;
/// Lists `0..SLOT_LISTS` are the slots, level-major.
const SLOT_LISTS: usize = LEVELS * SLOTS_PER_LEVEL;
/// Entries whose deadline had already passed when they were placed.
const PENDING: usize = SLOT_LISTS;
/// Entries due now, in firing order, handed out by `pop_expired`.
const READY: usize = SLOT_LISTS + 1;
const LIST_COUNT: usize = SLOT_LISTS + 2;
/// `Entry::list` of a free slab entry.
const FREE: u16 = u16::MAX;
/// A slab entry whose generation reaches this is retired, never reused.
const RETIRED: u32 = u32::MAX;

/// Handle of a timer on a [`TimerWheel`].
///
/// Copyable and cheap (8 bytes). The generation fences it: once its timer has
/// fired or been cancelled, the key is stale and every operation with it is a
/// no-op (`false` / `None`), even after the slab entry is reused for another
/// timer. A slab entry whose generation counter is exhausted is retired, so a
/// key is never handed out twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerKey {
    pub(super) index: u32,
    generation: u32,
}

/// A timer handed out by [`TimerWheel::pop_expired`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expired<T> {
    /// The key it had; stale from now on.
    pub key: TimerKey,
    /// Its deadline (ms). `now - deadline` is how late the driver was.
    pub deadline: u64,
    /// The value it was inserted with.
    pub value: T,
}

/// Counters of the wheel's internal work, for tests and metrics.
///
/// A lazy reset (a deadline moved later) is *not* counted: it is one store,
/// and counting it would make it two.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimerStats {
    /// Timers inserted.
    pub inserted: u64,
    /// Timers handed out as expired.
    pub fired: u64,
    /// Timers cancelled.
    pub cancelled: u64,
    /// Resets that re-linked the timer at once: moved earlier than the slot
    /// it waits in, or out of the due lists.
    pub relinked: u64,
    /// Timers moved down the hierarchy when a higher-level slot came due.
    pub cascaded: u64,
    /// Timers whose level-0 slot came due after their deadline had moved
    /// later (or that were parked beyond the span), re-slotted instead of
    /// fired: the whole cost of lazy extension.
    pub deferred: u64,
}

#[derive(Debug, Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
}

const EMPTY: List = List {
    head: NIL,
    tail: NIL,
};

#[derive(Debug)]
struct Entry<T> {
    value: Option<T>,
    /// The deadline the owner asked for. May be later than `slotted`.
    deadline: u64,
    /// The time the entry is filed under; `<= deadline`.
    slotted: u64,
    /// Insertion order, to break ties between equal deadlines.
    seq: u64,
    prev: u32,
    /// Next in the entry's list, or next free entry.
    next: u32,
    generation: u32,
    /// Which list holds it, or `FREE`.
    list: u16,
}

/// A hierarchical timer wheel with lazily extended deadlines. See the
/// [module docs](crate::timer) for the contract and an example.
pub struct TimerWheel<T> {
    entries: Vec<Entry<T>>,
    free_head: u32,
    lists: [List; LIST_COUNT],
    /// Bit `s` of `occupied[l]` is set iff slot `s` of level `l` is non-empty.
    occupied: [u64; LEVELS],
    /// Every timer due at or before this has been handed to `READY` (or
    /// fired); slots before it are empty.
    elapsed: u64,
    len: usize,
    next_seq: u64,
    /// A lower bound of the deadlines in `PENDING` while it is non-empty.
    pending_min: u64,
    /// Reused to order one batch of due entries.
    scratch: Vec<u32>,
    stats: TimerStats,
}

impl<T> Default for TimerWheel<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for TimerWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerWheel")
            .field("len", &self.len)
            .field("elapsed", &self.elapsed)
            .field("slab", &self.entries.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<T> TimerWheel<T> {
    /// An empty wheel at time 0.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty wheel at time 0 with room for `capacity` timers: inserting
    /// up to that many and polling them never allocates.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            entries: Vec::with_capacity(capacity),
            free_head: NIL,
            lists: [EMPTY; LIST_COUNT],
            occupied: [0; LEVELS],
            elapsed: 0,
            len: 0,
            next_seq: 0,
            pending_min: u64::MAX,
            scratch: Vec::with_capacity(capacity),
            stats: TimerStats::default(),
        }
    }

    /// Live timers (inserted, not yet fired or cancelled).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no timer is live.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The wheel's time: the latest `now` it has been polled with.
    pub fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Counters of internal work since the wheel was made.
    pub fn stats(&self) -> TimerStats {
        self.stats
    }

    /// Whether `key` names a live timer.
    pub fn contains(&self, key: TimerKey) -> bool {
        self.live(key).is_some()
    }

    /// The deadline of a live timer (the latest one set, lazily or not).
    pub fn deadline(&self, key: TimerKey) -> Option<u64> {
        self.live(key).map(|i| self.entries[i].deadline)
    }

    /// The value of a live timer.
    pub fn get(&self, key: TimerKey) -> Option<&T> {
        self.live(key).and_then(|i| self.entries[i].value.as_ref())
    }

    /// The value of a live timer, mutably.
    pub fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        self.live(key).and_then(|i| self.entries[i].value.as_mut())
    }

    /// Adds a timer due at `deadline_ms` (clamped to [`MAX_TIME_MS`]).
    ///
    /// A deadline at or before [`elapsed`](Self::elapsed) fires at the next
    /// poll. O(1); allocates only when the slab grows past its high-water mark.
    ///
    /// # Panics
    /// If the wheel already holds [`MAX_TIMERS`] entries.
    pub fn insert(&mut self, deadline_ms: u64, value: T) -> TimerKey {
        let deadline = deadline_ms.min(MAX_TIME_MS);
        let seq = self.next_seq;
        self.next_seq += 1;
        let index = if self.free_head != NIL {
            let index = self.free_head;
            let e = &mut self.entries[index as usize];
            self.free_head = e.next;
            e.value = Some(value);
            e.deadline = deadline;
            e.seq = seq;
            index
        } else {
            let index = u32::try_from(self.entries.len())
                .ok()
                .filter(|&i| i != NIL)
                .unwrap_or_else(|| panic!("timer wheel is full ({MAX_TIMERS} entries)"));
            self.entries.push(Entry {
                value: Some(value),
                deadline,
                slotted: deadline,
                seq,
                prev: NIL,
                next: NIL,
                generation: 0,
                list: FREE,
            });
            index
        };
        self.len += 1;
        self.stats.inserted += 1;
        self.place(index);
        TimerKey {
            index,
            generation: self.entries[index as usize].generation,
        }
    }

    /// Moves a live timer's deadline to `deadline_ms`; `false` if `key` is
    /// stale.
    ///
    /// A deadline at or after the time the timer is filed under is one store:
    /// the timer stays where it is, and when that slot comes due it is
    /// re-slotted at its new deadline instead of firing. An earlier one is
    /// re-linked now. Either way O(1), never allocating.
    pub fn reset(&mut self, key: TimerKey, deadline_ms: u64) -> bool {
        let Some(i) = self.live(key) else {
            return false;
        };
        let deadline = deadline_ms.min(MAX_TIME_MS);
        let e = &mut self.entries[i];
        e.deadline = deadline;
        if usize::from(e.list) < SLOT_LISTS && deadline >= e.slotted {
            return true;
        }
        self.stats.relinked += 1;
        self.unlink(i as u32);
        self.place(i as u32);
        true
    }

    /// Removes a live timer and returns its value; `None` if `key` is stale.
    /// O(1).
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        let i = self.live(key)?;
        self.unlink(i as u32);
        self.stats.cancelled += 1;
        Some(self.release(i as u32).2)
    }

    /// Arms, moves or disarms one owner's single entry: `key` is the entry's
    /// current key (if armed), `deadline_ms` where it should be (`None`:
    /// disarmed). Returns the key to keep. `value` is asked for only when a
    /// new entry is made: none was armed, or `key` went stale when it fired.
    pub fn arm(
        &mut self,
        key: Option<TimerKey>,
        deadline_ms: Option<u64>,
        value: impl FnOnce() -> T,
    ) -> Option<TimerKey> {
        match (key, deadline_ms) {
            (Some(key), Some(at)) if self.reset(key, at) => Some(key),
            (_, Some(at)) => Some(self.insert(at, value())),
            (Some(key), None) => {
                self.cancel(key);
                None
            }
            (None, None) => None,
        }
    }

    /// The next time the driver should poll: `None` when no timer is live.
    ///
    /// Never later than the earliest deadline; it can be earlier (a slot
    /// that must cascade, or one holding a lazily extended timer), in which
    /// case polling then fires nothing and moves it on. At or before
    /// [`elapsed`](Self::elapsed) means "poll now".
    pub fn next_expiry(&self) -> Option<u64> {
        let ready = self.lists[READY].head;
        if ready != NIL {
            return Some(self.entries[ready as usize].deadline);
        }
        if self.lists[PENDING].head != NIL {
            return Some(self.pending_min);
        }
        self.next_slot().map(|(_, start)| start)
    }

    /// Hands out the next timer due at `now_ms`, or `None` once none is.
    ///
    /// Call it until `None`. Timers come out in deadline order, ties in
    /// insertion order; one inserted or reset to a past deadline while
    /// draining comes out in the same loop, after those already found due.
    /// `now_ms` earlier than [`elapsed`](Self::elapsed) counts as `elapsed`:
    /// the wheel's time never goes back.
    pub fn pop_expired(&mut self, now_ms: u64) -> Option<Expired<T>> {
        let now = now_ms.min(MAX_TIME_MS);
        loop {
            let head = self.lists[READY].head;
            if head != NIL {
                self.unlink(head);
                self.stats.fired += 1;
                let (key, deadline, value) = self.release(head);
                return Some(Expired {
                    key,
                    deadline,
                    value,
                });
            }
            if self.lists[PENDING].head != NIL {
                self.drain_pending();
                continue;
            }
            match self.next_slot() {
                Some((list, start)) if start <= now => self.expire_slot(list, start),
                _ => {
                    self.elapsed = self.elapsed.max(now);
                    return None;
                }
            }
        }
    }

    /// Drains every timer due at `now_ms` into `fire`, in the order of
    /// [`pop_expired`](Self::pop_expired); returns how many fired.
    pub fn poll_expired(&mut self, now_ms: u64, mut fire: impl FnMut(Expired<T>)) -> usize {
        let mut fired = 0;
        while let Some(expired) = self.pop_expired(now_ms) {
            fire(expired);
            fired += 1;
        }
        fired
    }

    /// The values of every timer due at `now_ms`, in the order of
    /// [`pop_expired`](Self::pop_expired): for a driver that must let go of
    /// the wheel (a `RefCell` borrow) before it acts on them, as acting may
    /// arm timers again.
    pub fn take_expired(&mut self, now_ms: u64) -> Vec<T> {
        let mut due = Vec::new();
        self.poll_expired(now_ms, |expired| due.push(expired.value));
        due
    }

    fn live(&self, key: TimerKey) -> Option<usize> {
        let i = key.index as usize;
        match self.entries.get(i) {
            Some(e) if e.generation == key.generation && e.list != FREE => Some(i),
            _ => None,
        }
    }

    /// Files an unlinked entry by its deadline relative to `elapsed`.
    fn place(&mut self, i: u32) {
        let deadline = self.entries[i as usize].deadline;
        if deadline <= self.elapsed {
            self.pending_min = if self.lists[PENDING].head == NIL {
                deadline
            } else {
                self.pending_min.min(deadline)
            };
            self.link_back(PENDING, i);
            return;
        }
        // Park past-the-span deadlines at the last slot time the wheel can
        // represent; that slot defers them like a lazily extended timer.
        let slotted = deadline.min(self.elapsed + (WHEEL_SPAN_MS - 1));
        self.entries[i as usize].slotted = slotted;
        self.link_back(slot_list(self.elapsed, slotted), i);
    }

    /// The earliest non-empty slot: its list and the time it comes due.
    fn next_slot(&self) -> Option<(usize, u64)> {
        for (level, &occupied) in self.occupied.iter().enumerate() {
            if occupied == 0 {
                continue;
            }
            let shift = SLOT_BITS * level as u32;
            let current = (self.elapsed >> shift) & (SLOTS_PER_LEVEL as u64 - 1);
            // Start of the window of this level that holds `elapsed`.
            let window = self.elapsed & !((1u64 << (shift + SLOT_BITS)) - 1);
            let ahead = occupied & ((u64::MAX << current) << 1);
            let (slot, start) = if ahead != 0 {
                let slot = u64::from(ahead.trailing_zeros());
                (slot, window + (slot << shift))
            } else {
                // Only the top level wraps: a slot at or behind the current
                // one holds timers of the next rotation.
                debug_assert_eq!(level, LEVELS - 1, "a lower level holds a slot behind time");
                let slot = u64::from(occupied.trailing_zeros());
                (slot, window + WHEEL_SPAN_MS + (slot << shift))
            };
            return Some((level * SLOTS_PER_LEVEL + slot as usize, start));
        }
        None
    }

    /// Advances to `start` and empties the slot list due then: due entries
    /// go to `READY` in insertion order, the rest are re-slotted.
    fn expire_slot(&mut self, list: usize, start: u64) {
        self.elapsed = start;
        let level0 = list < SLOTS_PER_LEVEL;
        let mut i = self.take_list(list);
        while i != NIL {
            let e = &self.entries[i as usize];
            let next = e.next;
            if e.deadline <= start {
                self.scratch.push(i);
            } else {
                if level0 {
                    self.stats.deferred += 1;
                } else {
                    self.stats.cascaded += 1;
                }
                self.place(i);
            }
            i = next;
        }
        let entries = &self.entries;
        self.scratch
            .sort_unstable_by_key(|&i| entries[i as usize].seq);
        self.flush_scratch_to_ready();
    }

    /// Moves everything pending to `READY`, ordered by (deadline, seq).
    fn drain_pending(&mut self) {
        let mut i = self.take_list(PENDING);
        while i != NIL {
            self.scratch.push(i);
            i = self.entries[i as usize].next;
        }
        let entries = &self.entries;
        self.scratch.sort_unstable_by_key(|&i| {
            let e = &entries[i as usize];
            (e.deadline, e.seq)
        });
        self.flush_scratch_to_ready();
    }

    fn flush_scratch_to_ready(&mut self) {
        let mut scratch = std::mem::take(&mut self.scratch);
        for &i in &scratch {
            self.link_back(READY, i);
        }
        scratch.clear();
        self.scratch = scratch;
    }

    /// Frees an unlinked entry; returns what it held.
    fn release(&mut self, i: u32) -> (TimerKey, u64, T) {
        let e = &mut self.entries[i as usize];
        let value = e.value.take().expect("a live entry holds its value");
        let key = TimerKey {
            index: i,
            generation: e.generation,
        };
        e.list = FREE;
        e.generation += 1;
        if e.generation != RETIRED {
            e.next = self.free_head;
            self.free_head = i;
        }
        self.len -= 1;
        (key, e.deadline, value)
    }

    fn link_back(&mut self, list: usize, i: u32) {
        let tail = self.lists[list].tail;
        let e = &mut self.entries[i as usize];
        e.prev = tail;
        e.next = NIL;
        e.list = list as u16;
        if tail == NIL {
            self.lists[list].head = i;
            if list < SLOT_LISTS {
                self.occupied[list / SLOTS_PER_LEVEL] |= 1 << (list % SLOTS_PER_LEVEL);
            }
        } else {
            self.entries[tail as usize].next = i;
        }
        self.lists[list].tail = i;
    }

    fn unlink(&mut self, i: u32) {
        let e = &self.entries[i as usize];
        let (prev, next, list) = (e.prev, e.next, usize::from(e.list));
        if prev == NIL {
            self.lists[list].head = next;
        } else {
            self.entries[prev as usize].next = next;
        }
        if next == NIL {
            self.lists[list].tail = prev;
        } else {
            self.entries[next as usize].prev = prev;
        }
        if self.lists[list].head == NIL && list < SLOT_LISTS {
            self.occupied[list / SLOTS_PER_LEVEL] &= !(1 << (list % SLOTS_PER_LEVEL));
        }
    }

    /// Empties a list and returns its old head (the chain stays walkable
    /// through `next` until its entries are re-linked).
    fn take_list(&mut self, list: usize) -> u32 {
        let head = self.lists[list].head;
        self.lists[list] = EMPTY;
        if list < SLOT_LISTS {
            self.occupied[list / SLOTS_PER_LEVEL] &= !(1 << (list % SLOTS_PER_LEVEL));
        }
        head
    }

    #[cfg(test)]
    pub(super) fn set_generation_for_test(&mut self, key: TimerKey, generation: u32) -> TimerKey {
        let i = self.live(key).expect("live key");
        self.entries[i].generation = generation;
        TimerKey {
            index: key.index,
            generation,
        }
    }
}

/// The slot list a time `at > elapsed`, `at - elapsed < WHEEL_SPAN_MS`, is
/// filed in: the level is the highest 6-bit digit in which `at` and
/// `elapsed` differ; a time in the next top-level rotation wraps into the
/// top level.
fn slot_list(elapsed: u64, at: u64) -> usize {
    let differ = elapsed ^ at;
    let level = if differ >= WHEEL_SPAN_MS {
        LEVELS - 1
    } else {
        ((63 - (differ | (SLOTS_PER_LEVEL as u64 - 1)).leading_zeros()) / SLOT_BITS) as usize
    };
    let slot = (at >> (SLOT_BITS * level as u32)) as usize & (SLOTS_PER_LEVEL - 1);
    level * SLOTS_PER_LEVEL + slot
}
