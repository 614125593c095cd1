//! The wheel's structural invariants, checked in O(n) by tests.

use super::{
    FREE, NIL, PENDING, READY, SLOT_LISTS, SLOTS_PER_LEVEL, TimerWheel, WHEEL_SPAN_MS, slot_list,
};

impl<T> TimerWheel<T> {
    /// Checks every structural invariant; panics with what broke. O(n).
    ///
    /// For tests (the model test calls it after every step).
    #[doc(hidden)]
    pub fn assert_invariants(&self) {
        let mut linked = 0;
        for (list, l) in self.lists.iter().enumerate() {
            let (mut prev, mut i) = (NIL, l.head);
            while i != NIL {
                let e = &self.entries[i as usize];
                assert_eq!(usize::from(e.list), list, "entry {i} is in list {list}");
                assert_eq!(e.prev, prev, "entry {i}: broken back link");
                assert!(e.value.is_some(), "entry {i}: linked without a value");
                match list {
                    PENDING => assert!(e.deadline <= self.elapsed, "pending entry {i} not due"),
                    READY => assert!(e.deadline <= self.elapsed, "ready entry {i} not due"),
                    _ => {
                        assert!(
                            e.slotted <= e.deadline,
                            "entry {i}: slotted after its deadline"
                        );
                        assert!(e.slotted > self.elapsed, "entry {i}: slotted in the past");
                        assert!(
                            e.slotted - self.elapsed < WHEEL_SPAN_MS,
                            "entry {i}: past the span"
                        );
                        assert_eq!(
                            slot_list(self.elapsed, e.slotted),
                            list,
                            "entry {i}: misfiled"
                        );
                    }
                }
                (prev, i) = (i, e.next);
                linked += 1;
            }
            assert_eq!(l.tail, prev, "list {list}: tail");
            if list < SLOT_LISTS {
                let bit = self.occupied[list / SLOTS_PER_LEVEL] >> (list % SLOTS_PER_LEVEL) & 1;
                assert_eq!(bit == 1, l.head != NIL, "list {list}: occupancy bit");
            }
        }
        assert_eq!(linked, self.len, "linked entries vs len");
        let live = self.entries.iter().filter(|e| e.list != FREE).count();
        assert_eq!(live, self.len, "live entries vs len");
        if self.lists[PENDING].head != NIL {
            let mut i = self.lists[PENDING].head;
            while i != NIL {
                assert!(
                    self.pending_min <= self.entries[i as usize].deadline,
                    "pending_min"
                );
                i = self.entries[i as usize].next;
            }
        }
    }
}
