//! Result lines of the suite, read out of whatever text carries them: a
//! guest's serial console log (kernel messages, prefixes, `\r`, lines cut
//! or interleaved by other output) or the host run's output.
//!
//! Line format (written by guests/linux/suite/runner.c and init):
//! ```text
//! UB begin suite=pacer-ubench-style version=1 cpus=2 copies=1 passes=10,3 seconds=default tests=a,b
//! UB test=dhry2reg copies=1 pass=3 score=123456.7 unit=lps seconds=10.000 count=1234567
//! UB error test=execl copies=1 pass=2 msg=worker-failed
//! UB end copies=1 status=ok errors=0 seconds=1234.5
//! UB user begin / UB user end status=0      (frame the user command's output)
//! UB done end=poweroff                      (the guest's init is through)
//! ```
//! A line counts only if `UB ` starts it or follows a non-alphanumeric
//! character (so `[  3.1] UB ...` and `vm0| UB ...` work), every field
//! after the kind is `key=value`, the test is one of the twelve, its unit
//! is the test's unit and the numbers are finite and positive. Anything
//! else is counted as rejected and skipped: nothing in a log can make the
//! parser fail or panic.

use super::catalog;
use serde::Serialize;
use std::collections::BTreeMap;

/// One run of the suite with one copy count (from `UB begin` to `UB end`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Run {
    pub copies: u32,
    /// Online CPUs where the suite ran (from `UB begin`; 0 if unseen).
    pub cpus: u32,
    pub suite: String,
    pub version: u32,
    /// Saw `UB begin` / `UB end` for this run.
    pub begun: bool,
    pub complete: bool,
    /// Test name -> pass scores in pass order.
    pub passes: BTreeMap<String, Vec<f64>>,
    /// `(test, pass, message)` of passes that failed in the guest.
    pub errors: Vec<(String, u32, String)>,
}

/// Everything found in one log.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Log {
    pub runs: Vec<Run>,
    /// Lines that looked like result lines but were malformed.
    pub rejected: usize,
    /// The user command's output (between `UB user begin` and `UB user
    /// end`), if it ran, and its exit status if the end was seen.
    pub user_output: Option<String>,
    pub user_status: Option<i32>,
    /// `UB init kernel=...` fields, when the log is a guest's.
    pub guest_kernel: Option<String>,
    /// The guest's init printed `UB done`: everything it meant to run ran.
    pub done: bool,
}

impl Log {
    /// The last run with `copies` copies that has results.
    pub fn run_for(&self, copies: u32) -> Option<&Run> {
        self.runs
            .iter()
            .rev()
            .find(|r| r.copies == copies && !r.passes.is_empty())
    }

    /// Distinct copy counts with results, ascending.
    pub fn copy_counts(&self) -> Vec<u32> {
        let mut c: Vec<u32> = self
            .runs
            .iter()
            .filter(|r| !r.passes.is_empty())
            .map(|r| r.copies)
            .collect();
        c.sort_unstable();
        c.dedup();
        c
    }
}

/// The text after the `UB ` marker, if the line has one where it counts.
fn payload(line: &str) -> Option<&str> {
    let mut from = 0;
    while let Some(i) = line[from..].find("UB ") {
        let at = from + i;
        let ok_before = line[..at]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_alphanumeric());
        if ok_before {
            return Some(&line[at + 3..]);
        }
        from = at + 3;
    }
    None
}

/// `(kind, fields)`: kind is the leading bare word (`begin`, `end`,
/// `error`, `user`, ...) or "" for a pass line. `None` if a later token is
/// not `key=value`.
fn split(payload: &str) -> Option<(&str, BTreeMap<&str, &str>)> {
    let mut tokens = payload.split_whitespace().peekable();
    let mut kind = "";
    if let Some(first) = tokens.peek() {
        if !first.contains('=') {
            kind = first;
            tokens.next();
        }
    }
    let mut fields = BTreeMap::new();
    let mut extra_words = 0;
    for tok in tokens {
        match tok.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                fields.insert(k, v);
            }
            _ => extra_words += 1,
        }
    }
    // `UB user begin` has one more bare word; nothing else may
    let allowed = usize::from(kind == "user");
    (extra_words <= allowed).then_some((kind, fields))
}

fn num<T: std::str::FromStr>(f: &BTreeMap<&str, &str>, k: &str) -> Option<T> {
    f.get(k)?.parse().ok()
}

fn positive_count(f: &BTreeMap<&str, &str>, k: &str) -> Option<u32> {
    num::<u32>(f, k).filter(|&n| n >= 1)
}

enum Line<'a> {
    Begin(Run),
    Pass {
        test: &'a str,
        copies: u32,
        pass: u32,
        score: f64,
    },
    Error {
        test: &'a str,
        copies: u32,
        pass: u32,
        msg: &'a str,
    },
    End {
        copies: u32,
    },
    UserBegin,
    UserEnd(Option<i32>),
    Init(&'a str),
    Done,
}

