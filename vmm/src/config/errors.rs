//! Config errors in the user's words.
//!
//! serde and the TOML parser report a byte span and a message in their own
//! terms (`data did not match any variant of untagged enum RawCpus`,
//! `expected i64`, `$__toml_private_datetime`), often without the field.
//! This module turns such an error into one [`Diagnostic`]
//! `line:col: field.path: expected X, found Y`:
//!
//! - the field path comes from the document itself: the file is parsed a
//!   second time into toml's spanned document (`DeTable`, which recovers
//!   from syntax errors) and flattened into [`SpanIndex`], every key and
//!   value with its dotted path (`vm[1].workload.duration_ms`) and spans;
//!   the innermost entry whose span holds the error position names it;
//! - "expected" comes from [`expectation`], one sentence per config field,
//!   so the wording does not depend on how serde happened to fail;
//! - "found" describes the value at that position (`the integer 0`, `a
//!   date-time`), escaped by [`one_line`] so that no error spans two lines.
//!
//! Only the first syntax error is reported: later ones are usually its
//! echoes (an unterminated string swallows the next line).

use crate::config::Diagnostic;
use crate::text::{one_line, quoted, MAX_EXCERPT};
use std::ops::Range;
use toml::de::{DeTable, DeValue};

/// Longest word of a message kept whole; longer ones (a value or a path
/// the file repeats) are cut.
const MAX_WORD: usize = 96;
/// Longest message kept whole.
const MAX_MESSAGE: usize = 1000;

/// `message` cut to a readable length: every word longer than
/// [`MAX_WORD`] characters keeps its start and says how long it was, and
/// the whole is at most about [`MAX_MESSAGE`] characters. An error about a
/// 200 KB value names the value, it does not repeat it.
pub fn readable(message: &str) -> String {
    if message.chars().count() <= MAX_WORD {
        return message.to_string();
    }
    let mut out = String::with_capacity(message.len().min(MAX_MESSAGE + 64));
    for (i, word) in message.split(' ').enumerate() {
        if i > 0 {
            out.push(' ');
        }
        let n = word.chars().count();
        if n > MAX_WORD {
            // A word's trailing punctuation (`path:`) stays.
            let tail = word
                .chars()
                .last()
                .filter(|c| ":;,.)\"".contains(*c))
                .map(String::from)
                .unwrap_or_default();
            out.extend(word.chars().take(MAX_EXCERPT));
            out.push_str(&format!("…({n} characters){tail}"));
        } else {
            out.push_str(word);
        }
        if out.chars().count() > MAX_MESSAGE {
            let cut: String = out.chars().take(MAX_MESSAGE).collect();
            return format!("{cut}…({} characters)", message.chars().count());
        }
    }
    out
}

/// A value, the way an error message names it.
pub fn describe(v: &DeValue<'_>) -> String {
    match v {
        DeValue::String(s) => format!("the string {}", quoted(s)),
        DeValue::Integer(i) => format!("the integer {}", one_line(i.as_str())),
        DeValue::Float(f) => format!("the number {}", one_line(f.as_str())),
        DeValue::Boolean(b) => format!("`{b}`"),
        DeValue::Datetime(d) => format!("the date-time {d}"),
        DeValue::Array(_) => "an array".into(),
        DeValue::Table(_) => "a table".into(),
    }
}

