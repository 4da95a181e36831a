//! The config parser: any text as a `pacer` config file. Invariants: a
//! rejected config gives exactly one line per diagnostic, each with a
//! position inside the text and a field path, and none of serde's or
//! toml's internals (unless the text itself holds the word: an excerpt of
//! it may be quoted); an accepted one displays without a panic.

use crate::driver::Target;
use vmm::config::{Config, ConfigError, Diagnostic};

/// Words that must never reach the user.
pub const INTERNALS: &[&str] = &[
    "untagged enum",
    "$__toml",
    "i64",
    "u32",
    "u64",
    "f64",
    "i128",
    "Raw",
    "invalid type:",
    "a sequence",
    "variant of",
];

/// Whether `word` comes from the text itself (an excerpt, or a key as
/// written with its blanks and quotes left out).
pub fn from_the_text(text: &str, word: &str) -> bool {
    let squeezed: String = text
        .chars()
        .filter(|c| !matches!(c, ' ' | '"' | '\''))
        .collect();
    text.contains(word) || squeezed.contains(word)
}

pub struct ConfigTarget {
    files: super::GuestDir,
}

impl ConfigTarget {
    pub fn new() -> ConfigTarget {
        ConfigTarget {
            files: super::GuestDir::new("config", "kernel.elf"),
        }
    }
}

impl Default for ConfigTarget {
    fn default() -> Self {
        Self::new()
    }
}

const SEEDS: &[&str] = &[
    r#"[host]
cpus = "0-1"
policy = "haiku"
mode = "power-saving"
dispatch = "workers"
smt_isolation = true
log_dir = "logs"

[host.tunables]
bursty_load = 300

[[vm]]
name = "a"
vcpus = 2
memory_mib = 64
kernel = "kernel.elf"
cpus = [0, 1]
priority = 20
class = "timeshare"
workload = { name = "burst", period_us = 1000, run_us = 300, duration_ms = 500 }
console = "both"
timeout_s = 2.5

[[vm]]
name = "b-2"
vcpus = 3
memory_mib = 16
kernel = "kernel.elf"
cmdline = "debug=1"
workload = "mixed mixed=cpu,sleep,spinlock interval_us=100 cs_ns=5"
"#,
    "[[vm]]\nname=\"x\"\nvcpus=1\nmemory_mib=16\nkernel=\"kernel.elf\"\nworkload=\"cpu duration_ms=5\"\n",
    "[host]\npolicy = \"host\"\n[[vm]]\nname = 'q'\nvcpus = 0x10\nmemory_mib = 1_024\nkernel = \"kernel.elf\"\ninitrd = \"kernel.elf\"\nclass = \"realtime\"\n",
];

impl Target for ConfigTarget {
    fn name(&self) -> &'static str {
        "config"
    }

    fn seeds(&self) -> Vec<Vec<u8>> {
        SEEDS.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    fn run(&mut self, data: &[u8]) -> Result<(), String> {
        let text = String::from_utf8_lossy(data);
        let path = self.files.dir.join("pacer.toml");
        match Config::parse(&text, &path, &self.files.host) {
            Ok(c) => {
                let _ = c.to_string();
                Ok(())
            }
            Err(ConfigError::Invalid { diagnostics, .. }) => {
                let shown = ConfigError::Invalid {
                    path: path.clone(),
                    diagnostics: diagnostics.clone(),
                }
                .to_string();
                rejection_is_readable(&text, &shown, &diagnostics, None)
            }
            Err(e) => Err(format!("unexpected error kind: {e}")),
        }
    }
}

/// The invariants of a rejected config or matrix (`shown` is its error as
/// printed): one line per diagnostic, each with a position inside the
/// text and a field path, a message of at most `max_message` characters
/// when given, and none of the `INTERNALS` unless the text holds them.
pub fn rejection_is_readable(
    text: &str,
    shown: &str,
    diagnostics: &[Diagnostic],
    max_message: Option<usize>,
) -> Result<(), String> {
    let lines = shown.lines().count();
    if lines != diagnostics.len() {
        return Err(format!(
            "{} diagnostics shown on {lines} lines: {shown:?}",
            diagnostics.len()
        ));
    }
    let max_line = text.split('\n').count();
    for d in diagnostics {
        if d.line == 0 || d.line > max_line || d.column == 0 {
            return Err(format!(
                "position {}:{} outside the text: {d:?}",
                d.line, d.column
            ));
        }
        if d.field.trim().is_empty() {
            return Err(format!("no field path: {d:?}"));
        }
        if max_message.is_some_and(|max| d.message.chars().count() > max) {
            return Err(format!("a message of {} characters", d.message.len()));
        }
    }
    if let Some(w) = INTERNALS
        .iter()
        .find(|w| shown.contains(*w) && !from_the_text(text, w))
    {
        return Err(format!("internal word {w:?} in {shown:?}"));
    }
    Ok(())
}
