//! What each cell ran, so that `--resume` never mixes cells of two
//! different matrices.
//!
//! A cell's settings are everything that decides how it runs, resolved:
//! the matrix's kernel, host CPUs, time limit and tracing, the policy
//! (runner, policy, mode, dispatch), the layout's VMs (vCPUs, CPUs, class,
//! priority, memory) and, per VM, its workload (kind and resolved
//! parameters) and what it boots (the guest's workload words, or the Linux
//! suite's image and command line). They are flattened to `key = value`
//! lines; their digest (64-bit FNV-1a, hex) identifies them.
//!
//! Each finished cell's settings and digest are appended to
//! `cell-settings.jsonl` beside `results.jsonl` (before the cell's record,
//! so a record never lacks them). On `--resume`, a finished cell whose
//! settings differ from what the matrix gives now refuses the resume
//! (exit 2) naming the cell and the keys that changed: re-running it would
//! mix two matrices in one summary, and dropping its old result silently
//! would lose it. Cells the matrix adds (more repetitions, a new policy)
//! simply run. Finished cells whose settings are not in the file (an output
//! folder of a Pacer older than this file, or the file deleted) cannot be
//! shown to belong to the matrix: the resume is refused too, naming the
//! file.

use super::cells::{vm_boot, vm_workload, Cell, VmBoot};
use super::matrix::Matrix;
use crate::documents::matrix::MatrixView;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// The file beside `results.jsonl`.
pub const FILE: &str = "cell-settings.jsonl";

/// One line of [`FILE`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellSettings {
    pub id: String,
    pub digest: String,
    pub settings: BTreeMap<String, String>,
}

/// Flatten `v` into `prefix.key[i] = value` lines.
fn flatten(prefix: &str, v: &serde_json::Value, out: &mut BTreeMap<String, String>) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, v, out);
            }
        }
        Value::Array(items) => {
            if items.is_empty() {
                out.insert(prefix.to_string(), "[]".into());
            }
            for (i, v) in items.iter().enumerate() {
                flatten(&format!("{prefix}[{i}]"), v, out);
            }
        }
        Value::String(s) => {
            out.insert(prefix.to_string(), s.clone());
        }
        other => {
            out.insert(prefix.to_string(), other.to_string());
        }
    }
}

/// The resolved settings of `cell`.
pub fn of(m: &Matrix, view: &MatrixView, cell: &Cell) -> CellSettings {
    let layout = &view.layouts[cell.layout];
    let mut s = BTreeMap::new();
    s.insert("kernel".into(), m.kernel.display().to_string());
    s.insert("host_cpus".into(), view.host_cpus.clone());
    s.insert("cell_timeout_ns".into(), view.cell_timeout_ns.to_string());
    s.insert("trace".into(), m.trace.to_string());
    let mut policy = serde_json::to_value(&view.policies[cell.policy]).unwrap_or_default();
    if let Some(o) = policy.as_object_mut() {
        o.remove("label");
    }
    flatten("policy", &policy, &mut s);
    for (i, vm) in layout.vms.iter().enumerate() {
        let key = format!("vm.{}", vm.name);
        let mut spec = serde_json::to_value(vm).unwrap_or_default();
        if let Some(o) = spec.as_object_mut() {
            o.remove("name");
            o.remove("workload");
        }
        flatten(&key, &spec, &mut s);
        let w = vm_workload(m, cell, i);
        let wi = m.workloads.iter().position(|x| std::ptr::eq(x, w));
        if let Some(wv) = wi.map(|wi| &view.workloads[wi]) {
            let mut wv = serde_json::to_value(wv).unwrap_or_default();
            if let Some(o) = wv.as_object_mut() {
                o.remove("name");
            }
            flatten(&format!("{key}.workload"), &wv, &mut s);
        }
        match vm_boot(m, cell, i) {
            VmBoot::Bench { args, .. } => {
                s.insert(format!("{key}.boot.args"), args);
            }
            VmBoot::Linux { suite, cmdline } => {
                s.insert(format!("{key}.boot.suite"), format!("{suite:?}"));
                s.insert(format!("{key}.boot.cmdline"), cmdline);
            }
        }
    }
    CellSettings {
        id: cell.id(m),
        digest: digest(&s),
        settings: s,
    }
}

