//! Memory per idle stream (printed, not a criterion figure).
//!
//! Opens `n` streams that go quiet after their first event (the mock's
//! role chunk, then one token per `delay-ms`), first straight to the mock,
//! then through IOP, and reads this process's RSS before and after each
//! batch. Everything (mock, Edge, Node) is in this one process, each on its
//! own threads and so its own malloc arena: the direct batch is the mock's
//! (and the client's) cost per stream, the IOP batch adds the Edge's and
//! the Node's, so Edge + Node per stream = IOP − direct.
//!
//! RSS counts freed memory that the allocator kept (a burst of short-lived
//! allocations while streams open leaves pages resident that a quiet
//! process never uses again). Each batch therefore also reads the RSS after
//! jemalloc (the bench's allocator, as the product's) purged the free
//! pages of every arena: the second line per path, "trimmed", is what the
//! open streams really hold; the gap between the two is allocator
//! high-water, not per-stream state. Each batch also starts from a purged
//! heap, so the IOP batch does not reuse pages the direct batch freed.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::stack::{Scenario, Stack};

/// One batch: RSS growth in KiB for `n` open streams.
struct Batch {
    rss_kib: u64,
    /// The growth once malloc returned its free pages (see the module docs).
    trimmed_kib: u64,
    open_s: f64,
}

/// Opens `n` idle streams on each path and prints the RSS growth.
pub(crate) fn idle_streams(stack: &Stack, scenario: &Scenario, n: usize) {
    let direct = batch(stack.mock_addr(), &scenario.header_lines(), "m", n);
    let iop = batch(stack.ingress(), "", scenario.model, n);
    let per = |kib: u64| kib as f64 * 1024.0 / n as f64 / 1000.0;
    println!(
        "idle/{}: {n} idle streams; RSS growth of this process (mock + Edge + Node + client)",
        stack.driver.as_str()
    );
    println!(
        "  direct   {:>8} KiB  {:>6.1} KB a stream  (opened in {:.1} s)",
        direct.rss_kib,
        per(direct.rss_kib),
        direct.open_s
    );
    println!(
        "  iop      {:>8} KiB  {:>6.1} KB a stream  (opened in {:.1} s)",
        iop.rss_kib,
        per(iop.rss_kib),
        iop.open_s
    );
    let added = iop.rss_kib.saturating_sub(direct.rss_kib);
    println!(
        "  Edge + Node {added:>5} KiB  {:>6.1} KB a stream  ({:.1} MB at 10k streams)",
        per(added),
        per(added) * 10_000.0 / 1000.0
    );
    let trimmed = iop.trimmed_kib.saturating_sub(direct.trimmed_kib);
    println!(
        "  trimmed: direct {:>6.1}, iop {:>6.1}, Edge + Node {trimmed:>5} KiB  {:>6.1} KB a stream  ({:.1} MB at 10k streams)",
        per(direct.trimmed_kib),
        per(iop.trimmed_kib),
        per(trimmed),
        per(trimmed) * 10_000.0 / 1000.0
    );
}

/// Opens `n` streams to `addr`, waits for each one's first event, reads
/// the RSS, then closes them all (and lets the far end notice).
fn batch(addr: SocketAddr, headers: &str, model: &str, n: usize) -> Batch {
    // Start from what is really held, not from pages freed before.
    trim();
    let before = rss_kib();
    let start = Instant::now();
    let body = format!(
        r#"{{"model":"{model}","stream":true,"messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    let request = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n\
         {headers}content-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut streams = Vec::with_capacity(n);
    for _ in 0..n {
        let mut socket = TcpStream::connect(addr).expect("connect");
        socket.write_all(request.as_bytes()).expect("request");
        streams.push(socket);
    }
    let mut buf = [0u8; 4096];
    for socket in &mut streams {
        socket
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("timeout");
        let mut seen = Vec::new();
        while !seen.windows(6).any(|w| w == b"data: ") {
            match socket.read(&mut buf) {
                Ok(0) => panic!("stream closed before its first event"),
                Ok(n) => seen.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!("idle stream: {e}"),
            }
        }
    }
    let open_s = start.elapsed().as_secs_f64();
    // Let every thread settle (deferred frees, queued writes); a few
    // streams (criterion's test mode) settle at once.
    let settle = Duration::from_millis((n as u64 / 4).clamp(20, 500));
    std::thread::sleep(settle);
    let after = rss_kib();
    trim();
    let trimmed = rss_kib();
    drop(streams);
    // Let the far ends notice before the next batch.
    std::thread::sleep(settle * 2);
    Batch {
        rss_kib: after.saturating_sub(before),
        trimmed_kib: trimmed.saturating_sub(before),
        open_s,
    }
}

/// Returns the allocator's free pages to the kernel: jemalloc's purge of
/// every arena (`arena.<MALLCTL_ARENAS_ALL>.purge`), after this thread's
/// cache handed its objects back.
fn trim() {
    // `MALLCTL_ARENAS_ALL` is 4096 in jemalloc 5.
    for control in [c"thread.tcache.flush", c"arena.4096.purge"] {
        // SAFETY: both are jemalloc's "void" controls, called as its manual
        // says: a NUL-terminated name, no old value (null pointers) and no
        // new value (null, length 0); jemalloc reads and writes none of our
        // memory and takes its own locks. jemalloc is this bench's global
        // allocator (`main.rs`), so the symbol is the one in use. Exercised
        // by the bench's test mode (`cargo test -p perf --bench stream`),
        // which runs this report and checks the return code.
        let rc = unsafe {
            tikv_jemalloc_sys::mallctl(
                control.as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        assert_eq!(rc, 0, "jemalloc {control:?} failed: {rc}");
    }
}

/// This process's resident set, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}
