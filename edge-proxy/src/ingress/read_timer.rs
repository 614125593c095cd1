//! The deadlines of a client connection's request reads — the idle wait
//! for the next request, a head still arriving, a gap in a body — on its
//! core's timer wheel (`DESIGN.md`, "Timers"), not a monoio timer each.
//!
//! A connection owns one [`ReadDeadline`] (`framing::timer::Deadline`):
//! one entry on its core's [`ReadTimers`], moved to each bounded wait's
//! deadline, which for a later deadline is one store. A keep-alive
//! connection's requests thus touch the wheel once per head timeout or so,
//! not twice a request; a monoio timer was a 640-byte, 128-byte-aligned
//! `Sleep` registered and deregistered each wait, and it made the boxed
//! step that reads a request a 128-byte-aligned allocation (issue 8:
//! ~880 instructions a small request, `bench-results/profiles.md`,
//! round 48).
//!
//! Time is read from the core's clock at each wait (a fresh read: the
//! ticker may have slept long) and by the ticker. In production it is the
//! coarse clock, so the deadlines are real time as before; tests drive a
//! manual clock (`framing::timer`'s deadline tests).
//!
//! # Invariants
//! `framing::timer::Deadline`'s: a ready read wins even at its deadline,
//! one entry a connection, and a dropped [`ReadDeadline`] leaves nothing on
//! the wheel. A connection's reads follow each other, so it waits one
//! bounded read at a time, as a `Deadline` requires.

use framing::timer::{CoreTimers, Deadline};

/// The longest the ticker sleeps between clock reads with a manual clock.
pub const TICK_MS: u64 = 10;

/// One core's wheel of read deadlines, its clock and its ticker
/// (`CoreTimers::new(source, TICK_MS)`; run its ticker on the same core).
pub type ReadTimers = CoreTimers;

/// A connection's bound on its request reads (see the module docs).
pub type ReadDeadline = Deadline;
