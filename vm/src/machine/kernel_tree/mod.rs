//! `--kernel-tree DIR`: a kernel source tree configured with the suite's config (see
//! [`config`]), built out of tree in bpfvm's cache (see [`cache`]), then booted as an image the
//! user built would be. `docs/kernel-tree.md` is the user's side of it.
//!
//! Order: [`check`] everything the user gave (the tree, the fragments) before anything is
//! installed or built; [`build`] then installs the build tools, configures when the config
//! changed, builds when the sources did, and returns the image.
mod cache;
mod config;
mod make;
mod source;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::output::Events;
use config::{Line, Symbols};

pub use cache::{list, root as cache_root, Listed, Stamp};
pub use make::{BuildFailed, BUILD_FAILED_STATUS};

/// What a report says of a kernel built from a tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeInfo {
    pub dir: String,
    pub commit: Option<String>,
    pub dirty: bool,
    pub kernelversion: String,
    pub release: String,
    /// sha256 of the merged config fragments.
    pub config_hash: String,
    /// Whether this run built it (false: the cached build matched).
    pub built: bool,
    pub build_dir: String,
}

/// The tree and fragments, checked.
#[derive(Debug)]
pub struct Checked {
    source: source::Source,
    /// Each `--kconfig` fragment as shown to the user, parsed.
    user: Vec<(String, Vec<Line>)>,
}

impl Checked {
    pub fn kernelversion(&self) -> &str {
        &self.source.kernelversion
    }
}

/// A built kernel: its image and what the report says of it.
#[derive(Debug)]
pub struct Built {
    pub image: PathBuf,
    pub info: TreeInfo,
}

/// Checks the tree and reads the `--kconfig` fragments (each must parse), before anything is
/// installed or built.
pub fn check(dir: &Path, kconfig: &[PathBuf]) -> Result<Checked> {
    let source = source::open(dir)?;
    let mut user = Vec::new();
    for f in kconfig {
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("--kconfig {}: cannot read the fragment", f.display()))?;
        let shown = f.display().to_string();
        let lines =
            config::parse_fragment(&text, &shown).with_context(|| format!("--kconfig {shown}"))?;
        user.push((shown, lines));
    }
    Ok(Checked { source, user })
}

/// The Debian packages a kernel build needs, each with a command or file that shows it is
/// there (for hosts where dpkg does not answer): Documentation/process/changes.rst lists
/// them; pahole (dwarves) makes the BTF; ccache is used when present.
const BUILD_TOOLS: &[(&str, &str)] = &[
    ("make", "make"),
    ("gcc", "gcc"),
    ("libc6-dev", "/usr/include/stdio.h"),
    ("flex", "flex"),
    ("bison", "bison"),
    ("bc", "bc"),
    ("libelf-dev", "/usr/include/libelf.h"),
    ("libssl-dev", "/usr/include/openssl/opensslv.h"),
    ("dwarves", "pahole"),
    ("ccache", "ccache"),
];

fn on_path(cmd: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(cmd).is_file()))
}

fn present(what: &str) -> bool {
    if what.starts_with('/') {
        Path::new(what).exists()
    } else {
        on_path(what)
    }
}

/// Installs the build tools where they are missing; an error names the packages still missing.
fn ensure_build_tools(events: &Events) -> Result<()> {
    let pkgs: Vec<&str> = BUILD_TOOLS.iter().map(|(p, _)| *p).collect();
    crate::provision::ensure_packages(&pkgs, events)
        .context("installing the kernel build tools")?;
    let missing: Vec<&str> = BUILD_TOOLS
        .iter()
        .filter(|(_, what)| !present(what))
        .map(|(p, _)| *p)
        .collect();
    if !missing.is_empty() {
        bail!(
            "a kernel build needs the Debian packages {} (the commands or headers they bring \
             are missing); install them: {}",
            missing.join(" "),
            crate::provision::apt_install_command(&missing, crate::provision::is_root())
        );
    }
    Ok(())
}

fn first_line(cmd: &str, arg: &str) -> String {
    Command::new(cmd)
        .arg(arg)
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string()
        })
        .unwrap_or_default()
}

/// The compiler and pahole versions: a build with another is another build.
fn toolchain() -> String {
    format!(
        "{}; pahole {}",
        first_line("gcc", "--version"),
        first_line("pahole", "--version")
    )
}

/// The fragments to merge, in order, as (file name in the build directory, text), with the
/// wants that must survive (all but the selftests') and the selftests' own.
struct Fragments {
    files: Vec<(String, String)>,
    required: Vec<(config::Want, String)>,
    selftests: Vec<(config::Want, String)>,
}

