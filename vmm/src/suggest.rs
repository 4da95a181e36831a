//! "Did you mean" for every closed set of names a user types: config keys
//! and values, policies, modes, dispatch kinds, workloads and their
//! parameters, `set` keys, VM names, subcommands. One rule for all of
//! them, on `strsim` (the crate clap suggests with too): a near miss is a
//! typo (a letter missing, extra, wrong or two swapped), another case or
//! a plural.

/// The known name closest to `word` if it is a near miss, for "did you
/// mean" hints: within one edit of a name up to 5 letters (but not all of it), two of
/// a longer one (ignoring case); never `word` itself.
pub fn near_miss<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    if word.chars().count() > 64 {
        return None;
    }
    let lower = word.to_lowercase();
    known
        .into_iter()
        .filter(|k| *k != word)
        .map(|k| (strsim::osa_distance(&lower, &k.to_lowercase()), k))
        // A one-letter name is no near miss of another.
        .filter(|(d, k)| *d <= (k.chars().count() / 3).clamp(1, 2) && *d < k.chars().count())
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k)
}

/// `; did you mean "x"?` for a near miss, else nothing.
pub fn hint<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    near_miss(word, known)
        .map(|k| format!("; did you mean \"{k}\"?"))
        .unwrap_or_default()
}

/// `s` parsed as a `T`, or `T`'s own refusal with a hint among `names`:
/// for command-line values of the lower crates' closed sets.
pub fn parse<T>(s: &str, names: &[&str]) -> Result<T, String>
where
    T: std::str::FromStr,
    T::Err: std::fmt::Display,
{
    s.parse::<T>()
        .map_err(|e| format!("{e}{}", hint(s, names.iter().copied())))
}

/// `--mode`: low-latency or power-saving.
pub fn mode(s: &str) -> Result<vcpu_sched::Mode, String> {
    let names: Vec<&str> = vcpu_sched::Mode::ALL.iter().map(|m| m.as_str()).collect();
    parse(s, &names)
}

/// `--dispatch`: ranked, threads, workers, kvm-irqchip.
pub fn dispatch(s: &str) -> Result<vcpu_engine::DispatchKind, String> {
    let names: Vec<&str> = vcpu_engine::DispatchKind::ALL
        .iter()
        .map(|d| d.as_str())
        .collect();
    parse(s, &names)
}

/// The simulator's `--policy`: the scheduled policies.
pub fn sim_policy(s: &str) -> Result<vcpu_sched::PolicyKind, String> {
    let names: Vec<&str> = vcpu_sched::PolicyKind::ALL
        .iter()
        .map(|p| p.as_str())
        .collect();
    parse(s, &names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_misses() {
        let known = ["vcpus", "cpus", "memory_mib", "timeshare", "name"];
        assert_eq!(near_miss("vcpu", known), Some("vcpus"));
        assert_eq!(near_miss("VCPUS", known), Some("vcpus"));
        assert_eq!(near_miss("memory_mb", known), Some("memory_mib"));
        assert_eq!(near_miss("timeshar", known), Some("timeshare"));
        assert_eq!(near_miss("nmae", known), Some("name"));
        assert_eq!(near_miss("colour", known), None);
        assert_eq!(near_miss("vcpus", ["vcpus"]), None);
        assert_eq!(hint("cpu", known), "; did you mean \"cpus\"?");
        assert_eq!(hint("zzz", known), "");
        assert_eq!(near_miss("c", ["a", "b"]), None);
    }

    #[test]
    fn the_lower_crates_closed_sets() {
        assert!(mode("low-latncy")
            .unwrap_err()
            .ends_with("; did you mean \"low-latency\"?"));
        assert!(dispatch("rankd")
            .unwrap_err()
            .ends_with("; did you mean \"ranked\"?"));
        assert!(sim_policy("haku")
            .unwrap_err()
            .ends_with("; did you mean \"haiku\"?"));
        assert!(!dispatch("zzz").unwrap_err().contains("did you mean"));
        assert_eq!(dispatch("threads"), Ok(vcpu_engine::DispatchKind::Threads));
    }
}
