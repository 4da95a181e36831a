//! Scheduler profiler, after Haiku's scheduler profiler: per function name,
//! the call count and the inclusive and exclusive time.
//!
//! Instrument a function with a guard at its top:
//!
//! ```
//! fn wake() {
//!     let _p = vcpu_sched::profiler::scope("wake");
//!     // ...
//! }
//! # wake();
//! ```
//!
//! Without the `profiler` build feature, [`scope`] returns a zero-sized
//! guard with no drop code and every function here is a no-op, so the
//! instrumentation costs nothing. With the feature, each thread keeps a
//! stack of open scopes (started with [`std::time::Instant`]); when a scope
//! closes, its inclusive time (start to end) and exclusive time (inclusive
//! minus the inclusive time of the scopes nested directly in it) are added
//! to the thread's own table. [`report`] merges the tables of all threads
//! (and of threads that have exited) into one row per name.
//!
//! Recursion of one name counts the inner calls' time again in the outer
//! call's inclusive time (as Haiku's profiler does); exclusive time is never
//! counted twice.

/// Whether this build records anything (the `profiler` feature).
pub const ENABLED: bool = cfg!(feature = "profiler");

/// Aggregated measurements of one instrumented function.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProfileRow {
    /// The name given to [`scope`].
    pub name: String,
    /// Completed calls.
    pub calls: u64,
    /// Total time from entry to exit, nanoseconds.
    pub inclusive_ns: u64,
    /// Total time minus time spent in nested scopes, nanoseconds.
    pub exclusive_ns: u64,
}

impl ProfileRow {
    /// Mean inclusive time per call, nanoseconds (0 without calls).
    pub fn inclusive_avg_ns(&self) -> u64 {
        self.inclusive_ns.checked_div(self.calls).unwrap_or(0)
    }

    /// Mean exclusive time per call, nanoseconds (0 without calls).
    pub fn exclusive_avg_ns(&self) -> u64 {
        self.exclusive_ns.checked_div(self.calls).unwrap_or(0)
    }
}

/// Format rows as a table like Haiku's scheduler profiler (times in
/// microseconds), in the order given.
pub fn format_table(rows: &[ProfileRow]) -> String {
    use std::fmt::Write;
    let width = rows.iter().map(|r| r.name.len()).max().unwrap_or(0).max(8);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<width$} {:>10} {:>14} {:>11} {:>14} {:>11}",
        "function", "calls", "incl total us", "incl avg us", "excl total us", "excl avg us"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<width$} {:>10} {:>14.3} {:>11.3} {:>14.3} {:>11.3}",
            r.name,
            r.calls,
            r.inclusive_ns as f64 / 1e3,
            r.inclusive_avg_ns() as f64 / 1e3,
            r.exclusive_ns as f64 / 1e3,
            r.exclusive_avg_ns() as f64 / 1e3,
        );
    }
    out
}

/// The table of [`report`] as text (see [`format_table`]).
pub fn table() -> String {
    if !ENABLED {
        return "scheduler profiler disabled (build with --features profiler)\n".to_string();
    }
    format_table(&report())
}

/// Print [`table`] to standard output.
pub fn print_table() {
    print!("{}", table());
}

#[cfg(not(feature = "profiler"))]
mod imp {
    use super::ProfileRow;
    use std::marker::PhantomData;

    /// Guard of an open profiling scope (a zero-sized no-op in this build).
    #[must_use = "the scope closes when the guard is dropped"]
    pub struct ScopeGuard {
        _not_send: PhantomData<*const ()>,
    }

    /// Open a scope named `name`; it closes when the guard is dropped.
    #[inline(always)]
    pub fn scope(name: &'static str) -> ScopeGuard {
        let _ = name;
        ScopeGuard {
            _not_send: PhantomData,
        }
    }

    /// All measurements so far, sorted by exclusive total time (descending).
    /// Always empty in this build.
    pub fn report() -> Vec<ProfileRow> {
        Vec::new()
    }

    /// Forget all measurements (no-op in this build).
    pub fn reset() {}
}

#[cfg(feature = "profiler")]
mod imp {
    use super::ProfileRow;
    use parking_lot::Mutex;
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::marker::PhantomData;
    use std::sync::{Arc, OnceLock};
    use std::time::Instant;

    /// Running totals of one name.
    #[derive(Debug, Clone, Copy, Default)]
    struct Acc {
        calls: u64,
        inclusive_ns: u64,
        exclusive_ns: u64,
    }

