//! The API thread: one `poll(2)` loop over the listeners, the connections
//! and a wake-up eventfd, and a once-a-second sample of the scheduler.
//!
//! Why one thread and a loop rather than a thread per connection (as
//! tiny_http does): the thread is confined by a seccomp filter that lets
//! it start no thread, and a client that sends half a request, or reads
//! its event stream slowly, must cost a bounded buffer and nothing else.
//! So every socket is non-blocking; a request is read until whole (or
//! refused: too long, malformed, or not whole within [`READ_TIMEOUT`] of
//! its first byte; a connection that sends no request is closed after
//! [`IDLE_TIMEOUT`]) and answered. Connections are HTTP/1.1's: kept after
//! an answer unless the client says `Connection: close`; requests sent
//! one after the other without waiting (pipelined) are answered one at a
//! time in their order, the next taken once the answer before it is out
//! (at most [`REQUESTS_PER_TURN`] of a connection in a turn of the loop);
//! a client that shuts down its side after its requests (`nc -N`, socat)
//! is answered each whole one, then closed. A refusal closes the
//! connection (what follows a malformed request cannot be framed). A
//! client that pipelines requests and never reads their answers is read
//! no further than one request's limits, and dropped once its answer has
//! not moved for [`WRITE_STALL_TIMEOUT`].
//! Event-stream clients and long polls stay, and are fed at each sample.
//! Only a pause or resume holds the loop, for as long as the VM takes to
//! answer (a few ms; at most `routes::VM_REQUEST_TIMEOUT`).

use super::http::{self, Parsed, Response};
use super::routes::{self, Peer, Reply};
use super::view::Sampler;
use super::{ApiContext, Listeners};
use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use vmm_sys_util::eventfd::EventFd;

/// A request must be whole within this long after its first byte.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// A connection that has sent no request is closed after this long (since
/// it opened, or since its last answer).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// An answer the client takes none of for this long is dropped with its
/// connection (a client that sends requests and never reads their
/// answers would otherwise hold its connection for ever).
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Most connections at once (more are answered 503 and closed).
pub const MAX_CONNECTIONS: usize = 32;
/// An event-stream client that falls this far behind is dropped.
const MAX_PENDING_OUT: usize = 1 << 20;
/// Most requests of one connection answered in one turn of the loop: a
/// client that pipelines many cheap requests takes its turn with the
/// others rather than holding the thread.
const REQUESTS_PER_TURN: usize = 16;
/// Samples kept for long polls and new pages (two minutes).
const HISTORY: usize = 120;
/// Time between samples.
const TICK: Duration = Duration::from_secs(1);

enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn fd(&self) -> RawFd {
        match self {
            Stream::Unix(s) => s.as_raw_fd(),
            Stream::Tcp(s) => s.as_raw_fd(),
        }
    }
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a whole request at the front of `input`.
    Reading,
    /// Writing an answer; then the next request, or the end.
    Answering,
    /// An event stream: open until the client or the run ends.
    Events,
    /// A long poll for the samples after this one.
    Waiting(u64),
}

/// Most bytes buffered from a client: one request at its limits. A
/// partial request can never need more (the parser refuses it first), so
/// a client that sends more than is answered waits for its answers
/// (the socket's own buffers fill) rather than growing this one.
const MAX_INPUT: usize = http::MAX_HEAD_BYTES + http::MAX_BODY_BYTES;

struct Conn {
    stream: Stream,
    peer: Peer,
    /// Bytes received and not yet taken as a request (the front one may
    /// be partial; pipelined ones follow it).
    input: Vec<u8>,
    out: Vec<u8>,
    sent: usize,
    phase: Phase,
    /// Since when the connection has waited for a request: its opening,
    /// then the end of each answer.
    idle_since: Instant,
    /// When the front request's first byte was seen (none while idle).
    request_since: Option<Instant>,
    /// Close once the answer being written is out.
    close_after: bool,
    /// When the client last took bytes of an answer (or the answer began).
    out_progress: Instant,
    /// The client shut down its side (read gave end of file): it sends no
    /// more, and is answered what it sent before.
    eof: bool,
    /// Its turn ended with requests left in `input` to take.
    more: bool,
    closed: bool,
}

impl Conn {
    fn new(stream: Stream, peer: Peer) -> Conn {
        Conn {
            stream,
            peer,
            input: Vec::new(),
            out: Vec::new(),
            sent: 0,
            phase: Phase::Reading,
            idle_since: Instant::now(),
            request_since: None,
            close_after: false,
            out_progress: Instant::now(),
            eof: false,
            more: false,
            closed: false,
        }
    }

    /// Answer the front request; `close`: then close the connection.
    fn answer(&mut self, r: &Response, close: bool) {
        self.out = r.to_bytes(close);
        self.sent = 0;
        self.out_progress = Instant::now();
        self.close_after = close;
        self.phase = Phase::Answering;
    }

    /// A refusal: the connection's framing cannot be trusted after it.
    fn refuse(&mut self, status: u16, why: &str) {
        self.answer(&Response::error(status, why), true);
    }

