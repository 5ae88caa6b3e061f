//! Pin files (`kernels/<version>.toml`): parsing, validation, and in-place rewriting for `bump`.
//!
//! A pin names the Debian archive suites that hold a kernel and the exact `.deb`s to take from
//! them (name, version, sha256 from the signed Packages index). See `kernels/6.1.toml` for the
//! documented format.
use anyhow::{bail, Context, Result};
use serde::Deserialize;
use std::cmp::Ordering;
use std::path::{Path, PathBuf};

use crate::domain::arch::Arch;

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

    /// The file name `apt-get download` gives this package of `arch` (epoch colon escaped as
    /// apt does). A package of `Architecture: all` keeps `arch`'s name here: the name only
    /// keys the verified copy in the cache.
    pub fn deb_file_name(&self, arch: Arch) -> String {
        format!(
            "{}_{}_{}.deb",
            self.name,
            self.version.replace(':', "%3a"),
            arch.debian()
        )
    }
}

/// A kernel pin, read from `kernels/<version>.toml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pin {
    /// What users pass to `--kernel` ("6.1"); equals the file stem.
    pub version: String,
    /// The kernel's architecture: `arch` in the file, x86_64 when left out. A pin of another
    /// architecture than the host's also lists the packages of the guest's root.
    pub arch: Arch,
    /// `uname -r` the guest must report; names `boot/vmlinuz-<release>` in the tree.
    pub release: String,
    pub description: String,
    pub sources: Vec<Source>,
    pub packages: Vec<Package>,
    /// Features this kernel must have (names from `bpfvm_common::features`; see `vm::expect`).
    pub features: Vec<String>,
    /// What the kernel's own BPF selftests build from (`cargo xtask selftests`), if the pin
    /// names it.
    pub selftests: Option<Box<Selftests>>,
    /// The pin file.
    pub path: PathBuf,
}

/// A pin's `[selftests]`: the Debian source of its kernel and the headers its `bpf_testmod.ko`
/// builds against.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selftests {
    /// `linux-source-<series>` of the pin's version (fetched and verified like `[[package]]`).
    pub source: Package,
    /// When Debian has no source of the kernel's exact version: which it is and why it was
    /// taken (the report says so).
    #[serde(default)]
    pub source_note: Option<String>,
    /// The Debian package of the kernel's headers (`linux-headers-<release>`), installed on the
    /// host for the out-of-tree `bpf_testmod.ko`.
    pub headers: String,
    /// For a pin of another architecture than the host's: `headers`' own `.deb`, fetched from
    /// the pin's archive and unpacked, never installed (it depends on that architecture's gcc,
    /// which cannot be installed beside the host's); its `-common` and `linux-kbuild` packages
    /// (the kbuild tree's scripts, built for the host) come from the host's apt.
    #[serde(default)]
    pub headers_deb: Option<Package>,
    /// Files of the source's selftests that do not build, left out of the build, each with why.
    #[serde(default)]
    pub broken: Vec<Broken>,
}

/// A file of a pin's selftests source that does not build (`[[selftests.broken]]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Broken {
    /// Relative to `tools/testing/selftests/bpf`.
    pub file: String,
    pub reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPin {
    version: String,
    #[serde(default)]
    arch: Option<String>,
    release: String,
    #[serde(default)]
    description: String,
    #[serde(rename = "source", default)]
    sources: Vec<Source>,
    #[serde(rename = "package", default)]
    packages: Vec<Package>,
    #[serde(default)]
    features: Vec<String>,
    #[serde(default)]
    selftests: Option<Box<Selftests>>,
}

