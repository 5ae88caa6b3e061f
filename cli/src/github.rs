//! `bpfvm github-summary`: a run's reports as GitHub sees them. The step summary is
//! GitHub-flavoured markdown for `$GITHUB_STEP_SUMMARY` (each kernel's verdict, the failures,
//! the matrix); the annotations are workflow commands (`::error file=F,line=L::...`) at the
//! `file:line` of each failing test's panic.
//!
//! Everything a test printed is guest text, so untrusted: in an annotation it is escaped as
//! GitHub's toolkit escapes command data (`%`, `\r`, `\n`; properties also `:` and `,`), so
//! it stays one line and cannot start a command of its own; in the markdown, `&`, `<`, `>`, `|`
//! and line breaks are escaped so it cannot end its table cell or inject HTML.
//! Sources: <https://docs.github.com/en/actions/reference/workflow-commands-for-github-actions>
//! and `@actions/core`'s `command.ts` (`escapeData`, `escapeProperty`).
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use bpfvm_host::results::report::{Outcome, Report};

/// The reports in `dir`: a `bpfvm test` directory's `matrix.json` (every kernel), or one
/// kernel's `report.json` (`bpfvm test`'s `<kernel>/`, `vm-test`'s `target/vm-test/<kernel>/`).
pub fn load(dir: &Path) -> Result<Vec<Report>> {
    let matrix = dir.join("matrix.json");
    let single = dir.join("report.json");
    if matrix.is_file() {
        let text = std::fs::read_to_string(&matrix)
            .with_context(|| format!("reading {}", matrix.display()))?;
        serde_json::from_str(&text).with_context(|| format!("{} is not a matrix", matrix.display()))
    } else if single.is_file() {
        let text = std::fs::read_to_string(&single)
            .with_context(|| format!("reading {}", single.display()))?;
        let r = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a report", single.display()))?;
        Ok(vec![r])
    } else {
        bail!(
            "{} holds neither matrix.json nor report.json: pass the directory `bpfvm test` \
             printed (`reports: ...`) or a kernel's directory under it",
            dir.display()
        )
    }
}

/// Where a panic happened, as libtest's captured output says it (Rust 1.73 and later:
/// `thread 'name' panicked at src/x.rs:12:5:`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: String,
    pub line: u32,
}

/// The first panic location in a test's failure text.
pub fn panic_location(text: &str) -> Option<Location> {
    let rest = &text[text.find("panicked at ")? + "panicked at ".len()..];
    let token = rest.split_whitespace().next()?.trim_end_matches(':');
    let mut parts = token.rsplitn(3, ':');
    let _column: u32 = parts.next()?.parse().ok()?;
    let line = parts.next()?.parse().ok()?;
    let file = parts.next().filter(|f| !f.is_empty())?;
    Some(Location {
        file: file.to_string(),
        line,
    })
}

/// How panic paths map to repository paths. rustc names a file relative to the workspace
/// root of the crate that was built (`tests/maps.rs`), so a crate in a subdirectory needs that
/// subdirectory as `prefix`; an absolute path is kept only inside `repo` (the checkout), made
/// relative to it. A file elsewhere (std's `/rustc/...`, a dependency in `~/.cargo`) gets no
/// file in its annotation.
#[derive(Debug, Clone, Default)]
pub struct Paths {
    pub prefix: PathBuf,
    pub repo: Option<PathBuf>,
}

impl Paths {
    fn in_repo(&self, file: &str) -> Option<String> {
        let file = Path::new(file);
        let path = if file.is_absolute() {
            file.strip_prefix(self.repo.as_deref()?).ok()?.to_path_buf()
        } else {
            self.prefix.join(file)
        };
        Some(path.to_str()?.trim_start_matches("./").to_string())
    }
}

/// One failing test, on each kernel it failed on.
struct Failure<'a> {
    test: &'a str,
    kernels: Vec<&'a str>,
    reason: &'a str,
}

/// Failing tests in the order of the reports, one entry per test and reason (the same panic
/// on two kernels is one entry).
fn failures(reports: &[Report]) -> Vec<Failure<'_>> {
    let mut out: Vec<Failure> = Vec::new();
    for r in reports {
        for t in r.tests.iter().filter(|t| t.outcome == Outcome::Fail) {
            let reason = t.reason.as_deref().unwrap_or("failed");
            let kernel = r.kernel.version.as_str();
            match out
                .iter_mut()
                .find(|f| f.test == t.name && same_failure(f.reason, reason))
            {
                Some(f) => f.kernels.push(kernel),
                None => out.push(Failure {
                    test: &t.name,
                    kernels: vec![kernel],
                    reason,
                }),
            }
        }
    }
    out
}

