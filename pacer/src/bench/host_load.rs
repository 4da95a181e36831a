//! What else the host was doing while a cell ran, so a reader can tell a
//! verdict measured on a busy host from one on a quiet host: the load
//! average at the cell's end, the share of the host's CPU time during the
//! cell spent by anything but this process and its children (from
//! `/proc/stat` and `/proc/self/stat`), and the CPU frequency where sysfs
//! cpufreq is readable (null otherwise: many VMs have no cpufreq).

use serde::{Deserialize, Serialize};

/// The host's load during one cell; every figure null where unreadable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct HostLoad {
    /// The 1-minute load average at the cell's end (`/proc/loadavg`).
    pub loadavg_1m: Option<f64>,
    /// Of the host's CPU time during the cell (all CPUs), the share busy
    /// with anything but this process and its children: 0 on a quiet
    /// host, near 1 when others held every CPU.
    pub others_cpu_share: Option<f64>,
    /// The mean current frequency of the online CPUs at the cell's end
    /// (sysfs `cpufreq/scaling_cur_freq`); null: unreadable.
    pub cpu_freq_khz: Option<u64>,
}

impl HostLoad {
    /// "load 1.20, others 35 % of CPU time, 2.4 GHz" (or "CPU frequency
    /// unreadable").
    pub fn describe(&self) -> String {
        let load = self
            .loadavg_1m
            .map(|l| format!("load {l:.2}"))
            .unwrap_or_else(|| "load unreadable".into());
        let others = self
            .others_cpu_share
            .map(|s| format!("others {:.0} % of CPU time", s * 100.0))
            .unwrap_or_else(|| "others' CPU time unreadable".into());
        let freq = self
            .cpu_freq_khz
            .map(|k| format!("{:.2} GHz", k as f64 / 1e6))
            .unwrap_or_else(|| "CPU frequency unreadable".into());
        format!("{load}, {others}, {freq}")
    }
}

/// CPU time counters at the start of a cell.
#[derive(Debug, Clone, Copy)]
pub struct Start {
    /// (busy, total) clock ticks of all CPUs.
    host: Option<(u64, u64)>,
    /// Clock ticks of this process and its reaped children.
    ours: Option<u64>,
}

/// Read the counters before a cell runs.
pub fn start() -> Start {
    Start {
        host: host_ticks(),
        ours: our_ticks(),
    }
}

impl Start {
    /// The load over the cell that started at `self`.
    pub fn finish(&self) -> HostLoad {
        let share =
            match (self.host, host_ticks(), self.ours, our_ticks()) {
                (Some((b0, t0)), Some((b1, t1)), Some(o0), Some(o1)) if t1 > t0 => Some(
                    others_share(b1.saturating_sub(b0), t1 - t0, o1.saturating_sub(o0)),
                ),
                _ => None,
            };
        HostLoad {
            loadavg_1m: std::fs::read_to_string("/proc/loadavg")
                .ok()
                .and_then(|t| loadavg_1m(&t)),
            others_cpu_share: share,
            cpu_freq_khz: cpu_freq_khz(),
        }
    }
}

/// Busy ticks not ours over all ticks, within 0..=1.
fn others_share(busy: u64, total: u64, ours: u64) -> f64 {
    (busy.saturating_sub(ours) as f64 / total as f64).clamp(0.0, 1.0)
}

fn loadavg_1m(text: &str) -> Option<f64> {
    text.split_whitespace().next()?.parse().ok()
}

/// (busy, total) from `/proc/stat`'s `cpu` line: busy is all but idle and
/// iowait.
fn host_ticks() -> Option<(u64, u64)> {
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").ok()?)
}

fn parse_proc_stat(text: &str) -> Option<(u64, u64)> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal (guest time is
    // already within user and nice).
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4).unwrap_or(&0);
    Some((total - idle, total))
}

/// utime + stime + cutime + cstime of `/proc/self/stat`.
fn our_ticks() -> Option<u64> {
    parse_self_stat(&std::fs::read_to_string("/proc/self/stat").ok()?)
}

fn parse_self_stat(text: &str) -> Option<u64> {
    // The command name may hold spaces and parentheses: fields start after
    // the last ')'. Then state is field 3, utime field 14.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let at = |n: usize| f.get(n - 3)?.parse::<i64>().ok();
    let sum = at(14)? + at(15)? + at(16)? + at(17)?;
    u64::try_from(sum).ok()
}

/// The mean `scaling_cur_freq` of the CPUs that have one.
fn cpu_freq_khz() -> Option<u64> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu").ok()?;
    let freqs: Vec<u64> = dir
        .flatten()
        .filter(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with("cpu") && n[3..].chars().all(|c| c.is_ascii_digit()) && n.len() > 3
        })
        .filter_map(|e| {
            std::fs::read_to_string(e.path().join("cpufreq/scaling_cur_freq"))
                .ok()?
                .trim()
                .parse()
                .ok()
        })
        .collect();
    (!freqs.is_empty()).then(|| freqs.iter().sum::<u64>() / freqs.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        let stat = "cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 50 2 25 400 10 1 1 5 0 0\n";
        // busy = 100+5+50+3+2+10 = 170, total = 990.
        assert_eq!(parse_proc_stat(stat), Some((170, 990)));
        assert_eq!(parse_proc_stat("intr 1 2"), None);
        let me = "4242 (pacer (x) y) S 1 2 3 4 5 6 7 8 9 10 111 222 33 44 20 0 1 0";
        assert_eq!(parse_self_stat(me), Some(111 + 222 + 33 + 44));
        assert_eq!(loadavg_1m("1.25 0.80 0.50 2/300 4242\n"), Some(1.25));
        assert_eq!(loadavg_1m(""), None);
    }

    #[test]
    fn others_share_is_busy_time_not_ours() {
        assert_eq!(others_share(100, 200, 100), 0.0);
        assert_eq!(others_share(200, 200, 50), 0.75);
        // Our children's time reaped late can exceed the host's delta.
        assert_eq!(others_share(10, 200, 50), 0.0);
    }

    #[test]
    fn a_cell_on_this_host_reads_its_load() {
        let s = start();
        // Some CPU time of our own between the two readings.
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let load = s.finish();
        assert!(load.loadavg_1m.is_some_and(|l| l >= 0.0), "{load:?}");
        if let Some(s) = load.others_cpu_share {
            assert!((0.0..=1.0).contains(&s), "{load:?}");
        }
        let text = load.describe();
        assert!(text.starts_with("load "), "{text}");
        assert!(
            text.contains("GHz") || text.contains("CPU frequency unreadable"),
            "{text}"
        );
        assert_eq!(
            HostLoad::default().describe(),
            "load unreadable, others' CPU time unreadable, CPU frequency unreadable"
        );
    }
}
