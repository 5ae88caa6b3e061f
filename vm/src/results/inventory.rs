//! The committed list of tests a run must hold: `tests/inventory.txt` for this repository's
//! suite (`cargo xtask inventory --bless` writes it), an optional `bpfvm-inventory.txt` in a
//! user's workspace for `bpfvm test` (`bpfvm inventory --bless`). Without it a whole module
//! switched off (`#[cfg(any())] mod bpf_loop;`), a renamed test or a test binary left out of the
//! build is a green run: nothing else knows which tests should run.
//!
//! One line per test, `<binary> <libtest name>`, sorted; `#` starts a comment. The list is the
//! same for every kernel: one build runs on every pin, and a test that skips on a kernel still
//! runs and is listed.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::machine::guest::files;
use crate::results::report::{failed, listed, TestResult};
use crate::support::guest_files;

/// Every test of every binary, by binary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    pub tests: BTreeMap<String, BTreeSet<String>>,
}

/// What a run's test lists hold that the inventory does not, and the other way round.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Difference {
    /// `<binary> <test>` in the inventory (and selected by the filter) but not listed.
    pub missing: Vec<String>,
    /// `<binary> <test>` listed but not in the inventory.
    pub unexpected: Vec<String>,
}

impl Inventory {
    /// Parses an inventory file's text; an error names the line.
    pub fn parse(text: &str) -> Result<Self> {
        let mut inv = Inventory::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let Some((binary, test)) = line.split_once(' ') else {
                bail!("line {}: `{line}` is not `<binary> <test name>`", i + 1);
            };
            inv.add(binary, test.trim());
        }
        Ok(inv)
    }

    /// Reads the inventory at `path`.
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("{} is not a test inventory", path.display()))
    }

    pub fn add(&mut self, binary: &str, test: &str) {
        self.tests
            .entry(binary.to_string())
            .or_default()
            .insert(test.to_string());
    }

    /// The file's text, headed by `header` (comment lines).
    pub fn render(&self, header: &str) -> String {
        let mut out: String = header.lines().map(|l| format!("# {l}\n")).collect();
        for (binary, tests) in &self.tests {
            for t in tests {
                out.push_str(&format!("{binary} {t}\n"));
            }
        }
        out
    }

    /// Compares `listed` (each binary's `--list`, already filtered by libtest with `filter`)
    /// with the inventory's tests that `filter` selects (libtest keeps a test whose name
    /// contains the filter, `filter_tests` in library/test/src/lib.rs). A binary listed as
    /// `None` (it never listed its tests, which fails the run already) is not compared.
    /// `full` false compares only one way: the run's arguments select tests in ways the
    /// inventory cannot replay, so only unexpected tests are named.
    pub fn compare(
        &self,
        listed: &BTreeMap<String, Option<Vec<String>>>,
        filter: Option<&str>,
        full: bool,
    ) -> Difference {
        let selected = |t: &String| filter.is_none_or(|f| t.contains(f));
        let mut d = Difference::default();
        let empty = BTreeSet::new();
        for (binary, tests) in &self.tests {
            match listed.get(binary) {
                Some(None) => continue,
                Some(Some(names)) if full => d.missing.extend(
                    tests
                        .iter()
                        .filter(|t| selected(t) && !names.contains(t))
                        .map(|t| format!("{binary} {t}")),
                ),
                None if full => d.missing.extend(
                    tests
                        .iter()
                        .filter(|t| selected(t))
                        .map(|t| format!("{binary} {t}")),
                ),
                _ => {}
            }
        }
        for (binary, names) in listed {
            let known = self.tests.get(binary).unwrap_or(&empty);
            d.unexpected.extend(
                names
                    .iter()
                    .flatten()
                    .filter(|t| !known.contains(*t))
                    .map(|t| format!("{binary} {t}")),
            );
        }
        d
    }
}

impl Difference {
    pub fn is_empty(&self) -> bool {
        self.missing.is_empty() && self.unexpected.is_empty()
    }

