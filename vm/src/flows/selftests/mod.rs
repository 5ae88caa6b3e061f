//! `selftests`: the kernel's own BPF selftests (`test_progs`, `test_maps`, `bench`) built from
//! the kernel's source with its own Makefile and run in one boot of that kernel, every upstream
//! test and subtest judged like the suite's tests (`results::upstream`): a splat fails the test
//! that ran, a lost kernel log record fails the run, the pin's inventory and known failures
//! apply. `cargo xtask selftests` and `bpfvm selftests` both call [`selftests`].
mod build;
mod script;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::domain::options::VmOptions;
use crate::flows::run::{self, Prepared, RunDir, TestRun};
use crate::kernel::choice::KernelChoice;
use crate::kernel::pins;
use crate::machine::guest;
use crate::machine::provision;
use crate::results::health;
use crate::results::report::{self, Report, SelftestsInfo};
use crate::results::upstream::{self, Known};
use crate::support::output::{Events, StepClock};
use crate::support::paths::{target_dir, workspace_root};

/// `selftests`' options.
#[derive(Debug, Clone)]
pub struct Options {
    pub kernel: KernelChoice,
    pub vm: VmOptions,
    /// `test_progs -t PATTERN`: the tests to run (all when absent).
    pub pattern: Option<String>,
    /// Also run `test_maps` (every map test, in one process).
    pub maps: bool,
    /// The Debian clang to build with (the series' default when absent: `build::clang_for`).
    pub clang: Option<u32>,
    /// Write the pin's inventory from this build's `test_progs -l` instead of checking it.
    pub bless: bool,
}

/// Where a pin's inventory and known failures are: `kernels/selftests/<pin>.inventory` and
/// `<pin>.known.toml`.
fn pin_files(version: &str) -> (String, String) {
    (
        format!("kernels/selftests/{version}.inventory"),
        format!("kernels/selftests/{version}.known.toml"),
    )
}

/// The command that writes a pin's inventory.
fn bless_command(version: &str) -> String {
    format!("cargo xtask selftests --kernel {version} --bless")
}

/// What the selftests are built from, checked.
enum Target<'a> {
    Pin {
        pin: &'a pins::Pin,
        sel: &'a pins::Selftests,
        clang: u32,
    },
    Tree {
        dir: &'a Path,
        clang: u32,
    },
}

/// What the choice builds from, checked before anything is installed or booted: a pin with its
/// `[selftests]`, or a tree that holds the selftests, and the clang its series takes.
fn check(opts: &Options) -> Result<Target<'_>> {
    match &opts.kernel {
        KernelChoice::Pin(pin) => {
            let sel = pin.selftests.as_deref().with_context(|| {
                format!(
                    "kernel {}: {} has no [selftests] naming the kernel's Debian source \
                     (linux-source-<series>), so its selftests cannot be built",
                    pin.version,
                    pin.path.display()
                )
            })?;
            let clang = build::clang_for(&pin.version, opts.clang)?;
            Ok(Target::Pin { pin, sel, clang })
        }
        KernelChoice::Tree { dir, .. } => {
            build::check_tree(dir)?;
            let clang = build::clang_for(&tree_version(dir)?, opts.clang)?;
            if opts.bless {
                bail!(
                    "--bless writes a pin's inventory of the selftests (kernels/selftests/); a \
                     tree's tests are its own: leave --bless out"
                );
            }
            Ok(Target::Tree { dir, clang })
        }
        other => bail!(
            "selftests build from the kernel's source: give a pin (--kernel 6.1) or a tree \
             (--kernel-tree DIR), not {}",
            other.shown()
        ),
    }
}

/// `VERSION.PATCHLEVEL` from a tree's top Makefile.
fn tree_version(dir: &Path) -> Result<String> {
    let path = dir.join("Makefile");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim_start().strip_prefix('='))
            .map(|v| v.trim().to_string())
    };
    match (field("VERSION"), field("PATCHLEVEL")) {
        (Some(v), Some(p)) => Ok(format!("{v}.{p}")),
        _ => bail!(
            "{}: no VERSION and PATCHLEVEL: not a kernel tree",
            path.display()
        ),
    }
}

