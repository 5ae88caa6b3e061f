//! What each test costs to run, measured: the milliseconds a report's rows took, kept per
//! kernel, architecture and accelerator in `kernels/costs/<kernel>.<arch>.<accel>.toml`, so
//! that a run's boots (`selftests`) and a plan's pieces are cut from measured times rather
//! than guesses. A test with no measured cost takes [`Costs::DEFAULT_MS`].
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::domain::arch::Arch;
use crate::results::report::TestResult;

/// One kernel's measured costs: a test's name (a report row's, e.g. `test_progs/bpf_loop`)
/// and its milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Costs {
    #[serde(default)]
    pub ms: BTreeMap<String, u64>,
}

impl Costs {
    /// The cost of a test never measured: about what a small `test_progs` test takes under TCG.
    pub const DEFAULT_MS: u64 = 5_000;

    /// The committed cost file of `kernel` (a pin's version, or a tree's label) on `arch` under
    /// `accel` (`tcg`, `kvm`), below the workspace `root`.
    pub fn path(root: &Path, kernel: &str, arch: Arch, accel: &str) -> PathBuf {
        root.join("kernels")
            .join("costs")
            .join(format!("{kernel}.{arch}.{accel}.toml"))
    }

    /// The costs a run or a plan of `kernel` on `arch` under `accel` is cut by: its own file;
    /// while that is not measured, TCG's of the same architecture (a test's share of the whole
    /// is much the same under both accelerators), then x86_64's (a test long on one
    /// architecture is long on the other): a long test's watchdog and piece are then not
    /// [`Costs::DEFAULT_MS`]'s guess.
    pub fn measured(root: &Path, kernel: &str, arch: Arch, accel: &str) -> Result<Costs> {
        let tried = [
            (arch, accel),
            (arch, "tcg"),
            (Arch::X86_64, accel),
            (Arch::X86_64, "tcg"),
        ];
        match tried
            .iter()
            .map(|(a, acc)| Costs::path(root, kernel, *a, acc))
            .find(|p| p.exists())
        {
            Some(path) => Costs::load(&path),
            None => Ok(Costs::default()),
        }
    }

    /// Reads a cost file; none there is no measured cost.
    pub fn load(path: &Path) -> Result<Costs> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                toml::from_str(&text).with_context(|| format!("{} is not valid", path.display()))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Costs::default()),
            Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
        }
    }

    /// The file's text, with a header saying what wrote it.
    pub fn render(&self, header: &str) -> String {
        let mut text: String = header.lines().map(|l| format!("# {l}\n")).collect();
        text += &toml::to_string(self).expect("a map of strings to integers is TOML");
        text
    }

    /// The costs of the rows `unit` keeps (the name it gives each, e.g. a subtest's test), a
    /// unit's rows summed. Rows that ran no time (0 ms: not run, judged from elsewhere) are
    /// not measurements.
    pub fn of_rows<'a>(
        rows: impl IntoIterator<Item = &'a TestResult>,
        unit: impl Fn(&str) -> Option<String>,
    ) -> Costs {
        let mut ms = BTreeMap::new();
        for r in rows.into_iter().filter(|r| r.duration_ms > 0) {
            if let Some(name) = unit(&r.name) {
                *ms.entry(name).or_insert(0) += r.duration_ms;
            }
        }
        Costs { ms }
    }

    /// `other`'s measurements replace this file's; tests it did not run keep theirs.
    pub fn update(&mut self, other: &Costs) {
        self.ms
            .extend(other.ms.iter().map(|(k, v)| (k.clone(), *v)));
    }

    /// The cost of `test`: measured, or [`Costs::DEFAULT_MS`].
    pub fn of(&self, test: &str) -> u64 {
        self.ms.get(test).copied().unwrap_or(Self::DEFAULT_MS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::report::Outcome;

    fn row(name: &str, ms: u64) -> TestResult {
        TestResult {
            name: name.into(),
            outcome: Outcome::Pass,
            reason: None,
            duration_ms: ms,
            kernel_splats: vec![],
        }
    }

    #[test]
    fn a_report_s_rows_become_costs_and_round_trip_through_the_file() {
        let rows = [
            row("test_progs/a", 1200),
            row("test_progs/a/sub", 0),
            row("test_progs/b", 40),
            row("guest:inventory", 0),
        ];
        let costs = Costs::of_rows(&rows, |n| {
            n.starts_with("test_progs/").then(|| n.to_string())
        });
        assert_eq!(
            costs.ms,
            BTreeMap::from([("test_progs/a".into(), 1200), ("test_progs/b".into(), 40)])
        );
        assert_eq!(costs.of("test_progs/a"), 1200);
        assert_eq!(costs.of("test_progs/never"), Costs::DEFAULT_MS);
        let d = tempfile::tempdir().unwrap();
        let path = Costs::path(d.path(), "6.1", Arch::X86_64, "tcg");
        assert!(path.ends_with("kernels/costs/6.1.x86_64.tcg.toml"));
        assert_eq!(Costs::load(&path).unwrap(), Costs::default());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, costs.render("written by a test\nsecond line")).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.starts_with("# written by a test\n# second line\n"),
            "{text}"
        );
        assert_eq!(Costs::load(&path).unwrap(), costs);
        let mut older = Costs {
            ms: BTreeMap::from([("test_progs/a".into(), 9), ("test_progs/c".into(), 7)]),
        };
        older.update(&costs);
        assert_eq!(older.of("test_progs/a"), 1200);
        assert_eq!(older.of("test_progs/c"), 7);
    }
}
