//! The house's arrows, checked from the sources of the whole workspace:
//!
//! - the crates depend on each other only as the block `layering` of
//!   ARCHITECTURE.md says (`A -> B, C`: the path dependencies of A are B
//!   and C, no more);
//! - inside a crate, the modules its `never` lines name do not import each
//!   other that way (`vmm::vm -> vmm::config`);
//! - inside every crate, no import cycle holds more than [`MAX_CYCLE`]
//!   modules (a module is a file: `src/a/b.rs` is `a::b`, `src/a/mod.rs`
//!   is `a`).
//!
//! An import is a path written in the code (comments and the trailing
//! `#[cfg(test)] mod tests` left out) that starts at `crate::` or
//! `super::`, grouped imports (`use crate::{a, b::c}`) included, and names
//! a module of the crate: it counts for the longest module path it starts
//! with. A module declaring its children (`mod x;`, `pub use x::Y`) is not
//! an import of them.
//!
//! `cargo test -p pacer --test layering -- --nocapture` prints, per
//! crate, its modules, arrows, cycles and the largest cycle; with
//! `LAYERING_ROOT=DIR` it reads another checkout instead and only prints
//! (how the figures before a change are measured:
//! docs/measurements/layering-split.md).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The most modules one import cycle may hold.
const MAX_CYCLE: usize = 3;

/// The crates of the workspace whose modules are checked.
const CRATES: &[&str] = &["vcpu_sched", "devices", "vcpu_engine", "vmm", "pacer"];

fn root() -> PathBuf {
    match std::env::var_os("LAYERING_ROOT") {
        Some(r) => PathBuf::from(r),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join(".."),
    }
}

/// `text` with `//` comments blanked and a trailing `#[cfg(test)] mod
/// tests` cut off.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Every path that `crate::` or `super::` starts in `code`, as segments
/// relative to the crate root; `me` is the module the code is in.
fn paths(code: &str, me: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for anchor in ["crate::", "super::"] {
        for (at, _) in code.match_indices(anchor) {
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':' || c == '$')
            {
                continue;
            }
            let mut base: Vec<String> = if anchor == "crate::" {
                Vec::new()
            } else {
                me[..me.len().saturating_sub(1)].to_vec()
            };
            let mut rest = &code[at + anchor.len()..];
            // More `super::`s climb further.
            while let Some(r) = rest.strip_prefix("super::") {
                base.pop();
                rest = r;
            }
            loop {
                let id = ident(rest);
                if id.is_empty() {
                    break;
                }
                base.push(id.to_string());
                match rest[id.len()..].strip_prefix("::") {
                    Some(r) if !r.starts_with('{') => rest = r,
                    Some(r) => {
                        rest = r;
                        break;
                    }
                    None => {
                        rest = "";
                        break;
                    }
                }
            }
            if let Some(group) = rest.strip_prefix('{') {
                let mut depth = 0usize;
                let mut item = String::new();
                let mut items = Vec::new();
                for c in group.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => {
                            items.push(std::mem::take(&mut item));
                            break;
                        }
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            items.push(std::mem::take(&mut item));
                            continue;
                        }
                        _ => {}
                    }
                    item.push(c);
                }
                for it in items {
                    let mut p = base.clone();
                    for seg in it.trim().split("::") {
                        let id = ident(seg.trim());
                        if id.is_empty() || id == "self" {
                            break;
                        }
                        p.push(id.to_string());
                    }
                    out.push(p);
                }
            } else {
                out.push(base);
            }
        }
    }
    out
}

