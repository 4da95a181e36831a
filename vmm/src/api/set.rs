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
//!
//! The body is read strictly (issue 32): a key given twice, or a value
//! with blanks around it, is refused naming it; a value is answered and
//! recorded in its key's one spelling ([`Key::canonical`]: "0,0,0" is
//! "0").

use super::ApiContext;
use crate::config::sched_rules;
use crate::documents::{with_header, API_SCHEMA_VERSION, API_SET};
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
    /// The value as it is answered and recorded: one spelling for one
    /// meaning ("0,0,0" is "0", "012" is "12"); a value it cannot read is
    /// kept as given (`prepare` refuses it).
    pub canonical: fn(&str) -> String,
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
        canonical: canonical_cpu_list,
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
        canonical: canonical_integer,
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
        canonical: str::to_string,
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
        canonical: canonical_integer,
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
        canonical: |v| {
            if v == "none" {
                v.to_string()
            } else {
                canonical_integer(v)
            }
        },
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
        canonical: canonical_integer,
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
        canonical: str::to_string,
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
        canonical: canonical_cpu_list,
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
        canonical: canonical_cpu_list,
        read: |s| out_list(&s.out_of_service()),
        prepare: |s, value, _| Ok(Some(service(s.engine, service_list(s, value)?, true))),
    },
];

/// A CPU list as the host set writes it ("0,0,0" and "0-0" are "0").
fn canonical_cpu_list(value: &str) -> String {
    sched_rules::cpu_list(value).map_or_else(|_| value.to_string(), |set| set.to_list())
}

/// An integer without sign or leading zeros.
fn canonical_integer(value: &str) -> String {
    value
        .parse::<i64>()
        .map_or_else(|_| value.to_string(), |n| n.to_string())
}

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
///
/// Strict, as a hostile client is expected: a key given twice anywhere in
/// the body is refused (serde_json would keep the last), and so is a
/// value (or target) with blanks around it, rather than recording what
/// the check read past.
pub fn parse_body(body: &[u8]) -> Result<SetRequest, Refusal> {
    let bad = |why: String| (400, why);
    let duplicate = std::cell::RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(body);
    let v = serde::de::DeserializeSeed::deserialize(
        UniqueKeys {
            path: "",
            duplicate: &duplicate,
        },
        &mut de,
    )
    .and_then(|v| de.end().map(|()| v));
    let v: Value = match (v, duplicate.into_inner()) {
        (_, Some(path)) => {
            return Err(bad(format!(
                "duplicate key {}: each key may be given once",
                quoted(&path)
            )))
        }
        (Ok(v), None) => v,
        (Err(e), None) => {
            return Err(bad(format!(
                "expected a JSON object, found invalid JSON: {e}"
            )))
        }
    };
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
        Some(Value::String(s)) => Some(unpadded("target", s)?.to_string()),
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
            Value::String(s) => unpadded(&format!("set.{k}"), s)?.to_string(),
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

/// `value` of `field` if it has no blanks around it.
fn unpadded<'v>(field: &str, value: &'v str) -> Result<&'v str, Refusal> {
    if value.trim() == value {
        Ok(value)
    } else {
        Err((
            400,
            format!(
                "{field}: expected a value without blanks around it, found {}",
                quoted(value)
            ),
        ))
    }
}

/// A JSON value read with the keys of every object checked unique: the
/// first key given twice is left in `duplicate` (its path, `set.priority`)
/// and reading stops. (serde_json itself keeps the last of two.)
struct UniqueKeys<'a> {
    /// Where this value is in the body ("" the top).
    path: &'a str,
    duplicate: &'a std::cell::RefCell<Option<String>>,
}

