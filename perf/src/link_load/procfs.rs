//! Process and system samples from `/proc`: memory, CPU time, socket memory.
//!
//! CPU time comes from two places. `/proc/PID/stat` `utime + stime` counts
//! every thread the process ever had, exited ones included, but only in clock
//! ticks (`USER_HZ`, 100 per second on Linux). The sum of
//! `/proc/PID/task/*/schedstat` is in nanoseconds but forgets exited
//! threads. [`cpu_between`] uses the nanoseconds when both samples saw the
//! same threads, and the ticks otherwise.

use std::fs;
use std::io;
use std::time::{Duration, Instant};

/// Clock ticks per second of `/proc/PID/stat` times (`USER_HZ`; fixed at 100
/// in the Linux ABI on every architecture IOP runs on).
pub const USER_HZ: u64 = 100;

/// One sample of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcSample {
    /// When it was taken.
    pub at: Instant,
    /// `utime + stime` of the whole process, in clock ticks.
    pub cpu_ticks: u64,
    /// Sum of the live threads' on-CPU time, in ns.
    pub cpu_ns: u64,
    /// The live thread ids, sorted.
    pub tids: Vec<u32>,
    /// Sum of the live threads' voluntary context switches: each is one
    /// sleep of a thread (an event-loop park), so their rate is the rate of
    /// wakeups.
    pub voluntary_switches: u64,
    /// `VmRSS`, KiB.
    pub rss_kib: u64,
    /// `VmHWM` (peak RSS), KiB.
    pub hwm_kib: u64,
    /// `VmData` (private writable virtual memory: heap, stacks), KiB.
    pub data_kib: u64,
    /// `RssAnon`, KiB.
    pub rss_anon_kib: u64,
}

/// `pid` as a `/proc` path segment: a number, or `self`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pid {
    /// This process.
    Current,
    /// Another process.
    Other(u32),
}

impl Pid {
    fn dir(self) -> String {
        match self {
            Self::Current => "/proc/self".to_owned(),
            Self::Other(pid) => format!("/proc/{pid}"),
        }
    }
}

/// Samples process `pid`.
pub fn sample(pid: Pid) -> io::Result<ProcSample> {
    let dir = pid.dir();
    let at = Instant::now();
    let stat = fs::read_to_string(format!("{dir}/stat"))?;
    let cpu_ticks = stat_cpu_ticks(&stat)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unparsable /proc/PID/stat"))?;
    let status = fs::read_to_string(format!("{dir}/status"))?;
    let field = |name: &str| status_kib(&status, name).unwrap_or(0);
    let mut tids = Vec::new();
    let mut cpu_ns = 0u64;
    let mut voluntary_switches = 0u64;
    for entry in fs::read_dir(format!("{dir}/task"))? {
        let entry = entry?;
        let Some(tid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // A thread may exit between listing and reading: skip it.
        if let Ok(text) = fs::read_to_string(entry.path().join("schedstat"))
            && let Some(ns) = text
                .split_whitespace()
                .next()
                .and_then(|s| s.parse::<u64>().ok())
        {
            cpu_ns += ns;
            tids.push(tid);
        }
        if let Ok(text) = fs::read_to_string(entry.path().join("status")) {
            voluntary_switches += status_count(&text, "voluntary_ctxt_switches").unwrap_or(0);
        }
    }
    tids.sort_unstable();
    Ok(ProcSample {
        at,
        cpu_ticks,
        cpu_ns,
        tids,
        voluntary_switches,
        rss_kib: field("VmRSS"),
        hwm_kib: field("VmHWM"),
        data_kib: field("VmData"),
        rss_anon_kib: field("RssAnon"),
    })
}

/// CPU time the process used from `a` to `b`.
pub fn cpu_between(a: &ProcSample, b: &ProcSample) -> Duration {
    if a.tids == b.tids {
        Duration::from_nanos(b.cpu_ns.saturating_sub(a.cpu_ns))
    } else {
        let ticks = b.cpu_ticks.saturating_sub(a.cpu_ticks);
        Duration::from_millis(ticks * 1000 / USER_HZ)
    }
}

/// CPU use from `a` to `b` in percent of one core.
pub fn cpu_pct_between(a: &ProcSample, b: &ProcSample) -> f64 {
    let wall = b.at.saturating_duration_since(a.at).as_secs_f64();
    if wall <= 0.0 {
        return 0.0;
    }
    cpu_between(a, b).as_secs_f64() / wall * 100.0
}

/// `utime + stime` from the text of `/proc/PID/stat`. The command name may
/// hold spaces and parentheses, so fields are counted after the last `)`.
fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // After ")": state(3) ppid(4) … utime(14) stime(15).
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

/// A `Name:   123 kB` line of `/proc/PID/status`, in KiB.
fn status_kib(status: &str, name: &str) -> Option<u64> {
    status_count(status, name)
}

/// The number after `Name:` in `/proc/PID/status`.
fn status_count(status: &str, name: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let value = line.strip_prefix(name)?.strip_prefix(':')?;
        value.split_whitespace().next()?.parse().ok()
    })
}