fn fragments(checked: &Checked, symbols: &Symbols) -> Result<Fragments> {
    let tree = &checked.source.dir;
    let parse = |text: &str, name: &str| config::parse_fragment(text, name);
    let boot = parse(config::BOOT, "kernels/tree/boot.config")?;
    let suite = parse(config::SUITE, "kernels/tree/suite.config")?;
    let selftests_text = std::fs::read_to_string(tree.join(config::SELFTESTS))
        .map(|t| config::selftests_without_modules(&t))
        .unwrap_or_default();
    let selftests = parse(&selftests_text, config::SELFTESTS)?;
    let mut files = Vec::new();
    let mut add = |name: &str, lines: &[Line]| {
        let wants = config::resolve(lines, symbols);
        files.push((name.to_string(), config::fragment_text(&wants)));
        wants
    };
    let mut required = add("1-boot.config", &boot);
    let selftests = add("2-selftests.config", &selftests);
    required.extend(add("3-suite.config", &suite));
    for (i, (_, lines)) in checked.user.iter().enumerate() {
        required.extend(add(&format!("{}-user.config", 4 + i), lines));
    }
    // A selftests option a later fragment sets otherwise (the lockup panics) is not lost.
    let selftests = selftests
        .into_iter()
        .filter(|(w, _)| !required.iter().any(|(r, _)| r.name == w.name))
        .collect();
    Ok(Fragments {
        files,
        required,
        selftests,
    })
}

fn sha(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p);
        h.update(b"\0");
    }
    hex::encode(h.finalize())
}

fn make_cmd(tree: &Path, out: &Path) -> (Command, String) {
    let mut cmd = Command::new("make");
    cmd.arg("-C").arg(tree).arg(format!("O={}", out.display()));
    let shown = format!("make -C {} O={}", tree.display(), out.display());
    (cmd, shown)
}

/// Writes the fragments into `out/bpfvm/`, merges them over allnoconfig with the tree's
/// `merge_config.sh -n` and checks the result.
fn configure(
    tree: &Path,
    slot: &cache::Slot,
    frags: &Fragments,
    symbols: &Symbols,
    events: &Events,
) -> Result<()> {
    events.step("configuring the kernel (allnoconfig + boot, selftests, suite and your fragments)");
    let out = slot.out();
    let dir = out.join("bpfvm");
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    let (mut cmd, shown) = make_cmd(tree, &out);
    cmd.arg("-s").arg("outputmakefile");
    make::run(
        &mut cmd,
        &format!("{shown} -s outputmakefile"),
        "the build directory's Makefile",
        &slot.config_log(),
        events,
    )?;
    // Through sh: a copied tree may have lost the script's executable bit.
    let mut merge = Command::new("sh");
    merge
        .current_dir(&out)
        .arg(tree.join("scripts/kconfig/merge_config.sh"))
        .args(["-n", "-O", "."]);
    for (name, text) in &frags.files {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
        merge.arg(path);
    }
    let shown = format!(
        "cd {} && sh {}/scripts/kconfig/merge_config.sh -n -O . bpfvm/*.config",
        out.display(),
        tree.display()
    );
    make::run(
        &mut merge,
        &shown,
        "merging the fragments",
        &slot.dir.join("merge.log"),
        events,
    )?;
    let final_config = std::fs::read_to_string(out.join(".config"))
        .with_context(|| format!("read {}/.config", out.display()))?;
    let got = config::parse_config(&final_config);
    let lost = config::lost(&frags.required, &got);
    if !lost.is_empty() {
        bail!("{}", config::lost_error(&lost, symbols));
    }
    let dropped: Vec<String> = config::lost(&frags.selftests, &got)
        .iter()
        .map(|l| l.want.name.clone())
        .collect();
    if !dropped.is_empty() {
        events.note(format!(
            "{} options of the selftests fragment did not survive (their dependencies are not \
             in the suite's config; the suite does not need them): {}",
            dropped.len(),
            dropped.join(" ")
        ));
    }
    events.note(format!(
        "config: {} options =y, every option of boot.config, suite.config and --kconfig set",
        final_config.lines().filter(|l| l.ends_with("=y")).count()
    ));
    Ok(())
}

/// Where a git ref of a tree is checked out for an A/B (see `source::checkout_ref`).
pub fn checkout_ref(tree: &Path, rev: &str) -> Result<PathBuf> {
    source::checkout_ref(tree, rev, &crate::paths::cache_dir().join("tree-refs"))
}

