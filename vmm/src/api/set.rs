//! `POST /api/v1/set`: change what the scheduler does while the VMs run.
//!
//! The body names a target and keys, as `pacer ctl set` does on its command
//! line:
//!
//! ```json
//! {"target": "web/1", "set": {"affinity": "1", "priority": 20}}
//! {"target": null, "set": {"mode": "power-saving", "offline": "1"}}
//! ```
//!
//! A target is `VM` (every vCPU of it), `VM/VCPU`, or none (the host). Each
//! key is one entry of [`KEYS`]: its scope, the syntax of its value, how to
//! read its value now (for the record) and how to check a new value by the
//! config's own rules (`crate::config::sched_rules`) and make the change through
//! the engine. Every key of a request is checked on every vCPU of the
//! target before anything is changed, so a request is refused whole or
//! made whole. Adding a key is one entry of the table (weight, cap and
//! reservation, per vCPU, came with the operator shares).

use super::audit::SCHEMA_VERSION;
use super::ApiContext;
use crate::config::sched_rules;
use crate::text::quoted;
use serde_json::{json, Value};
use std::sync::Arc;
use vcpu_engine::host_cpus::HostCpuSet;
use vcpu_engine::EngineVcpu;
use vcpu_engine::{Engine, EngineError, EngineVm};
use vcpu_sched::stats::EntityStats;
use vcpu_sched::{Mode, SchedSnapshot};

/// Why a key's value is refused (the API answers 422 with the key in
/// front).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetError {
    /// The config's own rule for the value.
    #[error(transparent)]
    Rule(#[from] sched_rules::SchedRuleError),
    /// `priority` given beside `class`, out of the class's range.
    #[error("priority: {0}")]
    Priority(sched_rules::SchedRuleError),
    #[error("a vCPU key without a vCPU (a bug)")]
    NoVcpu,
    #[error("expected an integer, found {}", quoted(.0))]
    NotAnInteger(String),
    #[error("expected \"low-latency\" or \"power-saving\", found {}", quoted(.0))]
    NotAMode(String),
    #[error("expected at least one CPU left in service, found none after taking out {}", .0.to_list())]
    NoCpuLeft(HostCpuSet),
}

/// Where a key applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// A vCPU (given a VM, each of its vCPUs).
    Vcpu,
    /// The host: the scheduler as a whole, or its CPUs.
    Host,
}

/// What a key is checked against and changes.
pub struct Site<'a> {
    pub engine: &'a Engine,
    pub ctx: &'a ApiContext<'a>,
    pub snap: &'a SchedSnapshot,
    /// For [`Scope::Vcpu`] keys: the vCPU and its scheduler row.
    pub vcpu: Option<(&'a EngineVcpu, &'a EntityStats)>,
}

impl<'a> Site<'a> {
    fn vcpu(&self) -> Result<(&'a EngineVcpu, &'a EntityStats), SetError> {
        self.vcpu.ok_or(SetError::NoVcpu)
    }

    /// The CPUs out of service now.
    fn out_of_service(&self) -> HostCpuSet {
        let cpus = self.engine.cpu_map();
        self.snap
            .cpus
            .iter()
            .filter(|c| !c.in_service)
            .filter_map(|c| cpus.host(c.cpu))
            .collect()
    }
}

/// The keys of the same request, for keys that depend on each other
/// (`class` takes the `priority` given beside it).
pub type Pairs = [(String, String)];

/// A checked change, made later.
pub type Action<'a> = Box<dyn FnOnce() -> Result<(), EngineError> + 'a>;

/// One settable key.
pub struct Key {
    pub name: &'static str,
    pub scope: Scope,
    /// What a value looks like.
    pub syntax: &'static str,
    /// The value now.
    pub read: fn(&Site<'_>) -> String,
    /// Check `value` and return the change to make (`None`: another key
    /// of the request makes it).
    pub prepare: for<'a> fn(&Site<'a>, &str, &Pairs) -> Result<Option<Action<'a>>, SetError>,
}

