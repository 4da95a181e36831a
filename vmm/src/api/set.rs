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
//! reservation, per vCPU, came with the operator shares; the latency
//! bound, per VM, after them). A key that bears on the latency bounds
//! (affinity, priority, class, reservation, the bound) also says what it
//! does to a vCPU's settings as the bounds' admission reads them
//! ([`Key::level`]): the request is refused, in the config's words, if
//! the bounds could not all be promised after it (`admission.rs`).
//!
//! The body is read strictly (issue 32): a key given twice, or a value
//! with blanks around it, is refused naming it; a value is answered and
//! recorded in its key's one spelling ([`Key::canonical`]: "0,0,0" is
//! "0").

use super::ApiContext;
use crate::config::bounds::VcpuLevel;
use crate::config::sched_rules;
use crate::documents::{with_header, API_SCHEMA_VERSION, API_SET};
use crate::text::quoted;
use serde_json::{json, Value};
use std::sync::Arc;
use vcpu_engine::host_cpus::HostCpuSet;
use vcpu_engine::EngineVcpu;
use vcpu_engine::{Engine, EngineError, EngineVm};
use vcpu_sched::bound::LatencyBound;
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
    /// `bound_budget` given beside `latency_bound_us`, out of range.
    #[error("bound_budget: {0}")]
    BoundBudget(sched_rules::SchedRuleError),
    #[error("expected no `bound_budget` beside `latency_bound_us=none` (lifting the bound lifts its budget), found {}", quoted(.0))]
    BudgetWithoutBound(String),
}

/// Where a key applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// A vCPU (given a VM, each of its vCPUs).
    Vcpu,
    /// A whole VM: every vCPU of it at once, never one alone.
    Vm,
    /// The host: the scheduler as a whole, or its CPUs.
    Host,
}

/// What a key is checked against and changes.
pub struct Site<'a> {
    pub engine: &'a Engine,
    pub ctx: &'a ApiContext<'a>,
    pub snap: &'a SchedSnapshot,
    /// For [`Scope::Vcpu`] and [`Scope::Vm`] keys: the vCPU and its
    /// scheduler row.
    pub vcpu: Option<(&'a EngineVcpu, &'a EntityStats)>,
    /// The vCPUs of its VM (0 for the host).
    pub vm_vcpus: u32,
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
    /// For keys that bear on the latency bounds: make the change (the
    /// value, the request's other keys, the VM's vCPU count) to a vCPU's
    /// settings as the bounds' admission reads them.
    pub level: Option<LevelChange>,
    /// For keys that take host CPUs out of Pacer's service or put them
    /// back: the CPUs in service after the value, from those before (the
    /// bounds' admission judges what is left).
    pub service: Option<ServiceChange>,
}

/// A key's change to the host CPUs in Pacer's service.
pub type ServiceChange = fn(&HostCpuSet, &str) -> Result<HostCpuSet, SetError>;

