//! The kernel's BPF selftests built with the source's own Makefile into `cache_dir()/selftests/`:
//! - `src/<source>/`: a pin's Debian source unpacked once (`linux-source-<series>`);
//! - `btf/<pin>-<id>.btf`: a pin's BTF, dumped once from the guest;
//! - `build/<key>/tree/`: a copy of the source (rsync) built in place, keyed by the source, the
//!   BTF, the clang and the headers `bpf_testmod.ko` builds against. In place, because 6.1's
//!   Makefile links `urandom_read` with `liburandom_read.so` from its source directory whatever
//!   `OUTPUT` says (`$(OUTPUT)/urandom_read`'s rule); a copy, so that the unpacked source is
//!   never written to. A build is complete once its `.bpfvm-built` stamp is written;
//! - `.lock`: held while unpacking, copying or building.
use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context, Result};

use crate::domain::arch::Arch;
use crate::kernel::pins::{self, Package, Pin, Selftests};
use crate::kernel::source_tree::{self, TreeInfo};
use crate::machine::provision;
use crate::support::output::Events;
use crate::support::paths::cache_dir;
use crate::support::status::Untestable;

/// Where the selftests' sources, BTF and builds live.
pub(crate) fn root() -> PathBuf {
    cache_dir().join("selftests")
}

/// What the selftests are built from.
#[derive(Debug, Clone)]
pub(crate) struct Source {
    /// The kernel tree's top directory (holding `tools/testing/selftests/bpf`).
    pub tree: PathBuf,
    /// Names the source in the build's key.
    pub key: String,
    /// For the report: the package, its version and sha256, or the tree and its commit.
    pub describe: String,
    /// Whether a complete build of it is reused as it is: a pin's source never changes; a
    /// tree's is copied again (what changed) and made again each run.
    pub reuse: bool,
    /// Files of the selftests' directory left out of the copy (a pin's `broken`).
    pub left_out: Vec<String>,
}

/// A tree's source, as the tree build of its kernel saw it.
pub(crate) fn tree_source(dir: &Path, built: &TreeInfo) -> Source {
    let commit = built.at_commit().unwrap_or_default();
    Source {
        tree: dir.to_path_buf(),
        key: format!("tree {}", dir.display()),
        describe: format!(
            "the tree {}{commit} ({})",
            dir.display(),
            built.kernelversion
        ),
        reuse: false,
        left_out: vec![],
    }
}

/// The selftests' directory in a kernel tree.
pub(crate) const SELFTESTS_DIR: &str = "tools/testing/selftests/bpf";

/// Takes the selftests cache's lock, saying so while another run holds it.
fn lock(events: &Events) -> Result<File> {
    let dir = root();
    crate::support::fs::writable(&dir, "the selftests cache", "XDG_CACHE_HOME")?;
    crate::support::wait::lock_dir(&dir, || {
        events.note(format!(
            "another bpfvm run is building selftests; waiting for its lock ({})",
            dir.join(".lock").display()
        ))
    })
}

/// Runs `argv` logged to `logs/<log>.log` under the cache, shown first.
fn run(argv: &[&str], env: &[(&str, String)], log: &str, events: &Events) -> Result<()> {
    let shown = argv.join(" ");
    events.command(&shown);
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..]).envs(env.iter().map(|(k, v)| (k, v)));
    provision::run_logged(
        &mut cmd,
        &shown,
        &root().join("logs").join(format!("{log}.log")),
    )
}

/// A pin's source: its `linux-source-<series>` package fetched and verified like the pin's own
/// packages, its tarball unpacked once.
pub(crate) fn pin_source(pin: &Pin, sel: &Selftests, events: &Events) -> Result<Source> {
    let pkg = &sel.source;
    let deb = pins::fetch_package(pin, pkg, events)?;
    let key = format!("{}_{}-{}", pkg.name, pkg.version, &pkg.sha256[..12]);
    let dir = root().join("src").join(&key);
    let _lock = lock(events)?;
    if !dir.join(COMPLETE).is_file() {
        events.step(format!("unpacking {} (about a minute)", pkg.spec()));
        let parent = root().join("src");
        std::fs::create_dir_all(&parent)?;
        let tmp = tempfile::Builder::new()
            .prefix(".tmp-")
            .tempdir_in(&parent)?;
        let debdir = tmp.path().join("deb");
        let d = debdir.display().to_string();
        run(
            &["dpkg-deb", "-x", &deb.display().to_string(), &d],
            &[],
            "selftests-source",
            events,
        )?;
        let tarball = one_entry(&debdir.join("usr/src"), ".tar.xz")?;
        let t = tmp.path().display().to_string();
        run(
            &["tar", "-C", &t, "-xf", &tarball.display().to_string()],
            &[],
            "selftests-source",
            events,
        )?;
        std::fs::remove_dir_all(&debdir)?;
        std::fs::write(tmp.path().join(COMPLETE), format!("{}\n", pkg.spec()))?;
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(tmp.keep(), &dir)?;
    }
    let tree = one_entry(&dir, "")?;
    let mut describe = format!("Debian {} (sha256 {})", pkg.spec(), pkg.sha256);
    for b in &sel.broken {
        write!(
            describe,
            "; without {SELFTESTS_DIR}/{}: {}",
            b.file, b.reason
        )
        .unwrap();
    }
    Ok(Source {
        tree,
        key,
        describe,
        reuse: true,
        left_out: sel.broken.iter().map(|b| b.file.clone()).collect(),
    })
}