/// Every key `set` knows.
pub const KEYS: &[Key] = &[
    Key {
        name: "affinity",
        scope: Scope::Vcpu,
        syntax: "a CPU list within [host] cpus, e.g. \"0-1\"",
        read: |s| {
            s.vcpu()
                .map(|(_, row)| s.engine.host_set(&row.affinity).to_list())
                .unwrap_or_default()
        },
        prepare: |s, value, _| {
            let set = sched_rules::cpu_list(value)?;
            sched_rules::core_set(&set, &s.ctx.host_cpus)?;
            let (v, _) = s.vcpu()?;
            let engine = s.engine;
            Ok(Some(Box::new(move || engine.set_vcpu_affinity(v, &set))))
        },
    },
    Key {
        name: "priority",
        scope: Scope::Vcpu,
        syntax: "timeshare 1-99, realtime 100-120",
        read: |s| {
            s.vcpu()
                .map(|(_, row)| row.base_priority.to_string())
                .unwrap_or_default()
        },
        prepare: |s, value, pairs| {
            let (v, row) = s.vcpu()?;
            let class = match given(pairs, "class") {
                // `class` makes the change, with this priority.
                Some(_) => return Ok(None),
                None => row.class,
            };
            let priority = sched_rules::priority(class, integer(value)?)?;
            honoured(s, class, priority)?;
            let engine = s.engine;
            Ok(Some(Box::new(move || {
                engine.set_vcpu_priority(v, priority)
            })))
        },
    },
    Key {
        name: "class",
        scope: Scope::Vcpu,
        syntax: "timeshare or realtime (with `priority`, or the class's default)",
        read: |s| {
            s.vcpu()
                .map(|(_, row)| sched_rules::class_name(row.class).to_string())
                .unwrap_or_default()
        },
        prepare: |s, value, pairs| {
            let (v, _) = s.vcpu()?;
            let class = sched_rules::class_from_name(value)?;
            let priority = match given(pairs, "priority") {
                Some(p) => sched_rules::priority(class, integer(p)?).map_err(SetError::Priority)?,
                None => sched_rules::default_priority(class),
            };
            honoured(s, class, priority)?;
            let engine = s.engine;
            Ok(Some(Box::new(move || {
                engine.set_vcpu_class(v, class, priority)
            })))
        },
    },
    Key {
        name: "weight",
        scope: Scope::Vcpu,
        syntax: "1-10000 (100: the default share; haiku only)",
        read: |s| {
            s.vcpu()
                .map(|(_, row)| row.weight.to_string())
                .unwrap_or_default()
        },
        prepare: |s, value, _| {
            let (v, _) = s.vcpu()?;
            let weight = sched_rules::weight(integer(value)?)?;
            sched_rules::shares_honoured(s.ctx.policy, "weights", "the run's policy")?;
            let engine = s.engine;
            Ok(Some(Box::new(move || engine.set_vcpu_weight(v, weight))))
        },
    },
    Key {
        name: "cap",
        scope: Scope::Vcpu,
        syntax: "% of one CPU for each vCPU, 1-100, or \"none\" (haiku only)",
        read: |s| {
            s.vcpu()
                .map(|(_, row)| {
                    row.cap
                        .map_or("none".to_string(), |c| format!("{}", c / 10))
                })
                .unwrap_or_default()
        },
        prepare: |s, value, _| {
            let (v, row) = s.vcpu()?;
            let cap = match value {
                "none" => None,
                x => Some(sched_rules::cap(integer(x)?, 1)?),
            };
            if let Some(c) = cap {
                sched_rules::cap_covers_reservation(
                    Some(i64::from(c / 10)),
                    i64::from(row.reservation / 10),
                )?;
            }
            sched_rules::shares_honoured(s.ctx.policy, "caps", "the run's policy")?;
            let engine = s.engine;
            Ok(Some(Box::new(move || engine.set_vcpu_cap(v, cap))))
        },
    },
    Key {
        name: "reservation",
        scope: Scope::Vcpu,
        syntax: "% of one CPU for each vCPU, 0-100, all vCPUs' within the host's CPUs (haiku only)",
        read: |s| {
            s.vcpu()
                .map(|(_, row)| (row.reservation / 10).to_string())
                .unwrap_or_default()
        },
        prepare: |s, value, _| {
            let (v, row) = s.vcpu()?;
            let percent = integer(value)?;
            let permille = sched_rules::reservation(percent, 1)?;
            sched_rules::cap_covers_reservation(row.cap.map(|c| i64::from(c / 10)), percent)?;
            // The others' reservations as they are now, this vCPU's new one.
            let others: i64 = s
                .snap
                .entities
                .iter()
                .filter(|e| e.id != row.id)
                .map(|e| i64::from(e.reservation))
                .sum();
            sched_rules::reservations_fit(
                (others + i64::from(permille)) / 10,
                s.ctx.host_cpus.len(),
            )?;
            sched_rules::shares_honoured(s.ctx.policy, "reservations", "the run's policy")?;
            let engine = s.engine;
            Ok(Some(Box::new(move || {
                engine.set_vcpu_reservation(v, permille)
            })))
        },
    },
    Key {
        name: "mode",
        scope: Scope::Host,
        syntax: "low-latency or power-saving",
        read: |s| s.engine.mode().as_str().to_string(),
        prepare: |s, value, _| {
            let mode: Mode = value
                .parse()
                .map_err(|_| SetError::NotAMode(value.to_string()))?;
            let engine = s.engine;
            Ok(Some(Box::new(move || engine.set_mode(mode))))
        },
    },
    Key {
        name: "offline",
        scope: Scope::Host,
        syntax: "host CPUs to take out of Pacer's service, e.g. \"1\"",
        read: |s| out_list(&s.out_of_service()),
        prepare: |s, value, _| {
            let set = service_list(s, value)?;
            let left = s
                .ctx
                .host_cpus
                .difference(&s.out_of_service())
                .difference(&set);
            if left.is_empty() {
                return Err(SetError::NoCpuLeft(set));
            }
            Ok(Some(service(s.engine, set, false)))
        },
    },
    Key {
        name: "online",
        scope: Scope::Host,
        syntax: "host CPUs to put back in Pacer's service, e.g. \"1\"",
        read: |s| out_list(&s.out_of_service()),
        prepare: |s, value, _| Ok(Some(service(s.engine, service_list(s, value)?, true))),
    },
];

