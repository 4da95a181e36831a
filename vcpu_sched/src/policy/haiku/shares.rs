//! Operator shares under haiku (`crate::shares` has the model): the
//! weight's slice, the cap's throttling and renewal, the reservation's
//! level, and the changes while running that set them.

use super::{live, CpuAcct, HaikuScheduler, Slot};
use crate::entity::{Entity, RunState};
use crate::shares::{Bucket, Renewal, DEFAULT_WEIGHT, MAX_WEIGHT, MIN_RUN, PERMILLE};
use crate::{CoreId, CpuId, EntityId, Nanos, SchedClass, SchedError};
use std::sync::atomic::Ordering;

/// The one wording of each bad share value.
pub(crate) fn validate_weight(weight: u32) -> Result<(), SchedError> {
    if (1..=MAX_WEIGHT).contains(&weight) {
        Ok(())
    } else {
        Err(SchedError::Config(format!(
            "weight {weight} is out of range (1..={MAX_WEIGHT})"
        )))
    }
}

fn validate_permille(what: &str, permille: u32, zero_ok: bool) -> Result<(), SchedError> {
    let lo = if zero_ok { 0 } else { 1 };
    if (lo..=PERMILLE).contains(&permille) {
        Ok(())
    } else {
        Err(SchedError::Config(format!(
            "{what} {permille} per mille is out of range ({lo}..={PERMILLE}, one CPU at most per vCPU)"
        )))
    }
}

impl HaikuScheduler {
    /// A timeshare entity holding reservation tokens runs at the reserved
    /// level; one that spent them waits for their renewal at its own.
    /// Nothing to judge without a reservation (the common case, checked
    /// inline on the hot path; the rest is out of line).
    #[inline]
    pub(super) fn judge_reservation(&self, e: &mut Entity, now: Nanos) {
        if e.reserve.is_some() {
            self.judge_reservation_held(e, now);
        }
    }

    #[inline(never)]
    fn judge_reservation_held(&self, e: &mut Entity, now: Nanos) {
        let (t, mode) = (self.tun(), self.mode());
        let Some(b) = e.reserve.as_mut() else {
            return;
        };
        b.refill(now);
        let usable = b.usable() && e.prio.class == SchedClass::Timeshare;
        if usable != e.prio.is_reserved() {
            e.prio.set_reserved(usable, t, mode);
            if !usable {
                self.renewals
                    .push(b.renewed_at(now), e.id, Renewal::Reservation);
            }
        }
    }

    /// The stopped entity ran `ran` up to `now`: charge its buckets
    /// (nothing to do without a cap or reservation).
    #[inline]
    pub(super) fn charge_shares(&self, e: &mut Entity, ran: Nanos, now: Nanos) {
        if e.cap.is_some() || e.reserve.is_some() || e.bounded.is_some() {
            self.charge_buckets(e, ran, now);
        }
    }

    #[inline(never)]
    fn charge_buckets(&self, e: &mut Entity, ran: Nanos, now: Nanos) {
        if let Some(b) = e.cap.as_mut() {
            b.charge(ran, now);
        }
        if let Some(b) = e.reserve.as_mut() {
            b.charge(ran, now);
        }
        if let Some(b) = e.bounded.as_mut() {
            b.bucket.charge(ran, now);
        }
        self.judge_reservation(e, now);
        self.judge_bound(e, now);
    }

    /// Whether the runnable entity's cap leaves it nothing to run on now:
    /// then it is throttled (out of every queue, `Blocked` to the queues,
    /// runnable to the caller) until its bucket is renewed, and the CPU
    /// calling `schedule` reports it. An idle CPU is kicked so that it
    /// asks to be called at the renewal (`Dispatch::recheck_at`).
    #[inline]
    pub(super) fn throttle_if_spent(
        &self,
        e: &mut Entity,
        cpu: CpuId,
        now: Nanos,
        acct: &mut CpuAcct,
    ) -> bool {
        e.cap.is_some() && self.throttle_capped(e, cpu, now, acct)
    }

    /// `throttle_if_spent` for an entity with a cap.
    #[inline(never)]
    fn throttle_capped(&self, e: &mut Entity, cpu: CpuId, now: Nanos, acct: &mut CpuAcct) -> bool {
        let Some(b) = e.cap.as_mut() else {
            return false;
        };
        b.refill(now);
        if b.usable() {
            return false;
        }
        let until = b.renewed_at(now);
        e.unpark_sync();
        e.state = RunState::Blocked;
        e.throttled_until = Some(until);
        e.slept_at = now;
        e.counters.throttles += 1;
        e.uncharge_block(&self.m);
        self.renewals.push(until, e.id, Renewal::Cap);
        acct.throttled.push((e.id, until));
        if let Some(idle) = (0..self.m.cpus.len() as u32)
            .map(CpuId)
            .find(|c| *c != cpu && self.m.is_available(*c))
        {
            acct.kicks.push(idle);
        }
        true
    }

    /// The full quantum of a dispatched entity scaled by its weight over
    /// the mean weight ready on its core (all equal: unchanged).
    pub(super) fn weighted(&self, e: &Entity, core: CoreId, full: Nanos) -> Nanos {
        let mut slice = full;
        if e.prio.class != SchedClass::Realtime {
            let (sum, count) = self.m.load_of(core).slice_weights();
            if sum != count.saturating_mul(DEFAULT_WEIGHT as u64) || e.weight != DEFAULT_WEIGHT {
                let scaled =
                    slice as u128 * e.weight as u128 * count.max(1) as u128 / sum.max(1) as u128;
                slice = (scaled.min(Nanos::MAX as u128) as Nanos)
                    .max(self.table().minimal_quantum.min(slice));
            }
        }
        slice
    }

