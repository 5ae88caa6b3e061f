//! Pinned Debian kernels: the pin files in `kernels/*.toml`, fetching their `.deb`s through a
//! private apt (no root, host apt untouched), sha256 verification, and the extracted-tree cache.
//!
//! Layout under `cache_dir()`:
//! - `apt/<suites>-<hash>/`: sources.list, lists and apt cache of one set of sources;
//! - `debs/<name>_<version>_<arch>.deb`: verified packages;
//! - `kernels/<version>-<short sha>/` (`<version>-arm64-<id>/` for arm64, its id also how the
//!   root is made: `userland::root_id`): extracted
//!   trees (complete once renamed into place with their `.bpfvm-complete` marker); an arm64
//!   tree is also the guest's root (`userland`);
//! - `kernels/.lock`: taken by whoever downloads, extracts or bumps.
mod apt;
mod cache;
mod debver;
pub mod pin;
mod userland;

pub use pin::{check_release, release_from_package, Package, Pin, Selftests, Source};

use crate::domain::arch::Arch;
use crate::kernel::bootable::Bootable;
use crate::support::output::Events;
use anyhow::{bail, Context, Result};
use cache::{Cache, Cached};
use std::fmt;
use std::path::{Path, PathBuf};

/// The directory holding the x86_64 pin files: `<workspace>/kernels`.
pub fn pins_dir() -> PathBuf {
    crate::support::paths::workspace_root().join("kernels")
}

/// The directory holding `arch`'s pin files: `kernels/` for x86_64, `kernels/<arch>/` for
/// the others.
pub fn pins_dir_for(arch: Arch) -> PathBuf {
    match arch {
        Arch::X86_64 => pins_dir(),
        a => pins_dir().join(a.name()),
    }
}

/// All x86_64 pins in `kernels/*.toml`, sorted by version numerically.
pub fn pins() -> Result<Vec<Pin>> {
    pins_for(Arch::X86_64)
}

/// All pins of `arch`, sorted by version numerically.
pub fn pins_for(arch: Arch) -> Result<Vec<Pin>> {
    let pins = pins_in(&pins_dir_for(arch))?;
    if let Some(p) = pins.iter().find(|p| p.arch != arch) {
        bail!(
            "{}: arch = {:?}, but the pins in {} are {arch}'s; move it or fix `arch`",
            p.path.display(),
            p.arch.name(),
            pins_dir_for(arch).display()
        );
    }
    Ok(pins)
}

fn pins_in(dir: &Path) -> Result<Vec<Pin>> {
    let rd = std::fs::read_dir(dir)
        .with_context(|| format!("reading the kernel pins in {}", dir.display()))?;
    let mut pins = vec![];
    for e in rd {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "toml") {
            pins.push(Pin::load(&path)?);
        }
    }
    pins.sort_by(|a, b| pin::compare_versions(&a.version, &b.version));
    Ok(pins)
}

/// The x86_64 pin for `version` ("6.1"), or an error listing the pins there are.
pub fn resolve(version: &str) -> Result<Pin> {
    resolve_in(&pins_dir(), version)
}

/// The pin of `arch` for `version`, or an error listing the pins of `arch` there are.
pub fn resolve_for(version: &str, arch: Arch) -> Result<Pin> {
    let dir = pins_dir_for(arch);
    if !dir.is_dir() {
        bail!(
            "no kernel is pinned for {arch}: {} does not exist (bpfvm boots {})",
            dir.display(),
            Arch::EVERY.map(|a| a.name()).join(" and ")
        );
    }
    let pin = resolve_in(&dir, version)?;
    if pin.arch != arch {
        bail!(
            "{}: arch = {:?}, but the pins in {} are {arch}'s; move it or fix `arch`",
            pin.path.display(),
            pin.arch.name(),
            dir.display()
        );
    }
    Ok(pin)
}