    fn push(&mut self, bytes: &[u8]) {
        if self.out.len() - self.sent > MAX_PENDING_OUT {
            self.closed = true;
            return;
        }
        self.out.extend_from_slice(bytes);
    }

    /// Write what is pending, as far as the socket takes it.
    fn flush(&mut self) {
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(0) => {
                    self.closed = true;
                    return;
                }
                Ok(n) => {
                    self.sent += n;
                    self.out_progress = Instant::now();
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.closed = true;
                    return;
                }
            }
        }
        self.out.clear();
        self.sent = 0;
    }

    fn wants_out(&self) -> bool {
        self.sent < self.out.len()
    }

    /// Whether to read from the client now: not after its end of file,
    /// and not past [`MAX_INPUT`] (an event stream's reader's bytes are
    /// read to be dropped).
    fn wants_in(&self) -> bool {
        !self.eof && (self.phase == Phase::Events || self.input.len() < MAX_INPUT)
    }

    /// Read what the client sent, within [`MAX_INPUT`].
    fn read_in(&mut self) {
        let mut chunk = [0u8; 4096];
        while self.wants_in() {
            match self.stream.read(&mut chunk) {
                Ok(0) => self.eof = true,
                // The event stream is the last answer: more is dropped.
                Ok(_) if self.phase == Phase::Events => {}
                Ok(n) => {
                    if self.input.is_empty() && self.phase == Phase::Reading {
                        self.request_since = Some(Instant::now());
                    }
                    self.input.extend_from_slice(&chunk[..n]);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => {
                    self.closed = true;
                    return;
                }
            }
        }
    }

    /// The slowloris and idle limits of a connection waiting for a
    /// request, and the stall limit of one being answered.
    fn check_timers(&mut self) {
        if self.phase == Phase::Answering
            && self.wants_out()
            && self.out_progress.elapsed() > WRITE_STALL_TIMEOUT
        {
            self.closed = true;
        }
        if self.phase != Phase::Reading {
            return;
        }
        match self.request_since {
            // A connection opened ahead of use (browsers do) or kept after
            // an answer, and not used: closed without a word, which a
            // client expects.
            None if self.idle_since.elapsed() > IDLE_TIMEOUT => self.closed = true,
            Some(t) if t.elapsed() > READ_TIMEOUT => self.refuse(
                408,
                &format!(
                    "the request was not whole within {} s",
                    READ_TIMEOUT.as_secs()
                ),
            ),
            _ => {}
        }
    }
}

/// The peer's uid (SO_PEERCRED).
fn peer_uid(fd: RawFd) -> Option<u32> {
    // SAFETY: ucred is plain data.
    let mut cred: libc::ucred = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: a valid socket and a buffer of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    (r == 0).then_some(cred.uid)
}

