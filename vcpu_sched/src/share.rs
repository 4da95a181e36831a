//! Recent CPU share and the fair-share wake boost (beyond Haiku).
//!
//! Haiku ranks CPU-bound entities by cycling penalties, and the bursty
//! rule (`tunables::BURSTY_LOAD`, ULE's interactivity threshold) keeps
//! light sleepers out of that cycle. Neither helps a vCPU whose every wake
//! does real work: a guest interrupt handler, a packet, a disk block,
//! or, on a KVM that emulates guest ring 0, every interrupt at all (~100-
//! 200 us of guest kernel per wake). Its load-if-alone is well above the
//! bursty threshold, so it is penalised like a hog, never preempts one,
//! and waits behind the hog's slice at every wake: FreeBSD review D15985's
//! "waits on its timeslice behind the loop every time it is woken up".
//! On the development machine that vCPU got 17 % of a CPU next to one hog
//! (the host kernel gave it 50 %) and 2.5-7 ms wake latencies.
//!
//! What such a vCPU lacks is not priority but its share. So each
//! timeshare entity keeps its *recent share*: the fraction of wall-clock
//! time it ran, as an exponentially decayed average with half-life
//! `tunables::SHARE_HALF_LIFE` (sleeping and waiting in a queue both count
//! as not running). When it wakes, it is *entitled* to its weight's part
//! of its core's CPUs: its weight over the weights of the entities ready
//! there, itself included, the weight being its base priority (so 20 is
//! entitled to twice what 10 is, and boosting keeps Haiku's order of
//! priorities). A wake below that entitlement is *boosted*: E = P until
//! it blocks or has had its share, its penalties kept underneath, and it
//! counts as interactive, so it may preempt a CPU-bound runner of
//! lower E (the limited wake preemption of D15985 and Xen credit1's BOOST
//! for a vCPU that wakes UNDER its credit; EEVDF gives a sleeper with
//! positive lag the same precedence). A boosted entity that blocks early
//! collects no penalty; one that uses its quantum does, as in Haiku.
//!
//! The rule is self-limiting: a vCPU that wants more than its entitlement
//! is boosted only while it is below it, so it settles at its fair share
//! and the hog keeps the rest (checked by the simulator's scenarios 9-13
//! and the property tests). A waker just above its entitlement is *due*
//! when its decaying share falls to it (`time_to_fall`): the policy cuts
//! the runner then and boosts the waiter. It reads only the entity's own
//! history and the weights ready on its core: no workload names, no
//! layout.
//!
//! Fixed point: a share is in 1/`SHARE_SCALE` of a CPU; the decay factor
//! 2^(-dt / half-life) comes from a table of 64 steps per half-life,
//! linear in between, so an update is a division, a table load, a shift
//! and a few multiplies (no floating point on the wake path).

use crate::Nanos;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// One CPU, fully used.
pub(crate) const SHARE_SCALE: u32 = 1 << 16;

/// Table steps per half-life.
const STEPS: u64 = 64;

/// 2^(-i/64) * 2^16 for i in 0..64.
const DECAY: [u32; STEPS as usize] = [
    65536, 64830, 64132, 63441, 62757, 62081, 61413, 60751, 60097, 59449, 58809, 58176, 57549,
    56929, 56316, 55709, 55109, 54515, 53928, 53347, 52773, 52204, 51642, 51085, 50535, 49991,
    49452, 48920, 48393, 47871, 47356, 46846, 46341, 45842, 45348, 44859, 44376, 43898, 43425,
    42958, 42495, 42037, 41584, 41136, 40693, 40255, 39821, 39392, 38968, 38548, 38133, 37722,
    37316, 36914, 36516, 36123, 35734, 35349, 34968, 34591, 34219, 33850, 33486, 33125,
];