fn resolve_in(dir: &Path, version: &str) -> Result<Pin> {
    // The pin's own file first, so one broken pin does not stop the others from resolving.
    let own = dir.join(format!("{version}.toml"));
    if pin::version_key(version).is_some() && own.is_file() {
        return Pin::load(&own);
    }
    let all = pins_in(dir)?;
    if let Some(p) = all.iter().find(|p| p.version == version) {
        return Ok(p.clone());
    }
    let list: Vec<&str> = all.iter().map(|p| p.version.as_str()).collect();
    bail!(
        "unknown kernel {version}; pinned: {} ({}/*.toml); add a pin with a new {}/{version}.toml \
         (copy an existing one, point it at the Debian suite that has the kernel, then run \
         `cargo xtask kernels bump {version}` to fill in the package and sha256)",
        if list.is_empty() {
            "none".to_string()
        } else {
            list.join(", ")
        },
        dir.display(),
        dir.display()
    )
}

fn cache() -> Cache {
    Cache {
        root: crate::support::paths::cache_dir(),
    }
}

/// The cached tree of `pin`, if it was fetched before (no network, no lock).
pub fn cached(pin: &Pin) -> Option<Bootable> {
    cache().cached(pin)
}

/// The extracted kernel of `pin`: from the cache without any network access, else downloaded
/// (private apt), verified against the pin's sha256s, extracted and cached.
pub fn fetch(pin: &Pin, events: &Events) -> Result<Bootable> {
    fetch_in(&cache(), pin, events)
}

/// The verified `.deb` of `pkg`, one more package from `pin`'s suites (the kernel's source
/// for its selftests): from `debs/` when its sha256 still matches, else downloaded through the
/// pin's private apt and checked, as the pin's own packages are.
pub fn fetch_package(pin: &Pin, pkg: &Package, events: &Events) -> Result<PathBuf> {
    let cache = cache();
    let _lock = cache.lock(events)?;
    let one = Pin {
        packages: vec![pkg.clone()],
        ..pin.clone()
    };
    cache.check_cached_debs(&one)?;
    let apt = apt::Apt::for_pin(&cache.root, pin);
    cache.deb(&one, pkg, &apt, &mut false, events)
}

fn fetch_in(cache: &Cache, pin: &Pin, events: &Events) -> Result<Bootable> {
    // Everything under the lock: another run may be verifying, removing, downloading or
    // extracting the same files. Uncontended, the lock costs nothing.
    let _lock = cache.lock(events)?;
    cache.check_cached_debs(pin)?;
    match cache.state(pin) {
        Cached::Valid(tree) => {
            events.note(format!(
                "kernel {} ({}): cached at {}",
                pin.version,
                pin.release,
                tree.root.display()
            ));
            return Ok(tree);
        }
        // The .debs that are there were just verified.
        Cached::Damaged(why)
            if pin
                .packages
                .iter()
                .all(|p| cache.deb_path(p, pin.arch).is_file()) =>
        {
            events.warn(format!(
                "{why}; extracting it again from its verified .debs"
            ));
        }
        Cached::Damaged(why) => {
            let dir = cache.tree_dir(pin);
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
            bail!(
                "{why}; its .debs are not in {}, so it was removed: run `cargo xtask kernels \
                 fetch {}` to download it again",
                cache.debs().display(),
                pin.version
            );
        }
        Cached::Absent => {}
    }
    events.step(format!("fetching kernel {} ({})", pin.version, pin.release));
    cache.clean_stale(events);
    let apt = apt::Apt::for_pin(&cache.root, pin);
    let mut updated = false;
    let mut debs = vec![];
    for pkg in &pin.packages {
        debs.push(cache.deb(pin, pkg, &apt, &mut updated, events)?);
    }
    let tree = cache.extract(pin, &debs, events)?;
    events.note(format!(
        "kernel {} ({}) cached at {}",
        pin.version,
        pin.release,
        tree.root.display()
    ));
    Ok(tree)
}

/// One package a bump changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageBump {
    pub old_name: String,
    pub old_version: String,
    pub new_name: String,
    pub new_version: String,
    pub new_sha256: String,
}

