//! The second stage's working state: the file's text and spans, and the
//! diagnostics found so far. Every check reports through
//! [`Checker::err`], so every error has a position and a field path.

use super::diagnostic::{line_col, Diagnostic};
use super::raw::RawCpus;
use crate::config::errors::{readable, SpanIndex};
use std::ops::Range;
use std::path::{Path, PathBuf};
use toml::Spanned;
use vcpu_engine::host_cpus::HostCpuSet;

pub(super) struct Checker<'a> {
    pub(super) text: &'a str,
    /// Spans of every key and value, for fields serde gives no span for.
    pub(super) index: SpanIndex,
    pub(super) diags: Vec<Diagnostic>,
}

impl Checker<'_> {
    pub(super) fn err(
        &mut self,
        span: Range<usize>,
        field: impl Into<String>,
        message: impl ToString,
    ) {
        let (line, column) = line_col(self.text, span.start);
        self.diags.push(Diagnostic {
            line,
            column,
            field: readable(&field.into()),
            message: readable(&message.to_string()),
        });
    }

    pub(super) fn cpus(&mut self, raw: &Spanned<RawCpus>, field: &str) -> Option<HostCpuSet> {
        let parsed = match raw.get_ref() {
            RawCpus::List(s) => crate::config::sched_rules::cpu_list(s),
            RawCpus::Ids(ids) => crate::config::sched_rules::cpu_ids(ids),
        };
        parsed.map_err(|why| self.err(raw.span(), field, why)).ok()
    }

    pub(super) fn path(
        &mut self,
        base: &Path,
        raw: &Spanned<String>,
        field: &str,
    ) -> Option<PathBuf> {
        let p = Path::new(raw.get_ref());
        let p = if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        };
        if let Err(why) = crate::config::path_rules::shape(&p) {
            self.err(raw.span(), field, why);
            return None;
        }
        match std::fs::metadata(&p) {
            Ok(m) if m.is_file() => match crate::config::path_rules::input_file(&p) {
                Ok(()) => Some(p),
                Err(why) => {
                    self.err(raw.span(), field, why);
                    None
                }
            },
            Ok(_) => {
                self.err(
                    raw.span(),
                    field,
                    format!("expected a regular file, found {}", p.display()),
                );
                None
            }
            Err(e) => {
                self.err(
                    raw.span(),
                    field,
                    format!(
                        "expected a readable file, found {}: {e}{}",
                        p.display(),
                        build_hint(&p, &e)
                    ),
                );
                None
            }
        }
    }
}

/// For an image that is missing from where the guests' build scripts put
/// it (`guests/out/`), the command that builds it; else nothing.
pub(super) fn build_hint(path: &Path, e: &std::io::Error) -> &'static str {
    if e.kind() != std::io::ErrorKind::NotFound {
        return "";
    }
    let dir = |p: Option<&Path>| {
        p.and_then(Path::file_name)
            .and_then(|n| n.to_str())
            .map(str::to_string)
    };
    let parent = path.parent();
    let grandparent = parent.and_then(Path::parent);
    match (
        dir(grandparent).as_deref(),
        dir(parent).as_deref(),
        path.file_name().and_then(|n| n.to_str()),
    ) {
        (Some("guests"), Some("out"), Some("bench-guest.elf")) => {
            " (the bench guest is not built yet: run `bash guests/build.sh`)"
        }
        (Some("out"), Some("linux"), Some(_))
            if dir(grandparent.and_then(Path::parent)).as_deref() == Some("guests") =>
        {
            " (the Linux guest image is not built yet: run `bash guests/linux/build.sh`)"
        }
        _ => "",
    }
}