/// What a config field accepts, by its path pattern (array indices as `[]`).
pub fn expectation(pattern: &str) -> Option<&'static str> {
    Some(match pattern {
        "host" => "a [host] table",
        "vm" => "[[vm]] tables (one per VM)",
        "vm[]" => "a [[vm]] table",
        "host.cpus" | "vm[].cpus" => {
            "a CPU list in quotes such as \"0-3,8\", or an array of CPU numbers such as [0, 1]"
        }
        "host.cpus[]" | "vm[].cpus[]" => "a CPU number (an integer from 0)",
        "host.policy" => "one of \"haiku\", \"global-rr\", \"pinned\", \"eevdf\", \"host\"",
        "host.mode" => "one of \"low-latency\", \"power-saving\"",
        "host.smt_isolation" => "true or false",
        "host.dispatch" => "one of \"threads\", \"workers\", \"kvm-irqchip\", \"ranked\"",
        "host.kvm_poll_us" => "an integer number of microseconds from 10 to 10000",
        "host.halt_poll_us" => "an integer number of microseconds from 0 to 10000",
        "host.tunables" => "a table of scheduler tunables such as { bursty_load = 375 }",
        "host.log_dir" | "vm[].kernel" | "vm[].initrd" => "a path in quotes",
        "vm[].name" => "a name in quotes (1-64 characters of A-Z a-z 0-9 _ -)",
        "vm[].vcpus" => "an integer from 1 to 254",
        "vm[].memory_mib" => "an integer number of MiB from 2 to 1048576",
        "vm[].cmdline" => "a command line in quotes, such as \"debug=1 foo=bar\"",
        "vm[].class" => "one of \"timeshare\", \"realtime\"",
        "vm[].priority" => "an integer priority (timeshare 1-99, realtime 100-120)",
        "vm[].workload" => {
            "a workload in quotes such as \"cpu duration_ms=500\", or a table such as { name = \"cpu\", duration_ms = 500 }"
        }
        "vm[].workload.name" => "a workload name in quotes such as \"cpu\"",
        "vm[].console" => "one of \"log\", \"stdout\", \"both\"",
        "vm[].timeout_s" => "a number of seconds greater than 0, such as 30 or 2.5",
        _ => return None,
    })
}

/// Fields whose value is a table of fields of their own.
const TABLE_FIELDS: &[&str] = &["host", "vm", "vm[]", "host.tunables", "vm[].workload"];

/// What a kind of file accepts: one sentence per field pattern, and which
/// fields are tables of fields of their own. Host configs and bench
/// matrices each have one, so that serde's errors read the same in both.
#[derive(Clone, Copy)]
pub struct Schema {
    pub expectation: fn(&str) -> Option<&'static str>,
    pub table_fields: &'static [&'static str],
}

/// The host config's schema.
pub const HOST_CONFIG: Schema = Schema {
    expectation,
    table_fields: TABLE_FIELDS,
};

pub use crate::suggest::{hint, near_miss};

/// The names inside backticks of serde's `expected one of `a`, `b``.
fn backticked_names(s: &str) -> Vec<&str> {
    s.split('`').skip(1).step_by(2).collect()
}

/// `vm[3].cpus[0]` -> `vm[].cpus[]`.
pub fn pattern_of(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push('[');
            }
            ']' => {
                in_index = false;
                out.push(']');
            }
            _ if in_index => {}
            _ => out.push(c),
        }
    }
    out
}

/// One key or array element of the document.
#[derive(Debug, Clone)]
pub struct Node {
    /// Dotted path: `vm[1].workload.duration_ms`.
    pub path: String,
    /// The key's span (None for array elements).
    pub key: Option<Range<usize>>,
    /// The value's span (a header table's span is its `[header]`).
    pub value: Range<usize>,
    /// How the value is described in errors.
    pub found: String,
}

/// Every key and value of a config document with its path and spans.
#[derive(Debug, Default)]
pub struct SpanIndex {
    nodes: Vec<Node>,
    /// The document's syntax errors (span, message), in source order.
    syntax: Vec<(Range<usize>, String)>,
}

fn contains(span: &Range<usize>, pos: usize) -> bool {
    span.start <= pos && (pos < span.end || pos == span.start || pos == span.end)
}

impl SpanIndex {
    /// Parse `text` (recovering from syntax errors) and index it.
    pub fn new(text: &str) -> SpanIndex {
        let (doc, errors) = DeTable::parse_recoverable(text);
        let mut index = SpanIndex::default();
        index.walk_table(doc.get_ref(), "");
        let mut syntax: Vec<(Range<usize>, String)> = errors
            .iter()
            .map(|e| (e.span().unwrap_or(0..0), e.message().to_string()))
            .collect();
        syntax.sort_by_key(|(s, _)| (s.start, s.end));
        index.syntax = syntax;
        index
    }

    fn walk_table(&mut self, t: &DeTable<'_>, prefix: &str) {
        for (k, v) in t.iter() {
            let path = if prefix.is_empty() {
                k.get_ref().to_string()
            } else {
                format!("{prefix}.{}", k.get_ref())
            };
            self.nodes.push(Node {
                path: path.clone(),
                key: Some(k.span()),
                value: v.span(),
                found: describe(v.get_ref()),
            });
            self.walk_value(v.get_ref(), &path);
        }
    }