    impl Acc {
        fn add(&mut self, o: &Acc) {
            self.calls += o.calls;
            self.inclusive_ns = self.inclusive_ns.saturating_add(o.inclusive_ns);
            self.exclusive_ns = self.exclusive_ns.saturating_add(o.exclusive_ns);
        }
    }

    type Table = HashMap<&'static str, Acc>;

    /// Tables of live threads plus the merged table of exited threads.
    #[derive(Default)]
    struct Registry {
        live: Vec<Arc<Mutex<Table>>>,
        retired: Table,
    }

    fn registry() -> &'static Mutex<Registry> {
        static REGISTRY: OnceLock<Mutex<Registry>> = OnceLock::new();
        REGISTRY.get_or_init(Default::default)
    }

    /// An open scope on the thread's stack.
    struct Frame {
        name: &'static str,
        start: Instant,
        /// Inclusive time of the scopes closed directly inside this one.
        children_ns: u64,
    }

    /// Per-thread state: the scope stack and the thread's table (shared
    /// with the registry; only `report`/`reset` ever contend for its lock).
    struct ThreadState {
        stack: Vec<Frame>,
        table: Arc<Mutex<Table>>,
    }

    impl ThreadState {
        fn new() -> Self {
            let table = Arc::new(Mutex::new(Table::new()));
            registry().lock().live.push(Arc::clone(&table));
            ThreadState {
                stack: Vec::with_capacity(16),
                table,
            }
        }

        /// Close the top frame at `now` and account it.
        fn close_top(&mut self, now: Instant) {
            let Some(frame) = self.stack.pop() else {
                return;
            };
            let inclusive = now.saturating_duration_since(frame.start).as_nanos() as u64;
            let exclusive = inclusive.saturating_sub(frame.children_ns);
            if let Some(parent) = self.stack.last_mut() {
                parent.children_ns = parent.children_ns.saturating_add(inclusive);
            }
            self.table.lock().entry(frame.name).or_default().add(&Acc {
                calls: 1,
                inclusive_ns: inclusive,
                exclusive_ns: exclusive,
            });
        }
    }

    impl Drop for ThreadState {
        /// Thread exit: fold the thread's table into the retired table.
        fn drop(&mut self) {
            let mut reg = registry().lock();
            let mine = std::mem::take(&mut *self.table.lock());
            for (name, acc) in mine {
                reg.retired.entry(name).or_default().add(&acc);
            }
            reg.live.retain(|t| !Arc::ptr_eq(t, &self.table));
        }
    }

    thread_local! {
        static STATE: RefCell<ThreadState> = RefCell::new(ThreadState::new());
    }

    /// Guard of an open profiling scope; closing it records the call.
    #[must_use = "the scope closes when the guard is dropped"]
    pub struct ScopeGuard {
        /// Stack depth of this scope's frame (usize::MAX: not recorded).
        depth: usize,
        _not_send: PhantomData<*const ()>,
    }

    /// Open a scope named `name`; it closes when the guard is dropped.
    pub fn scope(name: &'static str) -> ScopeGuard {
        let depth = STATE
            .try_with(|s| {
                let mut s = s.borrow_mut();
                s.stack.push(Frame {
                    name,
                    start: Instant::now(),
                    children_ns: 0,
                });
                s.stack.len() - 1
            })
            .unwrap_or(usize::MAX);
        ScopeGuard {
            depth,
            _not_send: PhantomData,
        }
    }

    impl Drop for ScopeGuard {
        fn drop(&mut self) {
            if self.depth == usize::MAX {
                return;
            }
            let now = Instant::now();
            let _ = STATE.try_with(|s| {
                let mut s = s.borrow_mut();
                // Close scopes left open inside this one (leaked guards),
                // then this one; nothing if an outer guard already did.
                while s.stack.len() > self.depth {
                    s.close_top(now);
                }
            });
        }
    }

    /// All measurements so far (all threads, including exited ones), sorted
    /// by exclusive total time, descending (ties by name).
    pub fn report() -> Vec<ProfileRow> {
        let reg = registry().lock();
        let mut all = reg.retired.clone();
        for t in &reg.live {
            for (name, acc) in t.lock().iter() {
                all.entry(name).or_default().add(acc);
            }
        }
        drop(reg);
        let mut rows: Vec<ProfileRow> = all
            .into_iter()
            .map(|(name, a)| ProfileRow {
                name: name.to_string(),
                calls: a.calls,
                inclusive_ns: a.inclusive_ns,
                exclusive_ns: a.exclusive_ns,
            })
            .collect();
        rows.sort_by(|a, b| {
            b.exclusive_ns
                .cmp(&a.exclusive_ns)
                .then_with(|| a.name.cmp(&b.name))
        });
        rows
    }

    /// Forget all measurements of all threads (scopes open right now are
    /// still recorded when they close).
    pub fn reset() {
        let mut reg = registry().lock();
        reg.retired.clear();
        for t in &reg.live {
            t.lock().clear();
        }
    }
}

