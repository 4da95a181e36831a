//! Which request does what (the table in `api/mod.rs`), and who may change
//! things: a peer of the Unix socket (whose uid is recorded); a TCP peer
//! only looks.

use super::http::{Request, Response};
use super::{set, view, ApiContext};
use crate::documents::{with_header, API_KEYS, API_SAMPLES, API_SCHEMA_VERSION, API_VM_STATE};
use crate::text::quoted;
use crate::vm::VmRequest;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::time::Duration;

/// How long a pause or resume may take before the API answers without it.
const VM_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// The live page and its script, in the binary.
const PAGE_HTML: &str = include_str!("page.html");
const PAGE_JS: &str = include_str!("page.js");

/// Who sent a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// A peer of the Unix socket, with its uid.
    Unix(u32),
    /// A peer of the loopback TCP port: may look, not change.
    Tcp,
}

/// What to do with a request.
pub enum Reply {
    Now(Response),
    /// Open the event stream.
    Events,
    /// Answer with the samples after this one once there are some.
    Wait {
        after: u64,
    },
}

/// The samples after `after`, or `None` when there are none yet.
pub fn samples_after(history: &VecDeque<(u64, String)>, after: u64) -> Option<Response> {
    let newer: Vec<&str> = history
        .iter()
        .filter(|(seq, _)| *seq > after)
        .map(|(_, s)| s.as_str())
        .collect();
    if newer.is_empty() {
        return None;
    }
    // Each sample is a document of its own, kept as its JSON text.
    let samples: Vec<Value> = newer
        .iter()
        .filter_map(|s| serde_json::from_str(s).ok())
        .collect();
    Some(Response::json(
        200,
        &with_header(
            API_SAMPLES,
            API_SCHEMA_VERSION,
            json!({ "samples": samples }),
        ),
    ))
}

/// Route one request.
pub fn route(
    req: &Request,
    peer: Peer,
    ctx: &ApiContext<'_>,
    history: &VecDeque<(u64, String)>,
) -> Reply {
    let path = req.path.trim_end_matches('/');
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let get = req.method == "GET";
    let post = req.method == "POST";
    let wrong_method = |allowed: &str| {
        Reply::Now(Response::error(
            405,
            &format!("{} {}: expected {allowed}", req.method, req.path),
        ))
    };
    // Who may change things: a peer of the socket, whose uid is recorded.
    let writer = match peer {
        Peer::Unix(uid) => Some(uid),
        Peer::Tcp => None,
    };
    if post && writer.is_none() {
        return Reply::Now(Response::error(
            403,
            "changes are taken on the API socket only (its peer's uid is recorded); this TCP port is read-only",
        ));
    }
    match (parts.as_slice(), writer) {
        ([], _) if get => Reply::Now(Response::asset("text/html; charset=utf-8", PAGE_HTML)),
        (["page.js"], _) if get => {
            Reply::Now(Response::asset("text/javascript; charset=utf-8", PAGE_JS))
        }
        (["api", "v1", "vms"], _) if get => Reply::Now(Response::json(200, &view::vm_list(ctx))),
        (["api", "v1", "stats"], _) if get => match view::stats(ctx, req.param("vm")) {
            Some(v) => Reply::Now(Response::json(200, &v)),
            None => Reply::Now(Response::error(
                404,
                &ctx.no_vm_named(req.param("vm").unwrap_or("")),
            )),
        },
        (["api", "v1", "keys"], _) if get => Reply::Now(Response::json(200, &keys())),
        (["api", "v1", "events"], _) if get => Reply::Events,
        (["api", "v1", "status"], _) if get => {
            let after = match req.param("after").map(str::parse::<u64>) {
                None => history.back().map_or(0, |(seq, _)| seq.saturating_sub(1)),
                Some(Ok(n)) => n,
                Some(Err(_)) => {
                    return Reply::Now(Response::error(
                        400,
                        "after: expected a sample number (the `seq` of the last sample seen)",
                    ))
                }
            };
            match samples_after(history, after) {
                Some(r) => Reply::Now(r),
                None => Reply::Wait { after },
            }
        }
        (["api", "v1", "set"], Some(uid)) if post => {
            Reply::Now(match set::set(ctx, uid, &req.body) {
                Ok(v) => Response::json(200, &v),
                Err((status, why)) => Response::error(status, &why),
            })
        }
        (["api", "v1", "vms", name, action], Some(uid)) if post => {
            Reply::Now(vm_action(ctx, uid, name, action))
        }
        (["api", "v1", "set"] | ["api", "v1", "vms", _, _], _) => wrong_method("POST"),
        ([] | ["page.js"] | ["api", "v1", "vms" | "stats" | "keys" | "events" | "status"], _) => {
            wrong_method("GET")
        }
        _ => Reply::Now(Response::error(
            404,
            &format!(
                "no such resource {} (see GET /api/v1/keys and the README)",
                quoted(&req.path)
            ),
        )),
    }
}

/// The keys `set` takes.
fn keys() -> Value {
    let keys: Vec<Value> = set::KEYS
        .iter()
        .map(|k| {
            json!({
                "key": k.name,
                "target": match k.scope { set::Scope::Vcpu => "VM or VM/VCPU", set::Scope::Vm => "VM", set::Scope::Host => "none (the host)" },
                "value": k.syntax,
            })
        })
        .collect();
    with_header(API_KEYS, API_SCHEMA_VERSION, json!({ "keys": keys }))
}

/// Pause, resume or stop a VM.
fn vm_action(ctx: &ApiContext<'_>, uid: u32, name: &str, action: &str) -> Response {
    let req = match action {
        "pause" => Some(VmRequest::Pause),
        "resume" => Some(VmRequest::Resume),
        "stop" => None,
        other => {
            return Response::error(
                404,
                &format!(
                    "unknown action {} (expected pause, resume or stop)",
                    quoted(other)
                ),
            )
        }
    };
    if !ctx.configs.iter().any(|c| c.name == name) {
        return Response::error(404, &ctx.no_vm_named(name));
    }
    let Some(handle) = ctx.vms.find(name) else {
        return Response::error(409, &format!("VM {name} has not started yet"));
    };
    if handle.is_stopping() {
        return Response::error(409, &format!("VM {name} is stopped"));
    }
    let before = view::vm_state(ctx, name);
    let after = match req {
        None => {
            handle.stop();
            "stopped"
        }
        Some(r) => {
            if let Err(why) = handle.request(r, VM_REQUEST_TIMEOUT) {
                return Response::error(409, &format!("VM {name}: {action}: {why}"));
            }
            view::vm_state(ctx, name)
        }
    };
    if before != after {
        ctx.audit
            .record(uid, name, "state", Some(before.to_string()), after);
    }
    Response::json(
        200,
        &with_header(
            API_VM_STATE,
            API_SCHEMA_VERSION,
            json!({ "vm": name, "state": after }),
        ),
    )
}
