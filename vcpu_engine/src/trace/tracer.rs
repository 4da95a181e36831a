//! Recording: the handle the engine writes events through ([`Trace`]),
//! one ring per writing thread (`super::ring`), and the drain thread
//! (`pacer/trace`) that empties the rings into the file every few
//! milliseconds ([`Tracer`]).
//!
//! The hot path (`Trace::emit`) reads the clock, finds its thread's ring
//! (a thread-local, registered on the thread's first event) and copies
//! one record in. Nothing on it waits: a full ring counts the record as
//! lost, and the drain writes the count into the file as a `Lost` event.
//! Memory is bounded by (threads that record) x `ring_capacity` x 32
//! bytes. With tracing off the engine holds no `Trace` and pays one
//! branch per event site.
//!
//! The drain thread only writes to the file it was given (opened before
//! it started) and is confined by its own seccomp filter.

use super::format::{self, Meta, RingMeta, RunMeta};
use super::record::{Event, Record, RECORD_BYTES};
use super::ring::Ring;
use std::cell::RefCell;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Default records per thread ring (256 KiB of records).
pub const DEFAULT_RING_CAPACITY: usize = 8192;
/// Default time between two drains.
pub const DEFAULT_DRAIN_EVERY: Duration = Duration::from_millis(10);

/// Errors of recording a trace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TraceError {
    /// Creating or writing the file failed.
    #[error("trace file {path}: {source}")]
    File {
        /// The trace file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The OS refused the drain thread.
    #[error("cannot start the trace drain thread: {0}")]
    Thread(std::io::Error),
}

/// How a trace is recorded: [`TraceConfig::new`], then change what
/// differs from the defaults (more settings may be added).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TraceConfig {
    /// The file to write (replaced if it exists; its directory is made).
    pub path: PathBuf,
    /// Records each recording thread's ring holds
    /// ([`DEFAULT_RING_CAPACITY`]); a ring that fills between two drains
    /// loses records (counted as `Lost` events).
    pub ring_capacity: usize,
    /// Time between two drains ([`DEFAULT_DRAIN_EVERY`]).
    pub drain_every: Duration,
}

impl TraceConfig {
    /// A trace into `path` with the default ring size and drain period.
    pub fn new(path: &Path) -> TraceConfig {
        TraceConfig {
            path: path.to_path_buf(),
            ring_capacity: DEFAULT_RING_CAPACITY,
            drain_every: DEFAULT_DRAIN_EVERY,
        }
    }
}

/// A run's trace as the run's results report it ([`Tracer::outcome`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct TraceOutcome {
    /// The trace file.
    pub path: PathBuf,
    /// Records in the file's whole frames: all of them, or after a failed
    /// write those a reader finds (before the failure).
    pub records: u64,
    /// Records lost to full rings.
    pub lost: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Why the file is incomplete, if it is (a write failed).
    pub error: Option<String>,
}

/// What a finished trace holds ([`Tracer::finish`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct TraceTotals {
    /// Records written.
    pub records: u64,
    /// Records lost to full rings.
    pub lost: u64,
    /// The file's size.
    pub bytes: u64,
}

struct Inner {
    /// Tells this tracer's rings from another's in a thread's cache.
    id: u64,
    ring_capacity: usize,
    rings: Mutex<Vec<Arc<Ring>>>,
    next_ring: AtomicU32,
    /// Metadata waiting for the next drain.
    meta: Mutex<Vec<Meta>>,
    /// Set once the drain has stopped: later events are ignored.
    closed: AtomicBool,
    /// Events lost because their thread could not get a ring.
    unrecorded: AtomicU64,
    stop: Mutex<bool>,
    wake: Condvar,
}

/// The recording handle (cheap to clone; every clone writes into the same
/// trace).
#[derive(Clone)]
pub struct Trace {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trace").field("id", &self.inner.id).finish()
    }
}

thread_local! {
    /// This thread's ring, and the tracer it belongs to.
    static MY_RING: RefCell<Option<(u64, Arc<Ring>)>> = const { RefCell::new(None) };
}

impl Trace {
    /// Record `event` now.
    #[inline]
    pub fn emit(&self, event: Event) {
        let r = Record::new(crate::clock::now_ns(), &event);
        self.push(r);
    }

    fn push(&self, r: Record) {
        if self.inner.closed.load(Ordering::Relaxed) {
            return;
        }
        // try_with: a thread that records while it exits has no ring left.
        let _ = MY_RING.try_with(|mine| {
            let mut mine = mine.borrow_mut();
            match &*mine {
                Some((id, ring)) if *id == self.inner.id => ring.push(r),
                _ => match self.register() {
                    Some(ring) => {
                        ring.push(r);
                        *mine = Some((self.inner.id, ring));
                    }
                    None => {
                        self.inner.unrecorded.fetch_add(1, Ordering::Relaxed);
                    }
                },
            }
        });
    }

