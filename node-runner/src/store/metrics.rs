//! The run store writer's counters ([`WriterStats`]) as Prometheus text,
//! listed by the Node's admin port (`GET /metrics`, [`crate::admin`]).
//!
//! The writer drops an update rather than block a stream (see
//! [`super::writer`]), so these are how an operator sees that records are
//! being lost, and why: a full queue (the disk or the store thread cannot
//! keep up), a failed transaction (the disk), or an invalid record.
//!
//! - `iop_node_run_store_updates_total{outcome}` (counter), `outcome` ∈
//!   `written` | `invalid` | `failed` | `dropped_full` | `dropped_closed`:
//!   every update offered to the writer ends in exactly one of them (or is
//!   still waiting).
//! - `iop_node_run_store_commits_total{result}` (counter), `result` ∈ `ok`
//!   | `failed`: transactions (one a batch, one sync each).
//! - `iop_node_run_store_waiting` (gauge): updates accepted and not yet
//!   written, skipped or lost.
//!
//! Every series exists from start-up at 0; the labels are closed sets.

use std::fmt::Write as _;

use super::WriterStats;

/// Name of the updates counter.
pub const UPDATES_TOTAL: &str = "iop_node_run_store_updates_total";
/// Name of the transactions counter.
pub const COMMITS_TOTAL: &str = "iop_node_run_store_commits_total";
/// Name of the waiting updates gauge.
pub const WAITING: &str = "iop_node_run_store_waiting";

impl WriterStats {
    /// Updates accepted into the queue and not yet written, skipped as
    /// invalid or lost with a failed transaction. The counters are read one
    /// by one, so a snapshot taken mid-batch may count a few more.
    pub fn waiting(&self) -> u64 {
        self.queued
            .saturating_sub(self.written + self.invalid + self.failed)
    }

    /// Appends these counters as Prometheus text to `out`.
    pub fn render(&self, out: &mut String) {
        let _ = writeln!(
            out,
            "# HELP {UPDATES_TOTAL} Run record updates offered to the run store (F15), by how each ended."
        );
        let _ = writeln!(out, "# TYPE {UPDATES_TOTAL} counter");
        for (outcome, n) in [
            ("written", self.written),
            ("invalid", self.invalid),
            ("failed", self.failed),
            ("dropped_full", self.dropped_full),
            ("dropped_closed", self.dropped_closed),
        ] {
            let _ = writeln!(out, "{UPDATES_TOTAL}{{outcome=\"{outcome}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "# HELP {COMMITS_TOTAL} Run store transactions (one batch and one sync each), by result."
        );
        let _ = writeln!(out, "# TYPE {COMMITS_TOTAL} counter");
        let _ = writeln!(out, "{COMMITS_TOTAL}{{result=\"ok\"}} {}", self.batches);
        let _ = writeln!(
            out,
            "{COMMITS_TOTAL}{{result=\"failed\"}} {}",
            self.write_errors
        );
        let _ = writeln!(
            out,
            "# HELP {WAITING} Run record updates queued for the run store and not yet written."
        );
        let _ = writeln!(out, "# TYPE {WAITING} gauge");
        let _ = writeln!(out, "{WAITING} {}", self.waiting());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_series_is_listed_at_zero_before_any_update() {
        let mut out = String::new();
        WriterStats::default().render(&mut out);
        for outcome in [
            "written",
            "invalid",
            "failed",
            "dropped_full",
            "dropped_closed",
        ] {
            assert!(
                out.contains(&format!("{UPDATES_TOTAL}{{outcome=\"{outcome}\"}} 0\n")),
                "{outcome} missing:\n{out}"
            );
        }
        assert!(out.contains(&format!("{COMMITS_TOTAL}{{result=\"ok\"}} 0\n")));
        assert!(out.contains(&format!("{COMMITS_TOTAL}{{result=\"failed\"}} 0\n")));
        assert!(out.contains(&format!("{WAITING} 0\n")));
        assert_eq!(out.matches("# TYPE ").count(), 3);
    }

    #[test]
    fn counts_and_waiting_follow_the_writer() {
        let stats = WriterStats {
            queued: 10,
            dropped_full: 3,
            dropped_closed: 1,
            written: 5,
            invalid: 1,
            batches: 2,
            write_errors: 1,
            failed: 2,
        };
        let mut out = String::new();
        stats.render(&mut out);
        assert!(out.contains(&format!("{UPDATES_TOTAL}{{outcome=\"written\"}} 5\n")));
        assert!(out.contains(&format!("{UPDATES_TOTAL}{{outcome=\"dropped_full\"}} 3\n")));
        assert!(out.contains(&format!("{COMMITS_TOTAL}{{result=\"failed\"}} 1\n")));
        assert_eq!(stats.waiting(), 2);
        assert!(out.contains(&format!("{WAITING} 2\n")));
        // A snapshot read mid-batch never goes below zero.
        let racy = WriterStats {
            queued: 1,
            written: 2,
            ..WriterStats::default()
        };
        assert_eq!(racy.waiting(), 0);
    }
}