/// Two failure texts say the same when they differ only in the thread id libtest prints
/// (`thread 'x' (228) panicked at`).
fn same_failure(a: &str, b: &str) -> bool {
    let strip = |s: &str| -> String {
        let first = s.lines().next().unwrap_or("");
        let first = match (first.find(" ("), first.find(") panicked at ")) {
            (Some(i), Some(j)) if i < j => format!("{}{}", &first[..i], &first[j + 1..]),
            _ => first.to_string(),
        };
        s.lines().skip(1).fold(first, |acc, l| acc + "\n" + l)
    };
    strip(a) == strip(b)
}

/// The failure text without libtest's `thread '...' panicked at ...:` line, which the
/// annotation's place already says.
fn message(reason: &str) -> &str {
    match reason.split_once('\n') {
        Some((first, rest)) if first.contains("panicked at ") && !rest.trim().is_empty() => {
            rest.trim()
        }
        _ => reason.trim(),
    }
}

/// `::error` lines: one per failing test (at its panic's place when that is in the
/// repository), and one per kernel whose run failed for another reason (the VM, a splat).
pub fn annotations(reports: &[Report], paths: &Paths) -> Vec<String> {
    let mut out = Vec::new();
    for f in failures(reports) {
        let title = format!("{} failed on {}", f.test, f.kernels.join(", "));
        let place = panic_location(f.reason)
            .and_then(|loc| Some((paths.in_repo(&loc.file)?, loc.line)))
            .map(|(file, line)| format!("file={},line={line},", escape_property(&file)))
            .unwrap_or_default();
        out.push(format!(
            "::error {place}title={}::{}",
            escape_property(&title),
            escape_data(message(f.reason))
        ));
    }
    for r in reports {
        if let Some(why) = r.why_failed().filter(|_| r.summary.failed == 0) {
            let title = format!("bpfvm: kernel {}", r.kernel.version);
            out.push(format!(
                "::error title={}::{}",
                escape_property(&title),
                escape_data(&why)
            ));
        }
    }
    out
}

/// The step summary: a verdict per kernel, the failures, and (for more than one kernel) the
/// matrix of every test.
pub fn step_summary(reports: &[Report], paths: &Paths) -> String {
    let failed = reports.iter().filter(|r| !r.ok()).count();
    let mut md = format!(
        "### bpfvm: {} of {} kernel{} failed\n\n",
        failed,
        reports.len(),
        if reports.len() == 1 { "" } else { "s" }
    );
    md.push_str("| kernel | release | accel | passed | failed | skipped | VM | verdict |\n");
    md.push_str("| --- | --- | --- | ---: | ---: | ---: | ---: | --- |\n");
    for r in reports {
        let s = &r.summary;
        let verdict = match r.why_failed() {
            None => "ok".to_string(),
            Some(why) => format!("**FAIL**: {}", cell(&why)),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} | {:.0} s | {verdict} |",
            cell(&r.kernel.version),
            cell(r.kernel.release.as_deref().unwrap_or("?")),
            cell(&r.accel.name),
            s.passed,
            s.failed,
            s.skipped,
            r.vm.wall_time_s,
        );
    }
    let fails = failures(reports);
    if !fails.is_empty() {
        md.push_str(
            "\n#### Failures\n\n| test | kernels | where | message |\n| --- | --- | --- | --- |\n",
        );
        for f in &fails {
            let place = panic_location(f.reason).map_or(String::new(), |loc| {
                let file = paths.in_repo(&loc.file).unwrap_or(loc.file);
                format!("{}:{}", cell(&file), loc.line)
            });
            let _ = writeln!(
                md,
                "| {} | {} | {place} | {} |",
                cell(f.test),
                cell(&f.kernels.join(", ")),
                cell(message(f.reason)),
            );
        }
    }
    if reports.len() > 1 {
        md.push_str("\n#### Matrix\n\n| test |");
        for r in reports {
            let _ = write!(md, " {} |", cell(&r.kernel.version));
        }
        md.push_str("\n| --- |");
        md.push_str(&" :---: |".repeat(reports.len()));
        md.push('\n');
        let names = bpfvm_host::results::report::test_names(reports);
        for name in names {
            let _ = write!(md, "| {} |", cell(name));
            for r in reports {
                let mark = match r.tests.iter().find(|t| t.name == name).map(|t| t.outcome) {
                    Some(Outcome::Pass) => "pass",
                    Some(Outcome::Fail) => "**FAIL**",
                    Some(Outcome::Skip) => "skip",
                    None => "-",
                };
                let _ = write!(md, " {mark} |");
            }
            md.push('\n');
        }
    }
    md.push_str(&verifier_section(reports));
    md
}