/// A key's change to a vCPU's settings as the bounds' admission reads
/// them: the value, the request's keys, the VM's vCPU count.
pub type LevelChange = fn(&mut VcpuLevel, &str, &Pairs, u32) -> Result<(), SetError>;

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
        service: None,
        level: Some(|l, value, _, _| {
            l.cpus = sched_rules::cpu_list(value)?;
            Ok(())
        }),
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
        service: None,
        level: Some(|l, value, pairs, _| {
            if given(pairs, "class").is_none() {
                l.priority = sched_rules::priority(l.class, integer(value)?)?;
            }
            Ok(())
        }),
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
        service: None,
        level: Some(|l, value, pairs, _| {
            l.class = sched_rules::class_from_name(value)?;
            l.priority = match given(pairs, "priority") {
                Some(p) => {
                    sched_rules::priority(l.class, integer(p)?).map_err(SetError::Priority)?
                }
                None => sched_rules::default_priority(l.class),
            };
            Ok(())
        }),
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
        service: None,
        level: None,
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
        service: None,
        level: None,
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
        service: None,
        level: Some(|l, value, _, _| {
            l.reservation = sched_rules::reservation(integer(value)?, 1)?;
            Ok(())
        }),
    },
    Key {
        name: "latency_bound_us",
        scope: Scope::Vm,
        syntax: "wake-to-run bound in us, 1-1000000, with `bound_budget`; or \"none\" to lift it (haiku only)",
        canonical: none_or_integer,
        read: |s| {
            s.vcpu()
                .map(|(_, row)| {
                    row.latency_bound
                        .map_or("none".to_string(), |ns| ns.div_ceil(1000).to_string())
                })
                .unwrap_or_default()
        },
        prepare: |s, value, pairs| {
            let (v, _) = s.vcpu()?;
            let bound = requested_bound(value, pairs, s.vm_vcpus)?;
            if !s.ctx.policy.honours_latency_bounds() {
                return Err(sched_rules::SchedRuleError::BoundRefused {
                    policy: s.ctx.policy,
                    origin: "the run's policy".to_string(),
                }
                .into());
            }
            let engine = s.engine;
            Ok(Some(Box::new(move || {
                engine.set_vcpu_latency_bound(v, bound)
            })))
        },
        service: None,
        level: Some(|l, value, pairs, vcpus| {
            l.latency_bound = requested_bound(value, pairs, vcpus)?;
            Ok(())
        }),
    },
    Key {
        name: "bound_budget",
        scope: Scope::Vm,
        syntax: "% of one CPU for the whole VM, split evenly over its vCPUs, 1-100 per vCPU, with `latency_bound_us` (haiku only)",
        canonical: canonical_integer,
        read: |s| {
            s.vcpu()
                .map(|(_, row)| match row.latency_bound {
                    None => "none".to_string(),
                    // The VM's percent, from each vCPU's per mille, as the
                    // resolved config writes it: one that reads back alike.
                    Some(_) => sched_rules::vm_percent(row.bound_budget, s.vm_vcpus).to_string(),
                })
                .unwrap_or_default()
        },
        prepare: |_, _, pairs| match given(pairs, "latency_bound_us") {
            // `latency_bound_us` makes the change, with this budget.
            Some(_) => Ok(None),
            None => Err(sched_rules::SchedRuleError::BoundHalf("bound_budget").into()),
        },
        service: None,
        level: None,
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
        service: None,
        level: None,
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
        service: Some(|in_service, value| Ok(in_service.difference(&sched_rules::cpu_list(value)?))),
        level: None,
    },
    Key {
        name: "online",
        scope: Scope::Host,
        syntax: "host CPUs to put back in Pacer's service, e.g. \"1\"",
        canonical: canonical_cpu_list,
        read: |s| out_list(&s.out_of_service()),
        prepare: |s, value, _| Ok(Some(service(s.engine, service_list(s, value)?, true))),
        service: Some(|in_service, value| {
            Ok(in_service
                .iter()
                .chain(sched_rules::cpu_list(value)?.iter())
                .collect())
        }),
        level: None,
    },
];

/// A CPU list as the host set writes it ("0,0,0" and "0-0" are "0").
fn canonical_cpu_list(value: &str) -> String {
    sched_rules::cpu_list(value).map_or_else(|_| value.to_string(), |set| set.to_list())
}

/// "none", or an integer in its one spelling.
fn none_or_integer(value: &str) -> String {
    if value == "none" {
        value.to_string()
    } else {
        canonical_integer(value)
    }
}

