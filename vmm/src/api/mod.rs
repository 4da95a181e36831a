//! The control API of a run: `pacer run CONFIG --api-socket PATH`.
//!
//! Every hypervisor its users know can be inspected and changed while it
//! runs (Firecracker's API socket, Cloud Hypervisor's REST API and
//! `ch-remote`, libvirt's `virsh vcpupin / schedinfo / domstats`, `xl
//! vcpu-pin`). Pacer's is HTTP/1.1 with JSON bodies on a Unix socket, as
//! Firecracker's and Cloud Hypervisor's are:
//!
//! | request | what |
//! |---|---|
//! | `GET /api/v1/vms` | the VMs: state, vCPUs, core set, class, priority; policy, mode, CPUs out of service |
//! | `GET /api/v1/stats[?vm=NAME]` | per vCPU the scheduler's live state and statistics |
//! | `POST /api/v1/set` | change affinity, priority, class, weight, cap, reservation of a VM or vCPU; a VM's latency bound (admitted as the config's, `admission.rs`); the mode; a host CPU's service (`set.rs`) |
//! | `POST /api/v1/vms/NAME/pause`, `.../resume`, `.../stop` | pause, resume, stop a VM |
//! | `GET /api/v1/status[?after=SEQ]` | the per-second samples after SEQ (a long poll: waits for the next one) |
//! | `GET /api/v1/events` | the per-second samples as server-sent events |
//! | `GET /api/v1/keys` | the keys `set` takes |
//! | `GET /` | the live page (`page.html`, `page.js`: no build step, in the binary) |
//!
//! The socket is created mode 0600 (only the user who started Pacer, and
//! root, can connect) before any VM starts; a path that is taken is bad
//! input (a socket nobody listens on is replaced). Every change is checked
//! by the config's rules (`crate::config::sched_rules`) and recorded with the
//! peer's uid (SO_PEERCRED; `audit.rs`). `--api-http 127.0.0.1:PORT`
//! serves the same on a loopback TCP port for a browser, read-only: a TCP
//! peer has no uid to record, so it may look but not change.
//!
//! One thread (`pacer/api`) serves it all from a `poll` loop
//! (`server.rs`): a slow or hostile client holds a buffer of bounded size,
//! never the thread; oversized or malformed requests are answered with a
//! status and a one-line reason and never reach the VMs. The thread has a
//! seccomp filter of its own (`ThreadKind::Api`).

mod admission;
pub mod audit;
pub mod client;
pub mod http;
mod routes;
mod server;
pub mod set;
pub mod view;

use crate::config::VmConfig;
use crate::policy::Policy;
use crate::stop_registry::StopRegistry;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::Instant;
use vcpu_engine::host_cpus::HostCpuSet;
use vcpu_engine::Engine;

pub use server::serve;

/// Errors of this module (all before any VM starts).
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("--api-socket {}: {why}", .path.display())]
    Socket { path: PathBuf, why: BindError },
    #[error("--api-http {addr}: {why}")]
    Http { addr: String, why: BindError },
    #[error("cannot create {}: {source}", .path.display())]
    Record {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Why a socket could not be bound.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    #[error("expected a loopback address and port such as 127.0.0.1:8080 or [::1]:8080")]
    NotAnAddress,
    #[error("expected a loopback address (the page has no authentication), found {0}")]
    NotLoopback(std::net::IpAddr),
    #[error("exists and is not a socket; remove it or name another path")]
    NotASocket,
    #[error("another process serves this socket")]
    InUse,
    #[error("cannot replace it: {0}")]
    Replace(std::io::Error),
    #[error("expected a path of at most {0} bytes without NUL")]
    PathTooLong(usize),
    #[error("cannot make it owner-only: {0}")]
    OwnerOnly(std::io::Error),
    #[error("directory {} does not exist (Pacer creates no directory for it)", .0.display())]
    NoDirectory(PathBuf),
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Where the API listens.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiOptions {
    /// The Unix socket (`--api-socket`).
    pub socket: Option<PathBuf>,
    /// A loopback TCP address for the page (`--api-http`), read-only.
    pub http: Option<String>,
}

impl ApiOptions {
    pub fn is_enabled(&self) -> bool {
        self.socket.is_some() || self.http.is_some()
    }
}

/// What the API thread reads and changes.
pub struct ApiContext<'a> {
    /// The scheduled engine (none under `policy = "host"`).
    pub engine: Option<&'a Engine>,
    /// The VMs that have started, by name.
    pub vms: &'a StopRegistry,
    pub configs: &'a [VmConfig],
    pub policy: Policy,
    /// `[host] cpus`.
    pub host_cpus: HostCpuSet,
    pub audit: &'a audit::Audit,
    pub run_start: Instant,
}

