//! Pin files (`kernels/<version>.toml`): parsing, validation, and in-place rewriting for `bump`.
//!
//! A pin names the Debian archive suites that hold a kernel and the exact `.deb`s to take from
//! them (name, version, sha256 from the signed Packages index). See `kernels/6.1.toml` for the
//! documented format.
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::cmp::Ordering;
use std::path::{Path, PathBuf};

/// One `[[source]]`: an archive and a suite, read as `deb URI SUITE main`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub uri: String,
    pub suite: String,
    /// Archive components; `["main"]` when left out.
    #[serde(default = "default_components")]
    pub components: Vec<String>,
}

fn default_components() -> Vec<String> {
    vec!["main".to_string()]
}

/// One `[[package]]`: a `.deb` the kernel tree is extracted from.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Package {
    pub name: String,
    pub version: String,
    /// Lowercase hex sha256 of the `.deb`, as in the Packages index.
    pub sha256: String,
    /// Regex on package names that `kernels bump` searches for a newer ABI of this package.
    #[serde(default)]
    pub bump: Option<String>,
}

impl Package {
    /// `name=version`, as apt takes it and as errors show it.
    pub fn spec(&self) -> String {
        format!("{}={}", self.name, self.version)
    }

    /// The file name `apt-get download` gives this package (epoch colon escaped as apt does).
    pub fn deb_file_name(&self) -> String {
        format!(
            "{}_{}_{}.deb",
            self.name,
            self.version.replace(':', "%3a"),
            super::ARCH
        )
    }
}

/// A kernel pin, read from `kernels/<version>.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// What users pass to `--kernel` ("6.1"); equals the file stem.
    pub version: String,
    /// `uname -r` the guest must report; names `boot/vmlinuz-<release>` in the tree.
    pub release: String,
    pub description: String,
    pub sources: Vec<Source>,
    pub packages: Vec<Package>,
    /// Features this kernel must have (names from `bpfvm_common::features`; see `vm::expect`).
    pub features: Vec<String>,
    /// The pin file.
    pub path: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPin {
    version: String,
    release: String,
    #[serde(default)]
    description: String,
    #[serde(rename = "source", default)]
    sources: Vec<Source>,
    #[serde(rename = "package", default)]
    packages: Vec<Package>,
    #[serde(default)]
    features: Vec<String>,
}

impl Pin {
    /// Parses and validates pin text; `path` is used for messages and kept in the pin.
    pub fn parse(text: &str, path: &Path) -> Result<Pin> {
        let raw: RawPin = toml::from_str(text)
            .with_context(|| format!("{}: not a valid kernel pin", path.display()))?;
        let pin = Pin {
            version: raw.version,
            release: raw.release,
            description: raw.description,
            sources: raw.sources,
            packages: raw.packages,
            features: raw.features,
            path: path.to_path_buf(),
        };
        pin.validate()
            .with_context(|| format!("{}: invalid kernel pin", path.display()))?;
        Ok(pin)
    }

