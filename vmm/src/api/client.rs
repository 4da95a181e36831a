//! The client side of the control API, for `pacer ctl`: one request per
//! connection on the Unix socket, the answer's JSON or the server's
//! one-line reason; and the event stream, one sample at a time.
//!
//! Every answer must be whole within the client's deadline
//! ([`DEFAULT_DEADLINE`] unless given), counted from the request: a
//! server that answers a byte at a time cannot hold the client longer
//! than one that does not answer at all, nor can one that never accepts
//! the connection (the connect waits within the deadline too). On the event stream the head,
//! then each sample, must come within the deadline (at least
//! [`MIN_SAMPLE_GAP`]: samples are a second apart).

use super::http::percent_encode;
use serde_json::Value;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long an answer may take unless the caller says (a pause waits for
/// the VM's answer, up to 3 s on the server).
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);
/// The least time allowed between two samples of the event stream.
pub const MIN_SAMPLE_GAP: Duration = Duration::from_secs(5);
/// Longest answer taken.
const MAX_ANSWER_BYTES: usize = 64 << 20;

/// Errors of this module.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{}: cannot connect: {source} (is `pacer run --api-socket {}` running?)", .path.display(), .path.display())]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The server refused (4xx) or failed (5xx): its one-line reason.
    #[error("{message}")]
    Refused { status: u16, message: String },
    #[error("{}: not an answer of Pacer's API: {why}", .path.display())]
    BadAnswer { path: PathBuf, why: String },
    /// No whole answer (or sample) within the deadline.
    #[error("no answer from {} within {} s", .path.display(), .deadline.as_secs_f64())]
    Timeout { path: PathBuf, deadline: Duration },
}

