//! One CPU's fair run queue under EEVDF: virtual time, lag, eligibility,
//! virtual deadlines, the pick, placement and delayed dequeue, as
//! `kernel/sched/fair.c` of Linux 6.18 computes them for entities of equal
//! weight (see the design comment of [`super`] for what is left out).
//!
//! Names follow the kernel's so the two can be read side by side:
//! `vruntime`, `deadline`, `vlag`, `vprot`, `avg_vruntime`,
//! `entity_eligible`, `update_curr`, `place_entity`, `__pick_eevdf`,
//! `requeue_delayed_entity`. Virtual time is kept as `i64` nanoseconds in
//! the queue's own frame: an entity that moves to another queue takes its
//! lag with it, never its vruntime. Sums are exact (`i128`), so
//! eligibility is the kernel's division-free test.

use crate::{EntityId, Nanos};

/// NICE_0_LOAD after `scale_load_down`: the weight of every entity here.
/// The model gives every vCPU nice 0 (see the design comment), so a
/// nanosecond of run time is a nanosecond of virtual time; the weight
/// still appears where the kernel's formulas have it.
pub(super) const NICE_0_WEIGHT: i128 = 1024;

/// The EEVDF state of one entity (the fields of `struct sched_entity` the
/// model needs).
#[derive(Debug, Clone, Default)]
pub(super) struct FairEntity {
    /// Virtual run time v_i in the frame of the queue that holds it.
    pub vruntime: i64,
    /// Virtual deadline vd_i = v_i + r_i / w_i at its last request; while
    /// `rel_deadline`, the deadline minus the vruntime (it is moving).
    pub deadline: i64,
    /// Lag kept while it is on no queue: V - v_i at its dequeue, clamped.
    pub vlag: i64,
    /// Protected until its vruntime reaches this (RUN_TO_PARITY).
    pub vprot: i64,
    /// Its request r_i (the base slice).
    pub slice: Nanos,
    /// Blocked but still on its queue until it is eligible (DELAY_DEQUEUE).
    pub delayed: bool,
    /// `deadline` is relative (dequeued without sleeping: a migration).
    pub rel_deadline: bool,
    /// Placed at least once: the first placement is a fork's
    /// (ENQUEUE_INITIAL: half a slice to the first deadline).
    pub placed: bool,
    /// When its run time was last added to its vruntime (running only).
    pub exec_start: Nanos,
}

impl FairEntity {
    /// Still inside the slice it was picked for (`protect_slice`).
    pub fn protected(&self) -> bool {
        self.vprot > self.vruntime
    }
}

/// Read and write access to the entities' EEVDF state by handle (the
/// policy's entity table).
pub(super) trait FairEntities {
    fn fair(&self, id: EntityId) -> &FairEntity;
    fn fair_mut(&mut self, id: EntityId) -> &mut FairEntity;
}

/// One CPU's `cfs_rq`: the entities on it (runnable or delayed) and the
/// one it runs. The running entity is not in `queued`, as the kernel
/// keeps `curr` out of its tree.
#[derive(Debug, Clone, Default)]
pub(super) struct FairRq {
    /// On the queue and not running, in the order they joined (the
    /// kernel's tree keeps equal deadlines in that order).
    pub queued: Vec<EntityId>,
    /// The fair entity this CPU runs (`cfs_rq->curr`, on the queue).
    pub curr: Option<EntityId>,
    /// Monotonic lower bound of the queue's vruntimes: V of an empty queue.
    pub min_vruntime: i64,
}

impl FairRq {
    /// `nr_queued`: entities on the queue, the running one and delayed
    /// ones included.
    pub fn nr_queued(&self) -> usize {
        self.queued.len() + usize::from(self.curr.is_some())
    }