    /// Reads and parses a pin file.
    pub fn load(path: &Path) -> Result<Pin> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading kernel pin {}", path.display()))?;
        Pin::parse(&text, path)
    }

    fn validate(&self) -> Result<()> {
        if version_key(&self.version).is_none() {
            bail!(
                "version {:?} must be dotted numbers like \"6.1\"",
                self.version
            );
        }
        if let Some(stem) = self.path.file_stem().and_then(|s| s.to_str()) {
            if self.path.extension().is_some() && stem != self.version {
                bail!(
                    "version {:?} does not match the file name {stem}.toml; rename one of them",
                    self.version
                );
            }
        }
        if !valid_release(&self.release) {
            bail!(
                "release {:?} must be a `uname -r` string like \"6.1.0-57-cloud-amd64\"",
                self.release
            );
        }
        if self.sources.is_empty() {
            bail!("no [[source]]: add one with `uri` and `suite`");
        }
        for s in &self.sources {
            if !(s.uri.starts_with("http://") || s.uri.starts_with("https://")) {
                bail!(
                    "[[source]] uri {:?} must start with http:// or https://",
                    s.uri
                );
            }
            if s.suite.is_empty() || s.suite.contains(char::is_whitespace) {
                bail!("[[source]] suite {:?} must be one word", s.suite);
            }
            if s.components.is_empty()
                || s.components
                    .iter()
                    .any(|c| c.is_empty() || c.contains(char::is_whitespace))
            {
                bail!("[[source]] components {:?} must be words", s.components);
            }
        }
        if self.packages.is_empty() {
            bail!("no [[package]]: add one with `name`, `version` and `sha256`");
        }
        for p in &self.packages {
            if !valid_package_name(&p.name) {
                bail!("[[package]] name {:?} is not a Debian package name", p.name);
            }
            if p.version.is_empty() || p.version.contains(char::is_whitespace) {
                bail!(
                    "[[package]] {}: version {:?} is not a Debian version",
                    p.name,
                    p.version
                );
            }
            if p.sha256.len() != 64
                || !p
                    .sha256
                    .bytes()
                    .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
            {
                bail!(
                    "[[package]] {}: sha256 must be 64 lowercase hex digits, got {:?} ({} chars)",
                    p.name,
                    p.sha256,
                    p.sha256.len()
                );
            }
            if let Some(re) = &p.bump {
                regex::Regex::new(re).with_context(|| {
                    format!("[[package]] {}: bump is not a valid regex", p.name)
                })?;
            }
        }
        for f in &self.features {
            if bpfvm_common::features::find(f).is_none() {
                bail!(
                    "features: {f:?} is not a known feature (the table is in common/src/features.rs)"
                );
            }
        }
        Ok(())
    }

    /// Short id of the exact package set: the cache directory is `<version>-<short_id>`.
    pub fn short_id(&self) -> String {
        use sha2::{Digest, Sha256};
        if let [p] = self.packages.as_slice() {
            return p.sha256[..12].to_string();
        }
        let mut h = Sha256::new();
        for p in &self.packages {
            h.update(p.sha256.as_bytes());
            h.update(b"\n");
        }
        hex::encode(h.finalize())[..12].to_string()
    }
}

/// Sort key of a dotted numeric version ("6.12" -> [6, 12]); `None` if not of that form.
pub fn version_key(v: &str) -> Option<Vec<u64>> {
    if v.is_empty() {
        return None;
    }
    v.split('.').map(|p| p.parse::<u64>().ok()).collect()
}

/// Orders pin versions numerically ("5.10" < "6.1" < "6.12" < "7.2").
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    match (version_key(a), version_key(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}

fn valid_release(r: &str) -> bool {
    !r.is_empty()
        && r.chars().next().is_some_and(|c| c.is_ascii_digit())
        && r.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '+' | '_' | '~'))
}

fn valid_package_name(n: &str) -> bool {
    n.len() >= 2
        && n.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && n.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-' | '+'))
}

const NAME_PREFIXES: [&str; 4] = [
    "linux-image-",
    "linux-binary-",
    "linux-modules-",
    "linux-base-",
];
const NAME_SUFFIXES: [&str; 2] = ["-unsigned", "-dbg"];

/// The kernel release (`uname -r`) a Debian kernel package is for:
/// `linux-image-6.1.0-57-cloud-amd64-unsigned` -> `6.1.0-57-cloud-amd64`,
/// `linux-binary-7.2.13+deb14-cloud-amd64` -> `7.2.13+deb14-cloud-amd64`.
/// `None` for names that carry no release (meta packages like `linux-image-cloud-amd64`).
pub fn release_from_package(name: &str) -> Option<String> {
    let rest = NAME_PREFIXES.iter().find_map(|p| name.strip_prefix(p))?;
    let rest = rest.strip_prefix("unsigned-").unwrap_or(rest);
    let rest = NAME_SUFFIXES
        .iter()
        .find_map(|s| rest.strip_suffix(s))
        .unwrap_or(rest);
    // A release starts with "MAJOR.MINOR" digits: this skips meta packages.
    let mut parts = rest.splitn(3, '.');
    let major = parts.next()?;
    let minor = parts.next()?;
    let minor_digits: String = minor.chars().take_while(|c| c.is_ascii_digit()).collect();
    if major.is_empty() || !major.chars().all(|c| c.is_ascii_digit()) || minor_digits.is_empty() {
        return None;
    }
    valid_release(rest).then(|| rest.to_string())
}