    /// A slice bounded by the cap's tokens (the time they last running).
    pub(super) fn capped(&self, e: &Entity, slice: Nanos) -> Nanos {
        let mut slice = slice;
        if let Some(b) = &e.cap {
            slice = slice.min(b.run_time_left().max(MIN_RUN));
        }
        self.bounded_slice(e, slice).max(1)
    }

    /// Renew what is due: throttled entities are queued again (as on a
    /// wake; the kicks go to `kicks`), reservations become usable again
    /// (a waiting entity moves up to the reserved level).
    pub(super) fn renew_due(&self, now: Nanos, kicks: &mut Vec<CpuId>) {
        for (id, what) in self.renewals.take_due(now) {
            let Ok(slot) = self.slot(id) else { continue };
            let mut guard = slot.lock();
            let Slot {
                seq,
                entity,
                generation,
            } = &mut *guard;
            let Ok(e) = live(entity, *generation, id) else {
                continue;
            };
            match what {
                Renewal::Cap => {
                    let Some(until) = e.throttled_until else {
                        continue;
                    };
                    if let Some(b) = e.cap.as_mut() {
                        b.refill(now);
                        if !b.usable() {
                            // The cap was lowered meanwhile.
                            let at = b.renewed_at(now).max(now + 1);
                            e.throttled_until = Some(at);
                            self.renewals.push(at, id, Renewal::Cap);
                            continue;
                        }
                    }
                    e.throttled_until = None;
                    let since = e.slept_at.min(until);
                    e.counters.throttled_time = e
                        .counters
                        .throttled_time
                        .saturating_add(now.saturating_sub(since));
                    self.judge_reservation(e, now);
                    e.queued_at = now;
                    let d = self.place(e, id, seq, now);
                    if d.kick {
                        kicks.push(d.cpu);
                    }
                }
                Renewal::Reservation => {
                    if e.prio.is_reserved() || e.reserve.is_none() {
                        continue;
                    }
                    self.judge_reservation(e, now);
                    if !e.prio.is_reserved() {
                        // Charged since the renewal was set (it ran at its
                        // own level meanwhile): not full enough yet. Set it
                        // again, or nothing would: a vCPU waiting at a low
                        // level is never stopped to be judged, and would
                        // wait there without its reservation for good.
                        if let Some(b) = e.reserve.as_mut() {
                            if e.prio.class == SchedClass::Timeshare && !b.usable() {
                                let at = b.renewed_at(now).max(now + 1);
                                self.renewals.push(at, id, Renewal::Reservation);
                            }
                        }
                        continue;
                    }
                    match e.state {
                        RunState::Queued {
                            queue,
                            seq: s,
                            level,
                        } => {
                            if self.m.remove(queue, id, s, level) {
                                if let Some((y, true)) =
                                    self.enqueue_served(e, id, seq, queue, false, now)
                                {
                                    kicks.push(y);
                                }
                            }
                        }
                        RunState::Running(cpu) => {
                            let slot = &self.m.cpus[cpu.0 as usize];
                            if slot.running.load(Ordering::SeqCst) == id.index() {
                                slot.prio.store(e.prio.effective() as i32, Ordering::SeqCst);
                            }
                        }
                        RunState::Blocked => {}
                    }
                }
            }
        }
    }

    pub(super) fn set_weight_now(
        &self,
        id: EntityId,
        weight: u32,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        validate_weight(weight)?;
        self.change_shares(id, now, |e| {
            e.weight = weight;
            e.reweigh(&self.m);
        })
    }

    pub(super) fn set_cap_now(
        &self,
        id: EntityId,
        permille: Option<u32>,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        if let Some(p) = permille {
            validate_permille("cap", p, false)?;
        }
        self.change_shares(id, now, |e| {
            e.cap = permille.map(|p| match e.cap {
                // Keep what it spent: a new rate, the same debt.
                Some(mut b) => {
                    b.refill(now);
                    b.permille = p;
                    b.refill(now);
                    b
                }
                None => Bucket::new(p, now),
            });
            if e.throttled_until.is_some() {
                // Lifted or changed: the next `schedule` looks again.
                self.renewals.push(now, e.id, Renewal::Cap);
            }
        })
    }

    pub(super) fn set_reservation_now(
        &self,
        id: EntityId,
        permille: u32,
        now: Nanos,
    ) -> Result<Vec<CpuId>, SchedError> {
        validate_permille("reservation", permille, true)?;
        let (t, mode) = (self.tun(), self.mode());
        self.change_shares(id, now, |e| {
            e.reserve = (permille > 0).then(|| Bucket::new(permille, now));
            if e.reserve.is_none() {
                e.prio.set_reserved(false, t, mode);
            } else if e.throttled_until.is_none() && e.state != RunState::Blocked {
                self.judge_reservation(e, now);
            }
        })
    }

    /// Apply a share change and requeue a waiting entity at its (possibly
    /// new) level, as a priority change does.
    fn change_shares(
        &self,
        id: EntityId,
        now: Nanos,
        change: impl FnOnce(&mut Entity),
    ) -> Result<Vec<CpuId>, SchedError> {
        self.change_entity(id, now, false, |e| {
            change(e);
            Ok(())
        })
    }
}