/// Marks a complete unpacked source.
const COMPLETE: &str = ".bpfvm-complete";

/// The one entry of `dir` whose name ends in `suffix` (and is not a dot file).
fn one_entry(dir: &Path, suffix: &str) -> Result<PathBuf> {
    let mut found = vec![];
    for e in std::fs::read_dir(dir).with_context(|| format!("read {}", dir.display()))? {
        let name = e?.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') && name.ends_with(suffix) {
            found.push(dir.join(name));
        }
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        _ => bail!(
            "{} holds {} entries ending in `{suffix}`, not one: {found:?}",
            dir.display(),
            found.len()
        ),
    }
}

/// Whether the tree's test_progs has `--json-summary` (added in 6.4).
pub(crate) fn has_json_summary(tree: &Path) -> bool {
    std::fs::read_to_string(tree.join(SELFTESTS_DIR).join("test_progs.c"))
        .is_ok_and(|c| c.contains("\"json-summary\""))
}

/// Refuses a tree without the BPF selftests, before anything is installed or booted.
pub(crate) fn check_tree(tree: &Path) -> Result<()> {
    if !tree.join(SELFTESTS_DIR).join("Makefile").is_file() {
        bail!(
            "{} has no {SELFTESTS_DIR}/Makefile: the kernel's BPF selftests are not in it \
             (give the top of a kernel source tree)",
            tree.display()
        );
    }
    Ok(())
}

/// The clang each kernel series' selftests build with: (below this version, the Debian clangs
/// accepted, the first being the default, why). Debian 12 has clang 16, 19 and 22.
const CLANGS: &[(&str, &[u32], &str)] = &[
    (
        "6.2",
        &[16],
        "6.1's selftests build with clang 16 (measured); clang 19 and 22 are untried on them",
    ),
    (
        "6.13",
        &[19, 22],
        "6.2 to 6.12's selftests take clang 19 (the release of their time) or 22; untried with 16",
    ),
    (
        "999",
        &[22],
        "later selftests use BPF features only recent clang compiles: clang 22",
    ),
];

/// The clang to build `kernelversion`'s selftests with: `asked`, when the series accepts it,
/// else the series' default. A clang the series does not take is refused, naming the rule.
pub(crate) fn clang_for(kernelversion: &str, asked: Option<u32>) -> Result<u32> {
    let key = |v: &str| -> Vec<u64> {
        v.split(|c: char| !c.is_ascii_digit())
            .take(2)
            .filter_map(|p| p.parse().ok())
            .collect()
    };
    let v = key(kernelversion);
    let (_, accepted, why) = CLANGS
        .iter()
        .find(|(below, _, _)| v < key(below))
        .unwrap_or(&CLANGS[CLANGS.len() - 1]);
    match asked {
        None => Ok(accepted[0]),
        Some(c) if accepted.contains(&c) => Ok(c),
        Some(c) => bail!(
            "--clang {c}: the selftests of kernel {kernelversion} are built with clang {} ({why})",
            accepted
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(" or ")
        ),
    }
}

/// What `bpf_testmod.ko` builds against.
pub(crate) enum Kdir {
    /// A pin's headers package (its kbuild tree).
    Headers(PathBuf),
    /// A tree's kernel: the tree and its build directory, seen at the paths of its build.
    Tree { tree: PathBuf, build: PathBuf },
}

impl Kdir {
    /// The real directory, for the build's key.
    fn dir(&self) -> &Path {
        match self {
            Kdir::Headers(d) => d,
            Kdir::Tree { build, .. } => build,
        }
    }
}

/// A pin's headers package seen as a kbuild tree with the kernel's BTF as its `vmlinux`, in
/// the cache: kbuild gives a module its own BTF only where `vmlinux` is there to be its base
/// (`cmd_btf_ko` in scripts/Makefile.modfinal; pahole and resolve_btfids read raw BTF as
/// well as an ELF), and Debian's 6.1 headers package has none. Each entry of `headers` is
/// linked by its real path (its `scripts` and `tools` are relative links into linux-kbuild)
/// but its `vmlinux` and `Makefile` (see [`kbuild_makefile`]). Its `version` is the installed
/// package's.
pub(crate) fn headers_with_btf(headers: &Path, version: &str, btf: &Path) -> Result<PathBuf> {
    use sha2::{Digest, Sha256};
    let btf_bytes = std::fs::read(btf).with_context(|| format!("read {}", btf.display()))?;
    let name = headers
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // The package's version in the name, and so in the build's key.
    let dir = root().join("kdir").join(format!(
        "{name}_{version}-{}",
        &hex::encode(Sha256::digest(&btf_bytes))[..12]
    ));
    headers_copy(&dir, headers, &btf_bytes)?;
    Ok(dir)
}

