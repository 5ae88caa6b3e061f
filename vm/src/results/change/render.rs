//! A change written out: `change.md` (the pull-request comment: regressions first, the rest
//! collapsed, under GitHub's comment limit), `change.json`, `junit.xml` (a regression is a
//! failure; a failure the base already had or a flake is not) and the same markdown for the
//! step summary.
use std::fmt::Write as _;
use std::path::Path;

use anyhow::Result;

use super::cost::Cost;
use super::model::{Category, Change, Run, Side, TestChange, JSON, JUNIT, MARKDOWN};
use super::verifier::{moved, ProgChange};
use crate::results::bench::model::Clock;
use crate::results::bench::{ab, compare};
use crate::results::report::Outcome;
use crate::support::status::Status;

/// GitHub refuses a comment body longer than this many characters.
pub const COMMENT_LIMIT: usize = 65_536;
/// What `change.md` may use of it: the rest is left to the workflow's marker and header.
pub const BUDGET: usize = COMMENT_LIMIT - 1_024;
/// A reason shown in a row is cut to this many characters (change.json has it whole).
const REASON_CHARS: usize = 300;

/// Writes `change.md`, `change.json` and `junit.xml` into `dir`; returns the markdown.
pub fn write(change: &Change, dir: &Path) -> Result<String> {
    std::fs::create_dir_all(dir)?;
    let md = markdown(change, BUDGET);
    let json = serde_json::to_string_pretty(change)? + "\n";
    crate::support::fs::write_atomic(&dir.join(MARKDOWN), md.as_bytes())?;
    crate::support::fs::write_atomic(&dir.join(JSON), json.as_bytes())?;
    crate::support::fs::write_atomic(&dir.join(JUNIT), junit(change)?.as_bytes())?;
    Ok(md)
}

/// Appends `md` to the file GitHub Actions names in `$GITHUB_STEP_SUMMARY`, if it names one.
pub fn step_summary(md: &str) -> Result<()> {
    use std::io::Write;
    let Some(file) = std::env::var_os("GITHUB_STEP_SUMMARY") else {
        return Ok(());
    };
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&file)?;
    Ok(f.write_all(md.as_bytes())?)
}