    fn members(&self) -> impl Iterator<Item = EntityId> + '_ {
        self.curr.into_iter().chain(self.queued.iter().copied())
    }

    /// Sum of w_i * v_i and of w_i over the queue (`avg_vruntime`'s sums
    /// with the running entity added).
    fn sums(&self, ents: &impl FairEntities) -> (i128, i128) {
        self.members().fold((0, 0), |(s, w), id| {
            (
                s + NICE_0_WEIGHT * i128::from(ents.fair(id).vruntime),
                w + NICE_0_WEIGHT,
            )
        })
    }

    /// V, the weighted average vruntime, rounded down as the kernel's
    /// `avg_vruntime` does; `min_vruntime` when the queue is empty.
    pub fn avg_vruntime(&self, ents: &impl FairEntities) -> i64 {
        let (sum, load) = self.sums(ents);
        if load == 0 {
            return self.min_vruntime;
        }
        sum.div_euclid(load) as i64
    }

    /// `vruntime_eligible`: lag >= 0, i.e. V >= v, tested without the
    /// division's rounding: \Sum w_j v_j >= v * \Sum w_j.
    pub fn eligible(&self, ents: &impl FairEntities, vruntime: i64) -> bool {
        let (sum, load) = self.sums(ents);
        sum >= i128::from(vruntime) * load
    }

    /// `update_min_vruntime`: never backwards.
    fn update_min_vruntime(&mut self, ents: &impl FairEntities) {
        if let Some(m) = self.members().map(|id| ents.fair(id).vruntime).min() {
            self.min_vruntime = self.min_vruntime.max(m);
        }
    }

    /// `update_curr` at `now`: the running entity's run time since its
    /// last update becomes virtual time; a request used up gets the next
    /// deadline (`update_deadline`). Returns whether the kernel would
    /// reschedule: someone else is on the queue and the runner either
    /// finished its request or left its protected slice.
    pub fn update_curr(&mut self, ents: &mut impl FairEntities, now: Nanos) -> bool {
        let Some(curr) = self.curr else { return false };
        let e = ents.fair_mut(curr);
        let delta = now.saturating_sub(e.exec_start);
        if delta == 0 {
            return false;
        }
        e.exec_start = now;
        // calc_delta_fair at NICE_0_LOAD: one ns of run, one of vruntime.
        e.vruntime = e.vruntime.saturating_add(delta.min(i64::MAX as u64) as i64);
        let renewed = e.vruntime >= e.deadline;
        if renewed {
            e.deadline = e.vruntime.saturating_add(e.slice as i64);
        }
        let protected = e.protected();
        self.update_min_vruntime(ents);
        self.nr_queued() > 1 && (renewed || !protected)
    }

    /// `entity_lag`: V - v, clamped to twice the request (at least a tick),
    /// the bound EEVDF gives a steady system.
    pub fn entity_lag(avg: i64, e: &FairEntity, tick: Nanos) -> i64 {
        let limit = (2 * e.slice).max(tick).min(i64::MAX as u64) as i64;
        avg.saturating_sub(e.vruntime).clamp(-limit, limit)
    }

    /// The smallest request on the queue (`cfs_rq_min_slice`).
    fn min_slice(&self, ents: &impl FairEntities) -> Option<Nanos> {
        self.members().map(|id| ents.fair(id).slice).min()
    }

    /// `place_entity`: put `id` (not on the queue) at V minus its lag,
    /// the lag inflated by (W + w_i) / W so that it is still the lag
    /// once the entity is in the average (PLACE_LAG); deadline one request
    /// later, half a request for a new entity (PLACE_DEADLINE_INITIAL),
    /// or the relative deadline it left its last queue with
    /// (PLACE_REL_DEADLINE). Then it joins the queue.
    pub fn place(&mut self, ents: &mut impl FairEntities, id: EntityId, slice: Nanos) {
        let avg = self.avg_vruntime(ents);
        let (_, load) = self.sums(ents);
        let e = ents.fair_mut(id);
        e.slice = slice;
        let mut lag: i128 = 0;
        if load > 0 && e.vlag != 0 {
            // div_s64 truncates toward zero, as `/` on i128 does.
            lag = i128::from(e.vlag) * (load + NICE_0_WEIGHT) / load;
        }
        e.vruntime = (i128::from(avg) - lag).clamp(i64::MIN.into(), i64::MAX.into()) as i64;
        if e.rel_deadline {
            e.deadline = e.deadline.saturating_add(e.vruntime);
            e.rel_deadline = false;
        } else {
            let vslice = if e.placed { slice } else { slice / 2 };
            e.deadline = e.vruntime.saturating_add(vslice as i64);
        }
        e.placed = true;
        e.delayed = false;
        self.queued.push(id);
    }

    /// `dequeue_entity` of a runnable or delayed entity that leaves the
    /// queue: its lag is kept in `vlag` (`update_entity_lag`), and if it is
    /// moving rather than sleeping its deadline becomes relative.
    pub fn dequeue(
        &mut self,
        ents: &mut impl FairEntities,
        id: EntityId,
        sleep: bool,
        tick: Nanos,
    ) {
        let avg = self.avg_vruntime(ents);
        let e = ents.fair_mut(id);
        e.vlag = Self::entity_lag(avg, e, tick);
        if !sleep {
            e.deadline = e.deadline.saturating_sub(e.vruntime);
            e.rel_deadline = true;
        }
        e.delayed = false;
        if self.curr == Some(id) {
            self.curr = None;
        } else {
            self.queued.retain(|q| *q != id);
        }
        self.update_min_vruntime(ents);
    }

    /// The running entity blocked: with DELAY_DEQUEUE an entity that is
    /// not eligible (it ran more than its share) stays on the queue,
    /// delayed, and works its negative lag off there; an eligible one
    /// leaves with its lag. Returns whether it was delayed.
    pub fn block_curr(&mut self, ents: &mut impl FairEntities, tick: Nanos) -> bool {
        let Some(curr) = self.curr else { return false };
        if !self.eligible(ents, ents.fair(curr).vruntime) {
            ents.fair_mut(curr).delayed = true;
            self.curr = None;
            self.queued.push(curr);
            return true;
        }
        self.dequeue(ents, curr, true, tick);
        false
    }

    /// The delayed entity `id` leaves for good (it was picked, or it
    /// wakes to be placed elsewhere): its lag is kept, but never a
    /// positive one (DELAY_ZERO).
    pub fn finish_delayed(&mut self, ents: &mut impl FairEntities, id: EntityId, tick: Nanos) {
        self.dequeue(ents, id, true, tick);
        let e = ents.fair_mut(id);
        e.vlag = e.vlag.min(0);
    }

    /// `requeue_delayed_entity`: the delayed entity `id` woke on this
    /// queue. If its lag turned positive meanwhile it starts afresh at V
    /// (DELAY_ZERO); otherwise it keeps its place, vruntime and deadline.
    pub fn requeue_delayed(&mut self, ents: &mut impl FairEntities, id: EntityId, tick: Nanos) {
        let avg = self.avg_vruntime(ents);
        let lag = Self::entity_lag(avg, ents.fair(id), tick);
        ents.fair_mut(id).delayed = false;
        if lag > 0 {
            self.queued.retain(|q| *q != id);
            let e = ents.fair_mut(id);
            e.vlag = 0;
            e.rel_deadline = false;
            let slice = e.slice;
            self.place(ents, id, slice);
        }
    }

    /// The running entity stops but stays on the queue (`put_prev_entity`).
    pub fn put_prev(&mut self) {
        if let Some(curr) = self.curr.take() {
            self.queued.push(curr);
        }
    }

    /// `set_next_entity`: `id` (on the queue) runs from `now`, protected
    /// until its deadline, or for the smallest request on the queue if
    /// that is shorter (`set_protect_slice` under RUN_TO_PARITY).
    pub fn set_next(&mut self, ents: &mut impl FairEntities, id: EntityId, now: Nanos) {
        self.queued.retain(|q| *q != id);
        self.curr = Some(id);
        let min_slice = self.min_slice(ents).unwrap_or(0);
        let e = ents.fair_mut(id);
        e.exec_start = now;
        let slice = min_slice.min(e.slice);
        e.vprot = if slice == e.slice {
            e.deadline
        } else {
            e.deadline.min(e.vruntime.saturating_add(slice as i64))
        };
    }

    /// `__pick_eevdf`: the eligible entity with the earliest virtual
    /// deadline, the running one included while it is eligible; with
    /// `protect`, a running entity still inside its protected slice stays.
    /// Ties go to the earliest on the queue: the running entity wins
    /// only with a strictly earlier deadline (`entity_before`).
    pub fn pick(&self, ents: &impl FairEntities, protect: bool) -> Option<EntityId> {
        if self.nr_queued() == 1 {
            return self.curr.or_else(|| self.queued.first().copied());
        }
        let curr = self
            .curr
            .filter(|c| self.eligible(ents, ents.fair(*c).vruntime));
        if let Some(c) = curr {
            if protect && ents.fair(c).protected() {
                return Some(c);
            }
        }
        let mut best: Option<EntityId> = None;
        for &id in &self.queued {
            let e = ents.fair(id);
            let earlier = best.is_none_or(|b| e.deadline < ents.fair(b).deadline);
            if earlier && self.eligible(ents, e.vruntime) {
                best = Some(id);
            }
        }
        match (curr, best) {
            (Some(c), Some(b)) if ents.fair(c).deadline < ents.fair(b).deadline => Some(c),
            (c, None) => c.or_else(|| self.earliest_deadline(ents)),
            (_, b) => b,
        }
    }

    /// The queued entity with the earliest deadline (a fallback the exact
    /// arithmetic never needs: some entity is always at or below V).
    fn earliest_deadline(&self, ents: &impl FairEntities) -> Option<EntityId> {
        self.queued
            .iter()
            .copied()
            .min_by_key(|id| ents.fair(*id).deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    const MS: Nanos = 1_000_000;
    const SLICE: Nanos = 1_500_000;
    const TICK: Nanos = 4 * MS;

    #[derive(Default)]
    struct Ents(HashMap<EntityId, FairEntity>);

    impl FairEntities for Ents {
        fn fair(&self, id: EntityId) -> &FairEntity {
            &self.0[&id]
        }
        fn fair_mut(&mut self, id: EntityId) -> &mut FairEntity {
            self.0.entry(id).or_default()
        }
    }

    fn id(i: u32) -> EntityId {
        EntityId::new(i, 0)
    }

    /// A queue running entity 0 (placed at 0) with entities 1.. queued.
    fn queue(n: u32) -> (FairRq, Ents) {
        let mut rq = FairRq::default();
        let mut ents = Ents::default();
        for i in 0..n {
            ents.fair_mut(id(i)).placed = true;
            rq.place(&mut ents, id(i), SLICE);
        }
        rq.set_next(&mut ents, id(0), 0);
        (rq, ents)
    }

    #[test]
    fn run_time_is_virtual_time_and_a_used_request_gets_the_next_deadline() {
        let (mut rq, mut ents) = queue(2);
        assert_eq!(ents.fair(id(0)).deadline, SLICE as i64);
        // 1 ms: inside the request and the protected slice: no resched.
        assert!(!rq.update_curr(&mut ents, MS));
        assert_eq!(ents.fair(id(0)).vruntime, MS as i64);
        // 2 ms: the request is used up: next deadline, resched.
        assert!(rq.update_curr(&mut ents, 2 * MS));
        assert_eq!(ents.fair(id(0)).deadline, (2 * MS + SLICE) as i64);
        // Alone on the queue nothing reschedules, but the deadline moves on.
        let (mut alone, mut ents) = queue(1);
        assert!(!alone.update_curr(&mut ents, 4 * MS));
        assert_eq!(ents.fair(id(0)).deadline, (4 * MS + SLICE) as i64);
    }

    #[test]
    fn eligibility_is_lag_at_least_zero() {
        let (mut rq, mut ents) = queue(2);
        rq.update_curr(&mut ents, MS);
        // v0 = 1 ms, v1 = 0: V = 0.5 ms.
        assert_eq!(rq.avg_vruntime(&ents), (MS / 2) as i64);
        assert!(!rq.eligible(&ents, MS as i64));
        assert!(rq.eligible(&ents, 0));
        assert!(rq.eligible(&ents, (MS / 2) as i64));
        // The runner is no longer eligible: the pick is the other one,
        // protection or not (protection holds only while eligible).
        assert_eq!(rq.pick(&ents, true), Some(id(1)));
    }

    #[test]
    fn the_protected_runner_stays_until_its_deadline() {
        let (mut rq, mut ents) = queue(3);
        // Entity 2 placed with a lag it earned: earlier deadline than the
        // runner, but the runner is eligible and inside its slice.
        rq.update_curr(&mut ents, 100_000);
        ents.fair_mut(id(1)).vruntime = MS as i64;
        ents.fair_mut(id(2)).deadline = 0;
        // V = (0.1 + 1 + 0) / 3 ms: the runner and entity 2 are eligible.
        assert!(rq.eligible(&ents, 100_000));
        assert!(rq.eligible(&ents, 0));
        assert_eq!(rq.pick(&ents, true), Some(id(0)));
        assert_eq!(rq.pick(&ents, false), Some(id(2)));
    }

    #[test]
    fn placement_keeps_the_lag_it_left_with() {
        let (mut rq, mut ents) = queue(3);
        rq.update_curr(&mut ents, 3 * MS);
        // Entity 1 leaves (not sleeping: a migration) with V - v1 > 0.
        let avg = rq.avg_vruntime(&ents);
        rq.dequeue(&mut ents, id(1), false, TICK);
        let vlag = ents.fair(id(1)).vlag;
        assert_eq!(vlag, avg);
        assert!(ents.fair(id(1)).rel_deadline);
        // Back on the same queue: after placement its lag is what it was.
        rq.place(&mut ents, id(1), SLICE);
        let lag_after = rq.avg_vruntime(&ents) - ents.fair(id(1)).vruntime;
        assert!((lag_after - vlag).abs() <= 1, "{lag_after} vs {vlag}");
        // Its relative deadline came with it.
        let e1 = ents.fair(id(1));
        assert_eq!(e1.deadline - e1.vruntime, SLICE as i64);
        assert!(!e1.rel_deadline);
    }

    #[test]
    fn lag_is_clamped_to_twice_the_request_or_a_tick() {
        let e = FairEntity {
            vruntime: -100 * MS as i64,
            slice: SLICE,
            ..FairEntity::default()
        };
        assert_eq!(FairRq::entity_lag(0, &e, TICK), TICK as i64);
        let e = FairEntity { slice: 3 * MS, ..e };
        assert_eq!(FairRq::entity_lag(0, &e, TICK), (6 * MS) as i64);
    }

    #[test]
    fn a_new_entity_gets_half_a_request_to_its_first_deadline() {
        let mut rq = FairRq::default();
        let mut ents = Ents::default();
        rq.place(&mut ents, id(0), SLICE);
        assert_eq!(ents.fair(id(0)).deadline, (SLICE / 2) as i64);
    }

    #[test]
    fn an_ineligible_blocker_is_delayed_and_leaves_with_no_credit() {
        let (mut rq, mut ents) = queue(2);
        rq.update_curr(&mut ents, MS);
        // Entity 0 ran 1 ms ahead of V: it blocks delayed.
        assert!(rq.block_curr(&mut ents, TICK));
        assert!(ents.fair(id(0)).delayed);
        assert_eq!(rq.nr_queued(), 2);
        // Picked once it is eligible: it leaves with lag 0, not more.
        ents.fair_mut(id(1)).vruntime = 3 * MS as i64;
        assert!(rq.eligible(&ents, MS as i64));
        rq.finish_delayed(&mut ents, id(0), TICK);
        assert_eq!(ents.fair(id(0)).vlag, 0);
        assert_eq!(rq.nr_queued(), 1);
        // An eligible blocker leaves at once with its (positive) lag.
        let (mut rq, mut ents) = queue(2);
        ents.fair_mut(id(1)).vruntime = MS as i64;
        assert!(!rq.block_curr(&mut ents, TICK));
        assert_eq!(ents.fair(id(0)).vlag, (MS / 2) as i64);
        assert_eq!(rq.nr_queued(), 1);
    }

    #[test]
    fn a_delayed_entity_woken_with_credit_starts_at_v() {
        let (mut rq, mut ents) = queue(2);
        rq.update_curr(&mut ents, MS);
        assert!(rq.block_curr(&mut ents, TICK));
        // It still owes: woken now, it keeps its place.
        let before = ents.fair(id(0)).clone();
        rq.requeue_delayed(&mut ents, id(0), TICK);
        assert_eq!(ents.fair(id(0)).vruntime, before.vruntime);
        assert!(!ents.fair(id(0)).delayed);
        // Blocked again; the other ran past it meanwhile: it starts at V.
        rq.set_next(&mut ents, id(0), MS);
        assert!(rq.block_curr(&mut ents, TICK));
        ents.fair_mut(id(1)).vruntime = 5 * MS as i64;
        rq.requeue_delayed(&mut ents, id(0), TICK);
        let v = rq.avg_vruntime(&ents);
        assert!((ents.fair(id(0)).vruntime - v).abs() <= 1);
        assert_eq!(
            ents.fair(id(0)).deadline,
            ents.fair(id(0)).vruntime + SLICE as i64
        );
    }

    #[test]
    fn the_earliest_eligible_deadline_wins_and_ties_keep_queue_order() {
        let mut rq = FairRq::default();
        let mut ents = Ents::default();
        for i in 0..3 {
            ents.fair_mut(id(i)).placed = true;
            rq.place(&mut ents, id(i), SLICE);
        }
        // All at V with equal deadlines: the first queued.
        assert_eq!(rq.pick(&ents, true), Some(id(0)));
        ents.fair_mut(id(2)).deadline -= 1;
        assert_eq!(rq.pick(&ents, true), Some(id(2)));
        // An earlier deadline that is not eligible does not count.
        ents.fair_mut(id(1)).deadline -= 10;
        ents.fair_mut(id(1)).vruntime += 3 * MS as i64;
        assert_eq!(rq.pick(&ents, true), Some(id(2)));
    }
}