/// What [`bump`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BumpOutcome {
    pub version: String,
    pub path: PathBuf,
    pub old_release: String,
    pub new_release: String,
    /// Empty when the pin was already the newest.
    pub changes: Vec<PackageBump>,
    /// What changed in `[selftests]`, for a pin that has one.
    pub selftests: Option<String>,
}

impl BumpOutcome {
    pub fn already_newest(&self) -> bool {
        self.changes.is_empty()
    }
}

impl fmt::Display for BumpOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.already_newest() {
            return write!(
                f,
                "kernel {}: already newest ({})",
                self.version, self.old_release
            );
        }
        write!(f, "kernel {}: ", self.version)?;
        if self.old_release != self.new_release {
            write!(f, "release {} -> {}; ", self.old_release, self.new_release)?;
        }
        let parts: Vec<String> = self
            .changes
            .iter()
            .map(|c| {
                format!(
                    "{}={} -> {}={}",
                    c.old_name, c.old_version, c.new_name, c.new_version
                )
            })
            .collect();
        write!(f, "{}", parts.join(", "))?;
        if let Some(t) = &self.selftests {
            write!(f, "; {t}")?;
        }
        write!(f, " (rewrote {})", self.path.display())
    }
}

/// The version a bumped pin's `[selftests]` source moves to for kernel package version
/// `kernel`: `None` when it stays (already that version, or another one its `source_note`
/// explains); an error when the suites (`candidates`, `apt-cache madison` of the source's name)
/// have no source of that version, since the selftests would then not be the kernel's.
fn selftests_source(
    t: &Selftests,
    kernel: &str,
    candidates: &[(String, String)],
    pin: &Pin,
) -> Result<Option<String>> {
    if t.source.version == kernel || t.source_note.is_some() {
        return Ok(None);
    }
    if candidates
        .iter()
        .any(|(name, version)| name == &t.source.name && version == kernel)
    {
        return Ok(Some(kernel.to_string()));
    }
    bail!(
        "the suites of {} have no {} {kernel}, the new kernel's source, so its selftests could \
         not be built from it; {} is unchanged. Pin [selftests] source by hand to the nearest \
         version with a `source_note` saying why, then bump again",
        pin.path.display(),
        t.source.name,
        pin.path.display()
    )
}

/// The newest `(name, version)` among candidates (Debian version order, then name).
pub fn newest(candidates: &[(String, String)]) -> Option<&(String, String)> {
    candidates
        .iter()
        .max_by(|a, b| debver::compare(&a.1, &b.1).then_with(|| a.0.cmp(&b.0)))
}

/// Re-pins `version` to the newest packages in its suites that match each package's `bump`
/// regex, rewriting the pin file in place (comments kept). The new `.deb`s are downloaded and
/// verified before the file changes, so a bumped pin is known to fetch.
pub fn bump(version: &str, events: &Events) -> Result<BumpOutcome> {
    bump_in(&cache(), &resolve(version)?, events)
}