/// A pin's BTF, dumped once from its guest's `/sys/kernel/btf/vmlinux` (one boot) and cached.
fn pin_btf(p: &Prepared, pin: &pins::Pin, vm: &VmOptions, events: &Events) -> Result<PathBuf> {
    let dest = build::root()
        .join("btf")
        .join(format!("{}-{}.btf", pin.version, pin.short_id()));
    if dest.is_file() {
        return Ok(dest);
    }
    events.step(format!(
        "dumping the BTF of kernel {} (one boot)",
        pin.version
    ));
    let files = RunDir::new(&target_dir().join("selftests").join("btf"))?;
    let got = files.shared.join("vmlinux.btf");
    let argv: Vec<String> = ["cp", "/sys/kernel/btf/vmlinux"]
        .iter()
        .map(|s| s.to_string())
        .chain([got.display().to_string()])
        .collect();
    guest::write(
        &files.script,
        &guest::command_script(&files.shared, Path::new("/"), &argv),
    )?;
    let outcome = run::boot(p, vm, &files.shared, &files.script, events)?;
    let (problems, _) = run::judge_boot(&files.shared, &outcome, p)?;
    if !got.is_file() || !problems.is_empty() {
        bail!(
            "the boot that dumps kernel {}'s BTF failed: {}; {}",
            pin.version,
            outcome.diagnosis(),
            problems.join("; ")
        );
    }
    std::fs::create_dir_all(dest.parent().unwrap_or(Path::new("/")))?;
    crate::support::fs::write_atomic(&dest, &std::fs::read(&got)?)?;
    Ok(dest)
}

/// Builds (or reuses) the selftests of `target`: the packages they need, the source and the
/// kernel's BTF, then make. A pin's BTF is dumped from its guest (one boot with `vm`, the first
/// time) and `bpf_testmod.ko` builds against its headers package; a tree's BTF is its build's
/// `vmlinux`, and the module builds against that build.
fn build_for(
    target: &Target,
    p: &Prepared,
    vm: &VmOptions,
    events: &Events,
) -> Result<(build::Source, build::Built)> {
    let (Target::Pin { clang, .. } | Target::Tree { clang, .. }) = *target;
    let mut pkgs = provision::selftests_packages(clang);
    if let Target::Pin { sel, .. } = target {
        pkgs.push(sel.headers.clone());
    }
    let pkgs: Vec<&str> = pkgs.iter().map(String::as_str).collect();
    provision::ensure_packages(&pkgs, events)?;
    let (source, btf, kdir) = match *target {
        Target::Pin { pin, sel, .. } => (
            build::pin_source(pin, sel, events)?,
            pin_btf(p, pin, vm, events)?,
            // Debian's headers package installs its kbuild tree under its own name.
            build::Kdir::Headers(Path::new("/usr/src").join(&sel.headers)),
        ),
        Target::Tree { dir, .. } => {
            let tree = p
                .kernel
                .built_from
                .as_ref()
                .context("a tree's kernel was prepared without its build")?;
            let out = PathBuf::from(&tree.build_dir);
            (
                build::tree_source(dir, tree),
                out.join("vmlinux"),
                build::Kdir::Tree {
                    tree: dir.to_path_buf(),
                    build: out,
                },
            )
        }
    };
    let built = build::build(
        &build::Inputs {
            source: &source,
            btf: &btf,
            kdir,
            clang,
        },
        events,
    )?;
    Ok((source, built))
}

/// The kernel's own `bench` for `choice` (bench-vm's upstream rows): the build `selftests`
/// makes, reused when cached. `Ok(Err(why))` when `choice` has no selftests to build (a pin
/// without `[selftests]`, an image): the rows are skipped with that reason.
pub(crate) fn bench_binary(
    choice: &KernelChoice,
    p: &Prepared,
    vm: &VmOptions,
    events: &Events,
) -> Result<std::result::Result<PathBuf, String>> {
    let opts = Options {
        kernel: choice.clone(),
        vm: vm.clone(),
        pattern: None,
        maps: false,
        clang: None,
        bless: false,
    };
    let target = match check(&opts) {
        Ok(found) => found,
        Err(why) => return Ok(Err(format!("{why:#}"))),
    };
    let (_, built) = build_for(&target, p, vm, events)?;
    Ok(Ok(built.dir.join("bench")))
}