    /// The failing `guest:inventory` entry for a difference, naming every test (`file` is the
    /// inventory's path as the user sees it, `bless` the command that rewrites it).
    pub fn entry(&self, file: &str, bless: &str) -> Option<TestResult> {
        if self.is_empty() {
            return None;
        }
        let mut why = Vec::new();
        if !self.missing.is_empty() {
            why.push(format!(
                "{} listed in {file} did not run (not built, renamed or switched off): {}",
                count(self.missing.len()),
                self.missing.join(", ")
            ));
        }
        if !self.unexpected.is_empty() {
            why.push(format!(
                "{} ran that {file} does not list: {}",
                count(self.unexpected.len()),
                self.unexpected.join(", ")
            ));
        }
        Some(failed(
            "guest:inventory".into(),
            format!(
                "{}; if the change is meant, run `{bless}` and commit {file}",
                why.join("; ")
            ),
        ))
    }
}

/// Every test the binaries `(name, path)` hold, from each one's `--list --format terse` run
/// on this host (libtest lists without running a test; the guest runs the same files).
pub fn of_binaries<'a>(
    binaries: impl IntoIterator<Item = (&'a str, &'a Path)>,
) -> Result<Inventory> {
    let mut inv = Inventory::default();
    for (name, path) in binaries {
        let out = std::process::Command::new(path)
            .args(["--list", "--format", "terse"])
            .stdin(std::process::Stdio::null())
            .output()
            .with_context(|| format!("run {} --list", path.display()))?;
        if !out.status.success() {
            bail!(
                "`{} --list --format terse` failed ({}): {}",
                path.display(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let tests = listed(&String::from_utf8_lossy(&out.stdout));
        // A binary with no test is listed too, so that one left out of the build is missed.
        inv.tests.entry(name.to_string()).or_default();
        for t in tests {
            inv.add(name, &t);
        }
    }
    Ok(inv)
}

/// The inventory as a run's lists, for [`Inventory::compare`].
fn as_lists(inv: &Inventory) -> BTreeMap<String, Option<Vec<String>>> {
    inv.tests
        .iter()
        .map(|(b, t)| (b.clone(), Some(t.iter().cloned().collect())))
        .collect()
}

/// `inventory --bless` (`bless`) writes `built` to `path` (the file `file`, blessed by
/// `bless_cmd`, holding the tests `runner` must run); without it, compares the two. Returns
/// whether they agree (or the file was written) and what to say.
pub fn bless_or_check(
    built: &Inventory,
    path: &Path,
    (file, bless_cmd, runner): (&str, &str, &str),
    bless: bool,
) -> Result<(bool, String)> {
    if bless {
        let header = format!(
            "The tests `{runner}` must run: `<binary> <libtest name>`.\n\
             Written by `{bless_cmd}`; commit it with the change that adds, renames or removes a test."
        );
        crate::support::fs::write_atomic(path, built.render(&header).as_bytes())?;
        let n: usize = built.tests.values().map(BTreeSet::len).sum();
        return Ok((true, format!("wrote {} ({n} tests)", path.display())));
    }
    let d = Inventory::load(path)?.compare(&as_lists(built), None, true);
    Ok(match d.entry(file, bless_cmd) {
        None => (true, format!("{file} holds every test the build holds")),
        Some(e) => (false, e.reason.unwrap_or_default()),
    })
}

/// Each binary's `--list` as the guest wrote it (`None`: it wrote none).
pub fn read_lists(shared: &Path, binaries: &[String]) -> BTreeMap<String, Option<Vec<String>>> {
    binaries
        .iter()
        .map(|b| {
            let list = guest_files::read(&shared.join(files::list(b))).ok();
            (b.clone(), list.as_deref().map(listed))
        })
        .collect()
}

/// This repository's inventory, `tests/inventory.txt`.
pub const SUITE_FILE: &str = "tests/inventory.txt";
/// The command that rewrites it.
pub const SUITE_BLESS: &str = "cargo xtask inventory --bless";

/// A user's inventory for `bpfvm test`, in the workspace's root; optional.
pub const CRATE_FILE: &str = "bpfvm-inventory.txt";
/// The command that writes it.
pub const CRATE_BLESS: &str = "bpfvm inventory --bless";

/// `vm-test`'s inventory check: the failing entry when the run's lists and
/// `tests/inventory.txt` differ (or the file cannot be read).
pub fn check_suite(shared: &Path, binaries: &[String], filter: Option<&str>) -> Option<TestResult> {
    let path = crate::support::paths::workspace_root().join(SUITE_FILE);
    match Inventory::load(&path) {
        Ok(inv) => inv
            .compare(&read_lists(shared, binaries), filter, true)
            .entry(SUITE_FILE, SUITE_BLESS),
        Err(e) => Some(failed(
            "guest:inventory".into(),
            format!("{e:#}; `{SUITE_BLESS}` writes it"),
        )),
    }
}

fn count(n: usize) -> String {
    match n {
        1 => "1 test".into(),
        n => format!("{n} tests"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inv() -> Inventory {
        Inventory::parse(
            "# header\nb tests::bloom::a\nb tests::bloom::b\nb tests::bpf_loop::c\nother x\n",
        )
        .unwrap()
    }

    fn listed_as(pairs: &[(&str, Option<&[&str]>)]) -> BTreeMap<String, Option<Vec<String>>> {
        pairs
            .iter()
            .map(|(b, l)| {
                (
                    b.to_string(),
                    l.map(|l| l.iter().map(|s| s.to_string()).collect()),
                )
            })
            .collect()
    }

    #[test]
    fn a_module_switched_off_and_a_binary_left_out_are_missing_by_name() {
        let run = listed_as(&[("b", Some(&["tests::bloom::a", "tests::bloom::b"]))]);
        let d = inv().compare(&run, None, true);
        assert_eq!(d.missing, ["b tests::bpf_loop::c", "other x"]);
        assert!(d.unexpected.is_empty());
        let e = d
            .entry("tests/inventory.txt", "cargo xtask inventory --bless")
            .unwrap();
        assert_eq!(e.name, "guest:inventory");
        assert_eq!(
            e.reason.unwrap(),
            "2 tests listed in tests/inventory.txt did not run (not built, renamed or switched \
             off): b tests::bpf_loop::c, other x; if the change is meant, run \
             `cargo xtask inventory --bless` and commit tests/inventory.txt"
        );
    }

    #[test]
    fn a_filter_selects_what_must_run_and_a_renamed_test_is_both_missing_and_unexpected() {
        let run = listed_as(&[("b", Some(&["tests::bloom::a", "tests::bloom::b2"]))]);
        let d = inv().compare(&run, Some("bloom"), true);
        assert_eq!(d.missing, ["b tests::bloom::b"]);
        assert_eq!(d.unexpected, ["b tests::bloom::b2"]);
        let whole = listed_as(&[("b", Some(&["tests::bloom::a", "tests::bloom::b"]))]);
        assert!(inv().compare(&whole, Some("bloom"), true).is_empty());
        assert_eq!(
            inv().compare(&run, None, false),
            Difference {
                missing: vec![],
                unexpected: vec!["b tests::bloom::b2".into()]
            },
            "one way only"
        );
    }

    #[test]
    fn a_binary_that_never_listed_is_left_to_its_own_failure() {
        let run = listed_as(&[("b", None), ("other", Some(&["x"]))]);
        assert!(inv().compare(&run, None, true).is_empty());
    }

    #[test]
    fn the_file_reads_back_what_it_writes_and_a_bad_line_is_named() {
        let text = inv().render("written by a test");
        assert!(
            text.starts_with("# written by a test\nb tests::bloom::a\n"),
            "{text}"
        );
        assert_eq!(Inventory::parse(&text).unwrap(), inv());
        let e = format!("{:#}", Inventory::parse("b x\nlonely\n").unwrap_err());
        assert!(e.contains("line 2: `lonely`"), "{e}");
    }
}
