//! One host timer facility for every guest timer of the run.
//!
//! Guest LAPIC timers must fire on time whether their vCPU runs, waits in a
//! queue or is halted, so they cannot live in the thread that runs the
//! vCPU. One thread (`pacer/timers`) keeps every armed deadline in a heap
//! and sleeps until the earliest; re-arming or cancelling a key replaces its
//! deadline (stale heap entries are skipped by generation), so arming is
//! O(log n) and nothing is ever scanned. The thread asks the kernel for 1 ns
//! timer slack (the default 50 us would be added to every guest timer) and,
//! where permitted, the lowest real-time priority (guest timers are
//! interrupts; KVM's own fire from hrtimer interrupt context).

use super::clock::now_ns;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Who owns a timer (the caller's choice; one deadline per key).
pub type TimerKey = u64;

/// What fires: the key and the deadline it was armed for.
pub type TimerCallback = Box<dyn Fn(TimerKey, u64) + Send + Sync>;

#[derive(Default)]
struct State {
    /// (deadline, generation, key), earliest first.
    heap: BinaryHeap<Reverse<(u64, u64, TimerKey)>>,
    /// The live generation of each armed key.
    armed: HashMap<TimerKey, u64>,
    next_generation: u64,
    shutdown: bool,
}

struct Shared {
    state: Mutex<State>,
    cond: Condvar,
}

/// Give the calling thread, which only ever runs briefly and stands in for
/// something the kernel does in interrupt context, the place closest to
/// that where allowed: real-time priority `rank` (the lowest, 1, unless
/// vCPU threads are real-time too: the ranked dispatch's service rank),
/// 1 us timer slack.
pub(crate) fn run_like_an_interrupt(what: &str, rank: i32) {
    // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer
    // slack.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    let param = libc::sched_param {
        sched_priority: rank,
    };
    // SAFETY: sets the calling thread's policy; `param` is valid.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
        log::debug!(
            "{what} stays SCHED_OTHER: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// The timer service. Dropping it stops the thread.
pub struct Timers {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Timers {
    /// Start the timer thread at real-time priority `rank` (see
    /// [`run_like_an_interrupt`]); `on_fire` runs on it, with no lock held.
    pub fn start(on_fire: TimerCallback, rank: i32) -> std::io::Result<Timers> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            cond: Condvar::new(),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("pacer/timers".into())
            .spawn(move || {
                // Guest timers are interrupts: KVM's in-kernel LAPIC fires
                // them from hrtimer interrupt context, ahead of every task.
                run_like_an_interrupt("timer thread", rank);
                crate::thread_hook::thread_started(crate::thread_hook::EngineThread::Timers);
                run(&s, &on_fire)
            })?;
        Ok(Timers {
            shared,
            thread: Some(thread),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fire `key` at `deadline_ns` (CLOCK_MONOTONIC), replacing its
    /// previous deadline.
    pub fn arm(&self, key: TimerKey, deadline_ns: u64) {
        let mut st = self.lock();
        st.next_generation += 1;
        let generation = st.next_generation;
        st.armed.insert(key, generation);
        let earliest = st.heap.peek().map(|Reverse((d, _, _))| *d);
        st.heap.push(Reverse((deadline_ns, generation, key)));
        drop(st);
        if earliest.is_none_or(|e| deadline_ns < e) {
            self.shared.cond.notify_one();
        }
    }

    /// Forget `key`'s deadline (a no-op if none is armed).
    pub fn cancel(&self, key: TimerKey) {
        self.lock().armed.remove(&key);
    }

    /// Number of armed keys.
    #[cfg(test)]
    pub fn armed(&self) -> usize {
        self.lock().armed.len()
    }
}

impl Drop for Timers {
    fn drop(&mut self) {
        self.lock().shutdown = true;
        self.shared.cond.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(shared: &Shared, on_fire: &TimerCallback) {
    let mut st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
    let mut due = Vec::new();
    loop {
        if st.shutdown {
            return;
        }
        let now = now_ns();
        while let Some(&Reverse((deadline, generation, key))) = st.heap.peek() {
            if st.armed.get(&key) != Some(&generation) {
                st.heap.pop(); // cancelled or re-armed
                continue;
            }
            if deadline > now {
                break;
            }
            st.heap.pop();
            st.armed.remove(&key);
            due.push((key, deadline));
        }
        if !due.is_empty() {
            drop(st);
            for (key, deadline) in due.drain(..) {
                on_fire(key, deadline);
            }
            st = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            continue;
        }
        st = match st.heap.peek() {
            Some(&Reverse((deadline, _, _))) => {
                let wait = Duration::from_nanos(deadline.saturating_sub(now));
                shared
                    .cond
                    .wait_timeout(st, wait)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
            None => shared.cond.wait(st).unwrap_or_else(|p| p.into_inner()),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    #[test]
    fn fires_in_deadline_order_and_honours_cancel_and_rearm() {
        let (tx, rx) = channel();
        let tx = Mutex::new(tx);
        let timers = Timers::start(
            Box::new(move |k, _deadline| {
                let _ = tx.lock().unwrap().send((k, now_ns()));
            }),
            1,
        )
        .unwrap();
        let t0 = now_ns();
        timers.arm(1, t0 + 30_000_000);
        timers.arm(2, t0 + 10_000_000);
        timers.arm(3, t0 + 20_000_000);
        timers.cancel(3);
        timers.arm(4, t0 + 5_000_000);
        timers.arm(4, t0 + 40_000_000); // re-armed later: fires once, late
        let got: Vec<(TimerKey, u64)> = (0..3)
            .map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap())
            .collect();
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), vec![2, 1, 4]);
        // Never early.
        assert!(got[0].1 >= t0 + 10_000_000);
        assert!(got[2].1 >= t0 + 40_000_000);
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        assert_eq!(timers.armed(), 0);
        // A deadline in the past fires at once.
        timers.arm(9, 0);
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap().0, 9);
    }
}