/// 2^(-dt / half_life) in 1/`SHARE_SCALE`: the table's steps of 1/64
/// half-life, linear in between (within 0.01 % of the curve).
fn decay_factor(dt: Nanos, half_life: Nanos) -> u32 {
    const FINE: u64 = STEPS * 1024;
    let half_life = half_life.max(1);
    // After 17 half-lives nothing of 2^16 is left.
    if dt / 17 >= half_life {
        return 0;
    }
    // In 1/1024 of a step; u64 unless dt * 2^16 overflows (dt > 78 h),
    // which only a half-life of days could still decay.
    let fine = match dt.checked_mul(FINE) {
        Some(x) => x / half_life,
        None => (dt as u128 * FINE as u128 / half_life as u128) as u64,
    };
    if fine >= 17 * FINE {
        return 0;
    }
    let (steps, frac) = (fine / 1024, (fine % 1024) as u32);
    let i = (steps % STEPS) as usize;
    let hi = DECAY[i];
    let lo = DECAY.get(i + 1).copied().unwrap_or(SHARE_SCALE / 2);
    let v = hi - (((hi - lo) * frac) >> 10);
    v >> (steps / STEPS)
}

/// An entity's recent share of a CPU: the decayed average of "running"
/// over wall-clock time, valid up to `at`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RecentShare {
    /// 0..=SHARE_SCALE.
    value: u32,
    /// The time `value` was brought up to.
    at: Nanos,
    /// When the measurement began (the entity was added).
    since: Nanos,
}

impl RecentShare {
    /// A share of 0 measured from `now`.
    pub fn new(now: Nanos) -> RecentShare {
        RecentShare {
            value: 0,
            at: now,
            since: now,
        }
    }

    /// Whether it has a history yet: at least one half-life measured. A
    /// new entity's share of 0 says nothing about it (a hog added next
    /// to others would be boosted at its first wake).
    pub fn measured(&self, now: Nanos, half_life: Nanos) -> bool {
        now.saturating_sub(self.since) >= half_life
    }

    /// The entity did not run from `at` to `now` (slept or waited).
    pub fn idle_until(&mut self, now: Nanos, half_life: Nanos) {
        self.value = self.value_at(now, half_life);
        self.at = self.at.max(now);
    }

    /// The entity did not run from `at` to `from`, then ran until `to`
    /// (a run the scheduler learnt afterwards).
    pub fn ran_between(&mut self, from: Nanos, to: Nanos, half_life: Nanos) {
        self.idle_until(from, half_life);
        self.ran_until(to, half_life);
    }

    /// The entity ran from `at` to `now`.
    pub fn ran_until(&mut self, now: Nanos, half_life: Nanos) {
        let f = decay_factor(now.saturating_sub(self.at), half_life);
        let kept = ((self.value as u64 * f as u64) >> 16) as u32;
        self.value = (kept + (SHARE_SCALE - f)).min(SHARE_SCALE);
        self.at = self.at.max(now);
    }

    /// The share at `now` if the entity has not run since `at`.
    pub fn value_at(&self, now: Nanos, half_life: Nanos) -> u32 {
        let f = decay_factor(now.saturating_sub(self.at), half_life);
        ((self.value as u64 * f as u64) >> 16) as u32
    }
}

/// Whether a runner of (share, weight) `runner` is owed more than a
/// boosted waker of (share, weight) `waker` (`Machine::must_preempt`):
/// its share per weight is below three quarters of the waker's, so that
/// two entities near their entitlements still preempt each other as the
/// boost has them do, while a starved producer (a request dispatcher at a
/// third of its workers' share) is not preempted by every worker it
/// wakes.
pub(crate) fn owed_more(waker: (u32, u32), runner: (u32, u32)) -> bool {
    let ((ws, ww), (rs, rw)) = (waker, runner);
    // rs / rw < 3/4 x ws / ww, in integers.
    let lhs = 4 * rs as u64 * ww.max(1) as u64;
    lhs < 3 * ws as u64 * rw.max(1) as u64
}