/// Connect to the Unix socket at `path`, waiting at most `deadline` for a
/// server whose queue of connections not yet accepted is full (where a
/// plain connect(2) waits for ever): on a Unix socket the send timeout
/// bounds connect(2), which then fails with EAGAIN (`WouldBlock`).
fn connect_within(path: &Path, deadline: Duration) -> std::io::Result<UnixStream> {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "expected a path of 1 to {} bytes without NUL",
                addr.sun_path.len() - 1
            ),
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new socket this function owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // At least a millisecond: a zero timeout would mean none.
    let wait = deadline.max(Duration::from_millis(1));
    let tv = libc::timeval {
        tv_sec: wait.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_usec: wait.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: a valid socket and a timeval of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: `addr` is a valid sockaddr_un and `len` within it.
    let r = unsafe {
        libc::connect(
            fd,
            (&addr as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(UnixStream::from(owned))
}

/// A client of one API socket.
pub struct Client {
    path: PathBuf,
    deadline: Duration,
}

impl Client {
    /// A client whose answers must be whole within [`DEFAULT_DEADLINE`].
    pub fn new(path: &Path) -> Client {
        Client::with_deadline(path, DEFAULT_DEADLINE)
    }

    /// A client whose answers must be whole within `deadline` of the
    /// request (a zero deadline is taken as a millisecond).
    pub fn with_deadline(path: &Path, deadline: Duration) -> Client {
        Client {
            path: path.to_path_buf(),
            deadline: deadline.max(Duration::from_millis(1)),
        }
    }

    fn timeout(&self, deadline: Duration) -> ClientError {
        ClientError::Timeout {
            path: self.path.clone(),
            deadline,
        }
    }

    /// Read once from `s`, giving up at `until` (`allowed`: the deadline
    /// that `until` ends, for the message). 0: the server closed.
    fn read_by(
        &self,
        s: &mut UnixStream,
        buf: &mut [u8],
        until: Instant,
        allowed: Duration,
    ) -> Result<usize, ClientError> {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(self.timeout(allowed));
            }
            s.set_read_timeout(Some(left)).map_err(|e| self.io(e))?;
            match s.read(buf) {
                Ok(n) => return Ok(n),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    return Err(self.timeout(allowed))
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.io(e)),
            }
        }
    }

    fn io(&self, source: std::io::Error) -> ClientError {
        ClientError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn bad(&self, why: impl Into<String>) -> ClientError {
        ClientError::BadAnswer {
            path: self.path.clone(),
            why: why.into(),
        }
    }

    /// Connect and send one request.
    fn send(&self, method: &str, target: &str, body: &[u8]) -> Result<UnixStream, ClientError> {
        let mut s = match connect_within(&self.path, self.deadline) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(self.timeout(self.deadline))
            }
            Err(source) => {
                return Err(ClientError::Connect {
                    path: self.path.clone(),
                    source,
                })
            }
        };
        // A server that does not read cannot hold the request either.
        s.set_write_timeout(Some(self.deadline))
            .map_err(|e| self.io(e))?;
        let head = format!(
            "{method} {target} HTTP/1.1\r\nHost: pacer\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        );
        let sent = s
            .write_all(head.as_bytes())
            .and_then(|()| s.write_all(body));
        match sent {
            Ok(()) => Ok(s),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(self.timeout(self.deadline))
            }
            Err(e) => Err(self.io(e)),
        }
    }

    /// `GET path?query`.
    pub fn get(&self, path: &str, query: &[(&str, &str)]) -> Result<Value, ClientError> {
        let mut target = path.to_string();
        for (i, (k, v)) in query.iter().enumerate() {
            target.push(if i == 0 { '?' } else { '&' });
            target.push_str(&format!("{}={}", percent_encode(k), percent_encode(v)));
        }
        self.call("GET", &target, b"")
    }

    /// `POST path` with a JSON body.
    pub fn post(&self, path: &str, body: &Value) -> Result<Value, ClientError> {
        self.call("POST", path, body.to_string().as_bytes())
    }

    fn call(&self, method: &str, target: &str, body: &[u8]) -> Result<Value, ClientError> {
        let until = Instant::now() + self.deadline;
        let mut s = self.send(method, target, body)?;
        // The whole answer, up to the server's close, by the deadline.
        let mut answer = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            let n = self.read_by(&mut s, &mut chunk, until, self.deadline)?;
            if n == 0 {
                break;
            }
            answer.extend_from_slice(&chunk[..n]);
            if answer.len() > MAX_ANSWER_BYTES {
                return Err(self.bad("an answer longer than the limit"));
            }
        }
        let (status, head_len) = self.head(&answer)?;
        let json: Value = serde_json::from_slice(&answer[head_len..])
            .map_err(|e| self.bad(format!("status {status}, body not JSON: {e}")))?;
        if status == 200 {
            Ok(json)
        } else {
            Err(ClientError::Refused {
                status,
                message: json["error"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("status {status}")),
            })
        }
    }

    /// The status and head length of an answer.
    fn head(&self, answer: &[u8]) -> Result<(u16, usize), ClientError> {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut r = httparse::Response::new(&mut headers);
        match r.parse(answer) {
            Ok(httparse::Status::Complete(n)) => Ok((r.code.unwrap_or(0), n)),
            Ok(httparse::Status::Partial) => Err(self.bad("the answer ended early")),
            Err(e) => Err(self.bad(e.to_string())),
        }
    }

    /// Follow the event stream: `on_sample` gets each sample until it
    /// returns false or the run ends.
    pub fn events(&self, mut on_sample: impl FnMut(&Value) -> bool) -> Result<(), ClientError> {
        let mut until = Instant::now() + self.deadline;
        let mut s = self.send("GET", "/api/v1/events", b"")?;
        // Samples come every second; a silent server is a stopped one.
        let gap = self.deadline.max(MIN_SAMPLE_GAP);
        let mut allowed = self.deadline;
        let mut buf = Vec::new();
        let mut head_done = false;
        let mut chunk = [0u8; 8192];
        loop {
            let n = self.read_by(&mut s, &mut chunk, until, allowed)?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
            if !head_done {
                let (status, len) = match self.head(&buf) {
                    Ok(h) => h,
                    Err(_) if buf.len() < 8192 => continue,
                    Err(e) => return Err(e),
                };
                if status != 200 {
                    return Err(self.bad(format!("event stream answered {status}")));
                }
                buf.drain(..len);
                head_done = true;
                (until, allowed) = (Instant::now() + gap, gap);
            }
            while let Some(end) = buf.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = buf.drain(..end + 2).collect();
                until = Instant::now() + gap;
                let text = String::from_utf8_lossy(&event);
                for line in text.lines() {
                    if let Some(data) = line.strip_prefix("data: ") {
                        let v: Value = serde_json::from_str(data)
                            .map_err(|e| self.bad(format!("event not JSON: {e}")))?;
                        if !on_sample(&v) {
                            return Ok(());
                        }
                    }
                }
            }
            if buf.len() > MAX_ANSWER_BYTES {
                return Err(self.bad("an event longer than the limit"));
            }
        }
    }
}