    fn walk_value(&mut self, v: &DeValue<'_>, path: &str) {
        match v {
            DeValue::Table(t) => self.walk_table(t, path),
            DeValue::Array(a) => {
                for (i, e) in a.iter().enumerate() {
                    let p = format!("{path}[{i}]");
                    self.nodes.push(Node {
                        path: p.clone(),
                        key: None,
                        value: e.span(),
                        found: describe(e.get_ref()),
                    });
                    self.walk_value(e.get_ref(), &p);
                }
            }
            _ => {}
        }
    }

    /// The first syntax error of the document, if any.
    pub fn first_syntax_error(&self) -> Option<&(Range<usize>, String)> {
        self.syntax.first()
    }

    /// The innermost key or value at byte `pos` (the narrowest span; the
    /// deeper path on a tie).
    pub fn locate(&self, pos: usize) -> Option<&Node> {
        self.nodes
            .iter()
            .filter_map(|n| {
                let spans = [n.key.clone(), Some(n.value.clone())];
                spans
                    .into_iter()
                    .flatten()
                    .filter(|s| contains(s, pos))
                    .map(|s| s.len())
                    .min()
                    .map(|w| (w, std::cmp::Reverse(n.path.len()), n))
            })
            .min_by_key(|(w, depth, _)| (*w, *depth))
            .map(|(_, _, n)| n)
    }

    /// The node with exactly this path.
    pub fn get(&self, path: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.path == path)
    }
}

/// The table path in force at byte `pos` from the headers above it
/// (`[host]`, `[[vm]]` counted per name), for positions the recovered
/// document does not cover.
fn header_path_at(text: &str, pos: usize) -> String {
    let mut counts: std::collections::HashMap<String, usize> = Default::default();
    let mut current = String::new();
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if offset > pos {
            break;
        }
        let t = line.trim();
        if let Some(name) = t.strip_prefix("[[").and_then(|r| r.split("]]").next()) {
            let name = name.trim().to_string();
            let n = counts.entry(name.clone()).or_insert(0);
            current = format!("{name}[{n}]");
            *n += 1;
        } else if let Some(name) = t.strip_prefix('[').and_then(|r| r.split(']').next()) {
            current = name.trim().to_string();
        }
        offset += line.len();
    }
    current
}

/// The key assigned on the line holding `pos` (`name = ...`), if any.
fn key_on_line(text: &str, pos: usize) -> Option<String> {
    let pos = pos.min(text.len());
    let start = text[..pos].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let line = text[start..].lines().next().unwrap_or("");
    let (key, _) = line.split_once('=')?;
    let key = key.trim();
    let plain = key.replace(['"', '\'', ' '], "");
    (!plain.is_empty()
        && !key.starts_with('[')
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.\"' ".contains(c)))
    .then_some(plain)
}

/// The field a syntax error at `pos` is in: a header line names its table;
/// otherwise the table in force and the key assigned on the line.
fn syntax_field(text: &str, pos: usize) -> String {
    let pos = pos.min(text.len());
    let start = text[..pos].rfind('\n').map(|i| i + 1).unwrap_or(0);
    let line = text[start..].lines().next().unwrap_or("").trim();
    if let Some(h) = line.strip_prefix('[') {
        let name = h
            .trim_start_matches('[')
            .split(']')
            .next()
            .unwrap_or("")
            .trim();
        if !name.is_empty() {
            return name.to_string();
        }
    }
    let table = header_path_at(text, start.saturating_sub(1));
    match (key_on_line(text, pos), table.is_empty()) {
        (Some(k), true) => k,
        (Some(k), false) => format!("{table}.{k}"),
        (None, false) => table,
        (None, true) => "(top level)".into(),
    }
}

/// The text at `span`, or what follows it, as the "found" part of a syntax
/// error.
fn found_at(text: &str, span: &Range<usize>) -> String {
    let start = span.start.min(text.len());
    let end = span.end.clamp(start, text.len());
    let excerpt = if end > start {
        &text[start..end]
    } else {
        text[start..].lines().next().unwrap_or("")
    };
    if excerpt.trim().is_empty() {
        if text[start..].starts_with('\n') || start == text.len() {
            "the end of the line".into()
        } else {
            "a blank".into()
        }
    } else {
        format!(
            "`{}`",
            one_line(&excerpt.chars().take(MAX_EXCERPT).collect::<String>())
        )
    }
}

