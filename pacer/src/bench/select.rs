//! `pacer bench --only-policy P,.. --only-layout L,..`: the subset of a
//! matrix's cells to run now. Unselected cells are neither run nor
//! recorded, so a later run (`--resume`, with or without a filter) runs
//! them; the summary covers every cell the output folder holds.

use super::cells::Cell;
use super::Matrix;

/// Which policies and layouts of a matrix to run (`None`: all of them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    policies: Option<Vec<usize>>,
    layouts: Option<Vec<usize>>,
}

impl Selection {
    /// Every cell.
    pub fn all() -> Selection {
        Selection::default()
    }

    /// The cells of the named policies (labels) and layouts; an empty list
    /// selects every one. An unknown name is refused with the known ones
    /// and a did-you-mean.
    pub fn of(m: &Matrix, policies: &[String], layouts: &[String]) -> Result<Selection, String> {
        let labels: Vec<&str> = m.policies.iter().map(|p| p.label.as_str()).collect();
        let names: Vec<&str> = m.layouts.iter().map(|l| l.name.as_str()).collect();
        Ok(Selection {
            policies: indices("--only-policy", policies, &labels, &m.name)?,
            layouts: indices("--only-layout", layouts, &names, &m.name)?,
        })
    }

    /// Whether `cell` is to run.
    pub fn contains(&self, cell: &Cell) -> bool {
        let within =
            |set: &Option<Vec<usize>>, i: usize| set.as_ref().is_none_or(|s| s.contains(&i));
        within(&self.policies, cell.policy) && within(&self.layouts, cell.layout)
    }

    /// Whether every cell is selected.
    pub fn is_all(&self) -> bool {
        self.policies.is_none() && self.layouts.is_none()
    }
}

fn indices(
    flag: &str,
    wanted: &[String],
    known: &[&str],
    matrix: &str,
) -> Result<Option<Vec<usize>>, String> {
    if wanted.is_empty() {
        return Ok(None);
    }
    wanted
        .iter()
        .map(|w| {
            known.iter().position(|k| k == w).ok_or_else(|| {
                format!(
                    "{flag}: matrix {matrix:?} has no {w:?} (it has {}){}",
                    known.join(", "),
                    vmm::suggest::hint(w, known.iter().copied())
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

#[cfg(test)]
mod tests {
    use super::super::cells::expand;
    use super::super::matrix::tests::{Fixture, GOOD};
    use super::*;

    #[test]
    fn only_the_named_policies_and_layouts_are_selected() {
        let fx = Fixture::new("select");
        let m = fx.parse(GOOD).unwrap();
        let all = expand(&m);
        let s = Selection::of(&m, &["haiku".into(), "qemu".into()], &["prio".into()]).unwrap();
        let picked: Vec<_> = all.iter().filter(|c| s.contains(c)).collect();
        // prio x {cpu} x 2 policies x 3 repetitions.
        assert_eq!(picked.len(), 2 * 3);
        for c in picked {
            assert_eq!(m.layouts[c.layout].name, "prio");
            assert!(["haiku", "qemu"].contains(&m.policies[c.policy].label.as_str()));
        }
        let every = Selection::of(&m, &[], &[]).unwrap();
        assert!(every.is_all() && all.iter().all(|c| every.contains(c)));
        let layouts_only = Selection::of(&m, &[], &["pair".into()]).unwrap();
        assert_eq!(
            all.iter().filter(|c| layouts_only.contains(c)).count(),
            2 * 6 * 3
        );
    }

    #[test]
    fn unknown_names_are_refused_with_a_near_miss() {
        let fx = Fixture::new("select-bad");
        let m = fx.parse(GOOD).unwrap();
        let e = Selection::of(&m, &["haku".into()], &[]).unwrap_err();
        assert!(
            e.starts_with("--only-policy: matrix \"t\" has no \"haku\""),
            "{e}"
        );
        assert!(e.ends_with("did you mean \"haiku\"?"), "{e}");
        let e = Selection::of(&m, &[], &["pari".into()]).unwrap_err();
        assert!(
            e.contains("--only-layout") && e.ends_with("did you mean \"pair\"?"),
            "{e}"
        );
        assert!(!Selection::of(&m, &[], &["zzzz".into()])
            .unwrap_err()
            .contains("did you mean"));
    }
}