/// The verifier's statistics of the runs that have them (`vm::verifier::matrix`): processed
/// instructions per program and kernel, why the rest did not verify, and the `bpf_loop`
/// calls the verifier left.
fn verifier_section(reports: &[Report]) -> String {
    use bpfvm_host::results::verifier::matrix;
    let kernels = matrix::of_reports(reports);
    if kernels.is_empty() {
        return String::new();
    }
    let table = |md: &mut String, title: &str, rows: Vec<Vec<String>>| {
        let _ = write!(md, "\n| {title} |");
        for (k, _) in &kernels {
            let _ = write!(md, " {} |", cell(k));
        }
        md.push_str("\n| --- |");
        md.push_str(&" ---: |".repeat(kernels.len()));
        md.push('\n');
        for r in rows {
            let cells: Vec<String> = r.iter().map(|c| cell(c)).collect();
            let _ = writeln!(md, "| {} |", cells.join(" | "));
        }
    };
    let mut md = String::from("\n#### Verifier: processed instructions (✗ rejected)\n");
    table(&mut md, "program", matrix::rows(&kernels));
    let reasons = matrix::reasons(&kernels);
    if !reasons.is_empty() {
        md.push('\n');
        for r in reasons {
            let _ = writeln!(md, "- {}", cell(&r));
        }
    }
    let loops = matrix::bpf_loop_rows(&kernels);
    if !loops.is_empty() {
        table(&mut md, "bpf_loop calls: loaded -> left", loops);
    }
    md
}

/// Guest text in a markdown table cell: one line, no cell break, no HTML.
fn cell(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.trim().chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '|' => out.push_str("\\|"),
            '\n' => out.push_str("<br>"),
            '\r' => {}
            c if c.is_control() && c != '\t' => out.extend(c.escape_unicode()),
            c => out.push(c),
        }
    }
    out
}

