//! A wake-to-run bound a vCPU can be promised (after Tableau, EuroSys'18,
//! which gives every Xen vCPU a guaranteed maximum scheduling delay).
//!
//! A *bounded* vCPU has a bound B (ns) and a budget u: a per-mille of one
//! CPU, kept as a token bucket like the reservation's (`shares::Bucket`)
//! that holds one bound's worth, B x u. A rate, not a per-wake service
//! time, because only a rate can be summed against the CPUs: a per-wake
//! budget says nothing of how often the vCPU wakes, so no admission could
//! bound the time the bounded vCPUs take from each other. The bucket
//! holds B x u rather than a fixed period's budget so that what one
//! bounded vCPU may run ahead of another's wake scales with the bounds
//! promised: with equal bounds the rule below is kick <= B (1 - 2 x the
//! others' budgets).
//!
//! While its bucket holds tokens, a bounded vCPU runs at the bounded level
//! (`BOUNDED_PRIORITY`, the top timeshare level, which the admission keeps
//! to bounded vCPUs on their CPUs), ahead of every other timeshare entity;
//! its wake takes an idle CPU, else preempts (kicks) a CPU running a
//! non-bounded entity, and its slice there never outlasts its tokens.
//! Without tokens it is an ordinary timeshare entity. A wake with tokens
//! that reaches a CPU later than B is a *miss*, counted per vCPU.
//!
//! [`admit`] is the admission rule (ARCHITECTURE.md, "Latency bounds"):
//! budgets fit the CPUs, and each bounded vCPU's worst-case wait - the kick
//! plus everything the others may run at the bounded level meanwhile, a
//! busy period - is at most its bound.

use crate::shares::PERMILLE;
use crate::Nanos;
use serde::{Deserialize, Serialize};

/// The level a bounded vCPU holding budget runs at: the top timeshare
/// level (the reservation's too, which is why the admission refuses
/// reservations on the CPUs of bounded vCPUs).
pub const BOUNDED_PRIORITY: u8 = crate::shares::RESERVED_PRIORITY;

/// The cost of reaching a CPU a VMM on KVM admits bounds with: a signal
/// makes KVM_RUN return after 16 us on average and 82 us at most over 200
/// on the development machine (its ENVIRONMENT.md); 100 us covers that
/// and the dispatch after it.
pub const KICK_COST: Nanos = 100_000;

/// A vCPU's promise: wake-to-run at most `bound` ns while it has budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyBound {
    /// The bound, ns (> 0).
    pub bound: Nanos,
    /// The budget, per mille of one CPU (1..=1000).
    pub budget_permille: u32,
}

impl LatencyBound {
    /// The most run time its bucket holds: one bound's worth of budget.
    pub fn burst(&self) -> Nanos {
        (self.bound as u128 * self.budget_permille.min(PERMILLE) as u128 / PERMILLE as u128)
            as Nanos
    }
}

/// Why a set of bounded vCPUs cannot all be promised their bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// The budgets sum past the CPUs the bounded vCPUs may use.
    #[error("the bounded budgets sum to {total} per mille, more than the {cpus} CPU(s) they may use give ({most} per mille)")]
    BudgetsOverflow { total: u64, cpus: usize, most: u64 },
    /// A bound below the worst-case wait of its wake.
    #[error("bounded vCPU {index}'s bound of {bound} ns is below its worst-case wait: (kick {kick} ns + the others' bursts {bursts} ns) / (1 - the others' budgets {others_permille}/1000) = {wait} ns")]
    BoundTooTight {
        index: usize,
        bound: Nanos,
        kick: Nanos,
        bursts: Nanos,
        others_permille: u64,
        /// `Nanos::MAX` when the others' budgets fill a CPU (no busy
        /// period ends).
        wait: Nanos,
    },
}

/// The worst-case wait of bounded vCPU `j`'s wake, among `bounded` (all
/// may share a CPU with it), `kick` the cost of reaching a CPU (a kick and
/// its dispatch). `Nanos::MAX` when the others' budgets fill one CPU.
///
/// Proof sketch: j wakes with tokens and takes an idle CPU or kicks one
/// running a non-bounded entity (cost `kick`); else every CPU it may use
/// runs a bounded vCPU and it waits at the bounded level in that CPU's
/// queue. From then on that CPU runs only bounded vCPUs until j (only they
/// reach the bounded level there, and nothing below preempts them). A
/// bounded vCPU k runs there only on tokens: over a window W at most its
/// bucket, `burst_k`, plus what flows in, `u_k W`. So the wait W obeys
/// W <= kick + sum(burst_k) + sum(u_k) W, i.e.
/// W <= (kick + sum(burst_k)) / (1 - sum(u_k)), k != j.
pub fn worst_wait(bounded: &[LatencyBound], j: usize, kick: Nanos) -> Nanos {
    let (bursts, permille) = others(bounded, j);
    wait_of(kick, bursts, permille)
}

