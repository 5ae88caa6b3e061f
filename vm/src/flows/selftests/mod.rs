//! `selftests`: the kernel's own BPF selftests (`test_progs`, `test_verifier`, `test_maps`,
//! `bench`) built from the kernel's source with its own Makefile and run in as many boots of
//! that kernel as they take (`boots`), every upstream
//! test and subtest judged like the suite's tests (`results::upstream`): a splat fails the test
//! that ran, a lost kernel log record fails the run, the pin's inventory and known failures
//! apply. `cargo xtask selftests` and `bpfvm selftests` both call [`selftests`].
pub(crate) mod boots;
mod build;
mod script;
mod units;
mod veristat;

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::domain::arch::Arch;
use crate::domain::options::VmOptions;
use crate::flows::run::{self, Prepared, RunDir, TestRun};
use crate::kernel::choice::KernelChoice;
use crate::kernel::pins;
use crate::kernel::source_tree;
use crate::machine::guest;
use crate::machine::provision;
use crate::machine::tcg_thread;
use crate::results::costs::Costs;
use crate::results::denylist;
use crate::results::health;
use crate::results::plan::{self, Assigned, PieceId};
use crate::results::report::{self, Report, SelftestsInfo, TestResult};
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
    /// Run only this piece of the selftests' plan (`results::plan`), with the plan's hash the
    /// matrix was made from, if given; the piece that holds `test_verifier` also runs
    /// `test_maps` with `maps`.
    pub piece: Option<(PieceId, Option<String>)>,
    /// Deny lists of the user's, in the format of the tree's `DENYLIST` (BPF CI keeps its own
    /// beside the tree): applied after the tree's, each entry a skip with its comment.
    pub denylists: Vec<PathBuf>,
    /// Also run upstream `veristat` over every BPF object of the build, in a boot of its own
    /// ([`veristat`]): the report's `verifier` rows and `veristat.csv`.
    pub veristat: bool,
    /// Run this one unit alone, `test_verifier` or `test_maps`, instead of what the pattern
    /// selects: a change's rerun of one of their rows, which no `-t` selects.
    pub unit: Option<String>,
}

/// Where a pin's inventory and known failures are: `kernels/selftests/<pin>.inventory` and
/// `<pin>.known.toml`; an arm64 pin's `<pin>.arm64.inventory` and `<pin>.arm64.known.toml` (its
/// build and its kernel are not the x86_64 pin's).
fn pin_files(pin: &pins::Pin) -> (String, String) {
    let name = plan::selftests_pin_name(&pin.version, pin.arch);
    (
        format!("kernels/selftests/{name}.inventory"),
        format!("kernels/selftests/{name}.known.toml"),
    )
}

/// The command that writes a pin's inventory.
fn bless_command(pin: &pins::Pin) -> String {
    match pin.arch {
        Arch::X86_64 => format!("cargo xtask selftests --kernel {} --bless", pin.version),
        other => format!(
            "cargo xtask selftests --kernel {} --arch {other} --bless",
            pin.version
        ),
    }
}