/// What a CPU publishes about its runner's share at its dispatch, read
/// without a lock by wakers deciding whether to preempt it
/// (`Machine::must_preempt`): the share as of its last update, when that
/// was, the dispatch, the weight. Four plain stores on the dispatch path;
/// the decay is computed only by a boosted waker that asks (`at`).
#[derive(Debug)]
pub(crate) struct RunnerShare {
    /// `u32::MAX`: not measured yet (no judgement).
    value: AtomicU32,
    as_of: AtomicU64,
    dispatched: AtomicU64,
    weight: AtomicU32,
}

impl Default for RunnerShare {
    fn default() -> Self {
        RunnerShare {
            value: AtomicU32::new(u32::MAX),
            as_of: AtomicU64::new(0),
            dispatched: AtomicU64::new(0),
            weight: AtomicU32::new(1),
        }
    }
}

impl RunnerShare {
    /// The runner dispatched at `now` has `share` (measured or not) and
    /// `weight`. Relaxed: a waker that reads a mix of two dispatches' values
    /// misjudges one preemption, as it would reading a moment earlier.
    pub fn publish(&self, share: &RecentShare, measured: bool, weight: u32, now: Nanos) {
        let value = if measured { share.value } else { u32::MAX };
        self.value.store(value, Ordering::Relaxed);
        self.as_of.store(share.at, Ordering::Relaxed);
        self.dispatched.store(now, Ordering::Relaxed);
        self.weight.store(weight, Ordering::Relaxed);
    }

    /// The runner's (share, weight) at `now`: decayed to its dispatch,
    /// grown by running since; None if not measured.
    pub fn at(&self, now: Nanos, half_life: Nanos) -> Option<(u32, u32)> {
        let value = self.value.load(Ordering::Relaxed);
        if value == u32::MAX {
            return None;
        }
        let as_of = self.as_of.load(Ordering::Relaxed);
        let mut share = RecentShare {
            value,
            at: as_of,
            since: as_of,
        };
        share.ran_between(self.dispatched.load(Ordering::Relaxed), now, half_life);
        Some((share.value, self.weight.load(Ordering::Relaxed)))
    }
}

/// How long a share of `share` takes to fall below `entitled` while the
/// entity does not run: half_life * log2(share / entitled) (0 if it is
/// below already), interpolated between the table's steps.
pub(crate) fn time_to_fall(share: u32, entitled: u32, half_life: Nanos) -> Nanos {
    if share < entitled {
        return 0;
    }
    if entitled == 0 {
        return Nanos::MAX;
    }
    // Whole half-lives first, then the first table step that gets below,
    // then the point between it and the step before by linear
    // interpolation (the curve is within 0.01 % of a line over a step).
    let mut whole = 0u64;
    while (share >> (whole + 1)) >= entitled {
        whole += 1;
    }
    let rest = (share >> whole) as u64;
    let at = |i: u64| match i {
        STEPS => rest / 2,
        i => (rest * DECAY[i as usize] as u64) >> 16,
    };
    let step = (1..=STEPS)
        .find(|&i| at(i) < entitled as u64)
        .unwrap_or(STEPS);
    let (hi, lo) = (at(step - 1), at(step));
    // Fraction of the step from `hi` down to just below `entitled`.
    let frac = ((hi + 1).saturating_sub(entitled as u64) as u128 * 1024)
        .div_ceil((hi - lo).max(1) as u128)
        .min(1024);
    let steps_x1024 = (whole * STEPS + step - 1) as u128 * 1024 + frac;
    let mut t = (steps_x1024 * half_life as u128).div_ceil(STEPS as u128 * 1024) as Nanos;
    // Rounding may leave it a hair short: step until it is below.
    let fall = |t: Nanos| ((share as u64 * decay_factor(t, half_life) as u64) >> 16) as u32;
    while fall(t) >= entitled {
        t = t.saturating_add((half_life / (STEPS * 1024)).max(1));
    }
    t
}

