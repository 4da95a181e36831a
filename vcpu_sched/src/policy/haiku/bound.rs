//! Latency bounds under haiku (`crate::bound` has the model and the
//! admission rule): the bounded level while the budget lasts, the slice
//! it never outlasts, and the change that sets a bound.

use super::HaikuScheduler;
use crate::bound::LatencyBound;
use crate::entity::{Bounded, Entity};
use crate::shares::{Bucket, PERMILLE};
use crate::{CpuId, EntityId, Nanos, SchedClass, SchedError};

impl HaikuScheduler {
    /// A bounded timeshare entity holding budget runs at the bounded
    /// level; one that spent it is ordinary timeshare until the bucket
    /// refills (judged again at its next wake or stop). Nothing to judge
    /// without a bound (checked inline on the hot path).
    #[inline]
    pub(super) fn judge_bound(&self, e: &mut Entity, now: Nanos) {
        if e.bounded.is_some() {
            self.judge_bound_held(e, now);
        }
    }

    #[inline(never)]
    fn judge_bound_held(&self, e: &mut Entity, now: Nanos) {
        let (t, mode) = (self.tun(), self.mode());
        let Some(b) = e.bounded.as_mut() else {
            return;
        };
        b.bucket.refill(now);
        let usable = b.bucket.usable() && e.prio.class == SchedClass::Timeshare;
        e.prio.set_bounded(usable, t, mode);
    }

    /// A wake of a blocked entity: judge its budget and remember whether
    /// the wake is one the bound is promised for.
    #[inline]
    pub(super) fn judge_bounded_wake(&self, e: &mut Entity, now: Nanos) {
        self.judge_bound(e, now);
        e.woke_bounded = e.prio.is_bounded();
        if e.woke_bounded {
            e.counters.bounded_wakes += 1;
        }
    }

    /// A slice at the bounded level never outlasts the budget, not even
    /// by a cap's least run (`MIN_RUN`): what the others wait behind it is
    /// what the admission rule counts.
    #[inline]
    pub(super) fn bounded_slice(&self, e: &Entity, slice: Nanos) -> Nanos {
        match &e.bounded {
            Some(b) if e.prio.is_bounded() => slice.min(b.bucket.run_time_left().max(1)),
            _ => slice,
        }
    }

    pub(super) fn set_latency_bound_now(
        &self,
        id: EntityId,
        bound: Option<LatencyBound>,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        if let Some(b) = &bound {
            if b.bound == 0 || !(1..=PERMILLE).contains(&b.budget_permille) {
                return Err(SchedError::Config(format!(
                    "latency bound {} ns with budget {} per mille is out of range (bound > 0, budget 1..={PERMILLE})",
                    b.bound, b.budget_permille
                )));
            }
        }
        let (t, mode) = (self.tun(), self.mode());
        self.change_entity(id, now, false, |e| {
            e.bounded = bound.map(|b| Bounded {
                bound: b.bound,
                bucket: Bucket::over(b.budget_permille, b.bound, now),
            });
            if e.bounded.is_none() {
                e.prio.set_bounded(false, t, mode);
                e.woke_bounded = false;
            } else {
                self.judge_bound(e, now);
            }
            Ok(())
        })
    }
}