/// Whether `dir` looks like a kernel source tree (a top-level Makefile with VERSION and
/// PATCHLEVEL): what `--against` tells a tree from a pin or an image by.
pub fn is_tree(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Makefile")).is_ok_and(|m| source::kernelversion(&m).is_some())
}

/// Builds (or finds cached) the kernel of a checked tree.
pub fn build(checked: &Checked, events: &Events) -> Result<Built> {
    let src = &checked.source;
    ensure_build_tools(events)?;
    let toolchain = toolchain();
    let symbols = Symbols::read(&src.dir)?;
    let frags = fragments(checked, &symbols)?;
    let joined: Vec<&[u8]> = frags.files.iter().map(|(_, t)| t.as_bytes()).collect();
    let config_hash = sha(&joined);
    let t = Instant::now();
    let content = source::content_key(src)?;
    events.note(format!(
        "tree {}: {}, sources hashed in {:.1} s",
        src.dir.display(),
        match &src.git {
            Some(g) => format!(
                "{}{}",
                &g.commit[..12],
                if g.dirty { " (dirty)" } else { "" }
            ),
            None => "not a git tree".into(),
        },
        t.elapsed().as_secs_f64()
    ));
    let key = sha(&[
        content.as_bytes(),
        config_hash.as_bytes(),
        toolchain.as_bytes(),
    ]);
    let root = cache::root();
    let slot = cache::Slot::of(&root, &src.dir, &toolchain);
    let _lock = slot.lock(|| {
        events.note(format!(
            "waiting for another run building in {}",
            slot.dir.display()
        ))
    })?;
    let info = |stamp: &Stamp, built: bool| TreeInfo {
        dir: stamp.tree.clone(),
        commit: stamp.commit.clone(),
        dirty: stamp.dirty,
        kernelversion: stamp.kernelversion.clone(),
        release: stamp.release.clone(),
        config_hash: stamp.config_hash.clone(),
        built,
        build_dir: slot.out().display().to_string(),
    };
    if let Some(stamp) = slot
        .stamp()
        .filter(|s| s.key == key && slot.image().is_file())
    {
        events.note(format!(
            "the tree is unchanged since its cached build ({}): not building",
            slot.dir.display()
        ));
        slot.touch();
        return Ok(Built {
            image: slot.image(),
            info: info(&stamp, false),
        });
    }
    slot.unstamp()?;
    let configured = slot.dir.join("config.hash");
    let same_config = std::fs::read_to_string(&configured).is_ok_and(|h| h == config_hash)
        && slot.out().join(".config").is_file();
    if !same_config {
        let _ = std::fs::remove_file(&configured);
        configure(&src.dir, &slot, &frags, &symbols, events)?;
        std::fs::write(&configured, &config_hash)?;
    }
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let (mut cmd, mut shown) = make_cmd(&src.dir, &slot.out());
    cmd.arg(format!("-j{jobs}"));
    shown += &format!(" -j{jobs}");
    if on_path("ccache") {
        cmd.arg("CC=ccache gcc");
        shown += " CC='ccache gcc'";
    }
    cmd.arg("bzImage");
    shown += " bzImage";
    events.step(format!(
        "building the kernel of {} (log: {})",
        src.dir.display(),
        slot.build_log().display()
    ));
    let start = Instant::now();
    make::run(
        &mut cmd,
        &shown,
        "building the kernel",
        &slot.build_log(),
        events,
    )?;
    let build_seconds = start.elapsed().as_secs();
    let (mut cmd, _) = make_cmd(&src.dir, &slot.out());
    let release = crate::wait::output(cmd.args(["-s", "kernelrelease"]))?;
    let release = String::from_utf8_lossy(&release.stdout).trim().to_string();
    if release.is_empty() {
        bail!(
            "`make kernelrelease` printed nothing in {}",
            slot.out().display()
        );
    }
    let stamp = Stamp {
        tree: src.dir.display().to_string(),
        commit: src.git.as_ref().map(|g| g.commit.clone()),
        dirty: src.git.as_ref().is_some_and(|g| g.dirty),
        kernelversion: src.kernelversion.clone(),
        release,
        config_hash,
        key,
        toolchain,
        built_unix: cache::now(),
        build_seconds,
    };
    slot.write_stamp(&stamp)?;
    slot.touch();
    for gone in cache::evict(&root, cache::limit(), &slot.dir) {
        events.note(format!(
            "removed the least recently used tree build {}",
            gone.display()
        ));
    }
    Ok(Built {
        image: slot.image(),
        info: info(&stamp, true),
    })
}
