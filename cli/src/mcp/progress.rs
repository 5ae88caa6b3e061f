//! The child's step lines (its stderr, as the terminal shows them) as MCP progress: each
//! `==> step` (fetching, building, booting) and each finished test (`tests N of M`). The
//! total M is the inventory's count of the tests the filter selects, when the call has one.
use bpfvm_host::results::inventory::IGNORED;

/// What one line of the child's stderr tells the client, if anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Told {
    Step(String),
    Test { name: String, outcome: String },
}

/// Reads the lines `ui::terminal` writes: `==> STEP` and `    test NAME ... OUTCOME`.
pub(super) fn read(line: &str) -> Option<Told> {
    if let Some(step) = line.strip_prefix("==> ") {
        return Some(Told::Step(step.trim().to_string()));
    }
    let rest = line.strip_prefix("    test ")?;
    let (name, outcome) = rest.split_once(" ... ")?;
    Some(Told::Test {
        name: name.to_string(),
        outcome: outcome.to_string(),
    })
}

/// A call's progress: a count that only grows (MCP wants it so) and the message for it.
#[derive(Debug, Default)]
pub(super) struct Progress {
    events: u64,
    tests_done: u64,
    tests_total: Option<u64>,
}

impl Progress {
    pub(super) fn new(tests_total: Option<u64>) -> Self {
        Self {
            tests_total,
            ..Self::default()
        }
    }

    /// The next progress value and its message, for a line that tells something.
    pub(super) fn on_line(&mut self, line: &str) -> Option<(u64, String)> {
        let message = match read(line)? {
            Told::Step(s) => s,
            Told::Test { name, outcome } => {
                self.tests_done += 1;
                match self.tests_total {
                    Some(m) if m >= self.tests_done => {
                        format!("tests {} of {m}: {name} {outcome}", self.tests_done)
                    }
                    _ => format!("tests {}: {name} {outcome}", self.tests_done),
                }
            }
        };
        self.events += 1;
        Some((self.events, message))
    }
}

/// How many tests of an inventory (`tests/inventory.txt`: `<binary> <test>` a line, an
/// ignored one ending in `ignored: why`) a filter selects: a run's M.
pub(super) fn selected(inventory: &str, filter: Option<&str>) -> u64 {
    inventory
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.contains(IGNORED))
        .filter_map(|l| l.split_once(' ').map(|(_, test)| test))
        .filter(|test| filter.is_none_or(|f| test.contains(f)))
        .count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_and_tests_become_progress_and_the_rest_does_not() {
        let mut p = Progress::new(Some(2));
        assert_eq!(
            p.on_line("==> booting 6.1.0-57-cloud-amd64 under TCG"),
            Some((1, "booting 6.1.0-57-cloud-amd64 under TCG".into()))
        );
        assert_eq!(p.on_line("    accelerator: TCG (no /dev/kvm)"), None);
        assert_eq!(p.on_line("warning: something"), None);
        assert_eq!(
            p.on_line("    test maps::hash::a ... ok"),
            Some((2, "tests 1 of 2: maps::hash::a ok".into()))
        );
        assert_eq!(
            p.on_line("    test maps::hash::b ... FAILED (boom)"),
            Some((3, "tests 2 of 2: maps::hash::b FAILED (boom)".into()))
        );
        // More tests than the inventory said: no wrong total.
        assert_eq!(
            p.on_line("    test maps::hash::c ... ok"),
            Some((4, "tests 3: maps::hash::c ok".into()))
        );
    }

    #[test]
    fn the_inventory_counts_the_tests_a_filter_selects() {
        let inv = "# comment\nbpfvm_tests maps::hash::a\nbpfvm_tests maps::hash::b\n\
                   bpfvm_tests maps::array::a\nbpfvm_tests slow::x ignored: too slow\n";
        assert_eq!(selected(inv, None), 3);
        assert_eq!(selected(inv, Some("maps::hash")), 2);
        assert_eq!(selected(inv, Some("slow")), 0);
    }
}