/// Guest text in a table cell: one line, no cell break, no HTML, at most `max` characters.
fn cell(s: &str, max: usize) -> String {
    let mut out = String::new();
    let mut chars = s.trim().chars();
    for c in chars.by_ref().take(max) {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '|' => out.push_str("\\|"),
            '`' => out.push('\''),
            '\n' | '\r' => out.push(' '),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

/// `FAIL, FAIL (rerun)`: one side's runs.
fn runs(t: &TestChange, side: Side) -> String {
    let each = t.runs.iter().filter(|r| r.side == side).map(|r: &Run| {
        let o = match r.outcome {
            Outcome::Pass => "pass",
            Outcome::Fail => "FAIL",
            Outcome::Skip => "skip",
        };
        if r.rerun {
            format!("{o} (rerun)")
        } else {
            o.to_string()
        }
    });
    let all: Vec<String> = each.collect();
    if all.is_empty() {
        "absent".into()
    } else {
        all.join(", ")
    }
}

/// The first failing run's reason at head.
fn head_reason(t: &TestChange) -> &str {
    let failing = t.runs.iter().filter(|r| r.side == Side::Head);
    let mut reasons = failing.filter(|r| r.outcome == Outcome::Fail);
    reasons.find_map(|r| r.reason.as_deref()).unwrap_or("")
}

const TEST_HEADER: &str =
    "| kernel | test | head | base | reason at head |\n|---|---|---|---|---|\n";

fn test_row(t: &TestChange, reason: bool) -> String {
    let why = if reason {
        cell(head_reason(t), REASON_CHARS)
    } else {
        String::new()
    };
    format!(
        "| {} | `{}` | {} | {} | {why} |\n",
        cell(&t.kernel, 40),
        cell(&t.test, 200),
        runs(t, Side::Head),
        runs(t, Side::Base),
    )
}

const PROG_HEADER: &str = "| kernel | program | verdict | processed insns | total states | peak states | JIT bytes |\n|---|---|---|---|---|---|---|\n";

fn prog_row(p: &ProgChange) -> String {
    let verdict = |f: &Option<super::verifier::Figures>| {
        f.as_ref().map_or("-".to_string(), |f| {
            format!("{:?}", f.verdict).to_lowercase()
        })
    };
    let (b, h) = (p.base.as_ref(), p.head.as_ref());
    let fig = |g: fn(&super::verifier::Figures) -> Option<u64>| moved(b.and_then(g), h.and_then(g));
    let v = match (verdict(&p.base), verdict(&p.head)) {
        (x, y) if x == y => x,
        (x, y) => format!("**{x} → {y}**"),
    };
    format!(
        "| {} | `{}` | {v} | {} | {} | {} | {} |\n",
        cell(&p.kernel, 40),
        cell(&p.program, 200),
        fig(|f| f.processed_insns),
        fig(|f| f.total_states),
        fig(|f| f.peak_states),
        fig(|f| f.jited_bytes),
    )
}

/// A collapsed section: its title and rows, cut when the budget runs out.
struct Section {
    title: String,
    header: &'static str,
    rows: Vec<String>,
}

/// The comment: the verdict, every regression (rows with their reasons, or without when that
/// does not fit, or their names alone), the cost (every row, or only those that changed when
/// that does not fit), then the other categories collapsed, each cut to what fits in `budget`
/// characters; what was cut is said at the end, with change.json named.
pub fn markdown(change: &Change, budget: usize) -> String {
    let head = head_part(change);
    let regressions: Vec<&TestChange> = change.of(Category::Regression).collect();
    let verifier_regressions: Vec<&ProgChange> = change
        .verifier
        .iter()
        .filter(|p| p.regression.is_some())
        .collect();
    let part = |tests: &[&TestChange], detail: u8, every_cost_row: bool| {
        head.clone()
            + &regression_part(tests, &verifier_regressions, detail)
            + &cost_part(&change.cost, every_cost_row)
    };
    let cut_note_reserve = 600;
    let fits = |s: &str| s.chars().count() + cut_note_reserve <= budget;
    let mut md = part(&regressions, 2, true);
    let mut cut = vec![];
    let within: usize = change.cost.iter().map(within_threshold).sum();
    if !fits(&md) && within > 0 {
        md = part(&regressions, 2, false);
        cut.push(format!("{within} cost rows within the threshold"));
    }
    if !fits(&md) {
        md = part(&regressions, 1, false);
        cut.push("the regressions' reasons".to_string());
    }
    if !fits(&md) {
        md = part(&regressions, 0, false);
        cut.push("the regressions' table (their names are listed)".to_string());
    }
    // Only when even the names overflow the comment are regressions cut: the limit is GitHub's.
    // The cost rows that changed stay: a few hundred rows at most.
    let mut kept = regressions.len();
    while !fits(&md) && kept > 0 {
        kept = kept * 9 / 10;
        md = part(&regressions[..kept], 0, false);
    }
    if kept < regressions.len() {
        cut.insert(
            0,
            format!(
                "**{} of {} regressions** (their names alone exceed the limit)",
                regressions.len() - kept,
                regressions.len()
            ),
        );
    }
    for s in sections(change) {
        if s.rows.is_empty() {
            continue;
        }
        let open = format!(
            "\n<details><summary>{} ({})</summary>\n\n{}",
            s.title,
            s.rows.len(),
            s.header
        );
        let close = "\n</details>\n";
        let len = |s: &str| s.chars().count();
        let mut used = len(&md) + len(&open) + len(close) + cut_note_reserve;
        let mut part = open;
        let mut kept = 0;
        for r in &s.rows {
            used += len(r);
            if used > budget {
                break;
            }
            part.push_str(r);
            kept += 1;
        }
        if kept > 0 {
            md += &part;
            md += close;
        }
        if kept < s.rows.len() {
            cut.push(format!(
                "{} of {} rows of {}",
                s.rows.len() - kept,
                s.rows.len(),
                s.title
            ));
        }
    }
    if !cut.is_empty() {
        let _ = write!(
            md,
            "\n**Cut to stay under GitHub's {COMMENT_LIMIT}-character comment limit:** {}. \
             Every run of every test is in `change.json`.\n",
            cut.join("; ")
        );
    }
    md
}

/// The terminal's account: the verdict, the counts, every regression with its runs and the
/// cost rows that changed.
pub fn brief(change: &Change) -> String {
    let regressions: Vec<&TestChange> = change.of(Category::Regression).collect();
    let progs: Vec<&ProgChange> = change
        .verifier
        .iter()
        .filter(|p| p.regression.is_some())
        .collect();
    head_part(change) + &regression_part(&regressions, &progs, 2) + &cost_part(&change.cost, false)
}

/// The title and the verdict with the count per category.
fn head_part(c: &Change) -> String {
    let short = |s: &str| s.chars().take(12).collect::<String>();
    let mut md = format!(
        "## bpfvm: what `{}` ({}) did against `{}` ({})\n\n",
        cell(&c.head.name, 80),
        short(&c.head.commit),
        cell(&c.base.name, 80),
        short(&c.base.commit)
    );
    // A cost that failed counts its changed rows, or itself when head's own boots failed it.
    let costs = c.cost.iter().filter(|x| x.status == Status::Bad);
    let regressions = c.of(Category::Regression).count()
        + c.verifier.iter().filter(|p| p.regression.is_some()).count()
        + costs.map(|x| x.changed().len().max(1)).sum::<usize>();
    let verdict = match c.exit_status {
        0 => "no regression".to_string(),
        1 => format!(
            "**{regressions} regression{}**",
            if regressions == 1 { "" } else { "s" }
        ),
        125 => "**head cannot be built**".to_string(),
        _ => "**not judged**".to_string(),
    };
    let _ = writeln!(md, "Verdict: {verdict} (exit status {}).\n", c.exit_status);
    for k in &c.kernels {
        if let Some(p) = &k.problem {
            let _ = writeln!(md, "- kernel {}: {}", cell(&k.kernel, 40), cell(p, 600));
        }
    }
    let counts: Vec<String> = c
        .counts()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(cat, n)| format!("{} {n}", cat.name()))
        .collect();
    let kernels: Vec<String> = c.kernels.iter().map(|k| k.kernel.clone()).collect();
    let _ =
        writeln!(
        md,
        "Kernels {}; tests: {}; a failure at head was run {} more time{} at head, then at base.",
        cell(&kernels.join(", "), 200),
        if counts.is_empty() { "none".to_string() } else { counts.join(", ") },
        c.reruns,
        if c.reruns == 1 { "" } else { "s" },
    );
    md
}

/// The regressions: `detail` 2 with reasons, 1 without, 0 their names in one list.
fn regression_part(tests: &[&TestChange], progs: &[&ProgChange], detail: u8) -> String {
    let mut md = String::new();
    if !tests.is_empty() {
        let _ = write!(md, "\n### Regressions\n\n");
        if detail == 0 {
            let names: Vec<String> = tests
                .iter()
                .map(|t| format!("`{}` on {}", cell(&t.test, 200), cell(&t.kernel, 40)))
                .collect();
            md += &names.join(", ");
            md.push('\n');
        } else {
            md += TEST_HEADER;
            for t in tests {
                md += &test_row(t, detail == 2);
            }
        }
    }
    if !progs.is_empty() {
        let _ = write!(md, "\n### Verifier regressions\n\n{PROG_HEADER}");
        for p in progs {
            md += &prog_row(p);
        }
        if detail == 2 {
            md.push('\n');
            for p in progs {
                // The same program fails on several kernels: each reason names its kernel.
                let why = p.regression.as_deref().unwrap_or("");
                let _ = writeln!(md, "- {}: {}", cell(&p.kernel, 40), cell(why, REASON_CHARS));
            }
        }
    }
    md
}

/// How many of a cost's rows lie within its threshold.
fn within_threshold(c: &Cost) -> usize {
    let rows = c.compared.as_ref().map_or(0, |m| m.comparison.rows.len());
    rows - c.changed().len()
}

/// Each kernel's A/B (`--bench`): its verdict, the rows that changed and the table of every
/// row (`every_row`), or of the changed ones only.
fn cost_part(costs: &[Cost], every_row: bool) -> String {
    let mut md = String::new();
    for c in costs {
        let _ = write!(
            md,
            "\n### Cost on {} (`bench-vm --against`, {})\n\n",
            cell(&c.kernel, 40),
            c.size.name()
        );
        let problem = c.problem.as_deref().map(|p| cell(p, 600));
        let Some(m) = &c.compared else {
            let _ = writeln!(md, "Not judged: {}", problem.unwrap_or_default());
            continue;
        };
        let threshold = c.threshold_pct;
        let changed = ab::changed(&m.comparison);
        let verdict = match c.status {
            Status::Good => format!("no row changed beyond {threshold} % either way"),
            Status::Bad if !changed.is_empty() => format!(
                "**{} row{} changed beyond {threshold} %** (either way fails, as `bench-vm \
                 --against` does)",
                changed.len(),
                if changed.len() == 1 { "" } else { "s" }
            ),
            Status::Bad => "**head's own bench boots failed**".to_string(),
            _ => "**not judged**".to_string(),
        };
        let _ = writeln!(
            md,
            "A is the base, {}; B is head, {}; {}.\n\nCost verdict: {verdict}.",
            cell(&m.base, 120),
            cell(&m.head, 120),
            match m.clock {
                Clock::Icount => "figures are instruction counts",
                Clock::Wall => "figures are wall-clock times",
            }
        );
        if let Some(p) = problem {
            let _ = writeln!(md, "\n- {p}");
        }
        if !changed.is_empty() {
            let _ = writeln!(md, "\nChanged beyond {threshold} % (B against A):\n");
            for x in &changed {
                let _ = writeln!(md, "- {}: {:+.2} %", x.row, x.pct);
            }
        }
        let rows: Vec<&compare::Row> = match every_row {
            true => m.comparison.rows.iter().collect(),
            false => c.changed(),
        };
        if !rows.is_empty() {
            let _ = write!(
                md,
                "\n{}\n\n{}",
                compare::method(&m.comparison),
                compare::TABLE_HEAD
            );
            for r in rows {
                md += &compare::row_line(r, threshold);
            }
        }
        for note in &m.comparison.notes {
            let _ = writeln!(md, "\nNote: {}.", cell(note, 600));
        }
        let left_out = within_threshold(c);
        if !every_row && left_out > 0 {
            let _ = write!(
                md,
                "\n{left_out} rows within the threshold are not shown here."
            );
        }
        let _ = writeln!(
            md,
            "\nEvery row is in `change.json` and in the A/B's report, `{}`.",
            cell(&m.report, 300)
        );
    }
    md
}

/// The collapsed sections, in the order they are kept when space runs out.
fn sections(c: &Change) -> Vec<Section> {
    let tests = |cat: Category, title: &str| Section {
        title: title.to_string(),
        header: TEST_HEADER,
        rows: c.of(cat).map(|t| test_row(t, true)).collect(),
    };
    let changed = c.verifier.iter().filter(|p| p.regression.is_none());
    vec![
        tests(Category::StillFailing, "Failing at base too (not blamed)"),
        tests(Category::Flaky, "Flaky (not blamed)"),
        tests(Category::Fixed, "Fixed"),
        tests(Category::New, "New"),
        tests(Category::Removed, "Removed"),
        Section {
            title: "Verifier statistics that moved".into(),
            header: PROG_HEADER,
            rows: changed.map(prog_row).collect(),
        },
        tests(Category::Unchanged, "Unchanged"),
    ]
}

/// One suite per kernel: each test a case, failing only when it is a regression; a verifier
/// regression is a failing case `verifier:<file/prog>`; a kernel that could not be judged an
/// erroring case `change:<kernel>`.
pub fn junit(change: &Change) -> Result<String> {
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
    let mut report = Report::new("bpfvm change");
    for k in &change.kernels {
        let mut suite = TestSuite::new(format!("bpfvm change, kernel {}", k.kernel));
        let class = format!("kernel-{}", k.kernel);
        let mut add = |name: String, mut status: TestCaseStatus, message: String| {
            status.set_message(message);
            let mut case = TestCase::new(name, status);
            case.set_classname(class.clone());
            suite.add_test_case(case);
        };
        if let Some(p) = &k.problem {
            let status = TestCaseStatus::non_success(NonSuccessKind::Error);
            add(format!("change:{}", k.kernel), status, p.clone());
        }
        for t in change.tests.iter().filter(|t| t.kernel == k.kernel) {
            let status = match t.category {
                Category::Regression => TestCaseStatus::non_success(NonSuccessKind::Failure),
                Category::Removed => TestCaseStatus::skipped(),
                _ => TestCaseStatus::success(),
            };
            let message = format!(
                "{}: head {}; base {}",
                t.category.name(),
                runs(t, Side::Head),
                runs(t, Side::Base)
            );
            add(t.test.clone(), status, message);
        }
        for p in change.verifier.iter().filter(|p| p.kernel == k.kernel) {
            let status = match &p.regression {
                Some(_) => TestCaseStatus::non_success(NonSuccessKind::Failure),
                None => TestCaseStatus::success(),
            };
            let message = p.regression.clone().unwrap_or_else(|| "moved".into());
            add(format!("verifier:{}", p.program), status, message);
        }
        for c in change.cost.iter().filter(|c| c.kernel == k.kernel) {
            if let Some(p) = &c.problem {
                let kind = match c.status {
                    Status::Bad => NonSuccessKind::Failure,
                    _ => NonSuccessKind::Error,
                };
                add(
                    format!("cost:{}", k.kernel),
                    TestCaseStatus::non_success(kind),
                    p.clone(),
                );
            }
            let rows = c.compared.iter().flat_map(|m| &m.comparison.rows);
            for r in rows {
                let status = match ab::is_changed(r) {
                    true => TestCaseStatus::non_success(NonSuccessKind::Failure),
                    false => TestCaseStatus::success(),
                };
                let verdict = compare::verdict(r, c.threshold_pct);
                add(format!("cost:{}", r.name()), status, verdict);
            }
        }
        report.add_test_suite(suite);
    }
    Ok(report.to_string()?)
}