impl<'de> serde::de::DeserializeSeed<'de> for UniqueKeys<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for UniqueKeys<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        let path = format!("{}[]", self.path);
        while let Some(v) = seq.next_element_seed(UniqueKeys {
            path: &path,
            duplicate: self.duplicate,
        })? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut object = serde_json::Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = match self.path {
                "" => key.clone(),
                p => format!("{p}.{key}"),
            };
            if object.contains_key(&key) {
                *self.duplicate.borrow_mut() = Some(path);
                return Err(serde::de::Error::custom("duplicate key"));
            }
            let v = map.next_value_seed(UniqueKeys {
                path: &path,
                duplicate: self.duplicate,
            })?;
            object.insert(key, v);
        }
        Ok(Value::Object(object))
    }
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
    let mut canonical = Vec::new();
    for (k, value) in &pairs {
        let Some(key) = KEYS.iter().find(|key| key.name == k) else {
            let names: Vec<_> = KEYS.iter().map(|k| k.name).collect();
            return Err((
                400,
                format!(
                    "unknown key {} (keys: {}){}",
                    quoted(k),
                    names.join(", "),
                    crate::suggest::hint(k, names.iter().copied())
                ),
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
        canonical.push((k.clone(), (key.canonical)(value)));
    }
    // From here on each value is in its one spelling: checked, answered
    // and recorded as such.
    let pairs = canonical;
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
    // The target in one spelling too ("a/01" is "a/1").
    let target_name = match &vm {
        None => "host".to_string(),
        Some((vm, None)) => vm.name().to_string(),
        Some((vm, Some(i))) => format!("{}/{i}", vm.name()),
    };
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
    Ok(with_header(
        API_SET,
        API_SCHEMA_VERSION,
        json!({ "target": target_name, "changed": changed }),
    ))
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
        return Err((404, ctx.no_vm_named(name)));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(body: &str) -> String {
        match parse_body(body.as_bytes()) {
            Err((400, why)) => why,
            other => panic!("{body}: {other:?}"),
        }
    }

    #[test]
    fn a_key_given_twice_is_refused_by_name() {
        assert_eq!(
            refused(r#"{"target": "a", "set": {"priority": "20", "priority": "30"}}"#),
            "duplicate key \"set.priority\": each key may be given once"
        );
        assert!(
            refused(r#"{"target": "a", "target": "b", "set": {"priority": "2"}}"#)
                .starts_with("duplicate key \"target\"")
        );
        assert!(
            refused(r#"{"target": "a", "set": {"x": 1}, "set": {"y": 2}}"#)
                .starts_with("duplicate key \"set\"")
        );
        // The same key in two objects is two keys.
        let r = parse_body(br#"{"target": "a", "set": {"priority": 20, "class": "timeshare"}}"#)
            .unwrap();
        assert_eq!(r.pairs.len(), 2);
        // Invalid JSON and nesting past serde_json's limit stay refusals.
        assert!(refused(r#"{"target""#).starts_with("expected a JSON object, found invalid JSON"));
        assert!(refused(&"[".repeat(10_000)).contains("invalid JSON"));
        assert!(refused(r#"{"target": "a", "set": {"priority": 1}} x"#).contains("invalid JSON"));
    }

    #[test]
    fn values_with_blanks_around_them_are_refused_by_field() {
        assert_eq!(
            refused(r#"{"target": "a", "set": {"priority": "10 "}}"#),
            "set.priority: expected a value without blanks around it, found \"10 \""
        );
        assert!(refused(r#"{"target": "a", "set": {"affinity": "\t0"}}"#)
            .starts_with("set.affinity: expected a value without blanks"));
        assert!(refused(r#"{"target": " a", "set": {"priority": "1"}}"#)
            .starts_with("target: expected a value without blanks"));
        let r = parse_body(br#"{"target": "a/0", "set": {"affinity": "0, 1"}}"#).unwrap();
        assert_eq!(r.pairs, [("affinity".to_string(), "0, 1".to_string())]);
    }

    #[test]
    fn values_are_recorded_in_one_spelling() {
        let canonical = |key: &str, value: &str| {
            let k = KEYS.iter().find(|k| k.name == key).unwrap();
            (k.canonical)(value)
        };
        assert_eq!(canonical("affinity", "0,0,0"), "0");
        assert_eq!(canonical("affinity", "1,0-1, 0"), "0-1");
        assert_eq!(canonical("offline", "1,1"), "1");
        assert_eq!(canonical("priority", "+012"), "12");
        assert_eq!(canonical("cap", "none"), "none");
        assert_eq!(canonical("cap", "050"), "50");
        assert_eq!(canonical("weight", "x"), "x");
        assert_eq!(canonical("affinity", "0-"), "0-");
        assert_eq!(canonical("mode", "power-saving"), "power-saving");
        assert!(integer("10 ").is_err());
    }
}