impl ApiContext<'_> {
    /// Why `name` names no VM: the VMs there are, and the near miss.
    pub fn no_vm_named(&self, name: &str) -> String {
        let names: Vec<_> = self.configs.iter().map(|c| c.name.as_str()).collect();
        format!(
            "no VM named {} (VMs: {}){}",
            crate::text::quoted(name),
            names.join(", "),
            crate::suggest::hint(name, names.iter().copied())
        )
    }
}

/// The bound listeners, made before any VM starts.
pub struct Listeners {
    unix: Option<(UnixListener, PathBuf)>,
    tcp: Option<TcpListener>,
}

impl Listeners {
    /// The TCP address actually bound (a port 0 request gets one).
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.tcp.as_ref().and_then(|t| t.local_addr().ok())
    }

    /// The Unix socket's path.
    pub fn socket_path(&self) -> Option<&Path> {
        self.unix.as_ref().map(|(_, p)| p.as_path())
    }
}

/// Bind what `opts` asks for.
pub fn bind(opts: &ApiOptions) -> Result<Listeners, ApiError> {
    let unix = match &opts.socket {
        Some(p) => Some((
            bind_unix(p).map_err(|why| ApiError::Socket {
                path: p.clone(),
                why,
            })?,
            p.clone(),
        )),
        None => None,
    };
    let tcp = match &opts.http {
        Some(a) => Some(bind_tcp(a).map_err(|why| ApiError::Http {
            addr: a.clone(),
            why,
        })?),
        None => None,
    };
    Ok(Listeners { unix, tcp })
}

fn bind_tcp(addr: &str) -> Result<TcpListener, BindError> {
    let parsed: SocketAddr = addr.parse().map_err(|_| BindError::NotAnAddress)?;
    if !parsed.ip().is_loopback() {
        return Err(BindError::NotLoopback(parsed.ip()));
    }
    let l = TcpListener::bind(parsed)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// A Unix socket at `path`, mode 0600 before anyone can connect.
fn bind_unix(path: &Path) -> Result<UnixListener, BindError> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(BindError::NotASocket);
        }
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => return Err(BindError::InUse),
            // Nobody listens: a socket left by a run that ended abruptly.
            Err(_) => std::fs::remove_file(path).map_err(BindError::Replace)?,
        }
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        return Err(BindError::NoDirectory(dir.to_path_buf()));
    }
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain data.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(BindError::PathTooLong(addr.sun_path.len() - 1));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: socket(2) with constant arguments; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: `fd` is a new socket this function owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let len = std::mem::size_of::<libc::sa_family_t>() + bytes.len() + 1;
    // SAFETY: `addr` is a valid sockaddr_un and `len` within it.
    if unsafe { libc::bind(fd, (&addr as *const libc::sockaddr_un).cast(), len as u32) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // Owner-only before listen(2): no one can connect in between.
    // (No NUL: checked above.)
    let c_path = std::ffi::CString::new(bytes)
        .map_err(|_| BindError::PathTooLong(addr.sun_path.len() - 1))?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::chmod(c_path.as_ptr(), 0o600) } != 0 {
        let e = std::io::Error::last_os_error();
        let _ = std::fs::remove_file(path);
        return Err(BindError::OwnerOnly(e));
    }
    // SAFETY: a bound socket we own.
    if unsafe { libc::listen(fd, 16) } != 0 {
        let e = std::io::Error::last_os_error();
        let _ = std::fs::remove_file(path);
        return Err(e.into());
    }
    Ok(UnixListener::from(owned))
}