/// Makes `dir` the copy of `headers` with `btf` as its `vmlinux`, or brings one made before up
/// to date.
fn headers_copy(dir: &Path, headers: &Path, btf: &[u8]) -> Result<()> {
    // Not a link: one to the package's own `vmlinux` was written through before.
    if !dir
        .join("vmlinux")
        .symlink_metadata()
        .is_ok_and(|m| m.is_file())
    {
        let tmp = dir.with_extension("tmp");
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp)?;
        for entry in std::fs::read_dir(headers).with_context(|| {
            format!(
                "read {} (the kernel's headers package, installed with the selftests' packages)",
                headers.display()
            )
        })? {
            let entry = entry?;
            // A link would be written through: 6.12's and 7.2's packages have a `vmlinux`.
            if ["vmlinux", "Makefile"].contains(&entry.file_name().to_str().unwrap_or_default()) {
                continue;
            }
            let real = std::fs::canonicalize(entry.path())?;
            std::os::unix::fs::symlink(&real, tmp.join(entry.file_name()))?;
        }
        std::fs::write(tmp.join("vmlinux"), btf)?;
        let _ = std::fs::remove_dir_all(dir);
        std::fs::rename(&tmp, dir)?;
    }
    // Checked on every use, so that an entry made before it was written here gets it too;
    // replaced in place, as a run may be building against the entry.
    let makefile = kbuild_makefile(dir, headers);
    if std::fs::read_to_string(dir.join("Makefile"))
        .ok()
        .as_deref()
        != Some(&makefile)
    {
        let tmp = dir.join(format!(".Makefile.{}", std::process::id()));
        std::fs::write(&tmp, &makefile)?;
        std::fs::rename(&tmp, dir.join("Makefile"))?;
    }
    Ok(())
}

/// The `Makefile` of a headers copy `dir`: the package's own, with kbuild's output directory
/// the copy (where its `vmlinux` is) whatever the caller passes. 7.x's
/// `tools/testing/selftests/bpf/test_kmods/Makefile` runs `$(MAKE) -C $(KDIR) ...
/// KBUILD_OUTPUT= M=...` (its line 34 in 7.2) when `O` names no build with `Module.symvers`,
/// and that empty value overrides the `KBUILD_OUTPUT=` line of Debian's headers `Makefile`:
/// kbuild then looks for `include/config/auto.conf` in the `-common` package. Where the
/// package's Makefile sets none (6.1's, 6.12's), kbuild's output directory was the copy (make
/// runs in it) and stays so.
fn kbuild_makefile(dir: &Path, headers: &Path) -> String {
    format!(
        "override KBUILD_OUTPUT := {}\ninclude {}\n",
        dir.display(),
        headers.join("Makefile").display()
    )
}

/// A pin's headers `.deb` of another architecture than the host's, unpacked once under
/// `headers/` in the cache, its kbuild tree returned. It is not installed (it depends on that
/// architecture's gcc); the packages its tree links into, `linux-headers-<abi>-common` and
/// `linux-kbuild-<series>` (its scripts, built for the host), are installed from the host's
/// apt at its version, and linked where the tree's relative links look for them.
pub(crate) fn unpacked_headers(pin: &Pin, deb: &Package, events: &Events) -> Result<PathBuf> {
    let file = pins::fetch_package(pin, deb, events)?;
    let depends = Command::new("dpkg-deb")
        .args(["-f", &file.display().to_string(), "Depends"])
        .output()
        .context("run dpkg-deb -f")?;
    let needed = kbuild_packages(&String::from_utf8_lossy(&depends.stdout));
    let specs: Vec<String> = needed
        .iter()
        .map(|n| format!("{n}={}", deb.version))
        .collect();
    let missing: Vec<&str> = needed
        .iter()
        .zip(&specs)
        .filter(|(n, _)| provision::installed_version(n).as_deref() != Some(&deb.version))
        .map(|(_, s)| s.as_str())
        .collect();
    provision::ensure_packages(&missing, events)?;
    let dir = root().join("headers").join(format!(
        "{}_{}-{}",
        deb.name,
        deb.version,
        &deb.sha256[..12]
    ));
    let _lock = lock(events)?;
    if !dir.join(COMPLETE).is_file() {
        let tmp = dir.with_extension("tmp");
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp)?;
        let t = tmp.display().to_string();
        run(
            &["dpkg-deb", "-x", &file.display().to_string(), &t],
            &[],
            "selftests-headers",
            events,
        )?;
        for name in &needed {
            for base in ["usr/lib", "usr/src"] {
                let host = Path::new("/").join(base).join(name);
                if host.is_dir() {
                    std::fs::create_dir_all(tmp.join(base))?;
                    std::os::unix::fs::symlink(&host, tmp.join(base).join(name))?;
                }
            }
        }
        std::fs::write(tmp.join(COMPLETE), format!("{}\n", deb.spec()))?;
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&tmp, &dir)?;
    }
    Ok(dir.join("usr/src").join(&deb.name))
}