/// A CPU list for the record ("none" when empty).
fn out_list(set: &HostCpuSet) -> String {
    match set.to_list() {
        l if l.is_empty() => "none".into(),
        l => l,
    }
}

/// The value of `key` in the same request.
fn given<'p>(pairs: &'p Pairs, key: &str) -> Option<&'p str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

fn integer(value: &str) -> Result<i64, SetError> {
    value
        .trim()
        .parse()
        .map_err(|_| SetError::NotAnInteger(value.to_string()))
}

/// What the run's policy honours, as the config file says it.
fn honoured(s: &Site<'_>, class: vcpu_sched::SchedClass, priority: u8) -> Result<(), SetError> {
    sched_rules::vm_class(class)?;
    Ok(sched_rules::honoured(
        s.ctx.policy,
        class,
        priority,
        "the run's policy",
    )?)
}

/// Host CPUs given for `offline`/`online`: a list within `[host] cpus`.
fn service_list(s: &Site<'_>, value: &str) -> Result<HostCpuSet, SetError> {
    let set = sched_rules::cpu_list(value)?;
    sched_rules::core_set(&set, &s.ctx.host_cpus)?;
    Ok(set)
}

/// Put `set` in service or take it out.
fn service(engine: &Engine, set: HostCpuSet, in_service: bool) -> Action<'_> {
    Box::new(move || {
        set.iter()
            .try_for_each(|c| engine.set_cpu_service(c, in_service))
    })
}

/// A refusal: the HTTP status and the one-line reason.
pub type Refusal = (u16, String);

/// What a set request asks: a target (none: the host) and its keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetRequest {
    pub target: Option<String>,
    pub pairs: Vec<(String, String)>,
}

/// The request body: `{"target": "vm[/vcpu]" | null, "set": {key: value}}`.
pub fn parse_body(body: &[u8]) -> Result<SetRequest, Refusal> {
    let bad = |why: String| (400, why);
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| bad(format!("expected a JSON object, found invalid JSON: {e}")))?;
    let Some(obj) = v.as_object() else {
        return Err(bad(
            "expected a JSON object {\"target\": ..., \"set\": {...}}".into(),
        ));
    };
    if let Some(k) = obj.keys().find(|k| *k != "target" && *k != "set") {
        return Err(bad(format!(
            "unknown field {} (expected \"target\" and \"set\")",
            quoted(k)
        )));
    }
    let target = match obj.get("target") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(bad(format!(
            "target: expected a string \"VM\" or \"VM/VCPU\", or null for the host, found {other}"
        )))
        }
    };
    let Some(set) = obj.get("set").and_then(Value::as_object) else {
        return Err(bad("set: expected an object of keys and values".into()));
    };
    if set.is_empty() {
        return Err(bad("set: expected at least one key, found none".into()));
    }
    let mut pairs = Vec::new();
    for (k, v) in set {
        let value = match v {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            other => {
                return Err(bad(format!(
                    "set.{k}: expected a string or a number, found {other}"
                )))
            }
        };
        pairs.push((k.clone(), value));
    }
    Ok(SetRequest { target, pairs })
}