    /// A ring for the calling thread (once per thread and tracer); None
    /// if its memory cannot be mapped (the event is counted as lost).
    fn register(&self) -> Option<Arc<Ring>> {
        let id = self.inner.next_ring.fetch_add(1, Ordering::Relaxed);
        let thread = std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_string();
        let ring = Arc::new(Ring::new(self.inner.ring_capacity, id)?);
        self.meta(Meta::Ring(RingMeta {
            id,
            thread,
            capacity: ring.capacity(),
        }));
        lock(&self.inner.rings).push(ring.clone());
        Some(ring)
    }

    /// Add a metadata frame (written at the next drain).
    pub fn meta(&self, m: Meta) {
        lock(&self.inner.meta).push(m);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A trace being recorded: the file and its drain thread.
pub struct Tracer {
    trace: Trace,
    path: PathBuf,
    thread: Option<JoinHandle<(TraceTotals, Option<std::io::Error>)>>,
}

impl Tracer {
    /// Create the file (replacing one that exists), write its header and
    /// `run`, and start the drain thread.
    pub fn start(config: &TraceConfig, run: RunMeta) -> Result<Tracer, TraceError> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let file_err = |source| TraceError::File {
            path: config.path.clone(),
            source,
        };
        if let Some(dir) = config.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(file_err)?;
        }
        let file = std::fs::File::create(&config.path).map_err(file_err)?;
        let mut out = Out {
            file,
            bytes: 0,
            records: 0,
            scratch: Vec::new(),
            failed: None,
        };
        out.write(&format::header());
        out.meta(&Meta::Run(Box::new(run)));
        if let Some(e) = out.failed.take() {
            return Err(file_err(e));
        }
        let inner = Arc::new(Inner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            ring_capacity: config.ring_capacity.max(1),
            rings: Mutex::new(Vec::new()),
            next_ring: AtomicU32::new(0),
            meta: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            unrecorded: AtomicU64::new(0),
            stop: Mutex::new(false),
            wake: Condvar::new(),
        });
        let drain_inner = inner.clone();
        let every = config.drain_every;
        let thread = std::thread::Builder::new()
            .name("pacer/trace".into())
            .spawn(move || {
                crate::thread_hook::thread_started(crate::thread_hook::EngineThread::Trace);
                drain_loop(&drain_inner, out, every)
            })
            .map_err(TraceError::Thread)?;
        Ok(Tracer {
            trace: Trace { inner },
            path: config.path.clone(),
            thread: Some(thread),
        })
    }

    /// The handle to record with.
    pub fn trace(&self) -> Trace {
        self.trace.clone()
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Drain what is left, write the END frame and close the file. Events
    /// recorded afterwards are ignored.
    pub fn finish(mut self) -> Result<TraceTotals, TraceError> {
        match self.stop() {
            (t, None) => Ok(t),
            (_, Some(e)) => Err(e),
        }
    }

    /// [`Tracer::finish`], as a run's results report it.
    pub fn outcome(mut self) -> TraceOutcome {
        let path = self.path.clone();
        // After a failed write, the totals are what the file holds: the
        // records of its whole frames (a reader reads those), its bytes.
        let (t, e) = self.stop();
        TraceOutcome {
            path,
            records: t.records,
            lost: t.lost,
            bytes: t.bytes,
            error: e.map(|e| e.to_string()),
        }
    }

    fn stop(&mut self) -> (TraceTotals, Option<TraceError>) {
        let Some(thread) = self.thread.take() else {
            return (TraceTotals::default(), None);
        };
        *lock(&self.trace.inner.stop) = true;
        self.trace.inner.wake.notify_all();
        let (totals, e) = thread.join().unwrap_or_else(|_| {
            (
                TraceTotals::default(),
                Some(std::io::Error::other("the trace drain thread panicked")),
            )
        });
        self.trace.inner.closed.store(true, Ordering::Relaxed);
        let e = e.map(|source| TraceError::File {
            path: self.path.clone(),
            source,
        });
        (totals, e)
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        if let (_, Some(e)) = self.stop() {
            log::warn!("{e}");
        }
    }
}

/// The file being written: each frame is built whole in `scratch` (its
/// header, then its payload, the checksums computed once over the frame)
/// and handed to the kernel in one `write_all`, so that after a failed
/// write the file holds `records` in whole frames and a cut tail at most.
struct Out {
    file: std::fs::File,
    /// Bytes written.
    bytes: u64,
    /// Records in the whole frames written.
    records: u64,
    /// The frame being built, kept from drain to drain (no allocation
    /// churn on the confined drain thread).
    scratch: Vec<u8>,
    /// The first write that failed: nothing more is written (a frame
    /// after a partial one would be read as damage, not as a cut).
    failed: Option<std::io::Error>,
}

