//! Splats a kernel is known to print harmlessly: `kernels/splats/allowed.toml`. Each entry
//! has a regex (matched against the splat's whole text), the kernels it applies to (a pin
//! version such as `6.1`, or a glob on the release such as `6.12.*-cloud-amd64`) and the
//! reason (ideally the upstream commit or report). An allowed splat is reported with its
//! reason and never fails a run.
use std::path::Path;

use anyhow::{bail, Context, Result};
use regex::Regex;
use serde::Deserialize;

/// The file, as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    allow: Vec<RawEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    regex: String,
    kernels: Vec<String>,
    reason: String,
}

/// One checked entry.
#[derive(Debug, Clone)]
pub struct Entry {
    pub regex: Regex,
    pub kernels: Vec<String>,
    pub reason: String,
    /// `kernels`, each as an anchored pattern (`*` and `?` are globs).
    patterns: Vec<Regex>,
}

/// Every entry of the allowlist.
#[derive(Debug, Clone, Default)]
pub struct Allowlist {
    pub entries: Vec<Entry>,
}

/// `kernels/splats/allowed.toml` in the checkout.
pub fn path() -> std::path::PathBuf {
    crate::support::paths::workspace_root().join("kernels/splats/allowed.toml")
}

/// Reads and checks the allowlist at `path`.
pub fn load(path: &Path) -> Result<Allowlist> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    parse(&text).with_context(|| format!("{} is not a valid allowlist", path.display()))
}

/// Checks every entry: a regex that compiles, at least one kernel, a reason.
pub fn parse(text: &str) -> Result<Allowlist> {
    let file: File = toml::from_str(text)?;
    let entries = file
        .allow
        .into_iter()
        .enumerate()
        .map(|(i, e)| entry(e).with_context(|| format!("[[allow]] entry {}", i + 1)))
        .collect::<Result<_>>()?;
    Ok(Allowlist { entries })
}

fn entry(e: RawEntry) -> Result<Entry> {
    let regex = Regex::new(&e.regex)
        .with_context(|| format!("regex '{}' does not compile (Rust regex syntax)", e.regex))?;
    if e.kernels.is_empty() {
        bail!("regex '{}': `kernels` is empty: name the pin versions (\"6.1\") or release globs (\"6.12.*\") it applies to", e.regex);
    }
    if e.reason.trim().is_empty() {
        bail!(
            "regex '{}': `reason` is empty: say why the splat is harmless (an upstream commit or report)",
            e.regex
        );
    }
    let patterns = e.kernels.iter().map(|k| glob(k)).collect();
    Ok(Entry {
        regex,
        kernels: e.kernels,
        reason: e.reason,
        patterns,
    })
}

/// `6.12.*` -> `^6\.12\..*$`.
fn glob(pattern: &str) -> Regex {
    let body: String = pattern
        .split('*')
        .map(|part| {
            part.split('?')
                .map(regex::escape)
                .collect::<Vec<_>>()
                .join(".")
        })
        .collect::<Vec<_>>()
        .join(".*");
    Regex::new(&format!("^{body}$")).expect("escaped text and wildcards always compile")
}

impl Entry {
    /// Whether the entry names this kernel: its pin version (`6.1`) or its release.
    pub fn applies_to(&self, version: &str, release: Option<&str>) -> bool {
        self.patterns
            .iter()
            .any(|p| p.is_match(version) || release.is_some_and(|r| p.is_match(r)))
    }
}

impl Allowlist {
    /// The first entry that allows `splat_text` on this kernel.
    pub fn allowing(
        &self,
        splat_text: &str,
        version: &str,
        release: Option<&str>,
    ) -> Option<&Entry> {
        self.entries
            .iter()
            .find(|e| e.applies_to(version, release) && e.regex.is_match(splat_text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = r#"
[[allow]]
regex = 'WARNING: CPU: \d+ PID: \d+ at kernel/bpf/core\.c'
kernels = ["6.1", "6.12.*-cloud-amd64"]
reason = "harmless: upstream commit 0123abcd"
"#;

    #[test]
    fn an_entry_allows_its_splat_on_its_kernels_only() {
        let list = parse(ONE).unwrap();
        let warn = "------------[ cut here ]------------\n\
                    WARNING: CPU: 1 PID: 93 at kernel/bpf/core.c:12 f+0x1/0x2\n";
        let e = list
            .allowing(warn, "6.1", Some("6.1.0-57-cloud-amd64"))
            .unwrap();
        assert_eq!(e.reason, "harmless: upstream commit 0123abcd");
        assert!(list
            .allowing(warn, "6.12", Some("6.12.57-cloud-amd64"))
            .is_some());
        assert!(list
            .allowing(warn, "5.10", Some("5.10.0-46-cloud-amd64"))
            .is_none());
        assert!(list
            .allowing("WARNING: CPU: 0 PID: 1 at mm/x.c:1", "6.1", None)
            .is_none());
    }

    #[test]
    fn a_bad_entry_is_an_error_naming_it() {
        let bad_regex =
            format!("{ONE}\n[[allow]]\nregex = 'a('\nkernels = [\"6.1\"]\nreason = \"x\"\n");
        let e = format!("{:#}", parse(&bad_regex).unwrap_err());
        assert!(
            e.contains("[[allow]] entry 2") && e.contains("regex 'a(' does not compile"),
            "{e}"
        );
        let no_kernels = "[[allow]]\nregex = 'x'\nkernels = []\nreason = \"r\"\n";
        let e = format!("{:#}", parse(no_kernels).unwrap_err());
        assert!(
            e.contains("entry 1") && e.contains("`kernels` is empty"),
            "{e}"
        );
        let no_reason = "[[allow]]\nregex = 'x'\nkernels = [\"6.1\"]\nreason = \" \"\n";
        assert!(format!("{:#}", parse(no_reason).unwrap_err()).contains("`reason` is empty"));
        let typo = "[[allow]]\nregexp = 'x'\nkernels = [\"6.1\"]\nreason = \"r\"\n";
        assert!(format!("{:#}", parse(typo).unwrap_err()).contains("unknown field `regexp`"));
    }

    #[test]
    fn the_committed_allowlist_is_valid() {
        load(&path()).unwrap();
    }
}
