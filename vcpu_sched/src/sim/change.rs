//! Changes made while a simulation runs, through the scheduler's runtime
//! API: a host CPU out of service or back (`set_cpu_enabled`), the mode
//! (`set_mode`), and a group's affinity (`set_affinity`), class and
//! priority (`set_class`, `set_priority`), each at a moment of simulated
//! time. In a workload file:
//!
//! ```toml
//! [[change]]
//! at_us = 20000
//! cpu = 3
//! enabled = false           # CPU 3 out of service at 20 ms
//!
//! [[change]]
//! at_us = 30000
//! mode = "power-saving"
//!
//! [[change]]
//! at_us = 40000
//! group = "hog"
//! affinity = "0-1"          # every vCPU of the group
//!
//! [[change]]
//! at_us = 50000
//! group = "hog"
//! class = "realtime"        # with class: set_class; without: set_priority
//! priority = 100
//! ```

use super::workload::SimError;
use crate::{CpuSet, Mode, SchedClass};
use serde::{Deserialize, Serialize};

/// One change (exactly one kind per entry; see the module documentation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChangeSpec {
    /// When, in microseconds of simulated time.
    pub at_us: u64,
    /// A host CPU to take out of service or put back (with `enabled`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// The mode to switch to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
    /// The group whose vCPUs change (with `affinity`, or `priority` and
    /// optionally `class`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<CpuSet>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<SchedClass>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
}

/// What a [`ChangeSpec`] does.
#[derive(Debug, Clone, PartialEq)]
pub enum Change<'a> {
    CpuEnabled {
        cpu: u32,
        enabled: bool,
    },
    Mode(Mode),
    Affinity {
        group: &'a str,
        affinity: &'a CpuSet,
    },
    Class {
        group: &'a str,
        class: SchedClass,
        priority: u8,
    },
    Priority {
        group: &'a str,
        priority: u8,
    },
}

impl ChangeSpec {
    fn at(at_us: u64) -> ChangeSpec {
        ChangeSpec {
            at_us,
            cpu: None,
            enabled: None,
            mode: None,
            group: None,
            affinity: None,
            class: None,
            priority: None,
        }
    }

    /// CPU `cpu` out of service (`enabled` false) or back, at `at_us`.
    pub fn cpu_enabled(at_us: u64, cpu: u32, enabled: bool) -> ChangeSpec {
        ChangeSpec {
            cpu: Some(cpu),
            enabled: Some(enabled),
            ..ChangeSpec::at(at_us)
        }
    }

    /// Switch to `mode` at `at_us`.
    pub fn mode(at_us: u64, mode: Mode) -> ChangeSpec {
        ChangeSpec {
            mode: Some(mode),
            ..ChangeSpec::at(at_us)
        }
    }

    /// New affinity for every vCPU of `group` at `at_us`.
    pub fn affinity(at_us: u64, group: &str, affinity: CpuSet) -> ChangeSpec {
        ChangeSpec {
            group: Some(group.to_string()),
            affinity: Some(affinity),
            ..ChangeSpec::at(at_us)
        }
    }

    /// New class and priority for every vCPU of `group` at `at_us`.
    pub fn class(at_us: u64, group: &str, class: SchedClass, priority: u8) -> ChangeSpec {
        ChangeSpec {
            group: Some(group.to_string()),
            class: Some(class),
            priority: Some(priority),
            ..ChangeSpec::at(at_us)
        }
    }

    /// What this entry does, or why it does not say one thing.
    pub fn kind(&self) -> Result<Change<'_>, SimError> {
        let bad = |m: &str| {
            Err(SimError::Invalid(format!(
                "change at {} us: {m}",
                self.at_us
            )))
        };
        match self {
            ChangeSpec {
                cpu: Some(cpu),
                enabled: Some(enabled),
                mode: None,
                group: None,
                affinity: None,
                class: None,
                priority: None,
                ..
            } => Ok(Change::CpuEnabled {
                cpu: *cpu,
                enabled: *enabled,
            }),
            ChangeSpec {
                cpu: None,
                enabled: None,
                mode: Some(mode),
                group: None,
                affinity: None,
                class: None,
                priority: None,
                ..
            } => Ok(Change::Mode(*mode)),
            ChangeSpec {
                cpu: None,
                enabled: None,
                mode: None,
                group: Some(group),
                affinity,
                class,
                priority,
                ..
            } => match (affinity, class, priority) {
                (Some(affinity), None, None) if affinity.is_empty() => bad("empty affinity"),
                (Some(affinity), None, None) => Ok(Change::Affinity { group, affinity }),
                (None, Some(class), Some(priority)) => Ok(Change::Class {
                    group,
                    class: *class,
                    priority: *priority,
                }),
                (None, None, Some(priority)) => Ok(Change::Priority {
                    group,
                    priority: *priority,
                }),
                _ => bad("a group change needs affinity, or priority (and maybe class)"),
            },
            _ => bad("needs exactly one of: cpu + enabled, mode, group + ..."),
        }
    }
}