/// toml's own terms in a syntax error, in plain words.
fn plain_syntax(message: &str) -> String {
    let m = message.replace('\n', " ");
    let (what, expected) = match m.split_once(", expected ") {
        Some((w, e)) => (w.trim().to_string(), Some(e.trim().to_string())),
        None => (m.trim().to_string(), None),
    };
    if what.starts_with("string values must be quoted") || what == "missing value for key" {
        return "expected a value (a number, true or false, a \"quoted string\", an array or a table)".into();
    }
    if what == "duplicate key" {
        return "expected each key once per table (this one is given twice)".into();
    }
    match expected {
        Some(e) => format!("{what}: expected {e}"),
        None => what,
    }
}

/// Translate serde's type names into the user's.
fn plain_type(t: &str) -> String {
    let t = t.trim().trim_end_matches('.');
    match t {
        "i64" | "i32" | "i128" | "isize" => "an integer".into(),
        "u8" => "an integer from 0 to 255".into(),
        "u16" => "an integer from 0 to 65535".into(),
        "u32" => "an integer from 0 to 4294967295".into(),
        "u64" | "usize" => "a non-negative integer".into(),
        "f64" | "f32" => "a number".into(),
        "a boolean" => "true or false".into(),
        "a string" => "a string in quotes".into(),
        "a sequence" => "an array".into(),
        "a map" | "map" => "a table".into(),
        _ if t.starts_with("struct ") => "a table".into(),
        _ if t.starts_with("one of ") || t.contains('`') => {
            format!(
                "one of {}",
                t.trim_start_matches("one of ").replace('`', "\"")
            )
        }
        _ => t.replace('`', "\""),
    }
}

/// serde's message for a value error, when no field expectation is known.
fn plain_semantic(message: &str) -> String {
    let m = message.trim();
    if let Some((_, exp)) = m.split_once(", expected ") {
        return format!("expected {}", plain_type(exp));
    }
    if let Some(rest) = m.strip_prefix("unknown variant ") {
        if let Some((_, exp)) = rest.split_once("expected ") {
            return format!("expected {}", plain_type(exp));
        }
    }
    // An integer past i64 (toml keeps integers as i64).
    if m.contains("value was too large") || m.contains("too large to fit") {
        return format!("expected {}", plain_type("i64"))
            + " from -9223372036854775808 to 9223372036854775807";
    }
    if m.contains("untagged enum") || m.contains("$__toml") {
        return "a value of another kind was expected".into();
    }
    m.replace('`', "\"")
}

fn at(text: &str, pos: usize, field: String, message: String) -> Diagnostic {
    let (line, column) = crate::config::line_col(text, pos);
    let field = if field.is_empty() {
        "(top level)".to_string()
    } else {
        field
    };
    Diagnostic {
        line,
        column,
        field: readable(&one_line(&field)),
        message: readable(&one_line(&message)),
    }
}

/// The diagnostic for a file that is not UTF-8: the line and column of
/// the first bad byte (columns in characters of the valid text before it),
/// the field it is in, and the byte.
pub fn utf8_error(bytes: &[u8], err: &std::str::Utf8Error) -> Diagnostic {
    let valid = err.valid_up_to();
    // The prefix is valid UTF-8 by definition of `valid_up_to`.
    let text = std::str::from_utf8(&bytes[..valid]).unwrap_or_default();
    let bad = &bytes[valid..];
    let len = err
        .error_len()
        .unwrap_or(bad.len())
        .clamp(1, 4)
        .min(bad.len());
    let shown: Vec<String> = bad[..len].iter().map(|b| format!("0x{b:02X}")).collect();
    let what = if len == 1 { "the byte" } else { "the bytes" };
    at(
        text,
        valid,
        syntax_field(text, valid),
        format!(
            "expected UTF-8 text, found {what} {} (byte {} of the file)",
            shown.join(" "),
            valid + 1
        ),
    )
}

/// The diagnostic for an error of `toml::from_str` over `text` (a host
/// config).
pub fn explain(text: &str, err: &toml::de::Error) -> Diagnostic {
    explain_in(&HOST_CONFIG, text, err)
}