pub use imp::{report, reset, scope, ScopeGuard};

#[cfg(all(test, not(feature = "profiler")))]
mod tests {
    use super::*;

    #[test]
    fn disabled_profiler_is_a_zero_sized_no_op() {
        assert_eq!(std::mem::size_of::<ScopeGuard>(), 0);
        assert!(!std::mem::needs_drop::<ScopeGuard>());
        {
            let _p = scope("profiler_disabled");
        }
        assert!(report().is_empty());
        reset();
        assert!(table().contains("disabled"));
    }
}

#[cfg(all(test, feature = "profiler"))]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Tests share the global tables: serialise them and use unique names.
    static LOCK: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

    fn row(rows: &[ProfileRow], name: &str) -> ProfileRow {
        rows.iter()
            .find(|r| r.name == name)
            .cloned()
            .unwrap_or_else(|| panic!("no row {name}"))
    }

    fn spin(d: Duration) {
        let t = std::time::Instant::now();
        while t.elapsed() < d {
            std::hint::spin_loop();
        }
    }

    #[test]
    fn profiler_nested_scopes_split_inclusive_and_exclusive() {
        let _l = LOCK.lock();
        reset();
        for _ in 0..2 {
            let _outer = scope("profiler_test_outer");
            spin(Duration::from_micros(300));
            for _ in 0..3 {
                let _inner = scope("profiler_test_inner");
                spin(Duration::from_micros(200));
                let _leaf = scope("profiler_test_leaf");
                spin(Duration::from_micros(100));
            }
        }
        let rows = report();
        let (outer, inner, leaf) = (
            row(&rows, "profiler_test_outer"),
            row(&rows, "profiler_test_inner"),
            row(&rows, "profiler_test_leaf"),
        );
        assert_eq!((outer.calls, inner.calls, leaf.calls), (2, 6, 6));
        assert!(outer.exclusive_ns < outer.inclusive_ns);
        assert!(inner.exclusive_ns < inner.inclusive_ns);
        assert_eq!(leaf.exclusive_ns, leaf.inclusive_ns);
        assert!(outer.inclusive_ns >= inner.inclusive_ns + outer.exclusive_ns);
        assert_eq!(outer.inclusive_ns, outer.exclusive_ns + inner.inclusive_ns);
        assert_eq!(inner.inclusive_ns, inner.exclusive_ns + leaf.inclusive_ns);
        assert!(outer.exclusive_ns >= 2 * 300_000);
        assert!(inner.exclusive_ns >= 6 * 200_000);
        assert!(leaf.exclusive_ns >= 6 * 100_000);
        // Sorted by exclusive total, descending.
        assert!(rows
            .windows(2)
            .all(|w| w[0].exclusive_ns >= w[1].exclusive_ns));
        let t = table();
        assert!(
            t.contains("profiler_test_outer") && t.contains("excl total us"),
            "{t}"
        );
        reset();
        assert!(report()
            .iter()
            .all(|r| !r.name.starts_with("profiler_test_")));
    }

    #[test]
    fn profiler_aggregates_across_threads() {
        let _l = LOCK.lock();
        reset();
        let handles: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    for _ in 0..10 {
                        let _p = scope("profiler_test_thread");
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        // A live thread's records are visible too.
        {
            let _p = scope("profiler_test_thread");
        }
        assert_eq!(row(&report(), "profiler_test_thread").calls, 41);
        reset();
    }

    #[test]
    fn profiler_survives_out_of_order_drops() {
        let _l = LOCK.lock();
        reset();
        let outer = scope("profiler_test_ooo_outer");
        let inner = scope("profiler_test_ooo_inner");
        drop(outer); // closes inner as well
        drop(inner); // no-op
        let rows = report();
        assert_eq!(row(&rows, "profiler_test_ooo_outer").calls, 1);
        assert_eq!(row(&rows, "profiler_test_ooo_inner").calls, 1);
        reset();
    }
}