/// The soft `Max open files` limit of this process.
pub fn open_files_limit() -> Option<u64> {
    let limits = fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// System-wide CPU counters from the first line of `/proc/stat`, in ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SystemCpu {
    /// When it was taken.
    pub at: Instant,
    /// Ticks spent in anything but idle and iowait, over all CPUs.
    pub busy_ticks: u64,
}

/// Samples `/proc/stat`.
pub fn system_cpu() -> io::Result<SystemCpu> {
    let at = Instant::now();
    let text = fs::read_to_string("/proc/stat")?;
    let line = text
        .lines()
        .next()
        .filter(|l| l.starts_with("cpu "))
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unparsable /proc/stat"))?;
    let values: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal guest guest_nice; guest
    // time is already inside user.
    let busy = values
        .iter()
        .take(8)
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| *v)
        .sum();
    Ok(SystemCpu {
        at,
        busy_ticks: busy,
    })
}

/// Machine-wide busy time from `a` to `b` in percent of one core.
pub fn system_busy_pct(a: &SystemCpu, b: &SystemCpu) -> f64 {
    let wall = b.at.saturating_duration_since(a.at).as_secs_f64();
    if wall <= 0.0 {
        return 0.0;
    }
    let busy = b.busy_ticks.saturating_sub(a.busy_ticks) as f64 / USER_HZ as f64;
    busy / wall * 100.0
}

/// Kernel memory held by TCP sockets system-wide (`TCP: … mem P` of
/// `/proc/net/sockstat`, in pages), in KiB. Not part of any process's RSS.
pub fn tcp_socket_mem_kib() -> Option<u64> {
    let text = fs::read_to_string("/proc/net/sockstat").ok()?;
    let line = text.lines().find(|l| l.starts_with("TCP:"))?;
    let mut words = line.split_whitespace();
    let pages: u64 = loop {
        if words.next()? == "mem" {
            break words.next()?.parse().ok()?;
        }
    };
    Some(pages * 4)
}

/// Kernel slab memory system-wide (`Slab:` of `/proc/meminfo`), KiB: socket,
/// file and inode objects live there, outside any process's RSS.
pub fn slab_kib() -> Option<u64> {
    let text = fs::read_to_string("/proc/meminfo").ok()?;
    status_kib(&text, "Slab")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_stat_with_an_awkward_command_name() {
        let stat = "42 (a b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 17 0 0 20 0 3 0 1 2 3";
        assert_eq!(stat_cpu_ticks(stat), Some(267));
    }

    #[test]
    fn parses_status_fields() {
        let status =
            "Name:\tx\nVmHWM:\t  2048 kB\nVmRSS:\t  1024 kB\nvoluntary_ctxt_switches:\t7\n";
        assert_eq!(status_count(status, "voluntary_ctxt_switches"), Some(7));
        assert_eq!(status_kib(status, "VmRSS"), Some(1024));
        assert_eq!(status_kib(status, "VmHWM"), Some(2048));
        assert_eq!(status_kib(status, "VmData"), None);
    }

    #[test]
    fn samples_this_process() {
        let a = sample(Pid::Current).expect("procfs");
        assert!(a.rss_kib > 0 && !a.tids.is_empty());
        let b = sample(Pid::Current).expect("procfs");
        assert!(cpu_pct_between(&a, &b) >= 0.0);
        assert!(open_files_limit().is_some());
        assert!(system_cpu().is_ok());
        assert!(slab_kib().is_some());
    }
}