fn others(bounded: &[LatencyBound], j: usize) -> (Nanos, u64) {
    bounded
        .iter()
        .enumerate()
        .filter(|(k, _)| *k != j)
        .fold((0, 0), |(b, p), (_, x)| {
            (
                b.saturating_add(x.burst()),
                p + x.budget_permille.min(PERMILLE) as u64,
            )
        })
}

fn wait_of(kick: Nanos, bursts: Nanos, others_permille: u64) -> Nanos {
    if others_permille >= PERMILLE as u64 {
        return Nanos::MAX;
    }
    let num = kick.saturating_add(bursts) as u128 * PERMILLE as u128;
    let den = (PERMILLE as u64 - others_permille) as u128;
    num.div_ceil(den).min(Nanos::MAX as u128) as Nanos
}

/// The admission rule: `bounded` vCPUs that may use `cpus` CPUs, reached
/// at a cost of `kick` ns, can all be promised their bounds if their
/// budgets fit the CPUs and each one's worst-case wait ([`worst_wait`])
/// is at most its bound. The first failure is returned with its
/// arithmetic.
pub fn admit(bounded: &[LatencyBound], cpus: usize, kick: Nanos) -> Result<(), AdmissionError> {
    let total: u64 = bounded.iter().map(|b| b.budget_permille as u64).sum();
    let most = cpus as u64 * PERMILLE as u64;
    if total > most {
        return Err(AdmissionError::BudgetsOverflow { total, cpus, most });
    }
    for (j, b) in bounded.iter().enumerate() {
        let (bursts, others_permille) = others(bounded, j);
        let wait = wait_of(kick, bursts, others_permille);
        if wait > b.bound {
            return Err(AdmissionError::BoundTooTight {
                index: j,
                bound: b.bound,
                kick,
                bursts,
                others_permille,
                wait,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(bound_us: u64, permille: u32) -> LatencyBound {
        LatencyBound {
            bound: bound_us * 1000,
            budget_permille: permille,
        }
    }

    #[test]
    fn burst_is_one_bound_of_budget() {
        assert_eq!(b(1000, 50).burst(), 50_000);
        assert_eq!(b(1000, 1000).burst(), 1_000_000);
    }

    #[test]
    fn the_wait_is_the_busy_period_of_the_others() {
        // Three others of 15 % of 600 us: bursts 3 x 90 us, budgets 450/1000.
        let set = [b(600, 150), b(600, 150), b(600, 150), b(600, 150)];
        let w = worst_wait(&set, 0, 16_000);
        assert_eq!(w, (286_000u128 * 1000).div_ceil(550) as Nanos);
        assert_eq!(w, 520_000);
        assert!(admit(&set, 2, 16_000).is_ok());
    }

    #[test]
    fn a_bound_below_the_wait_is_refused_with_the_arithmetic() {
        let set = [b(600, 150), b(500, 150), b(600, 150), b(600, 150)];
        match admit(&set, 2, 16_000) {
            Err(AdmissionError::BoundTooTight {
                index,
                bursts,
                others_permille,
                wait,
                ..
            }) => {
                assert_eq!(index, 1);
                assert_eq!(bursts, 270_000);
                assert_eq!(others_permille, 450);
                assert_eq!(wait, 520_000);
            }
            other => panic!("expected BoundTooTight, got {other:?}"),
        }
    }

    #[test]
    fn budgets_past_the_cpus_are_refused_before_any_wait() {
        let set = [b(100_000, 800), b(100_000, 800), b(100_000, 500)];
        assert_eq!(
            admit(&set, 2, 0),
            Err(AdmissionError::BudgetsOverflow {
                total: 2100,
                cpus: 2,
                most: 2000
            })
        );
    }

    #[test]
    fn others_filling_a_cpu_leave_no_finite_wait() {
        let set = [b(u64::MAX / 1000, 10), b(1000, 500), b(1000, 500)];
        assert_eq!(worst_wait(&set, 0, 0), Nanos::MAX);
        assert!(matches!(
            admit(&set, 2, 0),
            Err(AdmissionError::BoundTooTight { index: 0, .. })
        ));
    }

    #[test]
    fn a_lone_bounded_vcpu_waits_only_for_the_kick() {
        assert_eq!(worst_wait(&[b(20, 1000)], 0, 16_000), 16_000);
        assert!(admit(&[b(16, 1000)], 1, 16_000).is_ok());
        assert!(admit(&[b(15, 1000)], 1, 16_000).is_err());
    }
}
