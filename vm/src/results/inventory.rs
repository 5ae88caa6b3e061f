//! The committed list of tests a run must hold: `tests/inventory.txt` for this repository's
//! suite (`cargo xtask inventory --bless` writes it), an optional `bpfvm-inventory.txt` in a
//! user's workspace for `bpfvm test` (`bpfvm inventory --bless`). Without it a whole module
//! switched off (`#[cfg(any())] mod bpf_loop;`), a renamed test or a test binary left out of the
//! build is a green run: nothing else knows which tests should run.
//!
//! One line per test, `<binary> <libtest name>`, sorted; `#` starts a comment. The list is the
//! same for every kernel: one build runs on every pin, and a test that skips on a kernel still
//! runs and is listed. An `#[ignore]`d test never runs, so its line says why:
//! `<binary> <libtest name> ignored: <reason>`; an ignored test whose line does not fails the run.
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::machine::guest::files;
use crate::results::report::{display_name, failed, ignored_tests, listed, Outcome, TestResult};
use crate::support::guest_files;

/// Every test of every binary, by binary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    pub tests: BTreeMap<String, BTreeSet<String>>,
    /// The tests recorded as `#[ignore]`d, by (binary, libtest name), with the reason given.
    pub ignored: BTreeMap<(String, String), String>,
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
            let Some((binary, rest)) = line.split_once(' ') else {
                bail!("line {}: `{line}` is not `<binary> <test name>`", i + 1);
            };
            // libtest names hold no space: what follows the name is the ignored record.
            let (test, note) = rest.trim().split_once(' ').unwrap_or((rest.trim(), ""));
            inv.add(binary, test);
            let note = note.trim();
            if note.is_empty() {
                continue;
            }
            match note.strip_prefix(IGNORED).map(str::trim) {
                Some(reason) if !reason.is_empty() => {
                    inv.ignored
                        .insert((binary.into(), test.into()), reason.into());
                }
                _ => bail!(
                    "line {}: `{line}` is not `<binary> <test name>` or `<binary> <test name> \
                     {IGNORED} <reason>`",
                    i + 1
                ),
            }
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
                match self.ignored.get(&(binary.clone(), t.clone())) {
                    Some(reason) => out.push_str(&format!("{binary} {t} {IGNORED} {reason}\n")),
                    None => out.push_str(&format!("{binary} {t}\n")),
                }
            }
        }
        out
    }

    /// The ignored records of `old` for the tests this inventory holds, so that a bless keeps
    /// them (a build's `--list` does not say which tests are ignored, nor why).
    fn keep_ignored(&mut self, old: &Inventory) {
        self.ignored = old
            .ignored
            .iter()
            .filter(|((b, t), _)| self.tests.get(b).is_some_and(|ts| ts.contains(t)))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
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
        self.compare_selected(listed, &|_, t| filter.is_none_or(|f| t.contains(f)), full)
    }

    /// [`Inventory::compare`] with the tests `selected(binary, test)` picks out as those that
    /// must run (a piece's, `results::plan`).
    pub fn compare_selected(
        &self,
        listed: &BTreeMap<String, Option<Vec<String>>>,
        selected: &dyn Fn(&str, &str) -> bool,
        full: bool,
    ) -> Difference {
        let mut d = Difference::default();
        let empty = BTreeSet::new();
        for (binary, tests) in &self.tests {
            match listed.get(binary) {
                Some(None) => continue,
                Some(Some(names)) if full => d.missing.extend(
                    tests
                        .iter()
                        .filter(|t| selected(binary, t) && !names.contains(t))
                        .map(|t| format!("{binary} {t}")),
                ),
                None if full => d.missing.extend(
                    tests
                        .iter()
                        .filter(|t| selected(binary, t))
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
             An #[ignore]d test's line ends in `{IGNORED} <reason>` (written by hand, kept by a bless).\n\
             Written by `{bless_cmd}`; commit it with the change that adds, renames or removes a test."
        );
        let mut built = built.clone();
        // A file that does not parse would lose its ignored records: it is named instead.
        if path.exists() {
            built.keep_ignored(&Inventory::load(path)?);
        }
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

/// `vm-test`'s inventory check: a failing entry when the run's lists and the tests of
/// `tests/inventory.txt` that `selected(binary, test)` picks (a filter's, a piece's) differ (or the file cannot be read), and each ignored test it does not
/// record as ignored failed ([`judge_ignored`]).
pub fn check_suite(
    tests: &mut Vec<TestResult>,
    shared: &Path,
    binaries: &[String],
    selected: &dyn Fn(&str, &str) -> bool,
) {
    let path = crate::support::paths::workspace_root().join(SUITE_FILE);
    let inv = Inventory::load(&path);
    judge_ignored(
        tests,
        shared,
        binaries,
        inv.as_ref().ok(),
        SUITE_FILE,
        |_, test| display_name(test),
    );
    tests.extend(match inv {
        Ok(inv) => inv
            .compare_selected(&read_lists(shared, binaries), selected, true)
            .entry(SUITE_FILE, SUITE_BLESS),
        Err(e) => Some(failed(
            "guest:inventory".into(),
            format!("{e:#}; `{SUITE_BLESS}` writes it"),
        )),
    });
}

/// What ends an ignored test's line: `<binary> <test> ignored: <reason>`.
pub const IGNORED: &str = "ignored:";

/// Each test libtest reported `ignored` (an `#[ignore]`d test, never run) in the binaries'
/// JSON events: a skip with its recorded reason when `inv` (the file `file`) records it as
/// ignored, a failure naming the fix when it does not, and a plain skip without an inventory
/// (a user's crate that has none). `report_name` makes a (binary, libtest name) the
/// test's name in `tests`.
pub fn judge_ignored(
    tests: &mut [TestResult],
    shared: &Path,
    binaries: &[String],
    inv: Option<&Inventory>,
    file: &str,
    report_name: impl Fn(&str, &str) -> String,
) {
    for binary in binaries {
        let jsonl = guest_files::read(&shared.join(format!("{binary}.jsonl"))).unwrap_or_default();
        for test in ignored_tests(&jsonl) {
            let name = report_name(binary, &test);
            let Some(t) = tests.iter_mut().find(|t| t.name == name) else {
                continue;
            };
            match inv.map(|i| i.ignored.get(&(binary.clone(), test.clone()))) {
                Some(Some(reason)) => t.reason = Some(format!("#[ignore]d: {reason}")),
                // A crate without an inventory checks no test's presence: its #[ignore]d tests
                // stay skips, as `cargo test` reports them.
                None => t.reason = Some(format!("#[ignore]d (no {file} records why)")),
                Some(None) => {
                    t.outcome = Outcome::Fail;
                    t.reason = Some(format!(
                        "#[ignore]d, so it never ran, and {file} does not record it as ignored: \
                         remove the #[ignore], or end its line in {file} with the reason: \
                         `{binary} {test} {IGNORED} <reason>`"
                    ));
                }
            }
        }
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

    #[test]
    fn an_ignored_line_keeps_its_reason_and_an_ignored_line_without_one_is_named() {
        let text = "b tests::bloom::a ignored: needs a NIC the VM lacks\nb tests::bloom::b\n";
        let parsed = Inventory::parse(text).unwrap();
        assert_eq!(
            parsed.ignored[&("b".into(), "tests::bloom::a".into())],
            "needs a NIC the VM lacks"
        );
        assert_eq!(parsed.tests["b"].len(), 2);
        assert_eq!(parsed.render(""), text);
        for bad in ["b x ignored:", "b x ignored: ", "b x because"] {
            let e = format!("{:#}", Inventory::parse(bad).unwrap_err());
            assert!(
                e.contains("line 1") && e.contains("ignored: <reason>"),
                "{e}"
            );
        }
    }

    const IGNORED_RUN: &str = r#"{ "type": "test", "event": "started", "name": "tests::bloom::a" }
{ "type": "test", "name": "tests::bloom::a", "event": "ok", "exec_time": 0.01 }
{ "type": "test", "name": "tests::bloom::b", "event": "ignored" }
"#;

    /// The results of a binary `b` whose test `bloom::b` libtest reported `ignored`, judged
    /// against `inv`, from a directory standing for the shared one.
    fn judged_ignored(inv: Option<&Inventory>) -> Vec<TestResult> {
        let shared = tempfile::tempdir().unwrap();
        std::fs::write(shared.path().join("b.jsonl"), IGNORED_RUN).unwrap();
        std::fs::write(
            shared.path().join(files::list("b")),
            "tests::bloom::a: test\ntests::bloom::b: test\n",
        )
        .unwrap();
        std::fs::write(shared.path().join("b.rc"), "0").unwrap();
        let out = crate::results::report::read_binary(shared.path(), "b");
        let mut tests = crate::results::report::parse_binary(&out, "");
        judge_ignored(
            &mut tests,
            shared.path(),
            &["b".into()],
            inv,
            SUITE_FILE,
            |_, t| display_name(t),
        );
        tests
    }

    #[test]
    fn an_ignored_test_fails_unless_the_inventory_records_why() {
        let tests = judged_ignored(Some(&inv()));
        let b = tests.iter().find(|t| t.name == "bloom::b").unwrap();
        assert_eq!(b.outcome, Outcome::Fail);
        assert_eq!(
            b.reason.as_deref().unwrap(),
            "#[ignore]d, so it never ran, and tests/inventory.txt does not record it as \
             ignored: remove the #[ignore], or end its line in tests/inventory.txt with the \
             reason: `b tests::bloom::b ignored: <reason>`"
        );
        let without = judged_ignored(None);
        let b = without.iter().find(|t| t.name == "bloom::b").unwrap();
        assert_eq!(b.outcome, Outcome::Skip, "a crate without an inventory");
        assert_eq!(
            b.reason.as_deref(),
            Some("#[ignore]d (no tests/inventory.txt records why)")
        );
        let recorded =
            Inventory::parse("b tests::bloom::a\nb tests::bloom::b ignored: flaky on TCG\n")
                .unwrap();
        let tests = judged_ignored(Some(&recorded));
        let b = tests.iter().find(|t| t.name == "bloom::b").unwrap();
        assert_eq!(b.outcome, Outcome::Skip);
        assert_eq!(b.reason.as_deref(), Some("#[ignore]d: flaky on TCG"));
        assert!(
            tests.iter().all(|t| t.outcome != Outcome::Fail),
            "{tests:?}"
        );
    }

    #[test]
    fn a_bless_keeps_the_ignored_records_of_the_tests_still_built() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("inventory.txt");
        std::fs::write(
            &path,
            "b tests::bloom::a ignored: slow\nb tests::gone ignored: old\n",
        )
        .unwrap();
        let built = Inventory::parse("b tests::bloom::a\nb tests::bloom::b\n").unwrap();
        let names = (SUITE_FILE, SUITE_BLESS, "cargo xtask vm-test");
        assert!(bless_or_check(&built, &path, names, true).unwrap().0);
        let written = Inventory::load(&path).unwrap();
        assert_eq!(
            written.ignored,
            BTreeMap::from([(("b".into(), "tests::bloom::a".into()), "slow".into())])
        );
        assert_eq!(written.tests, built.tests);
        assert!(bless_or_check(&built, &path, names, false).unwrap().0);
    }
}