/// The packages of a headers package's `Depends` that its kbuild tree links into: its
/// `linux-headers-*-common` and `linux-kbuild-*` (not the compiler it names).
fn kbuild_packages(depends: &str) -> Vec<String> {
    depends
        .split(',')
        .filter_map(|d| d.split_whitespace().next())
        .filter(|n| n.starts_with("linux-kbuild-") || n.starts_with("linux-headers-"))
        .map(str::to_string)
        .collect()
}

/// The kernel's BTF in an uncompressed kernel image (arm64's `Image`): its one blob that reads
/// as a whole BTF header (magic 0xeb9f, version 1, a 24-byte header, the types at 0 and the
/// strings right after them, `struct btf_header` in include/uapi/linux/btf.h) followed by its
/// data, the bytes `/sys/kernel/btf/vmlinux` shows (`__start_BTF` to `__stop_BTF`). Anything
/// smaller than 64 KiB of types is not vmlinux's.
pub(crate) fn btf_in_image(image: &[u8]) -> Result<&[u8]> {
    const HEADER: [u8; 8] = [0x9f, 0xeb, 1, 0, 24, 0, 0, 0];
    let word = |at: usize| u32::from_le_bytes(image[at..at + 4].try_into().unwrap()) as usize;
    let mut found = vec![];
    let mut at = 0;
    while let Some(i) = image[at..].windows(8).position(|w| w == HEADER) {
        let start = at + i;
        at = start + 1;
        if start + 24 > image.len() {
            break;
        }
        let (type_off, type_len, str_off, str_len) = (
            word(start + 8),
            word(start + 12),
            word(start + 16),
            word(start + 20),
        );
        let end = start + 24 + type_len + str_len;
        if type_off == 0 && str_off == type_len && type_len >= 64 << 10 && end <= image.len() {
            found.push(&image[start..end]);
        }
    }
    match found.as_slice() {
        [one] => Ok(one),
        _ => bail!(
            "{} blobs read as the kernel's BTF, not one (is it an uncompressed image?)",
            found.len()
        ),
    }
}

/// What a build is made of.
pub(crate) struct Inputs<'a> {
    pub source: &'a Source,
    pub btf: &'a Path,
    pub kdir: Kdir,
    pub clang: u32,
    /// The architecture the selftests are built for: the host's, or cross-built
    /// ([`cross_args`]).
    pub arch: Arch,
    /// Also make upstream `veristat` ([`VERISTAT`]).
    pub veristat: bool,
}

/// make's arguments that cross-build the selftests for `arch` (none for the host's): the
/// kernel's `ARCH`, the cross toolchain's prefix, and clang targeting `arch` too, since 6.1's
/// Makefile links `liburandom_read.so` and `urandom_read` with `$(CLANG)` and no target of
/// its own (its `-target bpf` still wins for the BPF objects: the last target is taken).
/// 6.12's adds the same target itself (`CLANG_TARGET_ARCH`, from `CROSS_COMPILE`).
fn cross_args(arch: Arch) -> Vec<String> {
    if arch == Arch::host() {
        return vec![];
    }
    let triple = arch.cross_gcc().trim_end_matches("gcc");
    vec![
        format!("ARCH={}", arch.name()),
        format!("CROSS_COMPILE={triple}"),
        format!("CLANG=clang --target={}", triple.trim_end_matches('-')),
    ]
}

/// A build of `test_progs`, `test_maps` and `bench`.
#[derive(Debug, Clone)]
pub(crate) struct Built {
    /// The built selftests' directory: the binaries, `bpf_testmod.ko` and the BPF objects they
    /// open.
    pub dir: PathBuf,
    /// The clang's `--version` line.
    pub clang: String,
    /// Whether a pin's complete build was reused without make.
    pub cached: bool,
    pub seconds: f64,
}

/// Copies `tree` into `work` with rsync: the selftests' directory on its own, so that what an
/// earlier build wrote there (what git ignores: the directory's `.gitignore` files and the
/// tree's unanchored patterns, `*.o` among them) stays for make to judge, while a source file
/// the tree no longer has goes, as everywhere else (found so: a test file removed from the
/// tree was still built from the copy).
fn copy(tree: &Path, work: &Path, events: &Events) -> Result<()> {
    let sel = format!("/{SELFTESTS_DIR}/");
    run(
        &[
            "rsync",
            "-a",
            "--delete",
            "--exclude=/.git",
            &format!("--exclude={sel}"),
            &format!("{}/", tree.display()),
            &format!("{}/", work.display()),
        ],
        &[],
        "selftests-copy",
        events,
    )?;
    let top = std::fs::read_to_string(tree.join(".gitignore")).unwrap_or_default();
    // The generated test lists (`prog_tests/tests.h`...) are not kept: make writes one again
    // when a test file is newer, never when one was removed.
    // The .gitignore files go too (the top one's `.*` would leave them out, where git keeps
    // them by its `!.gitignore`): with --delete, rsync protects what the receiver's copies
    // ignore, so without them every copy deleted the build's installed headers
    // (`tools/include`) and make, whose libbpf was up to date, did not put them back.
    let mut argv: Vec<String> = [
        "rsync",
        "-a",
        "--delete",
        "--include=tests.h",
        "--include=.gitignore",
        "--filter=:- .gitignore",
    ]
    .map(String::from)
    .to_vec();
    argv.extend(unanchored(&top).map(|p| format!("--exclude={p}")));
    let dir = work.join(SELFTESTS_DIR);
    std::fs::create_dir_all(&dir)?;
    argv.push(format!("{}/", tree.join(SELFTESTS_DIR).display()));
    argv.push(format!("{}/", dir.display()));
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    run(&argv, &[], "selftests-copy", events)
}