/// The bound `latency_bound_us=value` asks for (`None`: lift it), with
/// the `bound_budget` beside it split over the VM's `vcpus`: both or
/// neither, checked by the config's rules.
fn requested_bound(
    value: &str,
    pairs: &Pairs,
    vcpus: u32,
) -> Result<Option<LatencyBound>, SetError> {
    match (value, given(pairs, "bound_budget")) {
        ("none", None) => Ok(None),
        ("none", Some(budget)) => Err(SetError::BudgetWithoutBound(budget.to_string())),
        (_, None) => Err(sched_rules::SchedRuleError::BoundHalf("latency_bound_us").into()),
        (us, Some(budget)) => Ok(Some(LatencyBound {
            bound: sched_rules::latency_bound(integer(us)?)?,
            budget_permille: sched_rules::bound_budget(integer(budget)?, vcpus)
                .map_err(SetError::BoundBudget)?,
        })),
    }
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
            (Scope::Vm, None) => return Err((400, format!("{k} is a key of a VM: name one"))),
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
    if let (Some((_, Some(_))), Some(t)) = (&vm, &target) {
        if let Some(key) = keys.iter().find(|k| k.scope == Scope::Vm) {
            return Err((
                400,
                format!(
                    "{t}: {} is a key of a whole VM (all its vCPUs at once): name the VM, not one vCPU",
                    key.name
                ),
            ));
        }
    }
    let mut sites = Vec::new();
    match &vm {
        None => sites.push((
            "host".to_string(),
            Site {
                engine,
                ctx,
                snap: &snap,
                vcpu: None,
                vm_vcpus: 0,
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
                        vm_vcpus: vm.vcpus().len() as u32,
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
    // The latency bounds after the request, as the config would judge them.
    let (in_service, service_key) = service_after(ctx, &sites, &keys, &pairs)?;
    if let Some(k) = bound_key(&keys).or(service_key) {
        let targets: Vec<_> = sites
            .iter()
            .filter_map(|(_, s)| s.vcpu.map(|(_, row)| row.id))
            .collect();
        let vm_vcpus = sites.first().map_or(0, |(_, s)| s.vm_vcpus);
        let change = |l: &mut VcpuLevel| change_level(&keys, &pairs, vm_vcpus, l);
        match super::admission::refused_after(ctx, engine, &snap, &targets, &change, &in_service) {
            Ok(None) => {}
            Ok(Some(why)) => return Err((422, format!("{target_name}: {k}: {why}"))),
            Err(why) => return Err((422, format!("{target_name}: {k}: {why}"))),
        }
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

/// Make a request's changes (`keys` with their `pairs`, to a vCPU of a VM
/// of `vm_vcpus`) to the vCPU's settings as the bounds' admission reads
/// them.
fn change_level(
    keys: &[&Key],
    pairs: &Pairs,
    vm_vcpus: u32,
    l: &mut VcpuLevel,
) -> Result<(), SetError> {
    for (key, (_, value)) in keys.iter().zip(pairs) {
        if let Some(level) = key.level {
            level(l, value, pairs, vm_vcpus)?;
        }
    }
    Ok(())
}

/// The host CPUs in Pacer's service once the request's keys that change
/// them (`Key::service`: `offline`, `online`) are carried out, and the
/// first of those keys (the one a refusal by the bounds' admission names;
/// none: the request leaves the CPUs in service as they are).
fn service_after(
    ctx: &ApiContext<'_>,
    sites: &[(String, Site<'_>)],
    keys: &[&Key],
    pairs: &Pairs,
) -> Result<(HostCpuSet, Option<&'static str>), Refusal> {
    let out = sites
        .first()
        .map_or_else(HostCpuSet::new, |(_, s)| s.out_of_service());
    let mut in_service = ctx.host_cpus.difference(&out);
    let mut first = None;
    for (key, (k, value)) in keys.iter().zip(pairs) {
        let Some(change) = key.service else {
            continue;
        };
        in_service = change(&in_service, value).map_err(|e| (422, format!("host: {k}: {e}")))?;
        first.get_or_insert(key.name);
    }
    Ok((in_service, first))
}

/// The key a refusal by the bounds' admission names: `latency_bound_us`
/// if given, else the first key that bears on the bounds (none: the
/// request leaves them alone).
fn bound_key(keys: &[&Key]) -> Option<&'static str> {
    let bearing = || keys.iter().filter(|key| key.level.is_some());
    bearing()
        .find(|key| key.name == "latency_bound_us")
        .or_else(|| bearing().next())
        .map(|key| key.name)
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
        assert_eq!(canonical("latency_bound_us", "none"), "none");
        assert_eq!(canonical("latency_bound_us", "0500"), "500");
        assert!(integer("10 ").is_err());
    }

    use crate::config::bounds::{refusal, BoundedVm};
    use vcpu_engine::host_cpus::HostCpuSet;
    use vcpu_sched::SchedClass;

    /// A VM of `vcpus` vCPUs on `cpus`, timeshare 10, with a bound of
    /// `bound` (us, per mille per vCPU) or none.
    fn vm(
        name: &'static str,
        vcpus: u32,
        cpus: &str,
        bound: Option<(u64, u32)>,
    ) -> BoundedVm<'static> {
        let level = VcpuLevel {
            cpus: HostCpuSet::parse_list(cpus).unwrap(),
            class: SchedClass::Timeshare,
            priority: 10,
            reservation: 0,
            latency_bound: bound.map(|(us, permille)| LatencyBound {
                bound: us * 1000,
                budget_permille: permille,
            }),
        };
        BoundedVm {
            name,
            vcpus: vec![level; vcpus as usize],
        }
    }

    /// Apply `pairs` as a `set` of VM `target` would to the admission's
    /// view of `vms`: the refusal, or the view after.
    fn judged(
        mut vms: Vec<BoundedVm<'static>>,
        target: usize,
        pairs: &[(&str, &str)],
    ) -> Result<Vec<BoundedVm<'static>>, String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let keys: Vec<&Key> = pairs
            .iter()
            .map(|(k, _)| KEYS.iter().find(|key| key.name == k).unwrap())
            .collect();
        let k = bound_key(&keys).expect("the request bears on the bounds");
        let n = vms[target].vcpus.len() as u32;
        for l in &mut vms[target].vcpus {
            change_level(&keys, &pairs, n, l).map_err(|why| format!("{k}: {why}"))?;
        }
        match refusal(&vms) {
            Some(why) => Err(format!("{k}: {why}")),
            None => Ok(vms),
        }
    }

    #[test]
    fn a_bound_set_on_a_running_vm_is_admitted_over_the_live_vms() {
        let live = vec![vm("a", 2, "0-1", None), vm("b", 1, "0-1", None)];
        let after = judged(
            live,
            0,
            &[("latency_bound_us", "1000"), ("bound_budget", "20")],
        )
        .unwrap();
        // 20 % of a CPU for the VM: 10 % (100 per mille) per vCPU.
        for v in &after[0].vcpus {
            assert_eq!(
                v.latency_bound,
                Some(LatencyBound {
                    bound: 1_000_000,
                    budget_permille: 100
                })
            );
        }
        assert_eq!(after[1].vcpus[0].latency_bound, None);
    }

    #[test]
    fn a_bound_below_its_wait_is_refused_with_the_configs_arithmetic() {
        // a's two vCPUs hold 100 us each (1 ms x 10 %): b waits at most
        // (100 + 200) / (1 - 0.2) = 375 us, more than the 100 us it asks.
        let live = vec![
            vm("a", 2, "0-1", Some((1000, 100))),
            vm("b", 1, "0-1", None),
        ];
        assert_eq!(
            judged(
                live,
                1,
                &[("latency_bound_us", "100"), ("bound_budget", "10")]
            )
            .err()
            .unwrap(),
            "latency_bound_us: expected VM \"b\"'s latency bound to cover the worst-case wait of its wakes, found 100 us < (kick 100 us + the other bounded vCPUs' bursts 200 us) / (1 - their budgets 20 %) = 375 us; the other bounded vCPUs: 2 of VM \"a\""
        );
    }

    #[test]
    fn a_refusal_counts_the_other_bounded_vcpus_with_the_vms_they_belong_to() {
        // b's own second vCPU is one of the others: both VMs are named.
        let live = vec![
            vm("a", 1, "0-1", Some((1000, 100))),
            vm("b", 2, "0-1", None),
        ];
        let why = judged(
            live,
            1,
            &[("latency_bound_us", "100"), ("bound_budget", "20")],
        )
        .err()
        .unwrap();
        assert!(
            why.ends_with("the other bounded vCPUs: 2 of VMs \"a\", \"b\""),
            "{why}"
        );
    }

    #[test]
    fn budgets_past_the_cpus_are_refused_with_the_configs_arithmetic() {
        let live = vec![
            vm("a", 2, "0", Some((1_000_000, 250))),
            vm("b", 1, "0", None),
        ];
        assert_eq!(
            judged(
                live,
                1,
                &[("bound_budget", "60"), ("latency_bound_us", "1000000")]
            )
            .err()
            .unwrap(),
            "latency_bound_us: expected the bounded VMs (\"a\", \"b\") to ask budgets within the 1 host CPU(s) they may use (0), found 110 % of one CPU in all, more than 100 %"
        );
    }

    #[test]
    fn clearing_a_bound_frees_its_cpus_for_what_it_refused() {
        let live = vec![vm("a", 1, "0", Some((1000, 100))), vm("b", 1, "0-1", None)];
        // While a is bounded, a reservation on b (which may use a's CPU)
        // is refused, and so is a bound on b that a's burst makes too tight.
        assert!(judged(live.clone(), 1, &[("reservation", "10")])
            .err()
            .unwrap()
            .starts_with(
                "reservation: expected the bounded VMs (\"a\") to have host CPUs 0 to themselves at the bounded level, found VM \"b\" there with a reservation"
            ));
        let tight = [("latency_bound_us", "150"), ("bound_budget", "10")];
        assert!(judged(live.clone(), 1, &tight).is_err());
        // Lifted, a holds no bound, and both are admitted.
        let cleared = judged(live, 0, &[("latency_bound_us", "none")]).unwrap();
        assert_eq!(cleared[0].vcpus[0].latency_bound, None);
        assert!(judged(cleared.clone(), 1, &[("reservation", "10")]).is_ok());
        assert!(judged(cleared, 1, &tight).is_ok());
    }

    #[test]
    fn changes_that_would_break_an_admitted_bound_are_refused() {
        let live = vec![vm("a", 1, "0", Some((1000, 100))), vm("b", 1, "1", None)];
        let refused = |pairs: &[(&str, &str)], needle: &str| {
            let why = judged(live.clone(), 1, pairs).err().unwrap();
            assert!(why.contains(needle), "{pairs:?}: {why}");
        };
        // Off a's CPU, b may have them all.
        assert!(judged(live.clone(), 1, &[("priority", "99")]).is_ok());
        assert!(judged(live.clone(), 1, &[("class", "realtime")]).is_ok());
        // Moved onto a's CPU with them, or given them there: refused.
        refused(
            &[("affinity", "0-1"), ("priority", "99")],
            "affinity: expected the bounded VMs (\"a\") to have host CPUs 0 to themselves at the bounded level, found VM \"b\" there with timeshare priority 99",
        );
        let on_a = vec![live[0].clone(), vm("b", 1, "0-1", None)];
        let why = judged(on_a.clone(), 1, &[("class", "realtime")])
            .err()
            .unwrap();
        assert!(why.contains("with the realtime class"), "{why}");
        assert!(judged(on_a.clone(), 1, &[("priority", "98")]).is_ok());
        // The bounded VM itself: not realtime, no reservation.
        let why = judged(on_a.clone(), 0, &[("class", "realtime")])
            .err()
            .unwrap();
        assert_eq!(
            why,
            format!("class: {}", sched_rules::SchedRuleError::BoundRealtime)
        );
        let why = judged(on_a, 0, &[("reservation", "5")]).err().unwrap();
        assert_eq!(
            why,
            format!(
                "reservation: {}",
                sched_rules::SchedRuleError::BoundWithReservation
            )
        );
    }

    #[test]
    fn a_bound_and_its_budget_come_together_or_the_bound_is_lifted_alone() {
        let live = vec![vm("a", 2, "0-1", None)];
        assert_eq!(
            judged(live.clone(), 0, &[("latency_bound_us", "500")]).err().unwrap(),
            "latency_bound_us: expected `latency_bound_us` and `bound_budget` together, found only `latency_bound_us`"
        );
        assert!(judged(
            live.clone(),
            0,
            &[("latency_bound_us", "none"), ("bound_budget", "10")]
        )
        .err()
        .unwrap()
        .starts_with(
            "latency_bound_us: expected no `bound_budget` beside `latency_bound_us=none`"
        ));
        // The config's ranges, the VM's budget split over its 2 vCPUs.
        assert!(judged(
            live.clone(),
            0,
            &[("latency_bound_us", "500"), ("bound_budget", "201")]
        )
        .err()
        .unwrap()
        .starts_with("latency_bound_us: bound_budget: expected a bound budget from 1 to 200 % (100 % of a CPU per vCPU, 2 vCPU(s))"));
        assert!(judged(
            live,
            0,
            &[("latency_bound_us", "0"), ("bound_budget", "10")]
        )
        .err()
        .unwrap()
        .contains("expected a latency bound from 1 to 1000000 us, found 0"));
    }
}