/// 64-bit FNV-1a of the `key = value` lines, in hex.
pub fn digest(settings: &BTreeMap<String, String>) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (k, v) in settings {
        for b in k.bytes().chain(*b" = ").chain(v.bytes()).chain(*b"\n") {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// The keys whose values differ, as `key: old -> new` (at most `max`,
/// then how many more).
pub fn differences(
    old: &BTreeMap<String, String>,
    new: &BTreeMap<String, String>,
    max: usize,
) -> String {
    let none = "(none)".to_string();
    let mut keys: Vec<&String> = old.keys().chain(new.keys()).collect();
    keys.sort();
    keys.dedup();
    let diffs: Vec<String> = keys
        .into_iter()
        .filter(|k| old.get(*k) != new.get(*k))
        .map(|k| {
            format!(
                "{k}: {} -> {}",
                old.get(k).unwrap_or(&none),
                new.get(k).unwrap_or(&none)
            )
        })
        .collect();
    let mut text = diffs
        .iter()
        .take(max)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if diffs.len() > max {
        text += &format!(" and {} more", diffs.len() - max);
    }
    text
}

/// The settings recorded in `dir`, by cell id; None if the file is missing.
pub fn read(dir: &Path) -> Result<Option<BTreeMap<String, CellSettings>>, String> {
    let path = dir.join(FILE);
    let bytes = match vmm::input::read_regular_file(
        &path,
        vmm::input::MAX_RESULTS_BYTES,
        "a cell-settings.jsonl",
    ) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("--resume: cannot read {}: {e}", path.display())),
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut out = BTreeMap::new();
    // A torn last line (a kill mid-write) belongs to a cell never recorded.
    let whole = text.rfind('\n').map_or("", |i| &text[..=i]);
    for (i, line) in whole.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let s: CellSettings = serde_json::from_str(line).map_err(|e| {
            format!(
                "{}:{}: not a cell's settings ({}); the file was changed after pacer bench wrote it: restore it, or run into another --out-dir",
                path.display(),
                i + 1,
                if e.is_data() { "not the shape of one" } else { "not a line of JSON" }
            )
        })?;
        out.insert(s.id.clone(), s);
    }
    Ok(Some(out))
}

/// Append `s` to `dir`'s [`FILE`] (one write, flushed to disk).
pub fn append(dir: &Path, s: &CellSettings) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(s).map_err(std::io::Error::other)?;
    line.push(b'\n');
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(FILE))?;
    let len = f.metadata()?.len();
    if let Err(e) = f.write_all(&line).and_then(|()| f.sync_data()) {
        let _ = f.set_len(len);
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every VM's shares and co-scheduling are settings of its cells: two
    /// layouts that differ only there never share a digest, and `--resume`
    /// tells them apart.
    #[test]
    fn a_vms_shares_and_coscheduling_are_in_its_cells_settings() {
        use super::super::matrix::tests::{with_prio_vms, Fixture};
        let fx = Fixture::new("settings-shares");
        let digest_of = |vm: &str| {
            let m = fx.parse(&with_prio_vms(vm)).unwrap();
            let view = MatrixView::of(&m);
            let li = m.layouts.iter().position(|l| l.name == "prio").unwrap();
            let cell = super::super::cells::expand(&m)
                .into_iter()
                .find(|c| c.layout == li)
                .unwrap();
            of(&m, &view, &cell)
        };
        let relaxed =
            digest_of("{ name = \"s\", vcpus = 2, coschedule = \"relaxed\", weight = 300 }");
        assert_eq!(
            relaxed.settings.get("vm.s.coschedule").map(String::as_str),
            Some("relaxed")
        );
        assert_eq!(
            relaxed
                .settings
                .get("vm.s.shares.weight")
                .map(String::as_str),
            Some("300")
        );
        // Unset, a 2-vCPU VM on 2 CPUs is relaxed: the same cell.
        let unset = digest_of("{ name = \"s\", vcpus = 2, weight = 300 }");
        assert_eq!(relaxed.digest, unset.digest);
        let off = digest_of("{ name = \"s\", vcpus = 2, coschedule = \"off\", weight = 300 }");
        assert_ne!(relaxed.digest, off.digest);
        let light = digest_of("{ name = \"s\", vcpus = 2, coschedule = \"off\" }");
        assert_ne!(off.digest, light.digest);
    }

    #[test]
    fn differences_name_the_keys() {
        let a: BTreeMap<String, String> = [("x", "1"), ("y", "2"), ("z", "3")]
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        let mut b = a.clone();
        b.insert("y".into(), "5".into());
        b.remove("z");
        assert_eq!(differences(&a, &b, 5), "y: 2 -> 5, z: 3 -> (none)");
        assert_eq!(differences(&a, &b, 1), "y: 2 -> 5 and 1 more");
        assert_ne!(digest(&a), digest(&b));
        assert_eq!(digest(&a), digest(&a.clone()));
    }
}