/// The patterns of a `.gitignore` that git applies in every directory below it: those with no
/// `/` but a trailing one (`*.o`, `.*.cmd`, `modules.order`).
fn unanchored(gitignore: &str) -> impl Iterator<Item = &str> {
    gitignore.lines().map(str::trim).filter(|l| {
        !l.is_empty()
            && !l.starts_with('#')
            && !l.starts_with('!')
            && !l.trim_end_matches('/').contains('/')
    })
}

/// The LLVM directory of Debian's `clang-N`: first on make's PATH, so the Makefile's `clang`,
/// `llc`, `llvm-strip` and `ld.lld` are that version's.
fn llvm_bin(clang: u32) -> PathBuf {
    PathBuf::from(format!("/usr/lib/llvm-{clang}/bin"))
}

/// What a build makes: the binaries a run starts (`units`) and bench-vm's `bench`.
const TARGETS: [&str; 4] = ["test_progs", "test_verifier", "test_maps", "bench"];

/// The selftests' `veristat`, made only when asked ([`Inputs::veristat`]): it is not in
/// [`TARGETS`], so that the builds cached before it keep their key.
pub(crate) const VERISTAT: &str = "veristat";

/// Builds (or reuses) the selftests of `inputs`. A failed make stops (255): the source is a
/// pin's, so the host lacks something, it says nothing of a commit.
pub(crate) fn build(inputs: &Inputs, events: &Events) -> Result<Built> {
    let start = Instant::now();
    let clang = clang_version(inputs.clang)?;
    let key = build_key(inputs, &clang)?;
    let slot = root().join("build").join(&key[..16]);
    let work = slot.join("tree");
    let dir = work.join(SELFTESTS_DIR);
    let stamp = slot.join(".bpfvm-built");
    let _lock = lock(events)?;
    if inputs.source.reuse && stamp.is_file() {
        events.note(format!("selftests: cached build in {}", dir.display()));
        if inputs.veristat && !dir.join(VERISTAT).is_file() {
            make_selftests(inputs, &dir, &key, &[VERISTAT], events)?;
        }
        return Ok(Built {
            dir,
            clang,
            cached: true,
            seconds: start.elapsed().as_secs_f64(),
        });
    }
    let _ = std::fs::remove_file(&stamp);
    std::fs::create_dir_all(&work)?;
    events.step(format!(
        "copying {} into {}",
        inputs.source.tree.display(),
        work.display()
    ));
    copy(&inputs.source.tree, &work, events)?;
    for f in &inputs.source.left_out {
        let path = dir.join(f);
        std::fs::remove_file(&path).with_context(|| {
            format!(
                "leave out {}: the pin names it as broken, but the source has no such file",
                path.display()
            )
        })?;
    }
    let mut targets = TARGETS.to_vec();
    if inputs.veristat {
        targets.push(VERISTAT);
    }
    events.step(format!(
        "building {} with {clang} (several minutes the first time)",
        targets.join(", ")
    ));
    let made = make_selftests(inputs, &dir, &key, &targets, events)?;
    std::fs::write(&stamp, format!("{made}\n"))?;
    Ok(Built {
        dir,
        clang,
        cached: false,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// The first line of `clang --version` of Debian's clang `major`.
fn clang_version(major: u32) -> Result<String> {
    let clang_bin = llvm_bin(major).join("clang");
    let version = Command::new(&clang_bin)
        .arg("--version")
        .output()
        .with_context(|| format!("run {} --version", clang_bin.display()))?;
    Ok(String::from_utf8_lossy(&version.stdout)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string())
}

/// How a tree is copied into its build, in a tree's key (a pin's is copied once): a tree's
/// build copied before the .gitignore files went with it has lost its installed headers, and
/// make does not put them back.
const COPY: &str = "\ncopy keeps .gitignore";

/// The build's cache key: the source, the kernel's BTF, the compiler, the kbuild tree, what is
/// left out and the targets.
fn build_key(inputs: &Inputs, clang: &str) -> Result<String> {
    use sha2::{Digest, Sha256};
    let btf =
        std::fs::read(inputs.btf).with_context(|| format!("read {}", inputs.btf.display()))?;
    // What is left out is in the key only when there is some: the builds made before the list
    // existed keep theirs.
    let left_out: String = inputs
        .source
        .left_out
        .iter()
        .map(|f| format!("-{f}\n"))
        .collect();
    // A cross build's make arguments are in the key only when there are some: the host's
    // builds keep theirs.
    let cross: String = cross_args(inputs.arch)
        .iter()
        .map(|a| format!("\n{a}"))
        .collect();
    Ok(hex::encode(Sha256::digest(
        format!(
            "{}\n{}\n{clang}\n{}\n{left_out}{}{}{cross}",
            inputs.source.key,
            hex::encode(Sha256::digest(&btf)),
            inputs.kdir.dir().display(),
            TARGETS.join(" "),
            if inputs.source.reuse { "" } else { COPY }
        )
        .as_bytes(),
    )))
}

/// Runs the selftests' Makefile in `dir` (their resolve_btfids first, then `targets`);
/// returns the last make command, as shown.
fn make_selftests(
    inputs: &Inputs,
    dir: &Path,
    key: &str,
    targets: &[&str],
    events: &Events,
) -> Result<String> {
    let path = format!(
        "PATH={}:{}",
        llvm_bin(inputs.clang).display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let kdir = match &inputs.kdir {
        Kdir::Headers(d) => d.display().to_string(),
        Kdir::Tree { .. } => source_tree::BUILD_DIR.to_string(),
    };
    // The selftests' own resolve_btfids, for kbuild's pass over `bpf_testmod.ko` too (the
    // headers package has none), made first: 6.1's `bpf_testmod.ko` rule does not wait for it.
    // Cross-built, the host's tools are under `host/` (`HOST_BUILD_DIR` in the Makefile).
    let cross = cross_args(inputs.arch);
    let tools = match cross.is_empty() {
        true => "tools/build",
        false => "tools/build/host",
    };
    let resolve_btfids = dir.join(tools).join("resolve_btfids/resolve_btfids");
    let mut argv = vec![
        "env".to_string(),
        path,
        "make".into(),
        "-C".into(),
        dir.display().to_string(),
        format!("-j{jobs}"),
        format!("VMLINUX_BTF={}", inputs.btf.display()),
        format!("KDIR={kdir}"),
        format!("RESOLVE_BTFIDS={}", resolve_btfids.display()),
    ];
    argv.extend(cross);
    argv.push(resolve_btfids.display().to_string());
    let first = argv.clone();
    argv.pop();
    argv.extend(targets.iter().map(|t| t.to_string()));
    let log = root().join("logs").join(format!("make-{}.log", &key[..16]));
    let mut shown = String::new();
    for argv in [first, argv] {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let mut cmd;
        (cmd, shown) = match &inputs.kdir {
            Kdir::Headers(_) => (in_clean_env(&argv), argv.join(" ")),
            // The tree build's clean environment, which keeps none of those.
            Kdir::Tree { tree, build } => source_tree::command_in_build(tree, build, &argv),
        };
        events.command(&shown);
        if let Err(e) = provision::run_logged(&mut cmd, &shown, &log) {
            return Err(not_built(&inputs.kdir, &inputs.source.describe, e));
        }
    }
    Ok(shown)
}

/// `argv` in the tree build's clean environment: the selftests' Makefile reads `VMLINUX_H`,
/// `OUTPUT`, `EXTRA_CFLAGS`, `BPF_GCC`, `CROSS_COMPILE`, a calling make's `MAKEFLAGS`..., none of
/// which is in a cached build's key.
fn in_clean_env(argv: &[&str]) -> Command {
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(source_tree::clean_env());
    cmd
}

/// The error of a selftests build that failed with `e`: a pin's (its source is pinned) and a
/// tree's that the host failed stop the run (255); a tree's that its sources failed is
/// untestable (125), as its kernel's build would be.
fn not_built(kdir: &Kdir, describe: &str, e: anyhow::Error) -> anyhow::Error {
    match kdir {
        Kdir::Headers(_) => e.context(format!(
            "the selftests of {describe} did not build: the host lacks something they need (the \
             source is pinned)"
        )),
        Kdir::Tree { .. } => match source_tree::host_failure_of(&e) {
            Some(why) => e.context(format!(
                "the selftests of {describe} did not build: the host failed, not the sources \
                 ({why}): fix the host and run again"
            )),
            None => Untestable(format!("the selftests of {describe} did not build: {e:#}")).into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pin's selftests build sees only the clean environment: none of the test process's
    /// own variables (cargo's, and whatever a user's shell would add) reaches make.
    #[test]
    fn a_pins_selftests_make_sees_only_the_clean_environment() {
        let out = in_clean_env(&["env"]).output().unwrap();
        let seen: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| Some(l.split_once('=')?.0.to_string()))
            .collect();
        assert!(seen.iter().any(|k| k == "PATH"), "{seen:?}");
        assert!(std::env::vars().any(|(k, _)| k.starts_with("CARGO")));
        let allowed =
            |k: &str| ["PATH", "HOME", "TMPDIR", "LC_ALL"].contains(&k) || k.starts_with("CCACHE_");
        assert!(seen.iter().all(|k| allowed(k)), "{seen:?}");
    }

    /// A second copy into a built tree keeps what the selftests' .gitignore ignores (the
    /// installed headers under `tools/`), though the top .gitignore's `.*` matches the
    /// .gitignore files themselves; a file removed from the source goes.
    #[test]
    fn a_copy_again_keeps_the_builds_ignored_output() {
        let src = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        let sel = src.path().join(SELFTESTS_DIR);
        std::fs::create_dir_all(&sel).unwrap();
        std::fs::write(src.path().join(".gitignore"), ".*\n*.o\n!.gitignore\n").unwrap();
        std::fs::write(sel.join(".gitignore"), "/tools\n").unwrap();
        std::fs::write(sel.join("test_progs.c"), "").unwrap();
        std::fs::write(sel.join("gone.c"), "").unwrap();
        let events = Events::silent();
        copy(src.path(), work.path(), &events).unwrap();
        let built = work
            .path()
            .join(SELFTESTS_DIR)
            .join("tools/include/bpf/btf.h");
        std::fs::create_dir_all(built.parent().unwrap()).unwrap();
        std::fs::write(&built, "").unwrap();
        std::fs::remove_file(sel.join("gone.c")).unwrap();
        copy(src.path(), work.path(), &events).unwrap();
        assert!(built.is_file(), "the build's headers were deleted");
        assert!(!work.path().join(SELFTESTS_DIR).join("gone.c").exists());
    }

    /// The one blob of an image that reads as a whole BTF is taken; a header whose lengths do
    /// not hold is not.
    #[test]
    fn the_btf_of_an_image_is_its_one_whole_blob() {
        let blob = |types: u32, strings: u32| {
            let mut b = vec![0x9f, 0xeb, 1, 0, 24, 0, 0, 0];
            for w in [0, types, types, strings] {
                b.extend(w.to_le_bytes());
            }
            b.extend(vec![7u8; (types + strings) as usize]);
            b
        };
        let mut image = vec![0u8; 100];
        // A small one (a module's, a test's) is not vmlinux's.
        image.extend(blob(100, 10));
        let btf = blob(70_000, 500);
        image.extend(&btf);
        image.extend(vec![0u8; 50]);
        assert_eq!(btf_in_image(&image).unwrap(), &btf[..]);
        // Cut short: its strings run past the end.
        let e = btf_in_image(&image[..image.len() - 100]).unwrap_err();
        assert!(e.to_string().contains("0 blobs"), "{e}");
    }

    #[test]
    fn a_headers_packages_kbuild_dependencies_are_its_common_and_kbuild() {
        assert_eq!(
            kbuild_packages(
                "linux-headers-6.1.0-57-common (= 6.1.192-3), linux-kbuild-6.1 (>= 6.1.192-3), gcc-12\n"
            ),
            ["linux-headers-6.1.0-57-common", "linux-kbuild-6.1"]
        );
    }

    #[test]
    fn an_arm64_build_is_cross_compiled_and_the_hosts_is_not() {
        assert!(cross_args(Arch::host()).is_empty());
        assert_eq!(
            cross_args(Arch::Arm64),
            [
                "ARCH=arm64",
                "CROSS_COMPILE=aarch64-linux-gnu-",
                "CLANG=clang --target=aarch64-linux-gnu"
            ]
        );
    }

    /// veristat, made only when asked, leaves the build's key as it was: the builds cached
    /// before it are reused, and one made with it serves a run without.
    #[test]
    fn veristat_leaves_the_builds_key_as_it_was() {
        let d = tempfile::tempdir().unwrap();
        let btf = d.path().join("vmlinux.btf");
        std::fs::write(&btf, b"btf").unwrap();
        let source = Source {
            tree: d.path().to_path_buf(),
            key: "tree /src".into(),
            describe: String::new(),
            reuse: false,
            left_out: vec![],
        };
        let key = |veristat| {
            let inputs = Inputs {
                source: &source,
                btf: &btf,
                kdir: Kdir::Headers(d.path().to_path_buf()),
                clang: 19,
                arch: Arch::host(),
                veristat,
            };
            build_key(&inputs, "clang 19").unwrap()
        };
        assert_eq!(key(true), key(false));
        assert!(!TARGETS.contains(&VERISTAT));
    }

    #[test]
    fn the_patterns_git_applies_in_every_directory_are_kept() {
        let top = "# comment\n.*\n*.o\n*.ko\n/vmlinux*\n!.gitignore\nmodules.order\n\
                   Documentation/x\n/*\nsource/\n";
        assert_eq!(
            unanchored(top).collect::<Vec<_>>(),
            [".*", "*.o", "*.ko", "modules.order", "source/"]
        );
    }

    #[test]
    fn each_series_takes_its_clang_and_refuses_another() {
        assert_eq!(clang_for("6.1.192", None).unwrap(), 16);
        assert_eq!(clang_for("6.12.118", None).unwrap(), 19);
        assert_eq!(clang_for("6.12.0-rc1", Some(22)).unwrap(), 22);
        assert_eq!(clang_for("7.2.13", None).unwrap(), 22);
        let e = clang_for("6.1.192", Some(22)).unwrap_err().to_string();
        assert!(e.contains("clang 16"), "{e}");
    }

    #[test]
    fn a_tree_without_the_bpf_selftests_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let e = check_tree(d.path()).unwrap_err().to_string();
        assert!(e.contains("tools/testing/selftests/bpf"), "{e}");
        std::fs::create_dir_all(d.path().join(SELFTESTS_DIR)).unwrap();
        std::fs::write(d.path().join(SELFTESTS_DIR).join("Makefile"), "").unwrap();
        check_tree(d.path()).unwrap();
    }

    /// kbuild's output directory in a headers copy is the copy, where its BTF `vmlinux` is,
    /// whether the package's Makefile names one (7.2's, for kbuild that falls back to the
    /// source tree) or none (6.1's and 6.12's, for kbuild that falls back to make's directory),
    /// and whether the caller passes an empty `KBUILD_OUTPUT` (7.2's test_kmods/Makefile) or
    /// none. The package's own `vmlinux` stays as it was, and a copy made before (its
    /// `Makefile` a link to the package's) is brought up to date.
    #[test]
    fn a_headers_copys_kbuild_output_is_the_copy_whatever_the_caller_passes() {
        let t = tempfile::tempdir().unwrap();
        let t = std::fs::canonicalize(t.path()).unwrap();
        let package = |name: &str, own: &str, fallback: &str| {
            let common = t.join(format!("{name}-common"));
            std::fs::create_dir_all(&common).unwrap();
            std::fs::write(
                common.join("Makefile"),
                format!(
                    "srctree := $(realpath $(dir $(lastword $(MAKEFILE_LIST))))\n\
                     objtree := $(if $(KBUILD_OUTPUT),$(realpath $(KBUILD_OUTPUT)),{fallback})\n\
                     all:\n\t@echo $(objtree)\n"
                ),
            )
            .unwrap();
            let headers = t.join(name);
            std::fs::create_dir_all(headers.join("include")).unwrap();
            std::fs::write(headers.join("vmlinux"), "the package's").unwrap();
            std::fs::write(
                headers.join("Makefile"),
                format!("{own}include {}/Makefile\n", common.display()),
            )
            .unwrap();
            headers
        };
        let h72 = package(
            "h72",
            &format!("KBUILD_OUTPUT={}\n", t.join("h72").display()),
            "$(srctree)",
        );
        let h61 = package("h61", "", "$(CURDIR)");
        let objtree = |dir: &Path, args: &[&str]| {
            let out = Command::new("make")
                .args(["-s", "-C", &dir.display().to_string()])
                .args(args)
                .env_remove("KBUILD_OUTPUT")
                .env_remove("MAKEFLAGS")
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        };
        for headers in [&h72, &h61] {
            let copy = t.join(format!("{}-copy", headers.display()));
            headers_copy(&copy, headers, b"BTF").unwrap();
            assert!(copy.join("include").is_symlink());
            assert_eq!(objtree(&copy, &["KBUILD_OUTPUT="]), copy, "{headers:?}");
            assert_eq!(objtree(&copy, &[]), copy, "{headers:?}");
            assert_eq!(std::fs::read(copy.join("vmlinux")).unwrap(), b"BTF");
            assert_eq!(
                std::fs::read(headers.join("vmlinux")).unwrap(),
                b"the package's"
            );
        }
        let before = t.join("before");
        std::fs::create_dir_all(&before).unwrap();
        std::fs::write(before.join("vmlinux"), "BTF").unwrap();
        std::os::unix::fs::symlink(h72.join("Makefile"), before.join("Makefile")).unwrap();
        headers_copy(&before, &h72, b"BTF").unwrap();
        assert_eq!(objtree(&before, &["KBUILD_OUTPUT="]), before);
        assert!(!before.join("Makefile").is_symlink());
    }

    /// A tree's selftests that fail to build for the host's reason (memory, a killed
    /// compiler, a missing tool) stop the run (255); for the sources' reason, 125.
    #[test]
    fn a_trees_selftests_failing_on_the_host_stop_and_on_the_sources_are_untestable() {
        use crate::support::status::Status;
        let d = tempfile::tempdir().unwrap();
        let tree = Kdir::Tree {
            tree: d.path().into(),
            build: d.path().into(),
        };
        let build = |output: &str| {
            let log = d.path().join("make.log");
            let script = format!("echo '{output}'; exit 2");
            let mut cmd = Command::new("sh");
            cmd.args(["-c", &script]);
            let e = provision::run_logged(&mut cmd, "make", &log).unwrap_err();
            Status::of_error(&not_built(&tree, "the tree", e))
        };
        assert_eq!(build("progs/x.c:1:1: error: boom"), Status::Untestable);
        assert_eq!(
            build("cc1: out of memory allocating 4096 bytes"),
            Status::Stopped
        );
        assert_eq!(
            build("make[1]: clang-99: No such file or directory\nmake: *** [x] Error 127"),
            Status::Stopped
        );
    }
}
