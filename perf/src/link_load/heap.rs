//! Live heap by allocation size: a counting global allocator, to break the
//! Edge's per-connection memory down into its allocations.
//!
//! `iop-link-load heap` installs [`CountingAlloc`] as its global allocator,
//! starts the Edge in-process, runs the simulated fleet as a child process
//! (so only the Edge allocates in this one), and divides the difference of
//! two [`HeapHistogram`] snapshots by the node count. Unlike RSS this counts
//! what was asked of the allocator, touched or not.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering::Relaxed};

/// Size classes: class `c` holds sizes in `[2^(c-1), 2^c)` (class 0: size 0).
const CLASSES: usize = 48;

static LIVE_COUNT: [AtomicI64; CLASSES] = [const { AtomicI64::new(0) }; CLASSES];
static LIVE_BYTES: [AtomicI64; CLASSES] = [const { AtomicI64::new(0) }; CLASSES];

fn class(size: usize) -> usize {
    let bits = (usize::BITS - size.leading_zeros()) as usize;
    bits.min(CLASSES - 1)
}

fn record(size: usize, sign: i64) {
    let c = class(size);
    LIVE_COUNT[c].fetch_add(sign, Relaxed);
    LIVE_BYTES[c].fetch_add(sign * i64::try_from(size).unwrap_or(i64::MAX), Relaxed);
}

/// The system allocator, counting live allocations and bytes per size class.
/// Two relaxed atomic adds per allocation and per free.
#[derive(Debug, Default, Clone, Copy)]
pub struct CountingAlloc;

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; the counters are plain atomics and never allocate.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        record(layout.size(), 1);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        record(layout.size(), 1);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        record(layout.size(), -1);
        // SAFETY: `ptr` came from this allocator (hence `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        record(layout.size(), -1);
        record(new_size, 1);
        // SAFETY: the caller upholds `GlobalAlloc::realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// A snapshot of the live heap per size class (all zero unless
/// [`CountingAlloc`] is the global allocator).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeapHistogram {
    count: [i64; CLASSES],
    bytes: [i64; CLASSES],
}

/// One size class of a [`HeapHistogram::per_node`] difference.
#[derive(Debug, Clone, PartialEq)]
pub struct HeapClass {
    /// Smallest size of the class, bytes.
    pub min_size: usize,
    /// One past the largest size of the class, bytes.
    pub max_size: usize,
    /// Live allocations added, per node.
    pub allocs_per_node: f64,
    /// Live bytes added, per node.
    pub bytes_per_node: f64,
}

impl HeapHistogram {
    /// The live heap now.
    pub fn now() -> Self {
        Self {
            count: std::array::from_fn(|c| LIVE_COUNT[c].load(Relaxed)),
            bytes: std::array::from_fn(|c| LIVE_BYTES[c].load(Relaxed)),
        }
    }

    /// Live bytes in total.
    pub fn total_bytes(&self) -> i64 {
        self.bytes.iter().sum()
    }

    /// What grew (or shrank) since `before`, divided by `nodes`: the classes
    /// that changed by at least 0.05 allocations per node.
    pub fn per_node(&self, before: &Self, nodes: usize) -> Vec<HeapClass> {
        let nodes = nodes.max(1) as f64;
        (0..CLASSES)
            .filter_map(|c| {
                let allocs = (self.count[c] - before.count[c]) as f64 / nodes;
                let bytes = (self.bytes[c] - before.bytes[c]) as f64 / nodes;
                (allocs.abs() >= 0.05).then(|| HeapClass {
                    min_size: if c == 0 { 0 } else { 1 << (c - 1) },
                    max_size: 1 << c,
                    allocs_per_node: allocs,
                    bytes_per_node: bytes,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_are_powers_of_two() {
        assert_eq!(class(0), 0);
        assert_eq!(class(1), 1);
        assert_eq!(class(65_535), 16);
        assert_eq!(class(65_536), 17);
        assert_eq!(class(usize::MAX), CLASSES - 1);
    }

    #[test]
    fn per_node_divides_the_difference() {
        let before = HeapHistogram {
            count: [0; CLASSES],
            bytes: [0; CLASSES],
        };
        let mut after = before.clone();
        after.count[17] = 10;
        after.bytes[17] = 10 * 65_536;
        let classes = after.per_node(&before, 10);
        assert_eq!(classes.len(), 1);
        assert_eq!(classes[0].min_size, 65_536);
        assert_eq!(classes[0].bytes_per_node, 65_536.0);
        assert_eq!(after.total_bytes(), 655_360);
    }
}