/// The diagnostic for an error of `toml::from_str` over `text`, a file of
/// the given schema.
pub fn explain_in(schema: &Schema, text: &str, err: &toml::de::Error) -> Diagnostic {
    let expectation = schema.expectation;
    let index = SpanIndex::new(text);
    if let Some((span, message)) = index.first_syntax_error() {
        // The recovered document is unreliable around a syntax error: name
        // the field from the text (the header in force, the key assigned).
        let field = syntax_field(text, span.start);
        let msg = format!("{}, found {}", plain_syntax(message), found_at(text, span));
        return at(text, span.start, field, msg);
    }
    let span = err.span().unwrap_or(0..0);
    let message = err.message().trim();
    let node = index.locate(span.start);
    let base = node.map(|n| n.path.clone()).unwrap_or_default();
    let join = |name: &str| {
        if base.is_empty() {
            name.to_string()
        } else {
            format!("{base}.{name}")
        }
    };
    let backticked = |m: &str| m.split('`').nth(1).map(str::to_string);

    if let Some(rest) = message.strip_prefix("unknown field ") {
        // The span is the unknown key itself: `base` already names it.
        let name = backticked(rest).unwrap_or_default();
        let field = if base.ends_with(&name) {
            base.clone()
        } else {
            join(&name)
        };
        let names = rest
            .split_once("expected ")
            .map(|(_, e)| backticked_names(e))
            .unwrap_or_default();
        let known = rest
            .split_once("expected ")
            .map(|(_, e)| plain_type(e))
            .unwrap_or_else(|| "no fields here".into());
        let msg = format!(
            "unknown field {}; expected {known}{}",
            quoted(&name),
            hint(&name, names)
        );
        return at(text, span.start, field, msg);
    }
    if let Some(rest) = message.strip_prefix("missing field ") {
        // The span is the table that lacks it.
        let name = backticked(rest).unwrap_or_default();
        let field = join(&name);
        let what = expectation(&pattern_of(&field)).unwrap_or("a value");
        let msg = format!("missing; expected {what}");
        return at(text, span.start, field, msg);
    }
    let Some(mut node) = node else {
        return at(
            text,
            span.start,
            "(top level)".into(),
            plain_semantic(message),
        );
    };
    // Inside a value of a one-value field (`class = { a = 1 }`), the field
    // is at fault, not the key serde tripped over.
    let mut path = node.path.as_str();
    while expectation(&pattern_of(path)).is_none() {
        let Some(cut) = path.rfind(['.', '[']) else {
            break;
        };
        path = &path[..cut];
        let p = pattern_of(path);
        if expectation(&p).is_some() && !schema.table_fields.contains(&p.as_str()) {
            if let Some(parent) = index.get(path) {
                node = parent;
            }
            break;
        }
    }
    let pattern = pattern_of(&node.path);
    let expected = match expectation(&pattern) {
        Some(e) => e.to_string(),
        None => plain_semantic(message)
            .strip_prefix("expected ")
            .map(str::to_string)
            .unwrap_or_else(|| plain_semantic(message)),
    };
    // An enum value that is a near miss of one of its names.
    let near = message
        .strip_prefix("unknown variant ")
        .and_then(|rest| {
            let word = backticked(rest)?;
            let names = rest
                .split_once("expected ")
                .map(|(_, e)| backticked_names(e))?;
            Some(hint(&word, names))
        })
        .unwrap_or_default();
    // A value of a closed set that serde does not know as one (a policy):
    // the names of the expectation's `one of "a", "b"`.
    let near = if near.is_empty() && expected.starts_with("one of ") {
        let names: Vec<&str> = expected.split('"').skip(1).step_by(2).collect();
        node.found
            .strip_prefix("the string \"")
            .and_then(|w| w.strip_suffix('"'))
            .map(|w| hint(w, names))
            .unwrap_or_default()
    } else {
        near
    };
    let msg = format!("expected {expected}, found {}{near}", node.found);
    at(text, span.start, node.path.clone(), msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_escapes_controls_only() {
        assert_eq!(one_line("a\nb\tc\u{7}"), "a\\nb\\tc\\u{7}");
        assert_eq!(one_line("Grüße 東京"), "Grüße 東京");
        assert_eq!(quoted("a\"b"), "\"a\\\"b\"");
        assert!(quoted(&"x".repeat(100)).ends_with("…\""));
    }

    #[test]
    fn locate_finds_innermost_path() {
        let text = "[host]\ncpus = \"0-1\"\n\n[[vm]]\nname = \"a\"\nw = { a = 1, b = [1, 2] }\n[[vm]]\nname = \"b\"\n";
        let ix = SpanIndex::new(text);
        let pos = |s: &str| text.find(s).unwrap();
        assert_eq!(ix.locate(pos("\"0-1\"")).unwrap().path, "host.cpus");
        assert_eq!(ix.locate(pos("b = [")).unwrap().path, "vm[0].w.b");
        assert_eq!(ix.locate(pos("2]")).unwrap().path, "vm[0].w.b[1]");
        assert_eq!(ix.locate(pos("\"b\"")).unwrap().path, "vm[1].name");
        // A header names its table element.
        assert_eq!(
            ix.locate(text.rfind("[[vm]]").unwrap()).unwrap().path,
            "vm[1]"
        );
        assert_eq!(pattern_of("vm[12].cpus[3]"), "vm[].cpus[]");
    }

    #[test]
    fn garbage_keys_and_deep_nesting() {
        let text = "\"= \u{19}x\n";
        let e = toml::from_str::<toml::Table>(text).unwrap_err();
        let d = explain(text, &e);
        assert!(!d.field.is_empty(), "{d:?}");
        // Deeply nested arrays and tables: an error, not a stack overflow.
        for deep in [
            format!("a = {}", "[".repeat(20_000)),
            format!("a = {}", "{ b = ".repeat(20_000)),
        ] {
            let e = toml::from_str::<toml::Table>(&deep).unwrap_err();
            let d = explain(&deep, &e);
            assert!(!d.field.is_empty(), "{d:?}");
        }
    }

    #[test]
    fn utf8_errors_have_line_and_column() {
        let bytes: &[u8] =
            &std::hint::black_box(*b"[host]\ncpus = \"0\"\n[[vm]]\nname = \"\xc3\xa9\xff\"\n");
        let e = std::str::from_utf8(bytes).unwrap_err();
        let d = utf8_error(bytes, &e);
        assert_eq!((d.line, d.column), (4, 10), "{d:?}");
        assert_eq!(d.field, "vm[0].name");
        assert!(
            d.message.contains("the byte 0xFF (byte 36 of the file)"),
            "{d:?}"
        );
        let bytes: &[u8] = &std::hint::black_box([0xfeu8, 0xff]);
        let e = std::str::from_utf8(bytes).unwrap_err();
        let d = utf8_error(bytes, &e);
        assert_eq!((d.line, d.column), (1, 1));
        assert!(!d.field.is_empty());
    }

    #[test]
    fn long_values_are_cut() {
        assert_eq!(readable("expected 1, found 2"), "expected 1, found 2");
        let long = format!(
            "expected a file, found {}: No such file",
            "/x".repeat(100_000)
        );
        let r = readable(&long);
        assert!(r.len() < 200, "{r}");
        assert!(
            r.contains("(200001 characters)") && r.ends_with(": No such file"),
            "{r}"
        );
        let many = "word ".repeat(10_000);
        assert!(readable(&many).chars().count() < MAX_MESSAGE + 40);
    }

    #[test]
    fn near_misses() {
        let known = [
            "name",
            "vcpus",
            "memory_mib",
            "cpus",
            "timeshare",
            "realtime",
        ];
        assert_eq!(near_miss("vcpu", known), Some("vcpus"));
        assert_eq!(near_miss("VCPUS", known), Some("vcpus"));
        assert_eq!(near_miss("memory_mb", known), Some("memory_mib"));
        assert_eq!(near_miss("timeshar", known), Some("timeshare"));
        assert_eq!(near_miss("nmae", known), Some("name"));
        assert_eq!(near_miss("colour", known), None);
        assert_eq!(near_miss("vcpus", ["vcpus"]), None);
        assert_eq!(hint("cpu", known), "; did you mean \"cpus\"?");
        let text = "[[vm]]\nname = \"a\"\nvcpu = 1\n";
        #[derive(serde::Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Vm {
            name: String,
            vcpus: Option<i64>,
        }
        #[derive(serde::Deserialize, Debug)]
        #[allow(dead_code)]
        struct Doc {
            vm: Vec<Vm>,
        }
        let e = toml::from_str::<Doc>(text).unwrap_err();
        let d = explain(text, &e);
        assert_eq!(d.field, "vm[0].vcpu");
        assert!(d.message.ends_with("did you mean \"vcpus\"?"), "{d:?}");
    }

    #[test]
    fn header_and_key_fallbacks() {
        let text = "[host]\nx = 1\n[[vm]]\n[[vm]]\nvcpus = abc\n";
        assert_eq!(header_path_at(text, text.find("abc").unwrap()), "vm[1]");
        assert_eq!(
            key_on_line(text, text.find("abc").unwrap()).as_deref(),
            Some("vcpus")
        );
        assert_eq!(header_path_at(text, 8), "host");
    }
}