fn bump_in(cache: &Cache, pin: &Pin, events: &Events) -> Result<BumpOutcome> {
    if pin.packages.iter().all(|p| p.bump.is_none()) {
        bail!(
            "pin {} has no `bump` regex in any [[package]] of {}; add one to say which package \
             names are newer ABIs of the same kernel",
            pin.version,
            pin.path.display()
        );
    }
    events.step(format!(
        "looking for newer packages for kernel {}",
        pin.version
    ));
    let _lock = cache.lock(events)?;
    cache.clean_stale(events);
    let apt = apt::Apt::for_pin(&cache.root, pin);
    apt.update(events)?;
    let names = apt.pkgnames(events)?;
    let (updates, changes, mut releases) = newest_packages(pin, &apt, &names, events)?;
    releases.sort();
    releases.dedup();
    let new_release = match releases.as_slice() {
        [] => pin.release.clone(),
        [one] => one.clone(),
        many => bail!(
            "the newest packages for kernel {} are for different releases ({}); tighten the \
             bump regexes in {}",
            pin.version,
            many.join(", "),
            pin.path.display()
        ),
    };
    let mut outcome = BumpOutcome {
        version: pin.version.clone(),
        path: pin.path.clone(),
        old_release: pin.release.clone(),
        new_release: new_release.clone(),
        changes,
        selftests: None,
    };
    if outcome.already_newest() && new_release == pin.release {
        return Ok(outcome);
    }
    let kernel_version = updates
        .iter()
        .find(|u| u.index == 0)
        .map_or(&pin.packages[0].version, |u| &u.version);
    let mut selftests = None;
    if let Some(t) = &pin.selftests {
        let candidates = apt.madison(std::slice::from_ref(&t.source.name), events)?;
        let source = match selftests_source(t, kernel_version, &candidates, pin)? {
            Some(v) => Some((v.clone(), apt.sha256(&t.source.name, &v, events)?)),
            None => None,
        };
        let headers = pin::headers_package(&new_release);
        outcome.selftests = Some(match &source {
            Some((v, _)) => format!(
                "[selftests] {} {} -> {v}, headers {headers}",
                t.source.name, t.source.version
            ),
            None => format!(
                "[selftests] headers {headers} ({} {} kept: its source_note)",
                t.source.name, t.source.version
            ),
        });
        selftests = Some(pin::SelftestsUpdate { headers, source });
    }
    let text = std::fs::read_to_string(&pin.path)
        .with_context(|| format!("reading {}", pin.path.display()))?;
    let new_text = pin::rewrite(&text, &pin.path, &new_release, &updates, selftests.as_ref())?;
    write_proven(cache, pin, &apt, &new_text, events)?;
    events.note(outcome.to_string());
    Ok(outcome)
}

