//! `bpfvm github-summary`: the reports as a GitHub Actions step summary and annotations.
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use bpfvm_host::flows::crate_test;
use bpfvm_host::support::output::Events;
use clap::Args;

use crate::github;

/// For GitHub Actions: append a markdown summary of the reports (each kernel's verdict,
/// the failures, the matrix) to $GITHUB_STEP_SUMMARY, and print an `::error` annotation at
/// the file:line of each failing test's panic. Exits 0 when the reports say tests failed.
#[derive(Args)]
pub struct Options {
    /// Directories of reports: `bpfvm test`'s (with matrix.json) or one kernel's (with
    /// report.json). Default: `bpfvm test`'s for the crate in the current directory.
    dirs: Vec<PathBuf>,
    /// The checkout's root, which annotation paths are relative to. Default:
    /// $GITHUB_WORKSPACE, else the current directory.
    #[arg(long)]
    repo: Option<PathBuf>,
    /// Where the crate's workspace root is in the checkout (panic paths are relative to
    /// it). Default: from `cargo metadata` in the current directory.
    #[arg(long)]
    prefix: Option<PathBuf>,
    /// The file the summary is appended to. Default: $GITHUB_STEP_SUMMARY, else stdout.
    #[arg(long)]
    summary: Option<PathBuf>,
}

pub fn run(opts: Options, events: &Events) -> Result<ExitCode> {
    let Options {
        dirs,
        repo,
        prefix,
        summary,
    } = opts;
    let cwd = std::env::current_dir().context("the current directory")?;
    let repo = repo
        .or_else(|| std::env::var_os("GITHUB_WORKSPACE").map(PathBuf::from))
        .unwrap_or_else(|| cwd.clone());
    let repo = std::path::absolute(&repo).with_context(|| format!("{}", repo.display()))?;
    let needs_cargo = dirs.is_empty() || prefix.is_none();
    let cargo = if needs_cargo {
        Some(crate_test::cargo_dirs(events)?)
    } else {
        None
    };
    let dirs = match (dirs.is_empty(), &cargo) {
        (true, Some(c)) => vec![c.target.join(crate_test::REPORTS)],
        _ => dirs,
    };
    let prefix = match (prefix, &cargo) {
        (Some(p), _) => p,
        (None, Some(c)) => c
            .workspace_root
            .strip_prefix(&repo)
            .map(PathBuf::from)
            .unwrap_or_default(),
        (None, None) => PathBuf::new(),
    };
    let mut reports = Vec::new();
    for d in &dirs {
        reports.extend(github::load(d)?);
    }
    let paths = github::Paths {
        prefix,
        repo: Some(repo),
    };
    let md = github::step_summary(&reports, &paths);
    match summary.or_else(|| std::env::var_os("GITHUB_STEP_SUMMARY").map(PathBuf::from)) {
        Some(file) => {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&file)
                .with_context(|| format!("opening {}", file.display()))?;
            f.write_all(md.as_bytes())
                .with_context(|| format!("writing {}", file.display()))?;
        }
        None => bpfvm_host::ui::print_stdout(&md),
    }
    // Written as they are (print_stdout would defuse them): each is one line whose guest
    // text `github::escape_data` made inert.
    let mut out = std::io::stdout().lock();
    for line in github::annotations(&reports, &paths) {
        writeln!(out, "{line}").context("writing the annotations")?;
    }
    Ok(ExitCode::SUCCESS)
}