/// A workflow command's message (`@actions/core`'s `escapeData`); other control characters
/// (a terminal's escape sequences) are written out as `\u{..}`.
pub fn escape_data(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '%' => "%25".to_string(),
            '\r' => "%0D".to_string(),
            '\n' => "%0A".to_string(),
            c if c.is_control() && c != '\t' => c.escape_unicode().to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// A workflow command's property value (`escapeProperty`).
pub fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A real `bpfvm test --kernel 6.1,6.12` of examples/map-test with a failing test planted
    /// by hand (`maps::planted_failure`, an `assert_eq!` at tests/maps.rs:46).
    fn planted() -> PathBuf {
        Path::new(&std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets it"))
            .join("tests/fixtures/planted")
    }

    fn example_paths() -> Paths {
        Paths {
            prefix: "examples/map-test".into(),
            repo: Some("/home/runner/work/bpfvm/bpfvm".into()),
        }
    }

    #[test]
    fn the_planted_failure_is_annotated_at_its_panic_once_for_both_kernels() {
        let reports = load(&planted()).unwrap();
        assert_eq!(reports.len(), 2);
        let lines = annotations(&reports, &example_paths());
        assert_eq!(
            lines,
            ["::error file=examples/map-test/tests/maps.rs,line=46,\
              title=maps%3A%3Aplanted_failure failed on 6.1%2C 6.12::\
              assertion `left == right` failed: planted: key 7 was never inserted%0A  \
              left: None%0A right: Some(7)"]
        );
    }

    #[test]
    fn the_verifier_matrix_shows_each_kernels_insns_and_the_rejections_made_inert() {
        use bpfvm_host::results::verifier::{ProgStats, Verdict};
        let mut reports = load(&planted()).unwrap();
        assert!(!step_summary(&reports, &example_paths()).contains("#### Verifier"));
        let mut ok = ProgStats::not_loaded("counter", "count", String::new());
        ok.verdict = Verdict::Success;
        ok.reason = None;
        ok.log.processed_insns = Some(40);
        let mut bad = ok.clone();
        bad.verdict = Verdict::Rejected;
        bad.log.processed_insns = Some(7);
        bad.reason = Some("R1 <invalid> | mem access".into());
        reports[0].verifier = vec![ok];
        reports[1].verifier = vec![bad];
        let md = step_summary(&reports, &example_paths());
        assert!(md.contains("| program | 6.1 | 6.12 |"), "{md}");
        assert!(md.contains("| counter/count | 40 | ✗ 7 |"), "{md}");
        assert!(
            md.contains("- 6.12: rejected: R1 &lt;invalid&gt; \\| mem access: counter/count"),
            "{md}"
        );
    }

    #[test]
    fn the_summary_has_the_failure_row_and_the_matrix() {
        let reports = load(&planted()).unwrap();
        let md = step_summary(&reports, &example_paths());
        assert!(md.starts_with("### bpfvm: 2 of 2 kernels failed\n"), "{md}");
        assert!(
            md.contains(
                "| maps::planted_failure | 6.1, 6.12 | examples/map-test/tests/maps.rs:46 | \
                 assertion `left == right` failed: planted: key 7 was never inserted<br>  \
                 left: None<br> right: Some(7) |"
            ),
            "{md}"
        );
        assert!(
            md.contains("| 6.1 | 6.1.0-57-cloud-amd64 | tcg | 3 | 1 | 0 |"),
            "{md}"
        );
        assert!(
            md.contains("| maps::planted_failure | **FAIL** | **FAIL** |"),
            "{md}"
        );
        assert!(
            md.contains("| maps::runs_as_root_in_the_guest | pass | pass |"),
            "{md}"
        );
    }

    #[test]
    fn junit_and_one_kernels_directory_name_the_planted_test() {
        let junit = std::fs::read_to_string(planted().join("6.1/junit.xml")).unwrap();
        assert!(
            junit.contains(r#"<testcase name="maps::planted_failure""#),
            "{junit}"
        );
        assert!(junit.contains("<failure message="), "{junit}");
        let one = load(&planted().join("6.12")).unwrap();
        assert_eq!(one.len(), 1);
        assert_eq!(
            one[0].why_failed().as_deref(),
            Some("1 test failed: maps::planted_failure")
        );
        let md = step_summary(&one, &Paths::default());
        assert!(md.starts_with("### bpfvm: 1 of 1 kernel failed\n"), "{md}");
        assert!(!md.contains("#### Matrix"), "{md}");
        assert!(md.contains("| tests/maps.rs:46 |"), "{md}");
    }

    #[test]
    fn a_directory_without_reports_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = load(dir.path()).unwrap_err().to_string();
        assert!(
            e.contains("holds neither matrix.json nor report.json"),
            "{e}"
        );
    }

    #[test]
    fn guest_text_cannot_break_out_of_its_annotation_or_cell() {
        let mut reports = load(&planted().join("6.1")).unwrap();
        let t = reports[0]
            .tests
            .iter_mut()
            .find(|t| t.name == "maps::planted_failure")
            .unwrap();
        t.reason = Some(
            "thread 'x' panicked at /rustc/abc/library/core/src/x.rs:1:1:\n\
             100% done\r\n::add-mask::secret\n| <img src=x> |\x1b[2J"
                .into(),
        );
        let lines = annotations(&reports, &example_paths());
        assert_eq!(lines.len(), 1);
        assert!(!lines[0].contains('\n') && !lines[0].contains('\r'));
        assert!(
            !lines[0].contains("file="),
            "std's file is not the repo's: {}",
            lines[0]
        );
        assert!(
            lines[0].ends_with("::100%25 done%0D%0A::add-mask::secret%0A| <img src=x> |\\u{1b}[2J"),
            "{}",
            lines[0]
        );
        let md = step_summary(&reports, &example_paths());
        assert!(
            md.contains(
                "| 100% done<br>::add-mask::secret<br>\\| &lt;img src=x&gt; \\|\\u{1b}[2J |"
            ),
            "{md}"
        );
    }

    #[test]
    fn panic_locations_in_the_repository() {
        let loc = |s| panic_location(s);
        assert_eq!(
            loc("thread 't' (12) panicked at src/lib.rs:12:5:\nboom"),
            Some(Location {
                file: "src/lib.rs".into(),
                line: 12
            })
        );
        assert_eq!(loc("no panic here"), None);
        assert_eq!(loc("thread 't' panicked at somewhere"), None);
        let p = example_paths();
        assert_eq!(
            p.in_repo("/home/runner/work/bpfvm/bpfvm/src/a.rs")
                .as_deref(),
            Some("src/a.rs")
        );
        assert_eq!(p.in_repo("/root/.cargo/registry/src/x.rs"), None);
        assert_eq!(
            p.in_repo("tests/maps.rs").as_deref(),
            Some("examples/map-test/tests/maps.rs")
        );
    }

    #[test]
    fn a_kernel_that_failed_without_a_failing_test_is_annotated() {
        let r = Report::not_run("6.12", "fetching the kernel failed");
        let lines = annotations(&[r], &Paths::default());
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].starts_with("::error title=bpfvm%3A kernel 6.12::"),
            "{}",
            lines[0]
        );
    }
}
