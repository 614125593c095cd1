//! [`StorePriority`]: how the run store's thread is scheduled against the
//! threads that carry requests.
//!
//! The store thread commits a batch every 20 ms: a burst of B-tree work,
//! page writes and a sync, hundreds of microseconds of CPU on a busy node.
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

use std::fmt;
use std::str::FromStr;

/// How the store thread is scheduled (`iop-node --run-store-priority`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum StorePriority {
    /// `SCHED_IDLE`: it runs only when no normal thread wants the CPU.
    #[default]
    Idle,
    /// The normal policy, as the threads that carry requests.
    Normal,
}

impl StorePriority {
    /// The name `FromStr` reads.
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

impl fmt::Display for StorePriority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `--run-store-priority` value that is neither `idle` nor `normal`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("run store priority must be `idle` or `normal`, not `{0}`")]
pub struct StorePriorityError(String);

impl FromStr for StorePriority {
    type Err = StorePriorityError;

    fn from_str(value: &str) -> Result<StorePriority, StorePriorityError> {
        match value {
            "idle" => Ok(StorePriority::Idle),
            "normal" => Ok(StorePriority::Normal),
            other => Err(StorePriorityError(other.to_owned())),
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
        assert_eq!(StorePriority::default(), StorePriority::Idle);
        for p in [StorePriority::Idle, StorePriority::Normal] {
            assert_eq!(p.as_str().parse(), Ok(p));
            assert_eq!(p.to_string(), p.as_str());
        }
        let err = "low".parse::<StorePriority>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "run store priority must be `idle` or `normal`, not `low`"
        );
        assert!("IDLE".parse::<StorePriority>().is_err());
    }
}