/// What the selftests are built from, checked.
enum Target<'a> {
    Pin {
        pin: &'a pins::Pin,
        sel: &'a pins::Selftests,
        clang: u32,
    },
    /// A tree, or a ref of one checked out under the cache's `tree-refs/` (as its kernel is).
    Tree { dir: PathBuf, clang: u32 },
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
        KernelChoice::Tree { dir, .. } | KernelChoice::TreeRef { dir, .. } => {
            // A ref's selftests are its own commit's, from the checkout its kernel builds from.
            let dir = match &opts.kernel {
                KernelChoice::TreeRef { rev, .. } => source_tree::checkout_ref(dir, rev)?,
                _ => dir.clone(),
            };
            build::check_tree(&dir)?;
            let clang = build::clang_for(&tree_version(&dir)?, opts.clang)?;
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
    // An arm64 kernel's `vmlinuz` is its uncompressed `Image`, which holds the BTF the guest's
    // /sys/kernel/btf/vmlinux shows: read there, without a boot.
    if p.kernel.arch == Arch::Arm64 {
        let image = &p.kernel.bootable.vmlinuz;
        let bytes = std::fs::read(image).with_context(|| format!("read {}", image.display()))?;
        let btf = build::btf_in_image(&bytes)
            .with_context(|| format!("the BTF of kernel {} in {}", pin.version, image.display()))?;
        std::fs::create_dir_all(dest.parent().unwrap_or(Path::new("/")))?;
        crate::support::fs::write_atomic(&dest, btf)?;
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
    let problems = run::judge_boot(&files.shared, &outcome, p)?.problems;
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

/// The installed version of a pin's headers package, which must be its kernel's: the package
/// is installed by name from the host's apt, and a name can outlive a version (Debian's ABI
/// name stays across some uploads), so `bpf_testmod.ko` would build against other headers.
fn headers_version(pin: &pins::Pin, sel: &pins::Selftests, got: Option<String>) -> Result<String> {
    // The kernel's package is the pin's first, as its check of `[selftests]` reads it (7.2's is
    // `linux-binary-*`: sid's `linux-image-*` is a meta package).
    let want = (pin.packages.first())
        .map(|p| p.version.clone())
        .with_context(|| format!("{}: no package", pin.path.display()))?;
    match got {
        Some(v) if v == want => Ok(v),
        got => Err(anyhow::anyhow!(
            "{} is {} on this host, and pin {} needs version {want}, its kernel's, for              bpf_testmod.ko; install it: {}",
            sel.headers,
            got.map_or("not installed".into(), |v| format!("version {v}")),
            pin.version,
            provision::apt_install_command(
                &[&format!("{}={want}", sel.headers)],
                provision::is_root()
            )
        )),
    }
}

/// Builds (or reuses) the selftests of `target`: the packages they need, the source and the
/// kernel's BTF, then make (with `veristat` when asked). A pin's BTF is dumped from its guest
/// (one boot with `vm`, the first time) and `bpf_testmod.ko` builds against its headers
/// package; a tree's BTF is its build's `vmlinux`, and the module builds against that build.
fn build_for(
    target: &Target,
    p: &Prepared,
    vm: &VmOptions,
    veristat: bool,
    events: &Events,
) -> Result<(build::Source, build::Built)> {
    let (Target::Pin { clang, .. } | Target::Tree { clang, .. }) = *target;
    let arch = p.kernel.arch;
    let mut pkgs = provision::selftests_packages(clang, arch);
    if let Target::Pin { sel, .. } = target {
        if sel.headers_deb.is_none() {
            pkgs.push(sel.headers.clone());
        }
    }
    let pkgs: Vec<&str> = pkgs.iter().map(String::as_str).collect();
    provision::ensure_packages(&pkgs, events)?;
    let (source, btf, kdir) = match target {
        Target::Pin { pin, sel, .. } => {
            let (headers, version) = match &sel.headers_deb {
                // Debian's headers package installs its kbuild tree under its own name.
                None => (
                    Path::new("/usr/src").join(&sel.headers),
                    headers_version(pin, sel, provision::installed_version(&sel.headers))?,
                ),
                Some(deb) => (
                    build::unpacked_headers(pin, deb, events)?,
                    deb.version.clone(),
                ),
            };
            let btf = pin_btf(p, pin, vm, events)?;
            let kdir = build::Kdir::Headers(build::headers_with_btf(&headers, &version, &btf)?);
            (build::pin_source(pin, sel, events)?, btf, kdir)
        }
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
            arch,
            veristat,
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
        piece: None,
        denylists: vec![],
        veristat: false,
        unit: None,
    };
    let target = match check(&opts) {
        Ok(found) => found,
        Err(why) => return Ok(Err(format!("{why:#}"))),
    };
    let (_, built) = build_for(&target, p, vm, false, events)?;
    Ok(Ok(built.dir.join("bench")))
}

/// The rows of a report named as the guest marked them.
fn same(name: &str) -> String {
    name.to_string()
}

/// `test_progs -l [-t PATTERN]` of the build in `dir`, run on the host: listing reads only the
/// binary's own table of tests (`main` in test_progs.c lists before it loads anything), and
/// the guest runs this same binary from the host's root. A cross-built one runs under qemu's
/// user-mode emulator with the guest's root (`guest_root`) as its libraries.
fn list(dir: &Path, pattern: Option<&str>, p: &Prepared) -> Result<String> {
    let test_progs = dir.join("test_progs");
    let mut cmd = match &p.kernel.guest_root {
        Some(root) => {
            let mut c = std::process::Command::new(p.kernel.arch.qemu_user());
            c.arg("-L").arg(root).arg(&test_progs);
            c
        }
        None => std::process::Command::new(&test_progs),
    };
    cmd.current_dir(dir).arg("-l");
    if let Some(p) = pattern {
        cmd.args(["-t", p]);
    }
    let out = crate::support::wait::output(&cmd)?;
    // test_progs exits 2 (`EXIT_NO_TEST`) when the pattern selects nothing.
    if !out.status.success() && out.status.code() != Some(2) {
        bail!(
            "{} -l failed ({}): {}",
            dir.join("test_progs").display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `selftests`: builds the kernel's selftests for `opts.kernel` and runs them in as many boots
/// as they take (`boots`); writes `target/selftests/<kernel>/{report.json,junit.xml}` and each
/// boot's files under `boots/N/`.
pub fn selftests(opts: &Options, events: &Events) -> Result<(Report, PathBuf)> {
    let target = check(opts)?;
    let plan = boots::Plan::for_timeout(opts.vm.timeout)?;
    let piece = assigned(opts)?;
    let clock = StepClock::start();
    let events = &clock.watch(events);
    let start = clock.started();
    let allow = health::allow::load(&health::allow::path())?;
    let root = workspace_root();
    // A pin's known failures, read before anything boots (a broken file is the user's input);
    // a tree's tests are its own and it has none.
    let known = match &target {
        Target::Pin { pin, .. } => Known::load(&root.join(pin_files(pin).1))?,
        Target::Tree { .. } => Known::default(),
    };
    let users = opts
        .denylists
        .iter()
        .map(|f| denylist::load_file(f))
        .collect::<Result<Vec<_>>>()?
        .concat();
    let mut p = run::prepare_any_arch(&opts.kernel, &opts.vm, events)?;
    one_tcg_thread(&mut p, opts, events);
    let prepared = start.elapsed();

    let (source, built) = build_for(&target, &p, &opts.vm, opts.veristat, events)?;
    let config = kernel_config(&p);
    // A guest of its own root reads the build and the kernel's config at their host paths.
    if p.kernel.guest_root.is_some() {
        p.guest_reads = vec![built.dir.clone()];
        p.guest_reads.extend(config.parent().map(Path::to_path_buf));
    }
    let build_time = start.elapsed() - prepared;

    let all = list(&built.dir, None, &p)?;
    let denied = match &target {
        Target::Tree { .. } => denylist::load(&built.dir, p.kernel.arch.name()),
        Target::Pin { .. } => vec![],
    };
    let denied = [denied, users].concat();
    let (units, mut first_rows) = run_units(opts, piece.as_ref(), &built.dir, &all, &denied, &p)?;
    let known_file = match &target {
        Target::Pin { pin, .. } => {
            pin_checks(opts, pin, &known, &config, &all, &mut first_rows, events)?
        }
        Target::Tree { .. } => {
            events.note(
                "a tree's selftests are checked against no inventory: every test its test_progs \
                 lists and -t selects runs, but those its DENYLIST files deny",
            );
            String::new()
        }
    };
    let out_dir = target_dir().join("selftests").join(match &piece {
        Some(a) => a.dir_name(&p.kernel.label),
        None => p.kernel.label.clone(),
    });
    let costs = run_costs(&root, &p, &out_dir)?;
    events.note(plan.describe(units.len()));

    let json = build::has_json_summary(&source.tree);
    let script =
        |shared: &Path| script::script(shared, &built.dir, &config, plan.budget.as_secs(), json);
    let finish = |tests: &mut Vec<TestResult>| known.apply(tests, &known_file);
    let rules = TestRun {
        report_name: same,
        verifier: false,
        filter: opts.pattern.as_deref(),
        timings: (prepared, build_time),
        clock: &clock,
    };
    let each = boots::Run {
        vm: &opts.vm,
        plan,
        costs: &costs,
        out_dir: &out_dir,
        script: &script,
        finish: &finish,
        rules: &rules,
        allow: &allow,
    };
    let (reports, not_run) = boots::run(&mut p, &each, &units, first_rows, events)?;
    let mut report = boots::combine(reports, not_run);
    report.selftests = Some(SelftestsInfo {
        source: source.describe,
        note: match &target {
            Target::Pin { sel, .. } => sel.source_note.clone(),
            Target::Tree { .. } => None,
        },
        clang: built.clang,
        build_dir: built.dir.display().to_string(),
        build_cached: built.cached,
        build_s: built.seconds,
    });
    report.piece = piece.as_ref().map(Assigned::info);
    if opts.veristat {
        report.verifier = veristat::run(&p, &opts.vm, &built.dir, &config, &out_dir, events)?;
    }
    report.timings.wall_s = Some(clock.started().elapsed().as_secs_f64());
    report::write(&report, &out_dir)?;
    Ok((report, out_dir))
}

/// Under TCG, the selftests' threading (`tcg_thread::for_selftests`), said when it differs from
/// the accelerator's.
fn one_tcg_thread(p: &mut Prepared, opts: &Options, events: &Events) {
    if let Some(t) = p.accel.tcg_thread.as_mut() {
        let chosen = tcg_thread::for_selftests(opts.vm.tcg_thread, t);
        if chosen != *t {
            events.note(format!("TCG: {}", chosen.describe()));
            *t = chosen;
        }
    }
}

/// The piece of the selftests' plan this run is, when `--piece` names one.
fn assigned(opts: &Options) -> Result<Option<Assigned>> {
    let Some((id, expected)) = &opts.piece else {
        return Ok(None);
    };
    let kvm = opts.vm.accel == crate::domain::options::Choice::Kvm;
    let inputs = plan::Inputs::of(plan::Kind::Selftests, &workspace_root(), &opts.kernel, kvm)?;
    Ok(Some(Assigned::of(&inputs, *id, expected.as_deref())?))
}

/// Where libbpf's `__kconfig` finds the kernel's config in the guest comes from: a tree's
/// build, or the pin's (see [`pin_config`]).
fn kernel_config(p: &Prepared) -> PathBuf {
    match &p.kernel.built_from {
        Some(tree) => Path::new(&tree.build_dir).join(".config"),
        None => pin_config(&p.kernel.bootable.root, &p.kernel.bootable.release),
    }
}

/// A pin's config in its extracted packages: `boot/config-<release>`, or where 7.x's split
/// packages put it (linux-base's `usr/lib/modules/<release>/config`, beside linux-binary's
/// `vmlinuz`). The first when neither is there, for the error.
fn pin_config(root: &Path, release: &str) -> PathBuf {
    let boot = root.join("boot").join(format!("config-{release}"));
    let split = root.join("usr/lib/modules").join(release).join("config");
    if !boot.is_file() && split.is_file() {
        split
    } else {
        boot
    }
}

/// The run's units (`units::units`) from the tests its piece or `-t` selects of `all`
/// (`test_progs -l`), and the rows of what `denied` leaves out.
fn run_units(
    opts: &Options,
    piece: Option<&Assigned>,
    dir: &Path,
    all: &str,
    denied: &[denylist::Denied],
    p: &Prepared,
) -> Result<(Vec<units::Unit>, Vec<TestResult>)> {
    if let Some(unit) = &opts.unit {
        let unit = units::Unit {
            name: unit.clone(),
            args: vec![],
        };
        return Ok((vec![unit], vec![]));
    }
    let selected: Vec<String> = match (piece, &opts.pattern) {
        (Some(a), _) => a
            .piece
            .tests
            .iter()
            .filter(|u| u.binary == upstream::TEST_PROGS)
            .map(|u| u.test.clone())
            .collect(),
        (None, Some(pat)) => upstream::listed(&list(dir, Some(pat), p)?)
            .map(str::to_string)
            .collect(),
        (None, None) => upstream::listed(all).map(str::to_string).collect(),
    };
    // test_verifier is a unit of the plan; test_maps (in no plan: it runs only with --maps)
    // runs beside it.
    let whole = match piece {
        Some(a) => a
            .piece
            .holds(upstream::TEST_VERIFIER, upstream::TEST_VERIFIER),
        None => opts.pattern.is_none(),
    };
    let (units, mut first_rows) = units::units(
        &selected,
        opts.pattern.as_deref(),
        denied,
        whole,
        opts.maps && (piece.is_none() || whole),
    );
    if units.is_empty() {
        first_rows.push(report::no_test_ran(opts.pattern.as_deref()));
    }
    Ok((units, first_rows))
}

/// A pin's checks before it boots: its known entries against the kernel's `config`, and its
/// inventory against `all` (or, with `--bless`, the inventory written from it). Returns the
/// known list's file.
fn pin_checks(
    opts: &Options,
    pin: &pins::Pin,
    known: &Known,
    config: &Path,
    all: &str,
    first_rows: &mut Vec<TestResult>,
    events: &Events,
) -> Result<String> {
    let root = workspace_root();
    let (inv_file, known_file) = pin_files(pin);
    let kernel_config = std::fs::read_to_string(config)
        .with_context(|| format!("read the kernel's config {}", config.display()))?;
    first_rows.extend(known.check_config(&kernel_config, &known_file));
    let bless = bless_command(pin);
    if opts.bless {
        let header = format!(
            "The tests of the kernel's own `test_progs` for pin {}: `test_progs <test>`.\n\
             Written by `{bless}`; a test missing from the build, or new to it, fails the run.",
            pin.version
        );
        crate::support::fs::write_atomic(
            &root.join(&inv_file),
            upstream::inventory_of(all).render(&header).as_bytes(),
        )?;
        events.note(format!("wrote {inv_file}"));
    } else {
        first_rows.extend(upstream::check_inventory(
            all,
            &root.join(&inv_file),
            &inv_file,
            &bless,
        ));
    }
    Ok(known_file)
}

/// The measured costs a run plans its boots from: the committed file of its kernel, arch and
/// accelerator (or the nearest measured, [`Costs::measured`]), updated by the last run's report in `out_dir`.
fn run_costs(root: &Path, p: &Prepared, out_dir: &Path) -> Result<Costs> {
    let mut costs = Costs::measured(root, &p.kernel.label, p.kernel.arch, p.accel.kind.name())?;
    let last: Option<Report> = std::fs::read_to_string(out_dir.join("report.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    if let Some(r) = last {
        costs.update(&Costs::of_rows(&r.tests, |row| {
            plan::cost_unit(plan::Kind::Selftests, row)
        }));
    }
    Ok(costs)
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
            piece: None,
            denylists: vec![],
            veristat: false,
            unit: None,
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

    /// A ref of a tree builds its selftests from its own commit, checked out as its kernel
    /// is (`tree-refs/<commit>`), not from the tree as it is.
    #[test]
    fn a_trees_ref_builds_the_selftests_of_its_own_commit() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t", "-C"])
                .arg(t)
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}");
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        let test = t.join(build::SELFTESTS_DIR).join("prog_tests/planted.c");
        std::fs::create_dir_all(test.parent().unwrap()).unwrap();
        std::fs::write(t.join(build::SELFTESTS_DIR).join("Makefile"), "").unwrap();
        std::fs::write(t.join("Makefile"), "VERSION = 6\nPATCHLEVEL = 12\n").unwrap();
        // A commit of its own, so that its checkout is this test's alone.
        std::fs::write(&test, format!("base {:?}\n", t)).unwrap();
        git(&["init", "-q"]);
        git(&["add", "."]);
        git(&["commit", "-q", "-m", "base"]);
        let base = git(&["rev-parse", "HEAD"]);
        std::fs::write(&test, "head\n").unwrap();
        git(&["commit", "-q", "-am", "head"]);
        let opts = Options {
            kernel: KernelChoice::TreeRef {
                dir: t.to_path_buf(),
                rev: "HEAD~1".into(),
                kconfig: vec![],
            },
            vm: VmOptions::new(std::time::Duration::from_secs(60)),
            pattern: None,
            maps: false,
            clang: None,
            bless: false,
            piece: None,
            denylists: vec![],
            veristat: true,
            unit: None,
        };
        let Ok(Target::Tree { dir, clang: 19 }) = check(&opts) else {
            panic!("a tree's ref is a tree to build from");
        };
        let got =
            std::fs::read_to_string(dir.join(build::SELFTESTS_DIR).join("prog_tests/planted.c"));
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            dir.ends_with(format!("tree-refs/{base}")),
            "{}",
            dir.display()
        );
        assert!(got.unwrap().starts_with("base "));
    }

    /// A pin's config is found in 6.x's layout (`boot/`) and in 7.x's split packages'.
    #[test]
    fn a_pins_config_is_found_where_its_packages_put_it() {
        let t = tempfile::tempdir().unwrap();
        let r = "7.2.13+deb14-cloud-amd64";
        let split = t.path().join("usr/lib/modules").join(r).join("config");
        let boot = t.path().join("boot").join(format!("config-{r}"));
        assert_eq!(pin_config(t.path(), r), boot);
        std::fs::create_dir_all(split.parent().unwrap()).unwrap();
        std::fs::write(&split, "CONFIG_BPF=y\n").unwrap();
        assert_eq!(pin_config(t.path(), r), split);
        std::fs::create_dir_all(boot.parent().unwrap()).unwrap();
        std::fs::write(&boot, "CONFIG_BPF=y\n").unwrap();
        assert_eq!(pin_config(t.path(), r), boot);
    }

    /// The headers bpf_testmod.ko builds against are the pin kernel's version, or the run
    /// stops naming the package, both versions and the install command.
    #[test]
    fn a_pins_headers_must_be_its_kernels_version() {
        for (version, kernel) in [("6.1", "linux-image-"), ("7.2", "linux-binary-")] {
            let pin = pins::resolve(version).unwrap();
            let sel = pin.selftests.as_deref().unwrap();
            let want = pin.packages[0].version.clone();
            assert!(pin.packages[0].name.starts_with(kernel));
            assert_eq!(
                headers_version(&pin, sel, Some(want.clone())).unwrap(),
                want
            );
            let e = format!(
                "{:#}",
                headers_version(&pin, sel, Some("6.1.0-0".into())).unwrap_err()
            );
            assert!(
                e.contains("version 6.1.0-0") && e.contains(&format!("{}={want}", sel.headers)),
                "{e}"
            );
            let e = format!("{:#}", headers_version(&pin, sel, None).unwrap_err());
            assert!(e.contains("not installed"), "{e}");
        }
    }

    /// Each arm64 pin has `[selftests]`: it is built (clang of its series), checked against
    /// its own inventory and known list, and blessed with `--arch`.
    #[test]
    fn an_arm64_pin_builds_its_selftests_with_its_own_files() {
        for (version, clang) in [("6.1", 16), ("6.12", 19)] {
            let pin = (pins::pins_for(Arch::Arm64).unwrap().into_iter())
                .find(|p| p.version == version)
                .unwrap();
            assert_eq!(
                pin_files(&pin),
                (
                    format!("kernels/selftests/{version}.arm64.inventory"),
                    format!("kernels/selftests/{version}.arm64.known.toml")
                )
            );
            assert_eq!(
                bless_command(&pin),
                format!("cargo xtask selftests --kernel {version} --arch arm64 --bless")
            );
            let opts = Options {
                kernel: KernelChoice::Pin(pin),
                vm: VmOptions::new(std::time::Duration::from_secs(60)),
                pattern: None,
                maps: false,
                clang: None,
                bless: false,
                piece: None,
                denylists: vec![],
                veristat: false,
                unit: None,
            };
            assert!(
                matches!(check(&opts), Ok(Target::Pin { clang: c, .. }) if c == clang),
                "{version}"
            );
        }
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
            piece: None,
            denylists: vec![],
            veristat: false,
            unit: None,
        };
        let e = format!("{:#}", check(&opts).err().unwrap());
        assert!(
            e.starts_with("kernel 5.10: ") && e.contains("kernels/5.10.toml has no [selftests]"),
            "{e}"
        );
    }
}
