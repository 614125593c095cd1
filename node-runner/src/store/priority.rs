//! [`StorePriority`]: how the run store's thread is scheduled against the
//! threads that carry requests.
//!
//! The store thread commits a batch after its gather (100 ms by default)
//! or once it is full: a burst of B-tree work, page writes and a sync,
//! hundreds of microseconds of CPU on a busy node.
//! Under the normal policy a link or run thread woken on the CPU the burst
//! holds may wait for the burst's time slice to end, and the request it
//! carries waits with it. Under Linux's `SCHED_IDLE` any runnable thread of
//! the normal policy takes the CPU from the store thread at once, so the
//! store only uses CPU the event path leaves over. Measured on the 2-vCPU
//! bench box at 5,000 small requests/s: the tunnel's added p99 fell from
//! +0.62 to +0.40 ms (`bench-results/profiles.md`, round 39).
//!
//! The price: on a CPU busy for long, the store thread runs little, its
//! queue fills and updates are dropped — never blocking a stream, and
//! counted on `/metrics` (`iop_node_run_store_updates_total{outcome=
//! "dropped_full"}`). [`StorePriority::Normal`] keeps the normal policy
//! for a node that must keep every record under such load.

/// How the store thread is scheduled (`iop-node --run-store-priority`;
/// clap reads and lists the values by their [`as_str`](Self::as_str) names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum StorePriority {
    /// `SCHED_IDLE`: it runs only when no normal thread wants the CPU.
    #[default]
    Idle,
    /// The normal policy, as the threads that carry requests.
    Normal,
}

impl StorePriority {
    /// The value's name on the command line and in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            StorePriority::Idle => "idle",
            StorePriority::Normal => "normal",
        }
    }

    /// Applies this priority to the calling thread. `Normal` changes
    /// nothing; `Idle` fails only where the system refuses `SCHED_IDLE`
    /// (a seccomp filter, say), and the thread then keeps its policy.
    pub(crate) fn apply_to_this_thread(self) -> std::io::Result<()> {
        match self {
            StorePriority::Normal => Ok(()),
            StorePriority::Idle => enter_sched_idle(),
        }
    }
}

/// Puts the calling thread (not its process) under `SCHED_IDLE`. Any
/// thread may lower itself so, with no privilege.
#[allow(unsafe_code)] // one system call; see the SAFETY note
fn enter_sched_idle() -> std::io::Result<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `sched_setscheduler` only reads `param`, a valid, initialized
    // `sched_param` on this stack that outlives the call; pid 0 names the
    // calling thread. It writes no memory of ours.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calling thread's policy, from the kernel.
    #[allow(unsafe_code)]
    fn policy_of_this_thread() -> i32 {
        // SAFETY: no arguments but a pid (0: the calling thread); no memory.
        unsafe { libc::sched_getscheduler(0) }
    }

    #[test]
    fn idle_puts_only_the_calling_thread_under_sched_idle() {
        let before = policy_of_this_thread();
        let policy = std::thread::spawn(|| {
            StorePriority::Idle.apply_to_this_thread().unwrap();
            policy_of_this_thread()
        })
        .join()
        .unwrap();
        assert_eq!(policy, libc::SCHED_IDLE);
        assert_eq!(policy_of_this_thread(), before, "the caller is unchanged");
        let policy = std::thread::spawn(|| {
            StorePriority::Normal.apply_to_this_thread().unwrap();
            policy_of_this_thread()
        })
        .join()
        .unwrap();
        assert_eq!(policy, before);
    }

    #[test]
    fn names_round_trip_and_others_are_refused() {
        use clap::ValueEnum;
        assert_eq!(StorePriority::default(), StorePriority::Idle);
        for p in StorePriority::value_variants() {
            let name = p.to_possible_value().unwrap();
            assert_eq!(name.get_name(), p.as_str());
            assert_eq!(StorePriority::from_str(p.as_str(), false), Ok(*p));
        }
        assert!(StorePriority::from_str("low", false).is_err());
        assert!(StorePriority::from_str("IDLE", false).is_err());
    }
}