/// The rows of a report named as the guest marked them.
fn same(name: &str) -> String {
    name.to_string()
}

/// `selftests`: builds the kernel's selftests for `opts.kernel` and runs them in one boot;
/// writes `target/selftests/<kernel>/{report.json,junit.xml,kernel.log}`.
pub fn selftests(opts: &Options, events: &Events) -> Result<(Report, PathBuf)> {
    let target = check(opts)?;
    let clock = StepClock::start();
    let events = &clock.watch(events);
    let start = clock.started();
    let allow = health::allow::load(&health::allow::path())?;
    let root = workspace_root();
    // A pin's known failures, read before anything boots (a broken file is the user's input);
    // a tree's tests are its own and it has none.
    let known = match &target {
        Target::Pin { pin, .. } => Known::load(&root.join(pin_files(&pin.version).1))?,
        Target::Tree { .. } => Known::default(),
    };
    let p = run::prepare(&opts.kernel, &opts.vm, events)?;
    let prepared = start.elapsed();

    let (source, built) = build_for(&target, &p, &opts.vm, events)?;
    // Where libbpf's `__kconfig` finds the kernel's config in the guest comes from.
    let config = match &p.kernel.built_from {
        Some(tree) => Path::new(&tree.build_dir).join(".config"),
        None => p
            .kernel
            .bootable
            .root
            .join("boot")
            .join(format!("config-{}", p.kernel.bootable.release)),
    };
    let build_time = start.elapsed() - prepared;

    let out_dir = target_dir().join("selftests").join(&p.kernel.label);
    let files = RunDir::new(&out_dir)?;
    guest::write(
        &files.script,
        &script::script(
            &files.shared,
            &built.dir,
            &config,
            opts.pattern.as_deref(),
            opts.maps,
            build::has_json_summary(&source.tree),
        ),
    )?;
    let booted = run::boot_tests(&p, &opts.vm, files, &out_dir, events)?;
    let shared = booted.files.shared.clone();
    let kernel_log = crate::support::guest_files::read(&shared.join(guest::files::KERNEL_LOG))
        .unwrap_or_default();
    let mut tests = match booted.outcome.boot {
        None if !booted.vm_ok() => vec![report::never_started(&booted.ending())],
        _ => upstream::judge(&shared, opts.maps, &kernel_log),
    };
    if !tests
        .iter()
        .any(|t| t.name.starts_with(upstream::TEST_PROGS))
        && booted.vm_ok()
    {
        tests.push(report::no_test_ran(opts.pattern.as_deref()));
    }
    if let Some(why) = testmod_failure(&shared) {
        tests.push(report::failed("guest:bpf_testmod".into(), why));
    }
    match &target {
        Target::Pin { pin, .. } => {
            let (inv_file, known_file) = pin_files(&pin.version);
            known.apply(&mut tests, &known_file);
            let bless = bless_command(&pin.version);
            if opts.bless {
                let inv = upstream::inventory_of(&shared)?;
                let header = format!(
                    "The tests of the kernel's own `test_progs` for pin {}: `test_progs <test>`.\n\
                     Written by `{bless}`; a test missing from the build, or new to it, fails the run.",
                    pin.version
                );
                crate::support::fs::write_atomic(
                    &root.join(&inv_file),
                    inv.render(&header).as_bytes(),
                )?;
                events.note(format!("wrote {inv_file}"));
            } else {
                tests.extend(upstream::check_inventory(
                    &shared,
                    &root.join(&inv_file),
                    &inv_file,
                    &bless,
                ));
            }
        }
        Target::Tree { .. } => events.note(
            "a tree's selftests are checked against no inventory: every test its test_progs \
             lists and -t selects must run",
        ),
    }
    let info = SelftestsInfo {
        source: source.describe.clone(),
        note: match &target {
            Target::Pin { sel, .. } => sel.source_note.clone(),
            Target::Tree { .. } => None,
        },
        clang: built.clang.clone(),
        build_dir: built.dir.display().to_string(),
        build_cached: built.cached,
        build_s: built.seconds,
    };
    let rules = TestRun {
        report_name: same,
        verifier: false,
        filter: opts.pattern.as_deref(),
        timings: (prepared, build_time),
        clock: &clock,
    };
    let report = run::conclude(&p, booted, tests, &rules, &allow, events, |r| {
        r.selftests = Some(info);
    })?;
    Ok((report, out_dir))
}