fn classify(line: &str) -> Option<Line<'_>> {
    let (kind, f) = split(payload(line)?)?;
    Some(match kind {
        "" => {
            let test = catalog::find(f.get("test")?)?;
            let score: f64 = num(&f, "score")?;
            if !(score.is_finite() && score > 0.0) || f.get("unit") != Some(&test.unit) {
                return None;
            }
            Line::Pass {
                test: test.name,
                copies: positive_count(&f, "copies")?,
                pass: positive_count(&f, "pass")?,
                score,
            }
        }
        "begin" => Line::Begin(Run {
            copies: positive_count(&f, "copies")?,
            cpus: num(&f, "cpus").unwrap_or(0),
            suite: f.get("suite").unwrap_or(&"").to_string(),
            version: num(&f, "version").unwrap_or(0),
            begun: true,
            ..Run::default()
        }),
        "error" => Line::Error {
            test: catalog::find(f.get("test")?)?.name,
            copies: positive_count(&f, "copies")?,
            pass: num(&f, "pass")?,
            msg: f.get("msg").copied().unwrap_or(""),
        },
        "end" => Line::End {
            copies: positive_count(&f, "copies")?,
        },
        "user" => {
            // `UB user begin` or `UB user end status=N`
            let words: Vec<&str> = payload(line)?.split_whitespace().collect();
            match words.get(1) {
                Some(&"begin") => Line::UserBegin,
                Some(&"end") => Line::UserEnd(num(&f, "status")),
                _ => return None,
            }
        }
        "init" => Line::Init(f.get("kernel").copied().unwrap_or("")),
        "done" => Line::Done,
        _ => return None,
    })
}

/// The run that results with `copies` copies belong to: the current one if
/// it matches, else a new implicit run (a log cut before its `UB begin`).
fn run_for_copies(runs: &mut Vec<Run>, copies: u32) -> &mut Run {
    let matches = runs
        .last()
        .is_some_and(|r| r.copies == copies && !r.complete);
    if !matches {
        runs.push(Run {
            copies,
            ..Run::default()
        });
    }
    let last = runs.len() - 1;
    &mut runs[last]
}

