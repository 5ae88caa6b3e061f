//! The verifier's statistics per program per kernel (the guest's `verifier.json`, see
//! `bpfvm_common::verifier`), kept as `verifier.json` and a veristat CSV beside each
//! kernel's report ([`csv`]), compared against a baseline ([`compare`]) and shown as a
//! programs x kernels matrix ([`matrix`]). What is measured and from where:
//! docs/verifier-stats.md.
pub mod compare;
pub mod csv;
pub mod matrix;
pub mod verdicts;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

pub use bpfvm_common::verifier::{ProgStats, Verdict};

use crate::machine::guest::files;
use crate::results::report::{Outcome, TestResult};
use crate::support::guest_files;

/// The files kept per kernel, beside `report.json`.
pub const JSON: &str = "verifier.json";
pub const CSV: &str = "verifier.csv";

/// What the guest's `verifier` binary wrote, or why there is nothing: its exit status and the
/// last lines of its stderr.
pub fn read(shared: &Path) -> Result<Vec<ProgStats>> {
    let rc = guest_files::read(&shared.join(files::VERIFIER_RC)).ok();
    let stderr = guest_files::read(&shared.join(files::VERIFIER_STDERR)).unwrap_or_default();
    let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
    let tail = tail.into_iter().rev().collect::<Vec<_>>().join(" | ");
    match rc.as_deref().map(str::trim) {
        Some("0") => {}
        Some(rc) => bail!("the guest's verifier statistics failed (exit status {rc}): {tail}"),
        None => {
            bail!("the guest wrote no verifier statistics (the guest script did not reach them)")
        }
    }
    let text = guest_files::read(&shared.join(files::VERIFIER))
        .with_context(|| format!("reading the guest's {}", files::VERIFIER))?;
    serde_json::from_str(&text)
        .with_context(|| format!("the guest's {} is not JSON", files::VERIFIER))
}

/// Keeps the guest's statistics as `dir/verifier.json` and `dir/verifier.csv`. When the guest
/// wrote none, the last run's files are removed (a baseline check must not read them) and the
/// failed entry `guest:verifier.json` says why: the run fails.
pub fn keep(shared: &Path, dir: &Path) -> (Vec<ProgStats>, Option<TestResult>) {
    let failed = |why: String| TestResult {
        name: format!("guest:{}", files::VERIFIER),
        outcome: Outcome::Fail,
        reason: Some(why),
        duration_ms: 0,
        kernel_splats: vec![],
    };
    match read(shared).and_then(|s| write(&s, dir).map(|_| s)) {
        Ok(stats) => (stats, None),
        Err(e) => {
            let _ = std::fs::remove_file(dir.join(JSON));
            let _ = std::fs::remove_file(dir.join(CSV));
            (vec![], Some(failed(format!("{e:#}"))))
        }
    }
}

/// Writes `dir/verifier.json` and `dir/verifier.csv`; returns the CSV's path.
pub fn write(stats: &[ProgStats], dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    crate::support::fs::write_atomic(
        &dir.join(JSON),
        (serde_json::to_string_pretty(stats)? + "\n").as_bytes(),
    )?;
    let csv_path = dir.join(CSV);
    crate::support::fs::write_atomic(&csv_path, csv::write(stats).as_bytes())?;
    Ok(csv_path)
}

/// The committed baseline of pin `version`: `kernels/verifier/<version>.csv`.
pub fn baseline(version: &str) -> PathBuf {
    crate::support::paths::workspace_root()
        .join("kernels")
        .join("verifier")
        .join(format!("{version}.csv"))
}

/// The committed verdicts of pin `version` ([`verdicts`]): `kernels/verifier/<version>.verdicts`.
pub fn baseline_verdicts(version: &str) -> PathBuf {
    baseline(version).with_extension("verdicts")
}

/// Writes the verdicts of the last `vm-test` run of pin `version` as its baseline.
pub fn bless_verdicts(version: &str) -> Result<PathBuf> {
    let path = baseline_verdicts(version);
    crate::support::fs::write_atomic(&path, verdicts::text(&read_run(version)?).as_bytes())?;
    Ok(path)
}

/// The last `vm-test` run's statistics of kernel `label` (its `verifier.json`).
fn read_run(label: &str) -> Result<Vec<ProgStats>> {
    let path = run_csv(label).with_file_name(JSON);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "reading {}: run `cargo xtask vm-test --kernel {label}`",
            path.display()
        )
    })?;
    serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))
}

/// Reads and parses a veristat CSV file.
pub fn read_csv(path: &Path) -> Result<Vec<csv::Row>> {
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "reading {} (a veristat CSV: `veristat -o csv`, or the verifier.csv of a run)",
            path.display()
        )
    })?;
    csv::parse(&text, &path.display().to_string())
}

/// `verifier-compare A B`: two veristat CSV files, B judged against A at `threshold_pct`.
pub fn compare_files(a: &Path, b: &Path, threshold_pct: f64) -> Result<compare::Comparison> {
    if !(threshold_pct.is_finite() && threshold_pct >= 0.0) {
        bail!("--threshold {threshold_pct}: give a percentage of 0 or more");
    }
    Ok(compare::compare(
        &read_csv(a)?,
        &read_csv(b)?,
        threshold_pct,
    ))
}

/// The last `vm-test` run's `verifier.csv` of kernel `label`.
pub fn run_csv(label: &str) -> PathBuf {
    crate::support::paths::target_dir()
        .join("vm-test")
        .join(label)
        .join(CSV)
}

/// Compares the last `vm-test` run of pin `version` against its committed baseline at
/// `threshold_pct` (0 for this repository's own objects: any change is re-blessed).
pub fn check_against_baseline(version: &str, threshold_pct: f64) -> Result<compare::Comparison> {
    let base = baseline(version);
    if !base.is_file() {
        bail!(
            "no verifier baseline for kernel {version} ({}): run `cargo xtask vm-test --kernel \
             {version}`, then `cargo xtask verifier-stats --kernel {version} --bless`",
            base.display()
        );
    }
    let mut c = compare::compare(
        &read_csv(&base)?,
        &read_csv(&run_csv(version))?,
        threshold_pct,
    );
    // The CSV's `failure` is rejected or not loaded: the reasons are compared here.
    let verdicts = baseline_verdicts(version);
    match std::fs::read_to_string(&verdicts) {
        Ok(text) => {
            let base = verdicts::parse(&text, &verdicts.display().to_string())?;
            c.failures
                .extend(verdicts::changed(&base, &read_run(version)?));
        }
        Err(_) => c.failures.push(format!(
            "no verdicts baseline {}: bless it (`cargo xtask verifier-stats --kernel {version} \
             --bless`)",
            verdicts.display()
        )),
    }
    Ok(c)
}