/// Why `insmod bpf_testmod.ko` failed before the tests, if it did (its output, then its status).
fn testmod_failure(shared: &Path) -> Option<String> {
    let text = crate::support::guest_files::read(&shared.join(upstream::TESTMOD)).ok()?;
    let mut lines: Vec<&str> = text.lines().collect();
    let rc = lines.pop()?;
    (rc.trim() != "0").then(|| {
        format!(
            "insmod bpf_testmod.ko exited with {rc}: {} (the tests that use it fail)",
            lines.join(" | ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_version_comes_from_its_makefile() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join("Makefile"),
            "# SPDX\nVERSION = 6\nPATCHLEVEL = 12\nSUBLEVEL = 118\n",
        )
        .unwrap();
        assert_eq!(tree_version(d.path()).unwrap(), "6.12");
    }

    #[test]
    fn an_image_and_a_tree_to_bless_are_refused_before_anything_boots() {
        let opts = Options {
            kernel: KernelChoice::Image {
                path: "/k/bzImage".into(),
                modules: None,
            },
            vm: VmOptions::new(std::time::Duration::from_secs(60)),
            pattern: None,
            maps: false,
            clang: None,
            bless: false,
        };
        let e = check(&opts).err().unwrap().to_string();
        assert!(e.contains("give a pin (--kernel 6.1) or a tree"), "{e}");
        let tree = tempfile::tempdir().unwrap();
        let t = tree.path();
        std::fs::create_dir_all(t.join(build::SELFTESTS_DIR)).unwrap();
        std::fs::write(t.join(build::SELFTESTS_DIR).join("Makefile"), "").unwrap();
        std::fs::write(t.join("Makefile"), "VERSION = 6\nPATCHLEVEL = 12\n").unwrap();
        let tree_opts = Options {
            kernel: KernelChoice::Tree {
                dir: t.to_path_buf(),
                kconfig: vec![],
            },
            ..opts
        };
        assert!(matches!(
            check(&tree_opts),
            Ok(Target::Tree { clang: 19, .. })
        ));
        let bless = Options {
            bless: true,
            ..tree_opts
        };
        let e = check(&bless).err().unwrap().to_string();
        assert!(e.contains("leave --bless out"), "{e}");
    }

    /// bench-vm --upstream skips its bench rows with this reason on such a pin.
    #[test]
    fn a_pin_without_selftests_is_refused_naming_its_toml() {
        let pin = pins::resolve("5.10").unwrap();
        assert!(pin.selftests.is_none(), "5.10 has no [selftests]");
        let opts = Options {
            kernel: KernelChoice::Pin(pin),
            vm: VmOptions::new(std::time::Duration::from_secs(60)),
            pattern: None,
            maps: false,
            clang: None,
            bless: false,
        };
        let e = format!("{:#}", check(&opts).err().unwrap());
        assert!(
            e.starts_with("kernel 5.10: ") && e.contains("kernels/5.10.toml has no [selftests]"),
            "{e}"
        );
    }

    #[test]
    fn a_failed_insmod_is_named() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(
            d.path().join(upstream::TESTMOD),
            "insmod: ERROR: Invalid module format\n1\n",
        )
        .unwrap();
        assert!(testmod_failure(d.path())
            .unwrap()
            .contains("Invalid module format"));
        std::fs::write(d.path().join(upstream::TESTMOD), "0\n").unwrap();
        assert!(testmod_failure(d.path()).is_none());
    }
}