/// Parse a whole log. Never fails; see [`Log::rejected`].
pub fn parse_log(text: &str) -> Log {
    let mut log = Log::default();
    let mut user: Option<String> = None;
    for raw in text.lines() {
        let line = raw.trim_end_matches('\r');
        let parsed = classify(line);
        // the user command's output is everything between its markers
        if let Some(buf) = user.as_mut() {
            if !matches!(parsed, Some(Line::UserEnd(_))) {
                buf.push_str(line);
                buf.push('\n');
                continue;
            }
        }
        match parsed {
            None => {
                if payload(line).is_some() {
                    log.rejected += 1;
                }
            }
            Some(Line::Begin(run)) => log.runs.push(run),
            Some(Line::Pass {
                test,
                copies,
                pass,
                score,
            }) => {
                let run = run_for_copies(&mut log.runs, copies);
                let scores = run.passes.entry(test.to_string()).or_default();
                // a pass number seen again (a repeated line) is dropped
                if scores.len() < pass as usize {
                    scores.push(score);
                } else {
                    log.rejected += 1;
                }
            }
            Some(Line::Error {
                test,
                copies,
                pass,
                msg,
            }) => run_for_copies(&mut log.runs, copies).errors.push((
                test.to_string(),
                pass,
                msg.to_string(),
            )),
            Some(Line::End { copies }) => run_for_copies(&mut log.runs, copies).complete = true,
            Some(Line::UserBegin) => user = Some(String::new()),
            Some(Line::UserEnd(status)) => {
                log.user_output = Some(user.take().unwrap_or_default());
                log.user_status = status;
            }
            Some(Line::Init(kernel)) => log.guest_kernel = Some(kernel.to_string()),
            Some(Line::Done) => log.done = true,
        }
    }
    if let Some(partial) = user {
        log.user_output = Some(partial); // the guest stopped mid-command
    }
    log
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_clean_run() {
        let log = parse_log(
            "UB begin suite=pacer-ubench-style version=1 cpus=2 copies=1 passes=10,3 seconds=default tests=dhry2reg,execl\n\
             UB test=dhry2reg copies=1 pass=1 score=1000.5 unit=lps seconds=10.000 count=10005\n\
             UB test=dhry2reg copies=1 pass=2 score=2000 unit=lps seconds=10.000 count=20000\n\
             UB error test=execl copies=1 pass=1 msg=worker-failed\n\
             UB end copies=1 status=errors errors=1 seconds=20.0\n",
        );
        assert_eq!(log.rejected, 0);
        assert_eq!(log.runs.len(), 1);
        let r = &log.runs[0];
        assert_eq!((r.copies, r.cpus, r.version), (1, 2, 1));
        assert!(r.begun && r.complete);
        assert_eq!(r.passes["dhry2reg"], vec![1000.5, 2000.0]);
        assert_eq!(
            r.errors,
            vec![("execl".to_string(), 1, "worker-failed".to_string())]
        );
    }

    #[test]
    fn tolerates_console_garbage() {
        let text = "\
[    0.000000] Linux version 6.1.0 (debian-kernel@lists.debian.org)\r\n\
[    1.234567] UB test=pipe copies=1 pass=1 score=5.0 unit=lps\r\n\
vm0| UB test=pipe copies=1 pass=2 score=7.0 unit=lps\n\
XUB test=pipe copies=1 pass=3 score=9.0 unit=lps\n\
UB test=pipe copies=1 pass=3 score=12[    2.0] random: crng init done\n\
UB test=pipe copies=1 pass=3 score=nan unit=lps\n\
UB test=pipe copies=1 pass=3 score=-4 unit=lps\n\
UB test=pipe copies=1 pass=3 score=inf unit=lps\n\
UB test=pipe copies=1 pass=3 score=3 unit=KBps\n\
UB test=nosuch copies=1 pass=3 score=3 unit=lps\n\
UB test=pipe copies=0 pass=3 score=3 unit=lps\n\
UB test=pipe copies=1 pass=2 score=3 unit=lps\n\
UB test=pipe copies=1 pass=3 score=11.0 unit=lps\n\
UB \n\
UB begin\n\
\u{0}\u{7f}\u{fffd} UB test=pipe copies=1 pass=4 score=13.0 unit=lps seconds=1\n";
        let log = parse_log(text);
        let run = log.run_for(1).expect("a run");
        assert_eq!(run.passes["pipe"], vec![5.0, 7.0, 11.0, 13.0]);
        // the XUB line is not a result line; the next ten are rejected
        // (cut by a kernel message, nan, negative, inf, wrong unit, unknown
        // test, zero copies, a repeated pass, an empty and a bare begin)
        assert_eq!(log.rejected, 10);
        assert!(!run.begun && !run.complete);
    }

    #[test]
    fn separates_runs_by_copies_and_begin() {
        let log = parse_log(
            "UB begin copies=1 cpus=2\n\
             UB test=syscall copies=1 pass=1 score=10 unit=lps\n\
             UB end copies=1 status=ok\n\
             UB begin copies=2 cpus=2\n\
             UB test=syscall copies=2 pass=1 score=20 unit=lps\n\
             UB end copies=2 status=ok\n\
             UB begin copies=1 cpus=2\n\
             UB test=syscall copies=1 pass=1 score=30 unit=lps\n",
        );
        assert_eq!(log.runs.len(), 3);
        assert_eq!(log.copy_counts(), vec![1, 2]);
        // the last run with results wins, even unfinished
        assert_eq!(log.run_for(1).unwrap().passes["syscall"], vec![30.0]);
        assert_eq!(log.run_for(2).unwrap().passes["syscall"], vec![20.0]);
        assert!(log.run_for(8).is_none());
    }

    #[test]
    fn captures_user_output() {
        let log = parse_log(
            "UB init kernel=6.1.0-56-amd64 cpus=2\n\
             UB user begin\n\
             Running UnixBench\n\
             UB test=pipe copies=1 pass=1 score=1 unit=lps\n\
             done\n\
             UB user end status=3\n\
             UB done end=reboot\n",
        );
        assert_eq!(
            log.user_output.as_deref(),
            Some("Running UnixBench\nUB test=pipe copies=1 pass=1 score=1 unit=lps\ndone\n")
        );
        assert_eq!(log.user_status, Some(3));
        assert_eq!(log.guest_kernel.as_deref(), Some("6.1.0-56-amd64"));
        assert!(log.runs.is_empty(), "the user's lines are not the suite's");
        assert!(log.done);

        let cut = parse_log("UB user begin\npartial\n");
        assert_eq!(cut.user_output.as_deref(), Some("partial\n"));
        assert_eq!(cut.user_status, None);
        assert!(!cut.done);
        // a user command that prints the marker does not end the guest's run
        assert!(!parse_log("UB user begin\nUB done end=x\n").done);
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut x = 0x1234_5678u32;
        for _ in 0..200 {
            let mut s = String::from("UB test=pipe copies=1 pass=1 score=1 unit=lps ");
            for _ in 0..64 {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                s.push(char::from_u32((x >> 16) % 0x3000).unwrap_or('?'));
            }
            let _ = parse_log(&s);
        }
    }
}