/// Accept one connection, non-blocking; `None` when none waits.
fn accept(fd: RawFd) -> Option<RawFd> {
    // SAFETY: accept4 on our listening socket; no address is asked for.
    let c = unsafe {
        libc::accept4(
            fd,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    (c >= 0).then_some(c)
}

/// Serve until `done` (the run's end writes `wake`). Call on the API
/// thread; it confines itself first.
pub fn serve(listeners: Listeners, ctx: &ApiContext<'_>, wake: &EventFd, done: &AtomicBool) {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    crate::seccomp::install_or_warn(crate::seccomp::ThreadKind::Api);
    let mut conns: Vec<Conn> = Vec::new();
    let mut sampler = Sampler::default();
    let mut history: VecDeque<(u64, String)> = VecDeque::new();
    let mut next_tick = Instant::now();
    let unix_fd = listeners.unix.as_ref().map(|(l, _)| l.as_raw_fd());
    let tcp_fd = listeners.tcp.as_ref().map(|l| l.as_raw_fd());
    while !done.load(Ordering::Acquire) {
        let now = Instant::now();
        if now >= next_tick {
            let sample = sampler.sample(ctx);
            let seq = sample["seq"].as_u64().unwrap_or(0);
            let text = sample.to_string();
            let event = http::event(&text);
            history.push_back((seq, text));
            while history.len() > HISTORY {
                history.pop_front();
            }
            for c in &mut conns {
                match c.phase {
                    Phase::Events => c.push(&event),
                    Phase::Waiting(after) => {
                        if let Some(r) = routes::samples_after(&history, after) {
                            let close = c.close_after;
                            c.answer(&r, close);
                        }
                    }
                    _ => {}
                }
            }
            next_tick = (next_tick + TICK).max(now);
        }
        for c in &mut conns {
            c.check_timers();
            if c.wants_out() || c.phase == Phase::Answering || c.more {
                drive(c, ctx, &history, me);
            }
        }
        conns.retain(|c| !c.closed);

        // Poll: the wake-up, the listeners, every connection.
        let mut fds = vec![pollfd(wake.as_raw_fd(), libc::POLLIN)];
        for fd in [unix_fd, tcp_fd].into_iter().flatten() {
            fds.push(pollfd(fd, libc::POLLIN));
        }
        let first_conn = fds.len();
        for c in &conns {
            let mut ev = 0;
            if c.wants_out() {
                ev |= libc::POLLOUT;
            }
            if c.wants_in() {
                ev |= libc::POLLIN;
            }
            fds.push(pollfd(c.stream.fd(), ev));
        }
        // A connection with requests left to take: only a look at the others.
        let wait = if conns.iter().any(|c| c.more) {
            Duration::ZERO
        } else {
            next_tick.saturating_duration_since(Instant::now())
        };
        // SAFETY: `fds` is a valid array of pollfd of that length.
        let n = unsafe {
            libc::poll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                wait.as_millis().min(1000) as i32,
            )
        };
        if n <= 0 {
            continue;
        }
        if fds[0].revents != 0 {
            let _ = wake.read();
        }
        for (i, c) in conns.iter_mut().enumerate() {
            let re = fds[first_conn + i].revents;
            if re == 0 {
                continue;
            }
            if re & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 && c.wants_in() {
                c.read_in();
            }
            drive(c, ctx, &history, me);
            // Hung up both ways (or failed): nothing can reach the client,
            // and polling on would only see the hang-up again.
            if re & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 && !c.wants_out() {
                c.closed = true;
            }
        }
        // New connections.
        for (fd, tcp) in [(unix_fd, false), (tcp_fd, true)] {
            let Some(fd) = fd else { continue };
            while let Some(c) = accept(fd) {
                let (stream, peer) = if tcp {
                    // SAFETY: a new connected socket we own.
                    (Stream::Tcp(unsafe { TcpStream::from_raw_fd(c) }), Peer::Tcp)
                } else {
                    let uid = peer_uid(c).unwrap_or(u32::MAX);
                    // SAFETY: a new connected socket we own.
                    (
                        Stream::Unix(unsafe { UnixStream::from_raw_fd(c) }),
                        Peer::Unix(uid),
                    )
                };
                let mut conn = Conn::new(stream, peer);
                if conns.len() >= MAX_CONNECTIONS {
                    conn.refuse(
                        503,
                        &format!("more than {MAX_CONNECTIONS} connections at once"),
                    );
                    conn.flush();
                    continue;
                }
                conns.push(conn);
            }
        }
        conns.retain(|c| !c.closed);
    }
    drop(conns);
    if let Some((_, path)) = &listeners.unix {
        if let Err(e) = std::fs::remove_file(path) {
            log::warn!("cannot remove the API socket {}: {e}", path.display());
        }
    }
}

fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// Move `c` on as far as it goes without waiting: write what is pending;
/// once an answer is out, close or take the next request in `input`;
/// answer each whole request in the order sent.
fn drive(c: &mut Conn, ctx: &ApiContext<'_>, history: &VecDeque<(u64, String)>, me: u32) {
    c.more = false;
    let mut taken = 0;
    loop {
        if c.closed {
            return;
        }
        c.flush();
        if c.closed || c.wants_out() {
            return;
        }
        match c.phase {
            Phase::Events | Phase::Waiting(_) => return,
            Phase::Answering => {
                if c.close_after {
                    c.closed = true;
                    return;
                }
                c.phase = Phase::Reading;
                c.idle_since = Instant::now();
                c.request_since = (!c.input.is_empty()).then(Instant::now);
            }
            Phase::Reading => match http::parse_request(&c.input) {
                Parsed::Partial => {
                    // Nothing more will come: a partial request is dropped
                    // with the connection.
                    if c.eof {
                        c.closed = true;
                    }
                    return;
                }
                Parsed::Refused(status, why) => {
                    log::debug!("API request refused: {status} {why}");
                    c.input.clear();
                    c.refuse(status, &why);
                }
                Parsed::Done(_) if taken == REQUESTS_PER_TURN => {
                    c.more = true;
                    return;
                }
                Parsed::Done(req) => {
                    taken += 1;
                    c.input.drain(..req.len);
                    take(c, &req, ctx, history, me);
                }
            },
        }
    }
}

/// Answer one whole request (or start its stream or long poll).
fn take(
    c: &mut Conn,
    req: &http::Request,
    ctx: &ApiContext<'_>,
    history: &VecDeque<(u64, String)>,
    me: u32,
) {
    if let Peer::Unix(uid) = c.peer {
        if uid != me && uid != 0 {
            return c.refuse(403, &format!("uid {uid} may not use the API of uid {me}"));
        }
    }
    match routes::route(req, c.peer, ctx, history) {
        Reply::Now(r) => c.answer(&r, req.close),
        Reply::Events => {
            c.phase = Phase::Events;
            // The last answer on the connection: requests after it are
            // not read.
            c.input.clear();
            // From the next sample on: the last one may be a second old.
            c.out = http::event_stream_head();
            c.sent = 0;
        }
        Reply::Wait { after } => {
            c.phase = Phase::Waiting(after);
            c.close_after = req.close;
        }
    }
}