impl Out {
    /// Write `b` unless a write has failed.
    fn write(&mut self, b: &[u8]) -> bool {
        if self.failed.is_some() {
            return false;
        }
        match self.file.write_all(b) {
            Ok(()) => {
                self.bytes += b.len() as u64;
                true
            }
            Err(e) => {
                self.failed = Some(e);
                false
            }
        }
    }

    /// Start a frame in `scratch`: room for its header.
    fn begin(&mut self) -> Vec<u8> {
        let mut b = std::mem::take(&mut self.scratch);
        b.clear();
        b.extend_from_slice(&[0u8; format::FRAME_HEADER_BYTES]);
        b
    }

    /// Fill in the header of the frame in `b` and write it.
    fn finish_frame(&mut self, tag: u8, mut b: Vec<u8>) -> bool {
        let payload = &b[format::FRAME_HEADER_BYTES..];
        let ok = if payload.len() > format::MAX_FRAME_BYTES as usize {
            self.failed
                .get_or_insert_with(|| std::io::Error::other("trace frame too large"));
            false
        } else {
            let head = format::frame_header(tag, payload);
            b[..format::FRAME_HEADER_BYTES].copy_from_slice(&head);
            self.write(&b)
        };
        self.scratch = b;
        ok
    }

    fn frame(&mut self, tag: u8, payload: &[u8]) -> bool {
        let mut b = self.begin();
        b.extend_from_slice(payload);
        self.finish_frame(tag, b)
    }

    fn meta(&mut self, m: &Meta) {
        match serde_json::to_vec(m) {
            Ok(json) => {
                self.frame(format::TAG_META, &json);
            }
            Err(e) => {
                self.failed.get_or_insert_with(|| std::io::Error::other(e));
            }
        }
    }

    fn records(&mut self, records: &[Record]) {
        let per_frame = format::MAX_FRAME_BYTES as usize / RECORD_BYTES;
        for chunk in records.chunks(per_frame) {
            let mut b = self.begin();
            for r in chunk {
                b.extend_from_slice(&r.to_bytes());
            }
            if self.finish_frame(format::TAG_RECORDS, b) {
                self.records += chunk.len() as u64;
            }
        }
    }
}

/// What the drain keeps between two passes.
struct Drain {
    /// Lost records already reported, per ring id.
    lost_seen: std::collections::HashMap<u32, u64>,
    totals: TraceTotals,
    buf: Vec<Record>,
}

/// Drain until told to stop; the totals of what the file holds, and the
/// first write error if there was one.
fn drain_loop(
    inner: &Inner,
    mut out: Out,
    every: Duration,
) -> (TraceTotals, Option<std::io::Error>) {
    let mut d = Drain {
        lost_seen: Default::default(),
        totals: TraceTotals::default(),
        buf: Vec::new(),
    };
    // After a write error the rings are still emptied (and their losses
    // counted) so that recording threads never see full rings because the
    // disk is; nothing more is written.
    loop {
        let stopping = {
            let stop = lock(&inner.stop);
            if *stop {
                true
            } else {
                *inner
                    .wake
                    .wait_timeout(stop, every)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
        };
        drain_once(inner, &mut d, &mut out);
        if stopping {
            break;
        }
    }
    let mut end = [0u8; 16];
    end[..8].copy_from_slice(&d.totals.records.to_le_bytes());
    end[8..].copy_from_slice(&d.totals.lost.to_le_bytes());
    out.frame(format::TAG_END, &end);
    let totals = TraceTotals {
        // What a reader finds: the records of the whole frames written.
        records: out.records,
        lost: d.totals.lost,
        bytes: out.bytes,
    };
    (totals, out.failed)
}

/// Write pending metadata, then every ring's records and any new losses.
fn drain_once(inner: &Inner, d: &mut Drain, out: &mut Out) {
    let meta = std::mem::take(&mut *lock(&inner.meta));
    let rings: Vec<Arc<Ring>> = lock(&inner.rings).clone();
    d.buf.clear();
    let no_ring = (u32::MAX, inner.unrecorded.load(Ordering::Relaxed));
    let losses = rings
        .iter()
        .map(|ring| {
            ring.drain(&mut d.buf);
            (ring.id, ring.dropped())
        })
        .collect::<Vec<_>>();
    for (id, lost) in losses.into_iter().chain([no_ring]) {
        let seen = d.lost_seen.entry(id).or_insert(0);
        if lost > *seen {
            d.buf.push(Record::new(
                crate::clock::now_ns(),
                &Event::Lost {
                    count: lost - *seen,
                },
            ));
            d.totals.lost += lost - *seen;
            *seen = lost;
        }
    }
    drop(rings);
    // Forget the rings of threads that have ended (only the list holds
    // them) once they are empty.
    lock(&inner.rings).retain(|r| Arc::strong_count(r) > 1 || !r.is_empty());
    d.totals.records += d.buf.len() as u64;
    for m in &meta {
        out.meta(m);
    }
    out.records(&d.buf);
}
