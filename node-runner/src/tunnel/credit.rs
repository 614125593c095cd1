//! [`Credit`]: one stream's flow-control window (WindowUpdate).

use std::cell::Cell;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Poll, Waker};

/// The most credit a run waits to have back before it resumes (see
/// `Credit::resume_point`).
pub const RESUME_AT_MOST: u64 = 64 * 1024;

/// The byte credit of one tunnel stream: how many more body bytes the Node
/// may send on it. Starts at the stream's initial window; every
/// `WindowUpdate` for the stream [`grant`](Self::grant)s more.
///
/// # Contract (strict window)
/// Only body bytes count (the payload of `body` frames, not frame heads nor
/// status/headers/usage/terminal frames). The tunnel never sends more body
/// bytes than it was granted: a provider chunk larger than the credit left
/// is split (a zero-copy slice), the part that fits goes now and the rest
/// waits for a grant. So nothing is ever overdrawn and the Edge may hold the
/// Node to the window exactly; and since the remainder is a slice of a read
/// already done, a large chunk never deadlocks on a small window. While the
/// credit is spent the tunnel does not read from the provider, so a slow
/// client pauses only its own provider read; unread bytes stay in the
/// kernel's socket buffers and TCP pushes back on the provider.
///
/// # Runs (overdraft)
/// A normalized run's events are indivisible: the run sends its next event
/// while any credit is left, and `overdraw`s by that
/// event's cost (`proto::run_event_credit`). The balance may so go below
/// zero by at most one event; the Edge's grants repay it first. The
/// accounting stays exact (nothing is forgiven), so what the Node has sent
/// and the Edge has not granted back never exceeds the window plus one
/// event.
///
/// Cheap to clone; clones share the window (the link reader keeps one to
/// grant, the tunnel or run task one to spend). Not `Send`: per core, like
/// the stream it belongs to.
#[derive(Clone, Debug)]
pub struct Credit {
    inner: Rc<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Bytes that may be sent; below zero after a run's overdraft.
    balance: Cell<i64>,
    waiter: Cell<Option<Waker>>,
    /// The balance the waiter waits for.
    wake_at: Cell<i64>,
    /// The initial window.
    window: u32,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credit")
            .field("balance", &self.balance.get())
            .finish_non_exhaustive()
    }
}

impl Credit {
    /// A window of `initial` bytes.
    pub fn new(initial: u32) -> Self {
        let inner = Inner {
            balance: Cell::new(i64::from(initial)),
            waiter: Cell::new(None),
            wake_at: Cell::new(1),
            window: initial,
        };
        Self {
            inner: Rc::new(inner),
        }
    }

    /// Adds `increment` bytes (a `WindowUpdate`) and wakes a waiting tunnel.
    pub fn grant(&self, increment: u32) {
        let now = self
            .inner
            .balance
            .get()
            .saturating_add(i64::from(increment));
        self.inner.balance.set(now);
        if now >= self.inner.wake_at.get()
            && let Some(waker) = self.inner.waiter.take()
        {
            waker.wake();
        }
    }

    /// Bytes that may be sent now (0 while overdrawn).
    pub fn available(&self) -> u64 {
        u64::try_from(self.inner.balance.get()).unwrap_or(0)
    }

    /// Spends `n` bytes; `n` is at most [`available`](Self::available).
    pub(crate) fn spend(&self, n: usize) {
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        debug_assert!(n <= self.inner.balance.get(), "spent {n} bytes of {self:?}");
        self.debit(n);
    }

    /// Spends `n` bytes even beyond what is left (a run's event, sent while
    /// any credit was left; see the type's docs).
    pub(crate) fn overdraw(&self, n: u32) {
        self.debit(i64::from(n));
    }

    fn debit(&self, n: i64) {
        let left = self.inner.balance.get();
        self.inner.balance.set(left.saturating_sub(n));
    }

    /// Waits until some credit is available (at once if some is). One
    /// waiter at a time (the stream's tunnel task): a second waiter would
    /// replace the first one's waker.
    pub async fn ready(&self) {
        self.ready_at(1).await;
    }

    /// The balance a run waiting for credit resumes at: a quarter of its
    /// window, at most [`RESUME_AT_MOST`] (and at least 1).
    pub(crate) fn resume_point(&self) -> u64 {
        (u64::from(self.inner.window) / 4).clamp(1, RESUME_AT_MOST)
    }

    /// Waits until at least `at_least` bytes are available (a run resumes
    /// only once a good part of its window is back: a run that woke for
    /// each small grant would read and send a few events per wake-up). Same
    /// single-waiter rule as [`ready`](Self::ready).
    pub(crate) async fn ready_at(&self, at_least: u64) {
        let at_least = i64::try_from(at_least.max(1)).unwrap_or(i64::MAX);
        poll_fn(|cx| {
            if self.inner.balance.get() >= at_least {
                Poll::Ready(())
            } else {
                self.inner.wake_at.set(at_least);
                self.inner.waiter.set(Some(cx.waker().clone()));
                Poll::Pending
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_wakes_a_spent_window() {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .unwrap()
            .block_on(async {
                let credit = Credit::new(10);
                credit.ready().await;
                credit.spend(10);
                assert_eq!(credit.available(), 0);
                let granter = credit.clone();
                let waiting = monoio::spawn(async move {
                    credit.ready().await;
                    credit.available()
                });
                monoio::time::sleep(std::time::Duration::from_millis(5)).await;
                granter.grant(7);
                assert_eq!(waiting.await, 7);
                granter.grant(u32::MAX);
                assert_eq!(granter.available(), 7 + u64::from(u32::MAX));
            });
    }

    #[test]
    fn a_waiter_for_more_credit_is_woken_only_once_it_is_there() {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .unwrap()
            .block_on(async {
                let credit = Credit::new(0);
                let granter = credit.clone();
                let woken = std::rc::Rc::new(Cell::new(false));
                let flag = woken.clone();
                let waiting = monoio::spawn(async move {
                    credit.ready_at(100).await;
                    flag.set(true);
                });
                let settle = || monoio::time::sleep(std::time::Duration::from_millis(2));
                settle().await;
                granter.grant(60);
                settle().await;
                assert!(!woken.get(), "60 of 100: still waiting");
                granter.grant(40);
                waiting.await;
                assert!(woken.get());
            });
    }

    #[test]
    fn an_overdraft_is_repaid_before_credit_is_available_again() {
        let credit = Credit::new(100);
        credit.overdraw(60);
        assert_eq!(
            credit.available(),
            40,
            "still some left: the next event may go"
        );
        credit.overdraw(70);
        assert_eq!(credit.available(), 0, "30 overdrawn");
        credit.grant(30);
        assert_eq!(credit.available(), 0, "the overdraft is repaid first");
        credit.grant(1);
        assert_eq!(credit.available(), 1);
    }
}