impl Pin {
    /// Parses and validates pin text; `path` is used for messages and kept in the pin.
    pub fn parse(text: &str, path: &Path) -> Result<Pin> {
        let raw: RawPin = toml::from_str(text)
            .with_context(|| format!("{}: not a valid kernel pin", path.display()))?;
        let arch = match &raw.arch {
            Some(a) => a
                .parse()
                .with_context(|| format!("{}: invalid kernel pin: arch", path.display()))?,
            None => Arch::X86_64,
        };
        let pin = Pin {
            version: raw.version,
            arch,
            release: raw.release,
            description: raw.description,
            sources: raw.sources,
            packages: raw.packages,
            features: raw.features,
            selftests: raw.selftests,
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
        check_release(&self.release).context("release")?;
        if self.sources.is_empty() {
            bail!("no [[source]]: add one with `uri` and `suite`");
        }
        for s in &self.sources {
            check_uri(&s.uri).context("[[source]] uri")?;
            check_suite(&s.suite).context("[[source]] suite")?;
            if s.components.is_empty() {
                bail!("[[source]] components: empty; leave the field out for [\"main\"]");
            }
            for c in &s.components {
                check_suite(c).context("[[source]] components")?;
            }
        }
        if self.packages.is_empty() {
            bail!("no [[package]]: add one with `name`, `version` and `sha256`");
        }
        for p in &self.packages {
            check_package_name(&p.name).context("[[package]] name")?;
            check_debian_version(&p.version)
                .with_context(|| format!("[[package]] {}: version", p.name))?;
            check_sha256(&p.sha256).with_context(|| format!("[[package]] {}: sha256", p.name))?;
            if let Some(re) = &p.bump {
                regex::Regex::new(re).with_context(|| {
                    format!("[[package]] {}: bump is not a valid regex", p.name)
                })?;
            }
        }
        if let Some(t) = &self.selftests {
            let p = &t.source;
            check_package_name(&p.name).context("[selftests] source name")?;
            check_debian_version(&p.version).context("[selftests] source version")?;
            check_sha256(&p.sha256).context("[selftests] source sha256")?;
            check_package_name(&t.headers).context("[selftests] headers")?;
            let headers = headers_package(&self.release);
            if t.headers != headers {
                bail!(
                    "[selftests] headers {:?} are not those of release {}: bpf_testmod.ko built \
                     against them would not load in this kernel; set headers = {headers:?}",
                    t.headers,
                    self.release
                );
            }
            let kernel = &self.packages[0];
            match (&t.headers_deb, self.arch.boots_host_root()) {
                (None, true) => {}
                (Some(d), false) if d.name == t.headers && d.version == kernel.version => {
                    check_sha256(&d.sha256).context("[selftests] headers_deb sha256")?;
                }
                (Some(_), true) => bail!(
                    "[selftests] headers_deb is for a pin of another architecture than the \
                     host's: an {} pin's headers are installed from the host's apt",
                    self.arch
                ),
                (_, false) => bail!(
                    "[selftests] an {} pin's headers cannot be installed on the host: give \
                     headers_deb = {{ name = {:?}, version = {:?}, sha256 = ... }}",
                    self.arch,
                    t.headers,
                    kernel.version
                ),
            }
            if t.source_note.is_none() && p.version != kernel.version {
                bail!(
                    "[selftests] source {} {} is not the kernel's version ({} {}): the selftests \
                     would not be this kernel's; set its version and sha256, or say in a \
                     `source_note` why another version is taken",
                    p.name,
                    p.version,
                    kernel.name,
                    kernel.version
                );
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

/// The first character of `value` that `ok` refuses, as an error naming it and the rule.
fn check_chars(value: &str, ok: impl Fn(char) -> bool, rule: &str) -> Result<()> {
    match value.chars().find(|&c| !ok(c)) {
        Some(c) => bail!("{value:?}: character {:?} is not allowed; {rule}", c),
        None => Ok(()),
    }
}

/// A kernel release (`uname -r`, `make kernelrelease`): it names files and directories
/// (`boot/vmlinuz-<release>`, `lib/modules/<release>`, staged trees) and reaches vng's command
/// line, so it holds only `[A-Za-z0-9._+-]`, starts with a digit, has no `..`, and is at most
/// 64 bytes (`__NEW_UTS_LEN` in the kernel's `include/uapi/linux/utsname.h`).
pub fn check_release(release: &str) -> Result<()> {
    const RULE: &str = "a kernel release (`uname -r`) holds only letters, digits and . _ + -, \
                        starts with a digit (like \"6.1.0-57-cloud-amd64\"); for a kernel you \
                        build, set CONFIG_LOCALVERSION to such characters";
    check_chars(
        release,
        |c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-'),
        RULE,
    )?;
    if !release.starts_with(|c: char| c.is_ascii_digit()) {
        bail!("{release:?} does not start with a digit; {RULE}");
    }
    if release.contains("..") {
        bail!("{release:?} contains \"..\"; {RULE}");
    }
    if release.len() > 64 {
        bail!(
            "{release:?} is {} bytes, over the kernel's 64; {RULE}",
            release.len()
        );
    }
    Ok(())
}

/// A Debian package name (policy 5.6.1): `[a-z0-9][a-z0-9+.-]+`.
fn check_package_name(name: &str) -> Result<()> {
    const RULE: &str = "a Debian package name (policy 5.6.1) is at least two of a-z 0-9 + . - \
                        starting with a letter or digit; copy it from `apt-cache show`";
    check_chars(
        name,
        |c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '+' | '.' | '-'),
        RULE,
    )?;
    if name.len() < 2 || !name.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        bail!("{name:?}: {RULE}");
    }
    Ok(())
}

/// A Debian version (policy 5.6.12): `[epoch:]upstream[-revision]`, epoch digits, upstream
/// starting with a digit and made of `[A-Za-z0-9.+~-]` (`-` only with a revision), revision
/// of `[A-Za-z0-9.+~]`.
fn check_debian_version(version: &str) -> Result<()> {
    const RULE: &str = "a Debian version (policy 5.6.12) is [epoch:]upstream[-revision]: epoch \
                        digits, upstream starting with a digit of letters, digits and . + ~ -, \
                        revision of letters, digits and . + ~; copy it from `apt-cache show`";
    let (epoch, rest) = match version.split_once(':') {
        Some((e, rest)) => (Some(e), rest),
        None => (None, version),
    };
    if let Some(e) = epoch {
        if e.is_empty() || !e.chars().all(|c| c.is_ascii_digit()) {
            bail!("{version:?}: the epoch {e:?} is not a number; {RULE}");
        }
    }
    let (upstream, revision) = match rest.rsplit_once('-') {
        Some((u, r)) => (u, Some(r)),
        None => (rest, None),
    };
    check_chars(
        upstream,
        |c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '~' | '-'),
        RULE,
    )?;
    if !upstream.starts_with(|c: char| c.is_ascii_digit()) {
        bail!("{version:?}: the upstream version {upstream:?} does not start with a digit; {RULE}");
    }
    if let Some(r) = revision {
        check_chars(
            r,
            |c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '~'),
            RULE,
        )?;
        if r.is_empty() {
            bail!("{version:?}: the revision after the last '-' is empty; {RULE}");
        }
    }
    Ok(())
}

/// An archive suite or component (`bookworm-security`, `main`, `non-free-firmware`):
/// `[a-z0-9][a-z0-9.-]*`.
fn check_suite(word: &str) -> Result<()> {
    const RULE: &str = "suites and components are a-z 0-9 . - starting with a letter or digit, \
                        like \"bookworm-security\" or \"main\"";
    check_chars(
        word,
        |c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-'),
        RULE,
    )?;
    if !word.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit()) {
        bail!("{word:?}: {RULE}");
    }
    Ok(())
}