/// Carry out a set request from peer `uid`; the answer's JSON or why not.
pub fn set(ctx: &ApiContext<'_>, uid: u32, body: &[u8]) -> Result<Value, Refusal> {
    let SetRequest { target, pairs } = parse_body(body)?;
    let Some(engine) = ctx.engine else {
        return Err((
            409,
            "policy host has no scheduler to change: vCPU threads are left to the host kernel"
                .into(),
        ));
    };
    // Keys first: unknown keys and scope mismatches name the key.
    let mut keys = Vec::new();
    for (k, _) in &pairs {
        let Some(key) = KEYS.iter().find(|key| key.name == k) else {
            let names: Vec<_> = KEYS.iter().map(|k| k.name).collect();
            return Err((
                400,
                format!("unknown key {} (keys: {})", quoted(k), names.join(", ")),
            ));
        };
        match (key.scope, &target) {
            (Scope::Host, Some(t)) => {
                return Err((
                    400,
                    format!("{t}: {k} is a key of the host: give it without a target"),
                ))
            }
            (Scope::Vcpu, None) => {
                return Err((
                    400,
                    format!("{k} is a key of a VM or vCPU: name one (VM or VM/VCPU)"),
                ))
            }
            _ => keys.push(key),
        }
    }
    let snap = engine.snapshot();
    // The sites: the host, or each vCPU of the target with its row.
    let vm: Option<(Arc<EngineVm>, Option<usize>)> = match &target {
        None => None,
        Some(t) => Some(resolve(ctx, engine, t)?),
    };
    let mut sites = Vec::new();
    match &vm {
        None => sites.push((
            "host".to_string(),
            Site {
                engine,
                ctx,
                snap: &snap,
                vcpu: None,
            },
        )),
        Some((vm, which)) => {
            for v in vm.vcpus() {
                if which.is_some_and(|i| i != v.index() as usize) {
                    continue;
                }
                let Some(row) = snap.entities.iter().find(|e| e.id == v.entity()) else {
                    return Err((
                        409,
                        format!("{}/{}: not scheduled now", vm.name(), v.index()),
                    ));
                };
                sites.push((
                    format!("{}/{}", vm.name(), v.index()),
                    Site {
                        engine,
                        ctx,
                        snap: &snap,
                        vcpu: Some((v.as_ref(), row)),
                    },
                ));
            }
        }
    }
    let target_name = target.clone().unwrap_or_else(|| "host".into());
    // Check every key on every site first: a refusal changes nothing.
    let mut plan = Vec::new();
    for (key, (k, value)) in keys.iter().zip(&pairs) {
        let mut before = Vec::new();
        let mut actions = Vec::new();
        for (name, site) in &sites {
            before.push((name.clone(), (key.read)(site)));
            match (key.prepare)(site, value, &pairs) {
                Ok(Some(a)) => actions.push((name.clone(), a)),
                Ok(None) => {}
                Err(why) => return Err((422, format!("{name}: {k}: {why}"))),
            }
        }
        plan.push((k.as_str(), value.as_str(), summarize(&before), actions));
    }
    // Then change, and record what changed.
    let mut changed = Vec::new();
    let mut failures = Vec::new();
    for (k, value, previous, actions) in plan {
        let mut ok = true;
        for (name, action) in actions {
            if let Err(e) = action() {
                ok = false;
                failures.push(format!("{name}: {k}: {e}"));
            }
        }
        if ok {
            ctx.audit
                .record(uid, &target_name, k, Some(previous.clone()), value);
            changed.push(json!({ "key": k, "previous": previous, "value": value }));
        }
    }
    if !failures.is_empty() {
        return Err((500, failures.join("; ")));
    }
    Ok(json!({ "schema_version": SCHEMA_VERSION, "target": target_name, "changed": changed }))
}

/// One value for a key over several sites: the value if all agree, else
/// `site=value` pairs.
fn summarize(values: &[(String, String)]) -> String {
    match values.first() {
        Some((_, v)) if values.iter().all(|(_, w)| w == v) => v.clone(),
        _ => values
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join(" "),
    }
}

/// `VM` or `VM/VCPU` to a live VM of the engine.
fn resolve(
    ctx: &ApiContext<'_>,
    engine: &Engine,
    target: &str,
) -> Result<(Arc<EngineVm>, Option<usize>), Refusal> {
    let (name, vcpu) = match target.split_once('/') {
        Some((n, i)) => match i.parse::<usize>() {
            Ok(i) => (n, Some(i)),
            Err(_) => {
                return Err((
                    400,
                    format!(
                        "target: expected VM or VM/VCPU (a vCPU number), found {}",
                        quoted(target)
                    ),
                ))
            }
        },
        None => (target, None),
    };
    if !ctx.configs.iter().any(|c| c.name == name) {
        let names: Vec<_> = ctx.configs.iter().map(|c| c.name.as_str()).collect();
        return Err((
            404,
            format!("no VM named {} (VMs: {})", quoted(name), names.join(", ")),
        ));
    }
    let Some(vm) = engine.vm_named(name) else {
        return Err((
            409,
            format!("VM {name} is {}", super::view::vm_state(ctx, name)),
        ));
    };
    if let Some(i) = vcpu {
        if i >= vm.vcpus().len() {
            return Err((
                404,
                format!("VM {name} has vCPUs 0-{}, not {i}", vm.vcpus().len() - 1),
            ));
        }
    }
    Ok((vm, vcpu))
}