/// New values for one `[[package]]` entry, by index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageUpdate {
    pub index: usize,
    pub name: String,
    pub version: String,
    pub sha256: String,
}

/// Rewrites `release` and the given packages' `name`/`version`/`sha256` in pin text, keeping
/// comments, ordering and formatting. The result is re-validated.
pub fn rewrite(
    text: &str,
    path: &Path,
    release: &str,
    updates: &[PackageUpdate],
) -> Result<String> {
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .with_context(|| format!("{}: not valid TOML", path.display()))?;
    set_str(doc.as_table_mut(), "release", release);
    let packages = doc
        .get_mut("package")
        .and_then(|p| p.as_array_of_tables_mut())
        .with_context(|| format!("{}: no [[package]] tables", path.display()))?;
    for u in updates {
        let table = packages
            .get_mut(u.index)
            .with_context(|| format!("{}: no [[package]] number {}", path.display(), u.index))?;
        set_str(table, "name", &u.name);
        set_str(table, "version", &u.version);
        set_str(table, "sha256", &u.sha256);
    }
    let out = doc.to_string();
    Pin::parse(&out, path).context("the rewritten pin does not validate")?;
    Ok(out)
}

/// Sets a string value, keeping the old value's surrounding whitespace and trailing comment.
fn set_str(table: &mut toml_edit::Table, key: &str, new: &str) {
    let mut value = toml_edit::Value::from(new);
    if let Some(old) = table.get(key).and_then(|i| i.as_value()) {
        *value.decor_mut() = old.decor().clone();
    }
    table[key] = toml_edit::Item::Value(value);
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
# a comment that must survive
version = "6.1"
release = "6.1.0-57-cloud-amd64"   # uname -r
description = "test"
[[source]]
uri = "http://deb.debian.org/debian"
suite = "bookworm"
[[package]]
name = "linux-image-6.1.0-57-cloud-amd64-unsigned"
version = "6.1.192-3"   # keep me
sha256 = "e31a28be852fe1faec3cdbb0d19a25818f3b951d15dc13e331aeca4f991c52fe"
bump = '^linux-image-6\.1\.0-[0-9]+-cloud-amd64-unsigned$'
"#;

    fn p() -> PathBuf {
        PathBuf::from("/x/kernels/6.1.toml")
    }

    fn err(text: &str) -> String {
        format!("{:#}", Pin::parse(text, &p()).unwrap_err())
    }

    #[test]
    fn parses_a_good_pin() {
        let pin = Pin::parse(GOOD, &p()).unwrap();
        assert_eq!(pin.version, "6.1");
        assert_eq!(pin.release, "6.1.0-57-cloud-amd64");
        assert_eq!(pin.sources[0].components, vec!["main"]);
        assert_eq!(pin.packages.len(), 1);
        assert_eq!(
            pin.packages[0].spec(),
            "linux-image-6.1.0-57-cloud-amd64-unsigned=6.1.192-3"
        );
        assert_eq!(
            pin.packages[0].deb_file_name(),
            "linux-image-6.1.0-57-cloud-amd64-unsigned_6.1.192-3_amd64.deb"
        );
        assert_eq!(pin.short_id(), "e31a28be852f");
    }

    #[test]
    fn rejects_bad_sha() {
        let e = err(&GOOD.replace("c52fe\"", "c52f\""));
        assert!(e.contains("sha256 must be 64 lowercase hex digits"), "{e}");
        assert!(e.contains("63 chars"), "{e}");
        let e = err(&GOOD.replace("e31a28be", "E31A28BE"));
        assert!(e.contains("sha256 must be"), "{e}");
    }

    #[test]
    fn a_syntax_error_or_a_missing_field_names_the_file_and_the_line() {
        let e = err(&GOOD.replace("suite = \"bookworm\"", "suite = bookworm"));
        assert!(
            e.starts_with("/x/kernels/6.1.toml: not a valid kernel pin"),
            "{e}"
        );
        assert!(e.contains("line 8"), "{e}");
        let e = err(&GOOD.replace("version = \"6.1.192-3\"   # keep me\n", ""));
        assert!(
            e.starts_with("/x/kernels/6.1.toml: not a valid kernel pin"),
            "{e}"
        );
        assert!(e.contains("missing field `version`"), "{e}");
        assert!(e.contains("line 9"), "{e}");
        let e = err(&GOOD.replace("release = ", "# release = "));
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn rejects_missing_fields() {
        let e = err(&GOOD.replace("release = \"6.1.0-57-cloud-amd64\"   # uname -r\n", ""));
        assert!(e.contains("missing field `release`"), "{e}");
        let e = err(&GOOD.replace("sha256 = ", "sha = "));
        assert!(e.contains("sha"), "{e}");
        let no_source = GOOD.replace(
            "[[source]]\nuri = \"http://deb.debian.org/debian\"\nsuite = \"bookworm\"\n",
            "",
        );
        assert!(err(&no_source).contains("no [[source]]"));
        let no_pkg = GOOD.split("[[package]]").next().unwrap().to_string();
        assert!(err(&no_pkg).contains("no [[package]]"));
    }

    #[test]
    fn rejects_unknown_fields_and_bad_values() {
        assert!(err(&GOOD.replace("description", "descripton")).contains("unknown field"));
        assert!(err(&GOOD.replace("version = \"6.1\"", "version = \"6.2\"")).contains("file name"));
        assert!(err(&GOOD.replace("version = \"6.1\"", "version = \"six\"")).contains("dotted"));
        assert!(err(&GOOD.replace("[0-9]+", "[0-9+")).contains("not a valid regex"));
        assert!(err(&GOOD.replace("http://deb", "ftp://deb")).contains("http://"));
    }

    #[test]
    fn sorts_numerically() {
        let mut v = vec!["6.12", "7.2", "5.10", "6.1", "6.9"];
        v.sort_by(|a, b| compare_versions(a, b));
        assert_eq!(v, ["5.10", "6.1", "6.9", "6.12", "7.2"]);
    }

    #[test]
    fn derives_release() {
        let r = release_from_package;
        assert_eq!(
            r("linux-image-6.1.0-57-cloud-amd64-unsigned").unwrap(),
            "6.1.0-57-cloud-amd64"
        );
        assert_eq!(
            r("linux-image-5.10.0-46-cloud-amd64").unwrap(),
            "5.10.0-46-cloud-amd64"
        );
        assert_eq!(
            r("linux-image-6.12.118+deb13-cloud-amd64-unsigned").unwrap(),
            "6.12.118+deb13-cloud-amd64"
        );
        assert_eq!(
            r("linux-binary-7.2.13+deb14-cloud-amd64").unwrap(),
            "7.2.13+deb14-cloud-amd64"
        );
        assert_eq!(
            r("linux-binary-unsigned-7.2.13+deb14-cloud-amd64").unwrap(),
            "7.2.13+deb14-cloud-amd64"
        );
        assert_eq!(
            r("linux-modules-7.2.13+deb14-cloud-amd64").unwrap(),
            "7.2.13+deb14-cloud-amd64"
        );
        assert_eq!(r("linux-image-cloud-amd64"), None);
        assert_eq!(
            r("linux-image-6.1-cloud-amd64"),
            Some("6.1-cloud-amd64".into())
        );
        assert_eq!(r("firmware-linux"), None);
    }

    #[test]
    fn rewrite_keeps_comments() {
        let out = rewrite(
            GOOD,
            &p(),
            "6.1.0-58-cloud-amd64",
            &[PackageUpdate {
                index: 0,
                name: "linux-image-6.1.0-58-cloud-amd64-unsigned".into(),
                version: "6.1.200-1".into(),
                sha256: "a".repeat(64),
            }],
        )
        .unwrap();
        assert!(out.contains("# a comment that must survive"));
        assert!(
            out.contains("release = \"6.1.0-58-cloud-amd64\"   # uname -r"),
            "{out}"
        );
        assert!(out.contains("version = \"6.1.200-1\"   # keep me"), "{out}");
        assert!(out.contains("bump = '^linux-image-6\\.1\\.0-[0-9]+-cloud-amd64-unsigned$'"));
        let pin = Pin::parse(&out, &p()).unwrap();
        assert_eq!(
            pin.packages[0].name,
            "linux-image-6.1.0-58-cloud-amd64-unsigned"
        );
        assert_eq!(pin.packages[0].sha256, "a".repeat(64));
    }
}