/// A crate's modules (path segments -> file) and its import arrows.
struct Graph {
    modules: BTreeMap<Vec<String>, PathBuf>,
    arrows: BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut modules = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(src).unwrap().with_extension("");
        let mut segs: Vec<String> = rel
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if segs.last().is_some_and(|s| s == "mod") {
            segs.pop();
        }
        if segs == ["lib"] || segs == ["main"] {
            continue;
        }
        modules.insert(segs, f.clone());
    }
    let mut arrows: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (m, f) in &modules {
        let code = code_of(&std::fs::read_to_string(f).unwrap());
        for p in paths(&code, m) {
            // The longest module the path starts with.
            let target = (1..=p.len())
                .rev()
                .map(|n| p[..n].to_vec())
                .find(|t| modules.contains_key(t));
            if let Some(t) = target.filter(|t| t != m) {
                arrows.entry(m.clone()).or_default().insert(t);
            }
        }
    }
    Graph { modules, arrows }
}

/// The strongly connected components of more than one module (Tarjan).
fn cycles(g: &Graph) -> Vec<Vec<Vec<String>>> {
    struct T<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a Vec<String>, usize>,
        low: BTreeMap<&'a Vec<String>, usize>,
        stack: Vec<&'a Vec<String>>,
        on: BTreeSet<&'a Vec<String>>,
        out: Vec<Vec<Vec<String>>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a Vec<String>) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        if let Some(ws) = t.g.arrows.get(v) {
            for w in ws {
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(w);
                comp.push(w.clone());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for m in g.modules.keys() {
        if !t.index.contains_key(m) {
            visit(&mut t, m);
        }
    }
    t.out.sort_by_key(|c| std::cmp::Reverse(c.len()));
    t.out
}

fn name(m: &[String]) -> String {
    m.join("::")
}

/// The `layering` block of ARCHITECTURE.md: crate arrows (`A -> B, C`)
/// and forbidden module arrows (`never: krate::a -> krate::b`).
struct Intended {
    crates: BTreeMap<String, BTreeSet<String>>,
    never: Vec<(String, String)>,
}

fn intended(text: &str) -> Intended {
    let start = text
        .find("```text layering\n")
        .expect("ARCHITECTURE.md has a ```text layering block");
    let body = &text[start + "```text layering\n".len()..];
    let body = &body[..body.find("```").expect("the layering block ends")];
    let mut crates = BTreeMap::new();
    let mut never = Vec::new();
    for line in body.lines() {
        let line = line.split('#').next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        let (rule, line) = match line.strip_prefix("never:") {
            Some(rest) => (true, rest.trim()),
            None => (false, line),
        };
        let (from, to) = line
            .split_once("->")
            .unwrap_or_else(|| panic!("not an arrow: {line}"));
        let (from, to) = (from.trim().to_string(), to.trim());
        if rule {
            never.push((from, to.to_string()));
        } else {
            let deps = to
                .split(',')
                .map(|d| d.trim().to_string())
                .filter(|d| !d.is_empty() && d != "nothing")
                .collect();
            crates.insert(from, deps);
        }
    }
    Intended { crates, never }
}

/// A crate's path dependencies (`[dependencies]` only).
fn path_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut on = false;
    for line in manifest.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            on = l == "[dependencies]";
        } else if on && l.contains("path =") {
            out.insert(ident(l).to_string());
        }
    }
    out
}

#[test]
fn the_scanner_reads_every_kind_of_import() {
    let me = ["bench".to_string(), "run".to_string()];
    let code = code_of(
        "use crate::config::{self, Overrides}; // crate::cli in a comment\n\
         use super::{cells, store::Store, metrics::{self, Sample}};\n\
         fn f() -> crate::output::Out { super::super::cli::x() }\n\
         const S: &str = \"$crate::no\";\n\
         #[cfg(test)]\nmod tests { use crate::trace; }\n",
    );
    let got: Vec<String> = paths(&code, &me).iter().map(|p| name(p)).collect();
    assert_eq!(
        got,
        [
            "config",
            "config::Overrides",
            "output::Out",
            "bench::cells",
            "bench::store::Store",
            "bench::metrics",
            "cli::x",
        ]
    );
}

