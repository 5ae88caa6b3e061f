//! `--kernel-tree DIR`: a kernel source tree configured with the suite's config (see
//! [`config`]), built out of tree in bpfvm's cache (see [`cache`]) in a clean environment (see
//! [`env`]), then booted as an image the user built would be. `docs/kernel-tree.md` is the
//! user's side of it.
//!
//! Order: [`check`] everything the user gave (the tree, its state, the fragments, the
//! environment) before anything is installed or built; [`build`] then installs the build
//! tools and, unless the sources, fragments and toolchain are those of the cached build,
//! derives the config afresh (so a commit gets the same `.config` in a warm slot as in a cold
//! one), builds, checks the built `.config` and returns the image.
mod cache;
mod config;
mod env;
mod make;
mod source;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::support::output::Events;
use crate::support::status::Untestable;
use config::{Line, Symbols};
use env::{Mapped, OUT, SRC};

pub use cache::{list, root as cache_root, Listed, SlotLock, Stamp};

/// Names the way bpfvm builds a tree (the clean environment, the mapped paths): in the key
/// and the slot, so that a build made another way is never reused.
const RECIPE: &str = "bpfvm tree build 3: env -i, /run/bpfvm mapping, config derived per build, \
                      modules on for the selftests' bpf_testmod";

/// What a report says of a kernel built from a tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeInfo {
    pub dir: String,
    pub commit: Option<String>,
    pub dirty: bool,
    pub kernelversion: String,
    pub release: String,
    /// sha256 of the `.config` the kernel was built with.
    pub config_hash: String,
    /// Whether this run built it (false: the cached build matched).
    pub built: bool,
    pub build_dir: String,
}

