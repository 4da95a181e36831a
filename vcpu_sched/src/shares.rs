//! Operator shares per vCPU: weight, cap and reservation.
//!
//! Every hypervisor lets its operator say what each VM gets: Xen credit2's
//! weight and cap, ESXi's shares, limit and reservation, libvirt's
//! `<cputune>`, cgroups' `cpu.weight` and `cpu.max`. Haiku has priorities
//! only, so `haiku` maps the three onto its model beside the penalty
//! machinery (ARCHITECTURE.md, "Operator shares"):
//!
//! * **weight** (1..=10000, default 100, as `cpu.weight`): a vCPU's time
//!   slice is its ready-count slice scaled by its weight over the mean
//!   weight of the entities ready on its core (CFS's slice = period x
//!   w / W), so CPU-bound vCPUs that take turns through Haiku's penalty
//!   cycle get CPU time in proportion to their weights; the fair-share
//!   wake boost's entitlement counts it too (share weight = base priority
//!   x weight / 100). All weights equal: Haiku's slices, unchanged.
//! * **cap** (per-mille of one CPU): a token bucket refilled at the cap's
//!   rate and holding at most one period's budget (`SHARE_PERIOD` x cap,
//!   as credit2's cap and CFS bandwidth refill a budget per period). A
//!   vCPU's slice never outlasts its tokens; one that stops runnable with
//!   its tokens spent is *throttled*: taken off the queues (runnable but
//!   not dispatched) until the bucket is half full again, even on an idle
//!   host. Over any window of W the vCPU runs at most one budget plus
//!   cap x W.
//! * **reservation** (per-mille of one CPU): a token bucket at the
//!   reservation's rate; while it holds tokens the vCPU runs at the
//!   reserved level (`RESERVED_PRIORITY`, above every timeshare level,
//!   below realtime), so it gets at least its reservation whenever it asks;
//!   spent, it competes at its own priority until the bucket is half full
//!   again. `pacer validate` refuses reservations summing past the host's
//!   CPUs, so reserved levels never hold more than the CPUs can give.
//!
//! Both buckets are renewed by time, not by an event of the entity: the
//! policy keeps the renewals in one heap (`Renewals`) that every
//! `schedule` call looks at (one atomic load when nothing is due), and an
//! idle CPU's dispatch asks to be called again at the earliest
//! (`Dispatch::recheck_at`).

use crate::{EntityId, Nanos};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicU64, Ordering};

/// Default weight (cgroups' `cpu.weight` default).
pub const DEFAULT_WEIGHT: u32 = 100;
/// Largest weight (cgroups' `cpu.weight` maximum).
pub const MAX_WEIGHT: u32 = 10_000;
/// One CPU in the per-mille of caps and reservations.
pub const PERMILLE: u32 = 1000;
/// The period whose budget a cap or reservation bucket holds at most.
pub const SHARE_PERIOD: Nanos = 10_000_000;
/// A capped vCPU with fewer tokens than this is throttled rather than
/// dispatched for a sliver.
pub(crate) const MIN_RUN: Nanos = 50_000;
/// The effective priority a vCPU holding reservation tokens runs at:
/// above every timeshare level (1..=99 with penalties, so at most 99),
/// below realtime (100..=120).
pub const RESERVED_PRIORITY: u8 = 99;

/// A token bucket of run time: filled at `permille` / 1000 ns per ns,
/// holding at most one period's budget (`SHARE_PERIOD` for caps and
/// reservations, the bound for a latency bound's budget).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bucket {
    pub permille: u32,
    period: Nanos,
    tokens: i64,
    at: Nanos,
}

impl Bucket {
    /// A full bucket at `now` holding one `SHARE_PERIOD`'s budget.
    pub fn new(permille: u32, now: Nanos) -> Bucket {
        Bucket::over(permille, SHARE_PERIOD, now)
    }

    /// A full bucket at `now` holding one `period`'s budget.
    pub fn over(permille: u32, period: Nanos, now: Nanos) -> Bucket {
        let mut b = Bucket {
            permille: permille.clamp(1, PERMILLE),
            period: period.max(1),
            tokens: 0,
            at: now,
        };
        b.tokens = b.capacity();
        b
    }

    /// One period's budget.
    pub fn capacity(&self) -> i64 {
        (self.period as u128 * self.permille as u128 / PERMILLE as u128).min(i64::MAX as u128)
            as i64
    }

    /// Tokens at `now` (refilled since the last call; time never runs back).
    pub fn refill(&mut self, now: Nanos) -> i64 {
        if now > self.at {
            let add = ((now - self.at) as u128 * self.permille as u128 / PERMILLE as u128)
                .min(i64::MAX as u128) as i64;
            self.tokens = self.tokens.saturating_add(add).min(self.capacity());
            self.at = now;
        }
        self.tokens
    }

    /// The vCPU ran `ran` ns up to `now`.
    /// Tokens flow in while it runs too, so refill and use are netted
    /// before the bucket's limit applies.
    pub fn charge(&mut self, ran: Nanos, now: Nanos) {
        let add = if now > self.at {
            ((now - self.at) as u128 * self.permille as u128 / PERMILLE as u128)
                .min(i64::MAX as u128) as i64
        } else {
            0
        };
        self.at = self.at.max(now);
        self.tokens = self
            .tokens
            .saturating_add(add)
            .saturating_sub(ran.min(i64::MAX as u64) as i64)
            .min(self.capacity());
    }