/// The share an entity of share weight `weight` is entitled to on a core
/// of `core_cpus` CPUs where `others` is the weight of the other entities
/// ready there: its weight's part of the core's CPUs, in 1/`SHARE_SCALE`
/// (at most one CPU). A whole CPU means the core is not contended: there
/// is nothing to boost over then.
pub(crate) fn entitlement(core_cpus: usize, weight: u32, others: u64) -> u32 {
    let weight = weight.max(1) as u64;
    let cpus = core_cpus.max(1) as u64;
    (cpus * weight * SHARE_SCALE as u64 / (weight + others)).min(SHARE_SCALE as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn decay_table_is_two_to_the_minus_i_over_64() {
        for (i, &v) in DECAY.iter().enumerate() {
            let exact = 65536.0 * 2f64.powf(-(i as f64) / 64.0);
            assert!((v as f64 - exact).abs() <= 1.0, "step {i}: {v} vs {exact}");
        }
        assert_eq!(decay_factor(0, 4 * MS), SHARE_SCALE);
        assert_eq!(decay_factor(4 * MS, 4 * MS), SHARE_SCALE / 2);
        assert_eq!(decay_factor(8 * MS, 4 * MS), SHARE_SCALE / 4);
        // Between steps: monotone and close to the curve.
        let mut last = SHARE_SCALE;
        for us in 0..9000u64 {
            let f = decay_factor(us * 1000, 4 * MS);
            assert!(f <= last, "monotone at {us} us");
            let exact = 65536.0 * 2f64.powf(-(us as f64) / 4000.0);
            assert!((f as f64 - exact).abs() <= 3.0, "{us} us: {f} vs {exact}");
            last = f;
        }
        assert_eq!(decay_factor(1000 * MS, 4 * MS), 0);
        assert_eq!(decay_factor(u64::MAX, 1), 0);
    }

    #[test]
    fn share_converges_to_the_duty_cycle() {
        let hl = 4 * MS;
        let mut s = RecentShare::new(0);
        let mut t = 0;
        // 300 us running, 700 us not, for 100 ms: ~30 %.
        for _ in 0..100 {
            t += 300_000;
            s.ran_until(t, hl);
            t += 700_000;
            s.idle_until(t, hl);
        }
        let share = s.value_at(t, hl) as f64 / SHARE_SCALE as f64;
        assert!((0.25..0.32).contains(&share), "share {share}");
        // Always running: close to one CPU; never: zero.
        let mut busy = RecentShare::new(0);
        busy.ran_until(100 * MS, hl);
        assert!(busy.value_at(100 * MS, hl) > SHARE_SCALE * 99 / 100);
        assert_eq!(busy.value_at(300 * MS, hl), 0);
    }

    #[test]
    fn a_new_share_is_not_a_measurement() {
        let s = RecentShare::new(5 * MS);
        assert!(!s.measured(5 * MS, 8 * MS));
        assert!(!s.measured(12 * MS, 8 * MS));
        assert!(s.measured(13 * MS, 8 * MS));
    }

    #[test]
    fn half_life_halves_an_idle_share() {
        let hl = 4 * MS;
        let mut s = RecentShare::new(0);
        s.ran_until(200 * MS, hl);
        let full = s.value_at(200 * MS, hl);
        let half = s.value_at(204 * MS, hl);
        assert!(
            (half as i64 - (full / 2) as i64).abs() <= 2,
            "{half} vs {full}"
        );
        // Time never runs backwards: a stale `now` changes nothing.
        let before = s;
        s.idle_until(100 * MS, hl);
        assert_eq!(s.value_at(200 * MS, hl), before.value_at(200 * MS, hl));
    }

    #[test]
    fn time_to_fall_inverts_the_decay() {
        let hl = 8 * MS;
        let half = SHARE_SCALE / 2;
        assert_eq!(time_to_fall(half - 1, half, hl), 0);
        // Twice the entitlement: one half-life.
        let t = time_to_fall(SHARE_SCALE, half, hl);
        assert!((8 * MS..=8 * MS + hl / 1000).contains(&t), "{t}");
        // Against the exact log2, within a few microseconds.
        for share in [30_001u32, 30_500, 40_000, 52_000, 65_536] {
            let t = time_to_fall(share, 30_000, hl);
            let exact = hl as f64 * (share as f64 / 30_000.0).log2();
            assert!(
                (t as f64 - exact).abs() < 4_000.0,
                "share {share}: {t} vs {exact}"
            );
            // Below at that time, as the share itself computes it.
            let s = RecentShare {
                value: share,
                at: 0,
                since: 0,
            };
            assert!(s.value_at(t, hl) < 30_000, "share {share} at {t}");
        }
        assert_eq!(time_to_fall(1, 0, hl), Nanos::MAX);
    }

    #[test]
    fn a_runner_is_owed_more_below_three_quarters_of_the_wakers_share_per_weight() {
        let s = SHARE_SCALE;
        // Equal weights: the dispatcher at 0.15 against its worker at 0.41.
        assert!(owed_more((s * 41 / 100, 10), (s * 15 / 100, 10)));
        // Two entities near their entitlements: the waker preempts.
        assert!(!owed_more((s * 47 / 100, 10), (s * 46 / 100, 10)));
        assert!(!owed_more((s / 2, 10), (s * 3 / 8, 10)), "exactly 3/4");
        assert!(owed_more((s / 2, 10), (s * 3 / 8 - 1, 10)));
        // Per weight: a runner of twice the weight is owed twice the share.
        assert!(owed_more((s / 3, 10), (s / 3, 20)));
        assert!(!owed_more((s / 3, 20), (s / 3, 10)));
        // A zero weight counts as one.
        assert_eq!(owed_more((s, 0), (0, 0)), owed_more((s, 1), (0, 1)));
    }

    #[test]
    fn a_runners_published_share_decays_to_its_dispatch_and_grows_as_it_runs() {
        let hl = 8 * MS;
        let published = RunnerShare::default();
        assert_eq!(published.at(0, hl), None, "nothing published");
        // Ran 3 ms from 0, then waited 8 ms (one half-life) to its
        // dispatch at 11 ms.
        let mut r = RecentShare::new(0);
        r.ran_until(3 * MS, hl);
        published.publish(&r, true, 7, 11 * MS);
        let (at_dispatch, weight) = published.at(11 * MS, hl).unwrap();
        assert_eq!(weight, 7);
        assert!(at_dispatch.abs_diff(r.value_at(11 * MS, hl)) <= 1);
        // After running one half-life more: half of it plus half a CPU,
        // as `RecentShare` has it for the same run.
        let (ran, _) = published.at(19 * MS, hl).unwrap();
        let mut same = r;
        same.idle_until(11 * MS, hl);
        same.ran_until(19 * MS, hl);
        assert!(ran.abs_diff(same.value_at(19 * MS, hl)) <= 2, "{ran}");
        assert!(
            ran.abs_diff(at_dispatch / 2 + SHARE_SCALE / 2) <= 2,
            "{ran}"
        );
        // Not measured yet: no judgement.
        published.publish(&r, false, 7, 20 * MS);
        assert_eq!(published.at(21 * MS, hl), None);
    }

    #[test]
    fn entitlement_divides_the_core_among_its_contenders() {
        assert_eq!(entitlement(1, 10, 0), SHARE_SCALE);
        assert_eq!(entitlement(1, 10, 10), SHARE_SCALE / 2);
        assert_eq!(entitlement(1, 10, 30), SHARE_SCALE / 4);
        assert_eq!(entitlement(2, 10, 30), SHARE_SCALE / 2);
        assert_eq!(
            entitlement(2, 10, 0),
            SHARE_SCALE,
            "never more than one CPU"
        );
        // By weight: 20 next to 10 is entitled to two thirds, 10 to one.
        assert_eq!(entitlement(1, 20, 10), SHARE_SCALE * 2 / 3);
        assert_eq!(entitlement(1, 10, 20), SHARE_SCALE / 3);
    }
}