/// For each package of `pin` with a `bump` regex, the newest of the suites' packages (`names`)
/// it matches: the pin's updates, the changes to report, and the releases they are for.
fn newest_packages(
    pin: &Pin,
    apt: &apt::Apt,
    names: &[String],
    events: &Events,
) -> Result<(Vec<pin::PackageUpdate>, Vec<PackageBump>, Vec<String>)> {
    let mut updates = vec![];
    let mut changes = vec![];
    let mut releases = vec![];
    for (index, pkg) in pin.packages.iter().enumerate() {
        let Some(re) = &pkg.bump else { continue };
        let re = regex::Regex::new(re).expect("validated when the pin was parsed");
        let matching: Vec<String> = names.iter().filter(|n| re.is_match(n)).cloned().collect();
        let candidates = apt.madison(&matching, events)?;
        let Some((name, ver)) = newest(&candidates).cloned() else {
            bail!(
                "no package in {} matches the bump regex {:?} of {} in {}; the kernel series may \
                 have left these suites: edit the pin's [[source]]s or regex",
                pin.sources
                    .iter()
                    .map(|s| s.suite.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                re.as_str(),
                pkg.name,
                pin.path.display()
            );
        };
        if let Some(r) = release_from_package(&name) {
            releases.push(r);
        }
        if name == pkg.name && ver == pkg.version {
            continue;
        }
        let sha256 = apt.sha256(&name, &ver, events)?;
        updates.push(pin::PackageUpdate {
            index,
            name: name.clone(),
            version: ver.clone(),
            sha256: sha256.clone(),
        });
        changes.push(PackageBump {
            old_name: pkg.name.clone(),
            old_version: pkg.version.clone(),
            new_name: name,
            new_version: ver,
            new_sha256: sha256,
        });
    }
    Ok((updates, changes, releases))
}

/// Writes the bumped pin `new_text` over `pin`'s file once its packages are proven to download
/// and verify.
fn write_proven(
    cache: &Cache,
    pin: &Pin,
    apt: &apt::Apt,
    new_text: &str,
    events: &Events,
) -> Result<()> {
    let new_pin = Pin::parse(new_text, &pin.path)?;
    let mut updated = true;
    for pkg in &new_pin.packages {
        cache
            .deb(&new_pin, pkg, apt, &mut updated, events)
            .with_context(|| {
                format!(
                    "the new package {} did not fetch; {} is unchanged",
                    pkg.spec(),
                    pin.path.display()
                )
            })?;
    }
    let tmp = pin.path.with_extension("toml.tmp");
    std::fs::write(&tmp, new_text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &pin.path)
        .with_context(|| format!("replacing {}", pin.path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_pins_parse() {
        let all = pins().unwrap();
        assert!(
            all.iter().any(|p| p.version == "6.1"),
            "kernels/6.1.toml is missing"
        );
        let versions: Vec<&str> = all.iter().map(|p| p.version.as_str()).collect();
        let mut sorted = versions.clone();
        sorted.sort_by(|a, b| pin::compare_versions(a, b));
        assert_eq!(versions, sorted);
        for p in &all {
            for pkg in &p.packages {
                if let Some(re) = &pkg.bump {
                    let re = regex::Regex::new(re).unwrap();
                    assert!(
                        re.is_match(&pkg.name),
                        "{}: bump regex does not match {}",
                        p.version,
                        pkg.name
                    );
                }
            }
            let derived: Vec<String> = p
                .packages
                .iter()
                .filter_map(|k| release_from_package(&k.name))
                .collect();
            assert!(
                derived.iter().all(|r| r == &p.release),
                "{}: release {} but packages say {derived:?}",
                p.version,
                p.release
            );
        }
    }

    #[test]
    fn unknown_version_lists_pins() {
        let t = tempfile::tempdir().unwrap();
        for v in ["6.12", "5.10", "6.1"] {
            let text = std::fs::read_to_string(pins_dir().join("6.1.toml"))
                .unwrap()
                .replacen("version = \"6.1\"", &format!("version = \"{v}\""), 1);
            std::fs::write(t.path().join(format!("{v}.toml")), text).unwrap();
        }
        let e = resolve_in(t.path(), "9.9").unwrap_err().to_string();
        assert!(
            e.starts_with("unknown kernel 9.9; pinned: 5.10, 6.1, 6.12 ("),
            "{e}"
        );
        assert!(e.contains("kernels bump 9.9"), "{e}");
        assert_eq!(resolve_in(t.path(), "6.12").unwrap().version, "6.12");
    }

    #[test]
    fn picks_newest() {
        let c = |v: &[(&str, &str)]| {
            v.iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect::<Vec<_>>()
        };
        let cands = c(&[
            ("linux-image-6.1.0-56-cloud-amd64-unsigned", "6.1.170-1"),
            ("linux-image-6.1.0-57-cloud-amd64-unsigned", "6.1.192-3"),
            ("linux-image-6.1.0-9-cloud-amd64-unsigned", "6.1.27-1"),
            ("linux-image-6.1.0-57-cloud-amd64-unsigned", "6.1.192-10"),
        ]);
        assert_eq!(newest(&cands).unwrap().1, "6.1.192-10");
        let cands = c(&[
            ("linux-image-6.12.115+deb13-cloud-amd64", "6.12.115-1"),
            (
                "linux-image-6.12.115+deb13.1-cloud-amd64",
                "6.12.115-1+deb13u1",
            ),
        ]);
        assert_eq!(
            newest(&cands).unwrap().0,
            "linux-image-6.12.115+deb13.1-cloud-amd64"
        );
        assert_eq!(newest(&[]), None);
    }

    #[test]
    fn bump_outcome_text() {
        let mut o = BumpOutcome {
            version: "6.1".into(),
            path: "kernels/6.1.toml".into(),
            old_release: "6.1.0-57-cloud-amd64".into(),
            new_release: "6.1.0-57-cloud-amd64".into(),
            changes: vec![],
            selftests: None,
        };
        assert_eq!(
            o.to_string(),
            "kernel 6.1: already newest (6.1.0-57-cloud-amd64)"
        );
        o.new_release = "6.1.0-58-cloud-amd64".into();
        o.changes.push(PackageBump {
            old_name: "a".into(),
            old_version: "1".into(),
            new_name: "b".into(),
            new_version: "2".into(),
            new_sha256: "0".repeat(64),
        });
        assert_eq!(
            o.to_string(),
            "kernel 6.1: release 6.1.0-57-cloud-amd64 -> 6.1.0-58-cloud-amd64; a=1 -> b=2 (rewrote kernels/6.1.toml)"
        );
        o.selftests = Some("[selftests] x 1 -> 2, headers h".into());
        assert!(
            o.to_string().ends_with(
                "a=1 -> b=2; [selftests] x 1 -> 2, headers h (rewrote kernels/6.1.toml)"
            ),
            "{o}"
        );
    }

    #[test]
    fn a_bumped_selftests_source_is_the_new_kernels_or_the_bump_fails() {
        let pin = resolve("6.1").unwrap();
        let t = pin.selftests.as_deref().unwrap().clone();
        let old = t.source.version.clone();
        let c = |v: &[&str]| {
            v.iter()
                .map(|v| ("linux-source-6.1".to_string(), v.to_string()))
                .collect::<Vec<_>>()
        };
        // The same kernel version: nothing to do.
        assert_eq!(selftests_source(&t, &old, &c(&[]), &pin).unwrap(), None);
        // The new version is in the suites: taken, not a newer one.
        assert_eq!(
            selftests_source(&t, "6.1.200-1", &c(&[&old, "6.1.200-1", "6.1.201-1"]), &pin)
                .unwrap()
                .as_deref(),
            Some("6.1.200-1")
        );
        // Not there: an error naming the source, the pin left as it is.
        let e = selftests_source(&t, "6.1.200-1", &c(&[&old]), &pin)
            .unwrap_err()
            .to_string();
        assert!(e.contains("have no linux-source-6.1 6.1.200-1"), "{e}");
        assert!(e.contains("is unchanged"), "{e}");
        // A source another version on purpose (a source_note) stays.
        let noted = Selftests {
            source_note: Some("why".into()),
            ..t
        };
        assert_eq!(
            selftests_source(&noted, "6.1.200-1", &c(&[&old]), &pin).unwrap(),
            None
        );
    }

    /// A pin whose one `.deb` (built here with `dpkg-deb --build`, holding a kernel image and a
    /// module) is already in the cache's `debs/`: fetching it extracts without any network.
    fn local_pin(cache: &Cache) -> Pin {
        let release = "6.1.0-99-test-amd64";
        let src = tempfile::tempdir().unwrap();
        let root = src.path().join("pkg");
        for (path, text) in [
            (format!("boot/vmlinuz-{release}"), "the kernel image"),
            (format!("lib/modules/{release}/kernel/x.ko"), "a module"),
            ("DEBIAN/control".to_string(), "Package: linux-image-test\nVersion: 1\nArchitecture: amd64\nMaintainer: t <t@t>\nDescription: t\n"),
        ] {
            let p = root.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        let deb = src.path().join("x.deb");
        let out = std::process::Command::new("dpkg-deb")
            .args(["--build", "--root-owner-group"])
            .arg(&root)
            .arg(&deb)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let sha = crate::support::fs::sha256_file(&deb).unwrap();
        let pin = Pin::parse(
            &format!(
                "version = \"6.1\"\nrelease = \"{release}\"\n\
                 [[source]]\nuri = \"http://deb.debian.org/debian\"\nsuite = \"bookworm\"\n\
                 [[package]]\nname = \"linux-image-test\"\nversion = \"1\"\nsha256 = \"{sha}\"\n"
            ),
            Path::new("kernels/6.1.toml"),
        )
        .unwrap();
        std::fs::create_dir_all(cache.debs()).unwrap();
        std::fs::copy(
            &deb,
            cache.debs().join(pin.packages[0].deb_file_name(pin.arch)),
        )
        .unwrap();
        pin
    }

    #[test]
    fn a_tree_without_its_completion_marker_is_extracted_again() {
        let t = tempfile::tempdir().unwrap();
        let c = Cache {
            root: t.path().to_path_buf(),
        };
        let pin = local_pin(&c);
        let tree = fetch_in(&c, &pin, &Events::silent()).unwrap();
        assert_eq!(
            std::fs::read_to_string(&tree.vmlinuz).unwrap(),
            "the kernel image"
        );
        // A run killed while the tree was being written: a half image, no marker.
        std::fs::write(&tree.vmlinuz, "half").unwrap();
        std::fs::remove_file(tree.root.join(cache::COMPLETE)).unwrap();
        assert_eq!(c.cached(&pin), None);
        let again = fetch_in(&c, &pin, &Events::silent()).unwrap();
        assert_eq!(again, tree);
        assert_eq!(
            std::fs::read_to_string(&again.vmlinuz).unwrap(),
            "the kernel image"
        );
        assert!(again.root.join(cache::COMPLETE).is_file());
    }

    /// The marker records the vmlinuz's sha256 and the module files with their sizes.
    #[test]
    fn the_marker_records_the_image_hash_and_the_modules() {
        let t = tempfile::tempdir().unwrap();
        let c = Cache {
            root: t.path().to_path_buf(),
        };
        let pin = local_pin(&c);
        let tree = fetch_in(&c, &pin, &Events::silent()).unwrap();
        let text = std::fs::read_to_string(tree.root.join(cache::COMPLETE)).unwrap();
        assert_eq!(
            text,
            format!(
                "bpfvm kernel tree 2\nvmlinuz {} boot/vmlinuz-6.1.0-99-test-amd64\n\
                 module 8 lib/modules/6.1.0-99-test-amd64/kernel/x.ko\n",
                crate::support::fs::sha256_file(&tree.vmlinuz).unwrap()
            )
        );
        assert_eq!(cache::Manifest::parse(&text).unwrap().to_text(), text);
    }

    /// An altered image or a truncated module is found on the next use and extracted again
    /// from the verified .deb; without the .deb, the tree is removed and the error says to
    /// fetch it again.
    #[test]
    fn a_tree_that_no_longer_matches_its_marker_is_extracted_again_or_refused() {
        let t = tempfile::tempdir().unwrap();
        let c = Cache {
            root: t.path().to_path_buf(),
        };
        let pin = local_pin(&c);
        let tree = fetch_in(&c, &pin, &Events::silent()).unwrap();
        let module = tree.modules_dir().unwrap().join("kernel/x.ko");
        for (file, text) in [(&tree.vmlinuz, "the kernel imagf"), (&module, "a mod")] {
            std::fs::write(file, text).unwrap();
            assert!(
                matches!(c.state(&pin), Cached::Damaged(_)),
                "{}",
                file.display()
            );
            assert_eq!(c.cached(&pin), None);
            assert_eq!(fetch_in(&c, &pin, &Events::silent()).unwrap(), tree);
            assert_eq!(
                std::fs::read_to_string(&tree.vmlinuz).unwrap(),
                "the kernel image"
            );
            assert_eq!(std::fs::read_to_string(&module).unwrap(), "a module");
        }
        std::fs::remove_file(c.deb_path(&pin.packages[0], pin.arch)).unwrap();
        std::fs::write(&tree.vmlinuz, "x").unwrap();
        let e = format!("{:#}", fetch_in(&c, &pin, &Events::silent()).unwrap_err());
        assert!(e.contains("the cached kernel 6.1 in"), "{e}");
        assert!(
            e.contains("was altered: boot/vmlinuz-6.1.0-99-test-amd64 has sha256"),
            "{e}"
        );
        assert!(
            e.contains("run `cargo xtask kernels fetch 6.1` to download it again"),
            "{e}"
        );
        assert!(!tree.root.exists(), "the altered tree is gone");
    }

    /// A marker from an older bpfvm (the release only) counts as no marker.
    #[test]
    fn an_old_marker_counts_as_none() {
        let t = tempfile::tempdir().unwrap();
        let c = Cache {
            root: t.path().to_path_buf(),
        };
        let pin = local_pin(&c);
        let tree = fetch_in(&c, &pin, &Events::silent()).unwrap();
        std::fs::write(
            tree.root.join(cache::COMPLETE),
            format!("{}\n", pin.release),
        )
        .unwrap();
        assert_eq!(c.state(&pin), Cached::Absent);
        assert_eq!(fetch_in(&c, &pin, &Events::silent()).unwrap(), tree);
        assert!(matches!(c.state(&pin), Cached::Valid(_)));
    }

    #[test]
    fn cached_debs_are_verified_and_removed_only_under_the_lock() {
        let t = tempfile::tempdir().unwrap();
        let c = Cache {
            root: t.path().to_path_buf(),
        };
        let pin = local_pin(&c);
        let deb = c.debs().join(pin.packages[0].deb_file_name(pin.arch));
        std::fs::write(&deb, "corrupt").unwrap();
        let held = c.lock(&Events::silent()).unwrap();
        std::thread::scope(|s| {
            let run = s.spawn(|| fetch_in(&c, &pin, &Events::silent()));
            std::thread::sleep(std::time::Duration::from_millis(500));
            assert!(
                deb.exists(),
                "the .deb was checked and removed while another run held the lock"
            );
            drop(held);
            let err = format!("{:#}", run.join().unwrap().unwrap_err());
            assert!(err.contains("sha256 mismatch"), "{err}");
        });
        assert!(!deb.exists());
    }

    /// Real network fetch of the 6.1 pin into a fresh cache, then the cached second call.
    /// `cargo test -p vm -- --ignored --nocapture real_fetch_6_1_cold_then_warm`
    #[test]
    #[ignore = "downloads ~27 MB from the Debian mirror"]
    fn real_fetch_6_1_cold_then_warm() {
        real_fetch("6.1");
    }

    /// Real fetch of every pin (set BPFVM_FETCH_PINS="5.10 7.2" to choose).
    #[test]
    #[ignore = "downloads every pinned kernel from the Debian mirror"]
    fn real_fetch_all_pins() {
        let list = std::env::var("BPFVM_FETCH_PINS").unwrap_or_default();
        let all = pins().unwrap();
        for p in all {
            if list.is_empty() || list.split_whitespace().any(|v| v == p.version) {
                real_fetch(&p.version);
            }
        }
    }

    /// Two runs fetching the same pin into one empty cache at once: the lock makes one wait,
    /// both get the same complete tree, and no temporary file or second tree is left behind.
    /// `cargo test -p bpfvm-host --lib -- --ignored two_concurrent_fetches_share_one_cache` (run
    /// by `cargo xtask ci`).
    #[test]
    #[ignore = "downloads ~27 MB from the Debian mirror"]
    fn two_concurrent_fetches_share_one_cache() {
        let t = tempfile::tempdir().unwrap();
        let pin = resolve("6.1").unwrap();
        let trees: Vec<Bootable> = std::thread::scope(|s| {
            let runs: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let c = Cache {
                            root: t.path().to_path_buf(),
                        };
                        fetch_in(&c, &pin, &Events::silent()).unwrap()
                    })
                })
                .collect();
            runs.into_iter().map(|r| r.join().unwrap()).collect()
        });
        assert_eq!(trees[0], trees[1]);
        assert!(trees[0].vmlinuz.is_file());
        let entries: Vec<String> = std::fs::read_dir(t.path().join("kernels"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != ".lock")
            .collect();
        assert_eq!(entries.len(), 1, "one tree, no leftovers: {entries:?}");
        let debs: Vec<_> = std::fs::read_dir(t.path().join("debs")).unwrap().collect();
        assert_eq!(debs.len(), pin.packages.len(), "no temporary .debs left");
    }

    fn real_fetch(version: &str) {
        let t = tempfile::tempdir().unwrap();
        let c = Cache {
            root: t.path().to_path_buf(),
        };
        let pin = resolve(version).unwrap();
        let ev = Events::new(|o| eprintln!("{o:?}"));
        let start = std::time::Instant::now();
        let tree = fetch_in(&c, &pin, &ev).unwrap();
        let cold = start.elapsed();
        assert!(tree.vmlinuz.is_file());
        assert!(tree.modules_dir().is_some());
        let start = std::time::Instant::now();
        let again = fetch_in(&c, &pin, &ev).unwrap();
        let warm = start.elapsed();
        assert_eq!(tree, again);
        eprintln!(
            "kernel {version}: cold fetch {cold:?}, cached fetch {warm:?}, vmlinuz {}",
            tree.vmlinuz.display()
        );
    }
}