    /// How long a vCPU with these tokens may run from now before they are
    /// spent (the bucket refills while it runs, so more than the tokens).
    pub fn run_time_left(&self) -> Nanos {
        let t = self.tokens.max(0) as u128;
        if self.permille >= PERMILLE {
            return Nanos::MAX;
        }
        (t * PERMILLE as u128 / (PERMILLE - self.permille) as u128).min(Nanos::MAX as u128) as Nanos
    }

    /// The level a spent bucket must refill to before it counts again:
    /// half a budget (never below the minimal run).
    pub fn renew_level(&self) -> i64 {
        (self.capacity() / 2)
            .max(MIN_RUN as i64)
            .min(self.capacity())
    }

    /// Holds enough to run on.
    pub fn usable(&self) -> bool {
        self.tokens >= MIN_RUN.min(self.capacity() as u64) as i64
    }

    /// When, from `now` (refilled), the bucket reaches its renew level.
    pub fn renewed_at(&self, now: Nanos) -> Nanos {
        let missing = (self.renew_level() - self.tokens).max(0) as u128;
        let t = (missing * PERMILLE as u128).div_ceil(self.permille.max(1) as u128);
        now.saturating_add(t.min(Nanos::MAX as u128) as Nanos)
    }
}

/// What falls due at a renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Renewal {
    /// A throttled vCPU may run again.
    Cap,
    /// A vCPU's reservation bucket is usable again.
    Reservation,
}

/// Renewals of cap and reservation buckets, earliest first. `next` mirrors
/// the earliest (`u64::MAX`: none), read without the lock on every
/// `schedule`.
#[derive(Debug)]
pub(crate) struct Renewals {
    heap: parking_lot::Mutex<BinaryHeap<Reverse<(Nanos, EntityId, Renewal)>>>,
    next: AtomicU64,
}

impl Default for Renewals {
    fn default() -> Self {
        Renewals {
            heap: parking_lot::Mutex::new(BinaryHeap::new()),
            next: AtomicU64::new(u64::MAX),
        }
    }
}

impl Renewals {
    /// The earliest renewal, if any.
    pub fn next(&self) -> Option<Nanos> {
        let n = self.next.load(Ordering::Acquire);
        (n != u64::MAX).then_some(n)
    }

    /// Whether one is due at `now` (one atomic load).
    pub fn due(&self, now: Nanos) -> bool {
        self.next.load(Ordering::Acquire) <= now
    }

    pub fn push(&self, at: Nanos, id: EntityId, what: Renewal) {
        let mut h = self.heap.lock();
        h.push(Reverse((at, id, what)));
        let first = h.peek().map_or(u64::MAX, |Reverse((t, ..))| *t);
        self.next.store(first, Ordering::Release);
    }

    /// Take every renewal due at `now`.
    pub fn take_due(&self, now: Nanos) -> Vec<(EntityId, Renewal)> {
        let mut h = self.heap.lock();
        let mut out = Vec::new();
        while let Some(Reverse((t, id, what))) = h.peek().copied() {
            if t > now {
                break;
            }
            h.pop();
            out.push((id, what));
        }
        let first = h.peek().map_or(u64::MAX, |Reverse((t, ..))| *t);
        self.next.store(first, Ordering::Release);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn a_bucket_refills_at_its_rate_up_to_one_budget() {
        let mut b = Bucket::new(300, 0);
        assert_eq!(b.capacity(), 3 * MS as i64);
        assert_eq!(b.refill(0), 3 * MS as i64);
        b.charge(3 * MS, 3 * MS);
        // 3 ms ran, 0.9 ms refilled meanwhile.
        assert_eq!(b.refill(3 * MS), (9 * MS / 10) as i64);
        assert!(b.usable());
        // Refill stops at one budget.
        assert_eq!(b.refill(1000 * MS), 3 * MS as i64);
        // Running from full: 3 ms / (1 - 0.3).
        assert_eq!(b.run_time_left(), 3 * MS * 1000 / 700);
    }

    #[test]
    fn a_spent_bucket_renews_at_half_a_budget() {
        let mut b = Bucket::new(500, 0);
        b.charge(5 * MS, 0);
        assert_eq!(b.refill(0), 0);
        assert!(!b.usable());
        // 2.5 ms of tokens at 0.5 per ns: 5 ms.
        assert_eq!(b.renewed_at(0), 5 * MS);
        assert_eq!(b.refill(5 * MS), b.renew_level());
        assert!(b.usable());
    }

    #[test]
    fn renewals_come_out_earliest_first() {
        let r = Renewals::default();
        assert_eq!(r.next(), None);
        let (a, b) = (EntityId::new(0, 0), EntityId::new(1, 0));
        r.push(20, a, Renewal::Cap);
        r.push(10, b, Renewal::Reservation);
        assert_eq!(r.next(), Some(10));
        assert!(!r.due(9));
        assert_eq!(r.take_due(15), vec![(b, Renewal::Reservation)]);
        assert_eq!(r.next(), Some(20));
        assert_eq!(r.take_due(25), vec![(a, Renewal::Cap)]);
        assert_eq!(r.next(), None);
    }
}