#[test]
fn crates_modules_and_cycles_are_as_intended() {
    let root = root();
    // Another checkout is measured, not judged.
    let judge = std::env::var_os("LAYERING_ROOT").is_none();
    let arch = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let want = if judge {
        intended(&arch)
    } else {
        Intended {
            crates: BTreeMap::new(),
            never: Vec::new(),
        }
    };
    let mut bad = Vec::new();
    // Crate arrows.
    for (krate, deps) in &want.crates {
        let manifest = std::fs::read_to_string(root.join(krate).join("Cargo.toml"))
            .unwrap_or_else(|e| panic!("{krate}/Cargo.toml: {e}"));
        let have = path_dependencies(&manifest);
        if &have != deps {
            bad.push(format!(
                "crate {krate} depends on {have:?}; ARCHITECTURE.md says {deps:?}"
            ));
        }
    }
    println!("crate          modules  arrows  cycles  largest");
    for krate in CRATES {
        let src = root.join(krate).join("src");
        if !judge && !src.exists() {
            println!("{krate:<14} (no such crate)");
            continue;
        }
        let g = graph(&src);
        assert!(
            g.modules.len() >= 5,
            "{krate}: too few modules to mean anything"
        );
        let cs = cycles(&g);
        let arrows: usize = g.arrows.values().map(BTreeSet::len).sum();
        let largest = cs.first().map_or(0, Vec::len);
        println!(
            "{krate:<14} {:>7}  {arrows:>6}  {:>6}  {largest:>7}",
            g.modules.len(),
            cs.len()
        );
        // The same crate with each top-level module (a file or a folder)
        // as one: how far a folder's imports reach back.
        let mut top = Graph {
            modules: g
                .modules
                .iter()
                .map(|(m, f)| (m[..1].to_vec(), f.clone()))
                .collect(),
            arrows: BTreeMap::new(),
        };
        for (m, ts) in &g.arrows {
            for t in ts.iter().filter(|t| t[0] != m[0]) {
                top.arrows
                    .entry(m[..1].to_vec())
                    .or_default()
                    .insert(t[..1].to_vec());
            }
        }
        let top_cycles = cycles(&top);
        println!(
            "  top-level modules {}, arrows {}, cycles {}, largest {}",
            top.modules.len(),
            top.arrows.values().map(BTreeSet::len).sum::<usize>(),
            top_cycles.len(),
            top_cycles.first().map_or(0, Vec::len)
        );
        for c in &cs {
            let names: Vec<String> = c.iter().map(|m| name(m)).collect();
            println!("  cycle of {}: {}", c.len(), names.join(", "));
            if c.len() > MAX_CYCLE {
                bad.push(format!(
                    "{krate}: an import cycle of {} modules (at most {MAX_CYCLE}): {}",
                    c.len(),
                    names.join(", ")
                ));
            }
        }
        // Module arrows that must never be.
        for (from, to) in &want.never {
            let (Some((fk, fm)), Some((tk, tm))) = (from.split_once("::"), to.split_once("::"))
            else {
                panic!("never: {from} -> {to}: write krate::module -> krate::module");
            };
            if fk != *krate {
                continue;
            }
            assert_eq!(fk, tk, "never: {from} -> {to}: one crate");
            let under = |m: &Vec<String>, prefix: &str| {
                let n = name(m);
                n == prefix || n.starts_with(&format!("{prefix}::"))
            };
            assert!(
                g.modules.keys().any(|m| under(m, fm)) && g.modules.keys().any(|m| under(m, tm)),
                "never: {from} -> {to}: no such module in {krate}"
            );
            for (m, ts) in &g.arrows {
                if !under(m, fm) {
                    continue;
                }
                for t in ts.iter().filter(|t| under(t, tm)) {
                    bad.push(format!(
                        "{krate}: {} imports {} (ARCHITECTURE.md: never {from} -> {to})",
                        name(m),
                        name(t)
                    ));
                }
            }
        }
    }
    if judge {
        assert!(bad.is_empty(), "{}", bad.join("\n"));
    }
}