impl TreeInfo {
    /// ` at <commit>` with ` (dirty)` when it was, for a git tree.
    pub fn at_commit(&self) -> Option<String> {
        self.commit.as_ref().map(|c| {
            format!(
                " at {}{}",
                &c[..c.len().min(12)],
                if self.dirty { " (dirty)" } else { "" }
            )
        })
    }
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

/// A built kernel: its image and what the report says of it, and its slot's lock, which the
/// run holds while it uses the build.
#[derive(Debug)]
pub struct Built {
    pub image: PathBuf,
    pub info: TreeInfo,
    pub lock: SlotLock,
}

/// Checks the environment and the tree and reads the `--kconfig` fragments (each must parse),
/// before anything is installed or built.
pub fn check(dir: &Path, kconfig: &[PathBuf]) -> Result<Checked> {
    env::check()?;
    let source = source::open(dir)?;
    let suite = config::suite_lines()?;
    let mut user = Vec::new();
    for f in kconfig {
        let text = std::fs::read_to_string(f)
            .with_context(|| format!("--kconfig {}: cannot read the fragment", f.display()))?;
        let shown = f.display().to_string();
        let lines =
            config::parse_fragment(&text, &shown).with_context(|| format!("--kconfig {shown}"))?;
        config::check_user(&lines, &suite).with_context(|| format!("--kconfig {shown}"))?;
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

fn present(what: &str) -> bool {
    if what.starts_with('/') {
        Path::new(what).exists()
    } else {
        env::which(what).is_some()
    }
}

/// Installs the build tools where they are missing; an error names the packages still missing.
fn ensure_build_tools(events: &Events) -> Result<()> {
    let pkgs: Vec<&str> = BUILD_TOOLS.iter().map(|(p, _)| *p).collect();
    crate::machine::provision::ensure_packages(&pkgs, events)
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
            crate::machine::provision::apt_install_command(
                &missing,
                crate::machine::provision::is_root()
            )
        );
    }
    Ok(())
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
    let extra = parse(config::SELFTESTS_EXTRA, "kernels/tree/selftests.config")?;
    let suite = parse(config::SUITE, "kernels/tree/suite.config")?;
    let mut selftests_lines = Vec::new();
    for rel in config::selftests_fragments() {
        // A tree older than a file has none of its options to want.
        if let Ok(text) = std::fs::read_to_string(tree.join(&rel)) {
            let name = rel.rsplit('/').next().unwrap_or(&rel);
            let lines = parse(&config::selftests_kept(&text), &rel)?;
            selftests_lines.push((format!("2-selftests-{name}"), lines));
        }
    }
    let mut files = Vec::new();
    let mut add = |name: &str, lines: &[Line]| {
        let wants = config::resolve(lines, symbols);
        files.push((name.to_string(), config::fragment_text(&wants)));
        wants
    };
    let mut required = add("1-boot.config", &boot);
    let selftests: Vec<_> = (selftests_lines.iter())
        .flat_map(|(name, lines)| add(name, lines))
        .collect();
    required.extend(add("3-selftests-extra.config", &extra));
    required.extend(add("4-suite.config", &suite));
    for (i, (_, lines)) in checked.user.iter().enumerate() {
        required.extend(add(&format!("{}-user.config", 5 + i), lines));
    }
    // A selftests option a later fragment sets otherwise (the lockup panics, or `config.x86_64`
    // over `config`) is not lost: merge_config.sh takes the last value.
    let later = |i: usize, name: &str| {
        (selftests[i + 1..].iter().chain(&required)).any(|(r, _)| r.name == name)
    };
    let selftests = (0..selftests.len())
        .filter(|&i| !later(i, &selftests[i].0.name))
        .map(|i| selftests[i].clone())
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

/// Why the host, not the sources, failed a build of the tree that `provision::run_logged` ran
/// (its selftests), judged as the kernel's own build is ([`make::host_failure`]): `None` when
/// the sources failed. An error other than the command's non-zero exit (it could not start,
/// its log could not be written) is the host's.
pub(crate) fn host_failure_of(e: &anyhow::Error) -> Option<String> {
    let Some(failed) = e.downcast_ref::<crate::machine::provision::Failed>() else {
        return Some("the build could not run".into());
    };
    let text = std::fs::read(&failed.log)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    make::host_failure(failed.status, &text)
}

/// Runs `argv` on `tree` with its output in `out` (see [`env::Mapped`]), logged to `log`.
fn run_mapped(
    tree: &Path,
    out: &Path,
    argv: &[&str],
    label: &str,
    log: &Path,
    events: &Events,
) -> Result<()> {
    let m = Mapped::new(tree, out);
    make::run(
        &mut m.command(argv),
        &m.shown(argv),
        label,
        log,
        events,
        |l| m.unmap(l),
    )
}

/// Derives the config from the tree and the fragments alone: every symbol at its Kconfig
/// default with the fragments merged over it by the tree's `merge_config.sh` (alldefconfig, as
/// vmtest.sh's olddefconfig over its fragments), in the slot's `config/` (never over the last
/// build's `.config`, which kbuild's syncconfig would only update: a symbol whose default a
/// commit changed would keep the last build's value). Checks it, then puts it in `build/` only when it differs,
/// so that an unchanged config rebuilds nothing.
fn configure(
    tree: &Path,
    slot: &cache::Slot,
    frags: &Fragments,
    symbols: &Symbols,
    events: &Events,
) -> Result<()> {
    events.step("configuring the kernel (defaults + boot, selftests, suite and your fragments)");
    let dir = slot.config_dir();
    let frag_dir = dir.join("bpfvm");
    std::fs::create_dir_all(&frag_dir).with_context(|| format!("create {}", frag_dir.display()))?;
    let out_arg = format!("O={OUT}");
    run_mapped(
        tree,
        &dir,
        &["make", "-C", SRC, &out_arg, "-s", "outputmakefile"],
        "the config directory's Makefile",
        &slot.config_log(),
        events,
    )?;
    let merge = format!("{SRC}/scripts/kconfig/merge_config.sh");
    // Through sh: a copied tree may have lost the script's executable bit.
    let mut argv: Vec<String> = vec!["sh".into(), merge, "-O".into(), ".".into()];
    for (name, text) in &frags.files {
        let path = frag_dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
        argv.push(format!("bpfvm/{name}"));
    }
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    run_mapped(
        tree,
        &dir,
        &argv,
        "merging the fragments",
        &slot.dir.join("merge.log"),
        events,
    )?;
    let derived = std::fs::read_to_string(dir.join(".config"))
        .with_context(|| format!("read {}/.config", dir.display()))?;
    check_config(&derived, frags, symbols, events)?;
    let built = slot.out().join(".config");
    if std::fs::read_to_string(&built).ok().as_deref() != Some(derived.as_str()) {
        std::fs::create_dir_all(slot.out())?;
        crate::support::fs::write_atomic(&built, derived.as_bytes())?;
        events.note("config: derived afresh and changed since the last build");
    }
    Ok(())
}

/// Every line of the boot, suite and user fragments must hold in `config`; a lost one makes
/// this commit untestable (its sources cannot have what the suite needs, whatever the
/// verdict would be). Lost lines of the selftests' fragments are listed only.
fn check_config(config: &str, frags: &Fragments, symbols: &Symbols, events: &Events) -> Result<()> {
    let got = config::parse_config(config);
    let lost = config::lost(&frags.required, &got);
    if !lost.is_empty() {
        return Err(Untestable(config::lost_error(&lost, symbols)).into());
    }
    let dropped: Vec<String> = config::lost(&frags.selftests, &got)
        .iter()
        .map(|l| l.want.name.clone())
        .collect();
    if !dropped.is_empty() {
        events.note(format!(
            "{} options of the selftests' fragments did not survive (their dependencies are not \
             in the suite's config; the suite does not need them): {}",
            dropped.len(),
            dropped.join(" ")
        ));
    }
    events.note(format!(
        "config: {} options =y, every option of boot.config, suite.config and --kconfig set",
        config.lines().filter(|l| l.ends_with("=y")).count()
    ));
    Ok(())
}

/// That `rev` names a commit of the git tree `tree` (`--against REV`), checked before
/// anything is installed.
pub fn verify_rev(tree: &Path, rev: &str) -> Result<String> {
    source::verify_rev(tree, rev)
}

/// Where a git ref of a tree is checked out for an A/B (see `source::checkout_ref`).
pub fn checkout_ref(tree: &Path, rev: &str) -> Result<PathBuf> {
    source::checkout_ref(
        tree,
        rev,
        &crate::support::paths::cache_dir().join("tree-refs"),
    )
}

/// `argv` run as a tree's build runs it (the clean environment, `tree` and its build directory
/// `build` at the paths the build saw: the build's Makefile includes the tree's by that path),
/// from the build directory, with [`BUILD_DIR`] in `argv` naming it. An out-of-tree module
/// (the selftests' `bpf_testmod.ko`) builds against a tree's kernel so.
pub fn command_in_build(
    tree: &Path,
    build: &Path,
    argv: &[&str],
) -> (std::process::Command, String) {
    let m = Mapped::new(tree, build);
    (m.command(argv), m.shown(argv))
}

/// The clean environment a tree's make runs in (where the tools are, `HOME`, `TMPDIR`, C
/// messages): nothing of the user's shell reaches a build whose result is cached.
pub fn clean_env() -> Vec<(String, String)> {
    env::clean()
}

/// Where [`command_in_build`]'s command sees the build directory.
pub const BUILD_DIR: &str = OUT;

/// Whether `dir` looks like a kernel source tree (a top-level Makefile with VERSION and
/// PATCHLEVEL): what `--against` tells a tree from a pin or an image by.
pub fn is_tree(dir: &Path) -> bool {
    std::fs::read_to_string(dir.join("Makefile")).is_ok_and(|m| source::kernelversion(&m).is_some())
}

/// Builds (or finds cached) the kernel of a checked tree.
pub fn build(checked: &Checked, events: &Events) -> Result<Built> {
    ensure_build_tools(events)?;
    build_in(&cache::root(), checked, events)
}

/// The commit a tree is at, as a note says it: its short hash, and whether it is dirty.
fn describe_commit(src: &source::Source) -> String {
    match &src.git {
        Some(g) => format!(
            "{}{}",
            &g.commit[..12],
            if g.dirty { " (dirty)" } else { "" }
        ),
        None => "not a git tree".into(),
    }
}

/// Runs make for the kernel and the files an out-of-tree module links against, in the slot;
/// returns the seconds it took.
fn make_kernel(tree: &Path, slot: &cache::Slot, events: &Events) -> Result<u64> {
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get());
    let jobs = format!("-j{jobs}");
    let out_arg = format!("O={OUT}");
    let mut argv = vec!["make", "-C", SRC, &out_arg, &jobs];
    if env::which("ccache").is_some() {
        argv.push("CC=ccache gcc");
    }
    // `modules` (no in-tree module is configured) writes Module.symvers, which an
    // out-of-tree module (the selftests' bpf_testmod.ko) is linked against.
    argv.extend(["bzImage", "modules"]);
    events.step(format!(
        "building the kernel of {} (log: {})",
        tree.display(),
        slot.build_log().display()
    ));
    let start = Instant::now();
    run_mapped(
        tree,
        &slot.out(),
        &argv,
        "building the kernel",
        &slot.build_log(),
        events,
    )?;
    Ok(start.elapsed().as_secs())
}

/// The release of the kernel the slot built (`make kernelrelease`).
fn kernelrelease(tree: &Path, slot: &cache::Slot) -> Result<String> {
    let out_arg = format!("O={OUT}");
    let m = Mapped::new(tree, &slot.out());
    let out = crate::support::wait::output(&m.command(&[
        "make",
        "-s",
        "-C",
        SRC,
        &out_arg,
        "kernelrelease",
    ]))?;
    let release = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if release.is_empty() {
        bail!(
            "`make kernelrelease` printed nothing in {}",
            slot.out().display()
        );
    }
    Ok(release)
}

/// [`build`] with its slots under `root`.
fn build_in(root: &Path, checked: &Checked, events: &Events) -> Result<Built> {
    let src = &checked.source;
    let toolchain = env::toolchain();
    let symbols = Symbols::read(&src.dir)?;
    let frags = fragments(checked, &symbols)?;
    let joined: Vec<&[u8]> = frags.files.iter().map(|(_, t)| t.as_bytes()).collect();
    let fragments_hash = sha(&joined);
    let slot = cache::Slot::of(root, &src.dir, &format!("{toolchain}{RECIPE}"));
    let lock = slot.lock(|| {
        events.note(format!(
            "waiting for another run using {}",
            slot.dir.display()
        ))
    })?;
    // Under the lock: the sources as they are now, not before another run's build.
    let t = Instant::now();
    let content = source::content_key(src)?;
    events.note(format!(
        "tree {}: {}, sources hashed in {:.1} s",
        src.dir.display(),
        describe_commit(src),
        t.elapsed().as_secs_f64()
    ));
    // The config is a function of the sources (every Kconfig file is in `content`) and the
    // fragments, so these four decide the kernel.
    let key = sha(&[
        content.as_bytes(),
        fragments_hash.as_bytes(),
        toolchain.as_bytes(),
        RECIPE.as_bytes(),
    ]);
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
            lock,
        });
    }
    slot.unstamp()?;
    configure(&src.dir, &slot, &frags, &symbols, events)?;
    let build_seconds = make_kernel(&src.dir, &slot, events)?;
    // make read the tree for minutes after it was hashed: an edit meanwhile made a kernel of
    // sources no key names.
    if source::content_key(src)? != content {
        bail!(
            "the tree {} changed while its kernel was built: nothing is judged; run again once \
             it holds the sources to test",
            src.dir.display()
        );
    }
    // What was built, checked again: make's syncconfig may have changed what configure wrote.
    let built_config = std::fs::read_to_string(slot.out().join(".config"))
        .with_context(|| format!("read {}/.config", slot.out().display()))?;
    check_config(&built_config, &frags, &symbols, &Events::silent())?;
    let release = kernelrelease(&src.dir, &slot)?;
    let stamp = Stamp {
        tree: src.dir.display().to_string(),
        commit: src.git.as_ref().map(|g| g.commit.clone()),
        dirty: src.git.as_ref().is_some_and(|g| g.dirty),
        kernelversion: src.kernelversion.clone(),
        release,
        config_hash: sha(&[built_config.as_bytes()]),
        key,
        toolchain,
        built_unix: cache::now(),
        build_seconds,
    };
    slot.write_stamp(&stamp)?;
    slot.touch();
    for gone in cache::evict(root, cache::limit(), &slot.dir) {
        events.note(format!(
            "removed the least recently used tree build {}",
            gone.display()
        ));
    }
    Ok(Built {
        image: slot.image(),
        info: info(&stamp, true),
        lock,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::support::status::Status;

    /// A tree whose kbuild is three scripts that keep Kconfig's rules that matter here:
    /// `merge_config.sh` gives every symbol of `Kconfig.defaults` its default (alldefconfig;
    /// `n` is written `# CONFIG_X is not set`) and then the fragments' values; make's `bzImage`
    /// first does what syncconfig does to an existing `.config` (a symbol it lacks takes its
    /// default) and drops the option named in `drop` (a dependency the commit broke), then
    /// "builds" the `.config` as the image.
    fn fake_tree(dir: &Path, defaults: &str) {
        for d in ["scripts/kconfig", "kernel/bpf", "arch/x86"] {
            std::fs::create_dir_all(dir.join(d)).unwrap();
        }
        std::fs::write(dir.join("Kbuild"), "").unwrap();
        std::fs::write(dir.join("arch/x86/Kconfig"), "").unwrap();
        std::fs::write(dir.join("Kconfig.defaults"), defaults).unwrap();
        std::fs::write(
            dir.join("Makefile"),
            "VERSION = 6\nPATCHLEVEL = 12\nSUBLEVEL = 0\nEXTRAVERSION =\n\
             outputmakefile:\n\t@true\n\
             bzImage:\n\tcd $(O) && while IFS== read n v; do grep -q \"CONFIG_$$n[= ]\" .config || \
             echo \"CONFIG_$$n=$$v\" >> .config; done < $(CURDIR)/Kconfig.defaults\n\
             \tcd $(O) && if [ -f $(CURDIR)/drop ]; then sed -i \"/CONFIG_$$(cat $(CURDIR)/drop)=/d\" .config; fi\n\
             \tmkdir -p $(O)/arch/x86/boot && cp $(O)/.config $(O)/arch/x86/boot/bzImage\n\
             \tif [ -f $(CURDIR)/edit ]; then echo edited >> $(CURDIR)/kernel/bpf/core.c; fi\n\
             modules:\n\t@true\n             kernelrelease:\n\t@echo 6.12.0-fake\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("scripts/kconfig/merge_config.sh"),
            "shift 2\ntop=$(dirname \"$0\")/../..\n\
             { sed -e 's/^\\([A-Z0-9_]*\\)=n$/# CONFIG_\\1 is not set/' -e 's/^\\([A-Z0-9_]*=\\)/CONFIG_\\1/' \"$top/Kconfig.defaults\"; cat \"$@\"; } |\n\
             awk '{ if (match($0, /^CONFIG_[A-Z0-9_]+=/)) n = substr($0, 8, RLENGTH - 8);\n\
             else if (match($0, /^# CONFIG_[A-Z0-9_]+ is not set/)) { n = $2; sub(/^CONFIG_/, \"\", n) }\n\
             else next; if (!(n in v)) o[++k] = n; v[n] = $0 }\n\
             END { for (i = 1; i <= k; i++) print v[o[i]] }' > .config\n",
        )
        .unwrap();
    }

    fn config_of(built: &Built) -> String {
        std::fs::read_to_string(&built.image).unwrap()
    }

    /// A commit that turns a symbol's default from `y` to `n`: built in a slot that built the
    /// commit before it, it gets the same `.config` (the symbol off, its new default) and the
    /// same config hash as in a fresh slot. Before, make ran on the old `.config`, where
    /// syncconfig keeps the value the last build had.
    #[test]
    fn a_warm_slot_and_a_cold_one_build_a_commit_with_the_same_config() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("linux");
        fake_tree(&tree, "BPF_SYSCALL=y\nBISECT_PLANT=y\n");
        let warm = d.path().join("warm");
        let ev = Events::silent();
        let first = build_in(&warm, &check(&tree, &[]).unwrap(), &ev).unwrap();
        assert!(first.info.built);
        assert!(config_of(&first).contains("CONFIG_BISECT_PLANT=y"));
        std::fs::write(
            tree.join("Kconfig.defaults"),
            "BPF_SYSCALL=y\nBISECT_PLANT=n\n",
        )
        .unwrap();
        let again = build_in(&warm, &check(&tree, &[]).unwrap(), &ev).unwrap();
        let cold = build_in(&d.path().join("cold"), &check(&tree, &[]).unwrap(), &ev).unwrap();
        assert!(config_of(&cold).contains("# CONFIG_BISECT_PLANT is not set"));
        assert_eq!(config_of(&again), config_of(&cold));
        assert_eq!(again.info.config_hash, cold.info.config_hash);
        assert_ne!(first.info.config_hash, again.info.config_hash);
        // Unchanged: not built again, the same hash reported.
        let cached = build_in(&warm, &check(&tree, &[]).unwrap(), &ev).unwrap();
        assert!(!cached.info.built);
        assert_eq!(cached.info.config_hash, again.info.config_hash);
    }

    /// The slot stays locked while its build is used (its `Built`, then the run's `Ready`,
    /// holds the lock): another run cannot rebuild it under the staging of its bzImage or the
    /// selftests' build against its vmlinux. The same process preparing the tree again shares
    /// the lock instead of waiting for itself.
    #[test]
    fn the_slot_stays_locked_while_its_build_is_used() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("linux");
        fake_tree(&tree, "BPF_SYSCALL=y\n");
        let root = d.path().join("slots");
        let ev = Events::silent();
        let built = build_in(&root, &check(&tree, &[]).unwrap(), &ev).unwrap();
        let lock_file = Path::new(&built.info.build_dir).with_file_name(".lock");
        let other_run = || std::fs::File::open(&lock_file).unwrap().try_lock().is_ok();
        assert!(
            !other_run(),
            "another run could take the slot of a build in use"
        );
        let again = build_in(&root, &check(&tree, &[]).unwrap(), &ev).unwrap();
        assert!(!again.info.built);
        drop(built);
        assert!(!other_run());
        drop(again);
        // A child another test forks in the meantime holds the lock's descriptor until it
        // execs (flock belongs to the open file): the lock frees within moments, not at once.
        let freed = (0..100).any(|_| {
            other_run() || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                false
            }
        });
        assert!(
            freed,
            "the slot stayed locked after its last user dropped it"
        );
    }

    /// make reads the tree long after it was hashed: an edit meanwhile (here by the build
    /// itself) leaves a kernel of sources no key names, and the run stops (255).
    #[test]
    fn an_edit_while_the_kernel_builds_stops_the_run() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("linux");
        fake_tree(&tree, "BPF_SYSCALL=y\n");
        std::fs::write(tree.join("edit"), "").unwrap();
        let root = d.path().join("slots");
        let err = build_in(&root, &check(&tree, &[]).unwrap(), &Events::silent()).unwrap_err();
        assert_eq!(Status::of_error(&err), Status::Stopped, "{err:#}");
        assert!(
            format!("{err:#}").contains("changed while its kernel was built"),
            "{err:#}"
        );
    }

    /// An option the suite needs that the build drops (here after the config was derived, as
    /// syncconfig may) makes the commit untestable (125), naming the option.
    #[test]
    fn an_option_lost_in_the_build_makes_the_commit_untestable() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("linux");
        fake_tree(&tree, "BPF_SYSCALL=y\n");
        let root = d.path().join("slots");
        build_in(&root, &check(&tree, &[]).unwrap(), &Events::silent()).unwrap();
        std::fs::write(tree.join("drop"), "BPF_JIT").unwrap();
        let err = build_in(&root, &check(&tree, &[]).unwrap(), &Events::silent()).unwrap_err();
        assert!(err.downcast_ref::<Untestable>().is_some(), "{err:#}");
        assert!(format!("{err:#}").contains("CONFIG_BPF_JIT=y"), "{err:#}");
        assert!(format!("{err:#}").contains("exit status 125"), "{err:#}");
    }

    /// The selftests' `config`, `config.vm` and `config.<arch>` are merged in vmtest.sh's order
    /// (a later file's value wins, and the earlier one is not reported lost), their `=m` lines
    /// left out, and the suite's own fragments after them.
    #[test]
    fn the_selftests_config_files_are_merged_in_vmtest_order() {
        let d = tempfile::tempdir().unwrap();
        let tree = d.path().join("linux");
        fake_tree(&tree, "BPF_SYSCALL=y\n");
        let sel = tree.join("tools/testing/selftests/bpf");
        std::fs::create_dir_all(&sel).unwrap();
        std::fs::write(
            sel.join("config"),
            "CONFIG_SEL_A=y\nCONFIG_SEL_B=y\nCONFIG_SEL_M=m\n",
        )
        .unwrap();
        std::fs::write(sel.join("config.vm"), "CONFIG_SEL_VM=y\n").unwrap();
        let arch = format!("config.{}", std::env::consts::ARCH);
        std::fs::write(
            sel.join(&arch),
            "# CONFIG_SEL_B is not set\nCONFIG_SEL_ARCH=y\n",
        )
        .unwrap();
        std::fs::write(sel.join("config.s390x"), "CONFIG_SEL_S390=y\n").unwrap();
        let checked = check(&tree, &[]).unwrap();
        let frags = fragments(&checked, &Symbols::read(&tree).unwrap()).unwrap();
        let names: Vec<String> = frags.files.iter().map(|(n, _)| n.clone()).collect();
        let arch_file = format!("2-selftests-{arch}");
        assert_eq!(
            names[..5],
            [
                "1-boot.config",
                "2-selftests-config",
                "2-selftests-config.vm",
                &arch_file,
                "3-selftests-extra.config"
            ]
        );
        let wants: Vec<String> = frags.selftests.iter().map(|(w, _)| w.line()).collect();
        assert_eq!(
            wants,
            [
                "CONFIG_SEL_A=y",
                "CONFIG_SEL_VM=y",
                "# CONFIG_SEL_B is not set",
                "CONFIG_SEL_ARCH=y"
            ]
        );
        let built = build_in(&d.path().join("slots"), &checked, &Events::silent()).unwrap();
        let config = config_of(&built);
        for line in [
            "CONFIG_SEL_ARCH=y",
            "CONFIG_SEL_VM=y",
            "# CONFIG_SEL_B is not set",
        ] {
            assert!(config.lines().any(|l| l == line), "{line} in\n{config}");
        }
        assert!(
            !config.contains("SEL_M") && !config.contains("SEL_S390"),
            "{config}"
        );
    }

    /// What `make headers` leaves (arch/x86/include/generated) makes kbuild refuse an `O=`
    /// build: refused before building, with the fix.
    #[test]
    fn a_tree_kbuild_would_refuse_is_refused_first() {
        let d = tempfile::tempdir().unwrap();
        fake_tree(d.path(), "");
        std::fs::create_dir_all(d.path().join("arch/x86/include/generated")).unwrap();
        let err = format!("{:#}", check(d.path(), &[]).unwrap_err());
        assert!(
            err.contains("arch/x86/include/generated") && err.contains("mrproper"),
            "{err}"
        );
        assert!(Status::of_error(&check(d.path(), &[]).unwrap_err()) == Status::Stopped);
    }
}
