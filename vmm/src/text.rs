//! How a value from a user (a file name, a config value, a guest's
//! string) is shown inside a one-line message: escaped so that it stays on
//! one line, quoted and shortened.

/// Longest value excerpt quoted in an error.
pub(crate) const MAX_EXCERPT: usize = 48;

/// `s` with every control character escaped (`\n`, `\t`, `\u{7}`) so that it
/// prints on one line; printable text (any script) is kept as is.
pub fn one_line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_control() || c == '\u{2028}' || c == '\u{2029}' {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    out
}

/// `s` as a quoted, escaped, shortened excerpt: `"abc"`.
pub fn quoted(s: &str) -> String {
    let mut short: String = s.chars().take(MAX_EXCERPT).collect();
    if short.len() < s.len() {
        short.push('…');
    }
    format!("\"{}\"", one_line(&short).replace('"', "\\\""))
}