/// An archive URI, written into a one-line sources.list entry: http(s), a host, and only
/// characters that cannot end the field or the line (no whitespace, control, quote or `#`).
fn check_uri(uri: &str) -> Result<()> {
    const RULE: &str = "an archive uri is http:// or https:// and a host, of letters, digits \
                        and - . _ ~ : / % @ + = , ; (like \"http://deb.debian.org/debian\")";
    let rest = uri
        .strip_prefix("http://")
        .or_else(|| uri.strip_prefix("https://"))
        .with_context(|| format!("{uri:?} does not start with http:// or https://; {RULE}"))?;
    check_chars(
        uri,
        |c| {
            c.is_ascii_alphanumeric()
                || matches!(
                    c,
                    '-' | '.' | '_' | '~' | ':' | '/' | '%' | '@' | '+' | '=' | ',' | ';'
                )
        },
        RULE,
    )?;
    if rest.is_empty() || rest.starts_with('/') {
        bail!("{uri:?} has no host; {RULE}");
    }
    Ok(())
}

/// 64 lowercase hex digits, as the Packages index's SHA256 field.
fn check_sha256(sha: &str) -> Result<()> {
    const RULE: &str = "copy the SHA256 field from `apt-cache show NAME=VERSION`";
    check_chars(
        sha,
        |c| c.is_ascii_digit() || ('a'..='f').contains(&c),
        &format!("a sha256 is 64 lowercase hex digits; {RULE}"),
    )?;
    if sha.len() != 64 {
        bail!(
            "must be 64 lowercase hex digits, got {} chars; {RULE}",
            sha.len()
        );
    }
    Ok(())
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
    check_release(rest).is_ok().then(|| rest.to_string())
}

