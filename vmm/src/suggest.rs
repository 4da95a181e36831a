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

/// The one name `word` abbreviates, for a command word: its letters in
/// order within the name, the first one first (`rn` for `run`, `sts` for
/// `stats`), at least two of them; none when two names fit or `word` is a
/// name. Typists drop letters of short words more than they mistype them.
pub fn abbreviation<'a>(word: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let lower = word.to_lowercase();
    if lower.chars().count() < 2 || lower.chars().count() > 64 {
        return None;
    }
    let is_within = |name: &str| {
        let mut name = name.chars();
        let mut word = lower.chars();
        let first = word.next();
        name.next() == first && word.all(|c| name.any(|n| n == c))
    };
    let mut fits = known
        .into_iter()
        .filter(|k| k.to_lowercase() != lower && is_within(&k.to_lowercase()));
    let one = fits.next()?;
    fits.next().is_none().then_some(one)
}

/// A subcommand for a mistyped one: its abbreviation, else its near miss.
pub fn command<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    if known.contains(&word) {
        return None;
    }
    abbreviation(word, known.iter().copied()).or_else(|| near_miss(word, known.iter().copied()))
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
    fn command_words_abbreviated_or_mistyped() {
        let ctl = ["ls", "stats", "set", "pause", "resume", "stop", "watch"];
        assert_eq!(command("sts", &ctl), Some("stats"));
        assert_eq!(command("stp", &ctl), Some("stop"));
        assert_eq!(command("pase", &ctl), Some("pause"));
        assert_eq!(command("wacth", &ctl), Some("watch"));
        // `st` fits stats, set and stop: no guess.
        assert_eq!(abbreviation("st", ctl), None);
        assert_eq!(command("stats", &ctl), None);
        assert_eq!(command("rn", &["run", "validate", "bench"]), Some("run"));
        assert_eq!(command("zz", &["run", "validate"]), None);
        assert_eq!(abbreviation("r", ["run"]), None);
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
