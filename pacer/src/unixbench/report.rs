//! The tables: one section per copy count, UnixBench's familiar columns
//! (test, baseline, result, index), and, when a host reference run is
//! given, the host's result and index and the guest/host ratio per test,
//! the virtualization cost a user wants to see.

use super::score::{summarize, Summary};
use serde::Serialize;
use std::fmt::Write;
use vmm::unixbench::parse::Log;

/// One section of the report: a guest (or host) run and its reference.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Section {
    pub copies: u32,
    pub result: Summary,
    pub reference: Option<Summary>,
}

/// The sections for every copy count found in `log`, each paired with the
/// reference run of the same copy count when `reference` has one.
pub fn sections(log: &Log, reference: Option<&Log>) -> Vec<Section> {
    log.copy_counts()
        .into_iter()
        .filter_map(|copies| {
            let result = summarize(log.run_for(copies)?);
            let reference = reference.and_then(|r| r.run_for(copies)).map(summarize);
            Some(Section {
                copies,
                result,
                reference,
            })
        })
        .collect()
}

fn num(v: Option<f64>) -> String {
    match v {
        Some(v) if v >= 1e7 => format!("{v:.0}"),
        Some(v) => format!("{v:.1}"),
        None => "-".into(),
    }
}

fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.3}", a / b),
        _ => "-".into(),
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 {
        "copy"
    } else {
        "copies"
    }
}

/// Render the report. `what` names the measured side ("guest", "host").
pub fn render(sections: &[Section], what: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "UnixBench-style index (Pacer's own suite; not comparable with published UnixBench results)"
    );
    for sec in sections {
        let r = &sec.result;
        let _ = writeln!(
            s,
            "\n== {what}: {} {}{}{}",
            sec.copies,
            plural(sec.copies),
            if r.cpus > 0 {
                format!(", {} CPUs", r.cpus)
            } else {
                String::new()
            },
            if r.complete { "" } else { " (run incomplete)" }
        );
        let with_ref = sec.reference.is_some();
        if with_ref {
            let _ = writeln!(
                s,
                "{:<42} {:>9} {:>13} {:>13} {:>5} {:>8} {:>8} {:>10}",
                "Test", "Baseline", "Result", "Host", "Unit", "Index", "Host idx", "Guest/Host"
            );
        } else {
            let _ = writeln!(
                s,
                "{:<42} {:>9} {:>13} {:>5} {:>8}",
                "Test", "Baseline", "Result", "Unit", "Index"
            );
        }
        for row in &r.rows {
            let host = sec
                .reference
                .as_ref()
                .and_then(|h| h.rows.iter().find(|x| x.test == row.test));
            let mut name = format!("{} ({})", row.title, row.test);
            if row.failed_passes > 0 {
                name.push_str(&format!(" [{} failed]", row.failed_passes));
            }
            if with_ref {
                let _ = writeln!(
                    s,
                    "{:<42} {:>9.1} {:>13} {:>13} {:>5} {:>8} {:>8} {:>10}",
                    name,
                    row.baseline,
                    num(row.score),
                    num(host.and_then(|h| h.score)),
                    row.unit,
                    num(row.index),
                    num(host.and_then(|h| h.index)),
                    ratio(row.score, host.and_then(|h| h.score)),
                );
            } else {
                let _ = writeln!(
                    s,
                    "{:<42} {:>9.1} {:>13} {:>5} {:>8}",
                    name,
                    row.baseline,
                    num(row.score),
                    row.unit,
                    num(row.index)
                );
            }
        }
        let label = if r.full {
            "System index (12 tests)".to_string()
        } else {
            format!("Partial index ({} of 12 tests)", r.tests_scored)
        };
        if let Some(h) = &sec.reference {
            let _ = writeln!(
                s,
                "{:<42} {:>9} {:>13} {:>13} {:>5} {:>8} {:>8} {:>10}",
                label,
                "",
                "",
                "",
                "",
                num(r.index),
                num(h.index),
                ratio(r.index, h.index)
            );
        } else {
            let _ = writeln!(
                s,
                "{:<42} {:>9} {:>13} {:>5} {:>8}",
                label,
                "",
                "",
                "",
                num(r.index)
            );
        }
    }
    if sections.is_empty() {
        let _ = writeln!(s, "\n(no results)");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use vmm::unixbench::parse::parse_log;

    #[test]
    fn table_with_host_reference_shows_ratios() {
        // guest pipe 3 passes of 24880 -> score 24880 -> index 20;
        // host 49760 -> index 40; guest/host 0.5
        let guest = parse_log(
            "UB begin copies=1 cpus=2\n\
             UB test=pipe copies=1 pass=1 score=24880 unit=lps\n\
             UB test=pipe copies=1 pass=2 score=24880 unit=lps\n\
             UB test=pipe copies=1 pass=3 score=24880 unit=lps\n\
             UB end copies=1 status=ok\n",
        );
        let host = parse_log("UB test=pipe copies=1 pass=1 score=49760 unit=lps\n");
        let secs = sections(&guest, Some(&host));
        assert_eq!(secs.len(), 1);
        let text = render(&secs, "guest");
        assert!(
            text.contains("not comparable with published UnixBench"),
            "{text}"
        );
        assert!(text.contains("== guest: 1 copy, 2 CPUs\n"), "{text}");
        let line = text
            .lines()
            .find(|l| l.contains("(pipe)"))
            .expect("pipe row");
        let cols: Vec<&str> = line.split_whitespace().rev().take(6).collect();
        // ... Baseline Result Host Unit Index HostIdx Ratio (reversed)
        assert_eq!(
            cols,
            ["0.500", "40.0", "20.0", "lps", "49760.0", "24880.0"],
            "{line}"
        );
        let idx = text
            .lines()
            .find(|l| l.starts_with("Partial index"))
            .unwrap();
        assert!(idx.ends_with("20.0     40.0      0.500"), "{idx}");
    }

    #[test]
    fn missing_reference_and_failures_render() {
        let guest = parse_log(
            "UB test=spawn copies=2 pass=1 score=252 unit=lps\n\
             UB error test=execl copies=2 pass=1 msg=timeout\n",
        );
        let text = render(&sections(&guest, Some(&Log::default())), "guest");
        assert!(text.contains("(execl) [1 failed]"), "{text}");
        assert!(text.contains("(run incomplete)"), "{text}");
        // spawn index 252 / 126 x 10 = 20
        let spawn = text.lines().find(|l| l.contains("(spawn)")).unwrap();
        assert!(spawn.trim_end().ends_with("lps     20.0"), "{spawn}");
        assert!(render(&[], "host").contains("(no results)"));
    }
}