/// New values for one `[[package]]` entry, by index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageUpdate {
    pub index: usize,
    pub name: String,
    pub version: String,
    pub sha256: String,
}

/// Debian's package of a kernel release's headers, which a pin's `[selftests]` must name.
pub fn headers_package(release: &str) -> String {
    format!("linux-headers-{release}")
}

/// A bumped pin's `[selftests]`: the new release's headers, and the source's new version and
/// sha256 (`None`: the source stays, as its `source_note` explains).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelftestsUpdate {
    pub headers: String,
    pub source: Option<(String, String)>,
}

/// Rewrites `release`, the given packages' `name`/`version`/`sha256` and `[selftests]` in pin
/// text, keeping comments, ordering and formatting. The result is re-validated.
pub fn rewrite(
    text: &str,
    path: &Path,
    release: &str,
    updates: &[PackageUpdate],
    selftests: Option<&SelftestsUpdate>,
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
    if let Some(u) = selftests {
        let table = doc
            .get_mut("selftests")
            .and_then(|t| t.as_table_like_mut())
            .with_context(|| format!("{}: no [selftests] table", path.display()))?;
        set_str(table, "headers", &u.headers);
        if let Some((version, sha256)) = &u.source {
            let source = table
                .get_mut("source")
                .and_then(|t| t.as_table_like_mut())
                .with_context(|| format!("{}: no [selftests] source", path.display()))?;
            set_str(source, "version", version);
            set_str(source, "sha256", sha256);
        }
    }
    let out = doc.to_string();
    Pin::parse(&out, path).context("the rewritten pin does not validate")?;
    Ok(out)
}

/// Sets a string value, keeping the old value's surrounding whitespace and trailing comment.
fn set_str(table: &mut dyn toml_edit::TableLike, key: &str, new: &str) {
    let mut value = toml_edit::Value::from(new);
    if let Some(old) = table.get(key).and_then(|i| i.as_value()) {
        *value.decor_mut() = old.decor().clone();
    }
    table.insert(key, toml_edit::Item::Value(value));
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
            pin.packages[0].deb_file_name(pin.arch),
            "linux-image-6.1.0-57-cloud-amd64-unsigned_6.1.192-3_amd64.deb"
        );
        assert_eq!(pin.short_id(), "e31a28be852f");
    }

    #[test]
    fn rejects_bad_sha() {
        let e = err(&GOOD.replace("c52fe\"", "c52f\""));
        assert!(e.contains("sha256: must be 64 lowercase hex digits"), "{e}");
        assert!(e.contains("63 chars"), "{e}");
        let e = err(&GOOD.replace("e31a28be", "E31A28BE"));
        assert!(e.contains("sha256: "), "{e}");
        assert!(e.contains("character 'E' is not allowed"), "{e}");
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

    /// Each field with a value Debian does not allow: the error names the file, the field, the
    /// character and the rule to follow.
    #[test_case::test_case("release = \"6.1.0-57-cloud-amd64\"", "release = \"6.1$(id>x)\"", "release: \"6.1$(id>x)\": character '$'"; "release with shell syntax")]
    #[test_case::test_case("release = \"6.1.0-57-cloud-amd64\"", "release = \"6.1/../../x\"", "release: \"6.1/../../x\": character '/'"; "release with a slash")]
    #[test_case::test_case("release = \"6.1.0-57-cloud-amd64\"", "release = \"6.1..x\"", "release: \"6.1..x\" contains \"..\""; "release with dot dot")]
    #[test_case::test_case("release = \"6.1.0-57-cloud-amd64\"", "release = \"-6.1\"", "release: \"-6.1\" does not start with a digit"; "release starting with a dash")]
    #[test_case::test_case("release = \"6.1.0-57-cloud-amd64\"", "release = \"6.1 x\"", "release: \"6.1 x\": character ' '"; "release with a space")]
    #[test_case::test_case("uri = \"http://deb.debian.org/debian\"", "uri = \"http://deb.debian.org/debian\\ndeb http://evil/ x main\"", "[[source]] uri: \"http://deb.debian.org/debian\\ndeb http://evil/ x main\": character '\\n'"; "uri with a newline")]
    #[test_case::test_case("uri = \"http://deb.debian.org/debian\"", "uri = \"http://deb.debian.org/debian#x\"", "character '#'"; "uri with a comment")]
    #[test_case::test_case("uri = \"http://deb.debian.org/debian\"", "uri = \"http:///debian\"", "has no host"; "uri without a host")]
    #[test_case::test_case("uri = \"http://deb.debian.org/debian\"", "uri = \"file:///srv\"", "does not start with http:// or https://"; "uri not http")]
    #[test_case::test_case("suite = \"bookworm\"", "suite = \"../../x\"", "[[source]] suite: \"../../x\": character '/'"; "suite with a slash")]
    #[test_case::test_case("suite = \"bookworm\"", "suite = \"Bookworm\"", "character 'B'"; "suite upper case")]
    #[test_case::test_case("suite = \"bookworm\"", "suite = \"bookworm\"\ncomponents = [\"main\", \"x y\"]", "[[source]] components: \"x y\": character ' '"; "component with a space")]
    #[test_case::test_case("suite = \"bookworm\"", "suite = \"bookworm\"\ncomponents = []", "components: empty"; "no components")]
    #[test_case::test_case("name = \"linux-image-6.1.0-57-cloud-amd64-unsigned\"", "name = \"linux-image/../x\"", "[[package]] name: \"linux-image/../x\": character '/'"; "name with a slash")]
    #[test_case::test_case("name = \"linux-image-6.1.0-57-cloud-amd64-unsigned\"", "name = \"-linux\"", "policy 5.6.1"; "name starting with a dash")]
    #[test_case::test_case("name = \"linux-image-6.1.0-57-cloud-amd64-unsigned\"", "name = \"x\"", "at least two"; "name of one letter")]
    #[test_case::test_case("version = \"6.1.192-3\"", "version = \"6.1/../../x-3\"", "version: \"6.1/../../x\": character '/'"; "version with a slash")]
    #[test_case::test_case("version = \"6.1.192-3\"", "version = \"6.1.192-3 \"", "version: \"3 \": character ' '"; "version with a space")]
    #[test_case::test_case("version = \"6.1.192-3\"", "version = \"x:6.1.192-3\"", "the epoch \"x\" is not a number"; "version with a bad epoch")]
    #[test_case::test_case("version = \"6.1.192-3\"", "version = \"6.1.192-\"", "revision after the last '-' is empty"; "version with an empty revision")]
    #[test_case::test_case("version = \"6.1.192-3\"", "version = \"v6.1-3\"", "does not start with a digit"; "version not starting with a digit")]
    #[test_case::test_case("version = \"6.1.192-3\"", "version = \"6.1.192-3~a_b\"", "character '_'"; "revision with an underscore")]
    fn rejects_what_debian_does_not_allow(good: &str, bad: &str, want: &str) {
        assert!(GOOD.contains(good), "{good}");
        let e = err(&GOOD.replacen(good, bad, 1));
        assert!(
            e.starts_with("/x/kernels/6.1.toml: invalid kernel pin: "),
            "{e}"
        );
        assert!(e.contains(want), "want {want:?} in {e}");
    }

    #[test]
    fn accepts_what_debian_allows() {
        for v in [
            "1:6.1.192-3",
            "6.1.192",
            "6.12.118-1~bpo12+1",
            "7.2.13+deb14-1.2",
        ] {
            check_debian_version(v).unwrap();
        }
        for r in ["6.13.0-rc1-bpf+", "7.2.13+deb14-cloud-amd64", "6.1.0_x"] {
            check_release(r).unwrap();
        }
        check_release(&"6".repeat(64)).unwrap();
        assert!(format!("{:#}", check_release(&"6".repeat(65)).unwrap_err()).contains("65 bytes"));
        check_uri("https://snapshot.debian.org/archive/debian/20240101T000000Z").unwrap();
        check_suite("non-free-firmware").unwrap();
        check_package_name("g++").unwrap();
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
            None,
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

    /// GOOD with a `[selftests]` of its kernel.
    fn with_selftests(headers: &str, source_version: &str, note: bool) -> String {
        let note = if note {
            "source_note = \"the nearest Debian has\"\n"
        } else {
            ""
        };
        format!(
            "{GOOD}[selftests]\nsource = {{ name = \"linux-source-6.1\", version = \"{source_version}\", sha256 = \"{}\" }}  # src\n{note}headers = \"{headers}\"\n",
            "b".repeat(64)
        )
    }

    /// An arm64 pin's headers cannot be installed on the host: its `[selftests]` names their
    /// `.deb`, the kernel's version; an x86_64 pin's are installed and name none.
    #[test]
    fn a_cross_pins_selftests_name_their_headers_deb() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels/arm64/6.1.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let pin = Pin::parse(&text, &path).unwrap();
        let deb = pin.selftests.unwrap().headers_deb.unwrap();
        assert_eq!(deb.name, "linux-headers-6.1.0-57-cloud-arm64");
        let line = text
            .lines()
            .find(|l| l.starts_with("headers_deb = "))
            .unwrap();
        let e = format!(
            "{:#}",
            Pin::parse(&text.replace(line, ""), &path).unwrap_err()
        );
        assert!(e.contains("give headers_deb = { name = \"linux-headers-6.1.0-57-cloud-arm64\", version = \"6.1.192-3\""), "{e}");
        let other = text.replace(line, &line.replace("6.1.192-3", "6.1.190-1"));
        let e = format!("{:#}", Pin::parse(&other, &path).unwrap_err());
        assert!(e.contains("cannot be installed on the host"), "{e}");
        let x86 = with_selftests("linux-headers-6.1.0-57-cloud-amd64", "6.1.192-3", false)
            + &format!("{line}\n");
        assert!(
            err(&x86).contains("installed from the host's apt"),
            "{}",
            err(&x86)
        );
    }

    #[test]
    fn selftests_must_be_the_kernels_own() {
        let ok = with_selftests("linux-headers-6.1.0-57-cloud-amd64", "6.1.192-3", false);
        assert!(Pin::parse(&ok, &p()).is_ok());
        let e = err(&with_selftests(
            "linux-headers-6.1.0-56-cloud-amd64",
            "6.1.192-3",
            false,
        ));
        assert!(
            e.contains("[selftests] headers \"linux-headers-6.1.0-56-cloud-amd64\" are not those of release 6.1.0-57-cloud-amd64"),
            "{e}"
        );
        assert!(
            e.contains("set headers = \"linux-headers-6.1.0-57-cloud-amd64\""),
            "{e}"
        );
        let other = with_selftests("linux-headers-6.1.0-57-cloud-amd64", "6.1.190-1", false);
        let e = err(&other);
        assert!(
            e.contains("[selftests] source linux-source-6.1 6.1.190-1 is not the kernel's version (linux-image-6.1.0-57-cloud-amd64-unsigned 6.1.192-3)"),
            "{e}"
        );
        // Another version is taken on purpose when a note says why.
        let noted = with_selftests("linux-headers-6.1.0-57-cloud-amd64", "6.1.190-1", true);
        assert!(Pin::parse(&noted, &p()).is_ok());
    }

    #[test]
    fn rewrite_moves_selftests_with_the_kernel() {
        let text = with_selftests("linux-headers-6.1.0-57-cloud-amd64", "6.1.192-3", false);
        let image = PackageUpdate {
            index: 0,
            name: "linux-image-6.1.0-58-cloud-amd64-unsigned".into(),
            version: "6.1.200-1".into(),
            sha256: "a".repeat(64),
        };
        let update = SelftestsUpdate {
            headers: "linux-headers-6.1.0-58-cloud-amd64".into(),
            source: Some(("6.1.200-1".into(), "c".repeat(64))),
        };
        let out = rewrite(
            &text,
            &p(),
            "6.1.0-58-cloud-amd64",
            std::slice::from_ref(&image),
            Some(&update),
        )
        .unwrap();
        let t = Pin::parse(&out, &p()).unwrap().selftests.unwrap();
        assert_eq!(t.headers, "linux-headers-6.1.0-58-cloud-amd64");
        assert_eq!(
            (t.source.name.as_str(), t.source.version.as_str()),
            ("linux-source-6.1", "6.1.200-1")
        );
        assert_eq!(t.source.sha256, "c".repeat(64));
        assert!(out.contains(" }  # src"), "{out}");
        // Without the [selftests] update the rewritten pin does not validate: the old headers.
        let e = rewrite(
            &text,
            &p(),
            "6.1.0-58-cloud-amd64",
            std::slice::from_ref(&image),
            None,
        )
        .unwrap_err();
        assert!(
            format!("{e:#}").contains("are not those of release 6.1.0-58"),
            "{e:#}"
        );
    }
}
