//! `bpfvm test`: the user's own crate, one boot per kernel. Builds its tests with
//! `cargo test --no-run --message-format=json`, runs every test binary in one guest per kernel
//! (`guest::crate_test_script`), and writes `report.json` + `junit.xml` per kernel and
//! `matrix.json`, as `vm-test` does for this repository, under
//! `<the crate's target dir>/bpfvm-test/`. A user crate has no feature expectations: a test
//! that needs a feature the kernel lacks fails, or skips itself.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::domain::arch::Arch;
use crate::domain::options::VmOptions;
use crate::flows::run::{boot_tests, conclude, prepare_any_arch, run_dir_reading, TestRun};
use crate::kernel::choice::KernelChoice;
use crate::machine::build::{self, parse_cargo_messages, Artifact};
use crate::machine::guest::{self, CrateBinary, VerifierRun};
use crate::machine::provision::tail_lines;
use crate::results::health::{self, allow::Allowlist};
use crate::results::inventory::{self, Inventory};
use crate::results::plan::{self, Assigned, PieceId};
use crate::results::report::{self, Report};
use crate::support::output::{Events, StepClock};
use crate::support::shell;

#[derive(Debug, Clone)]
pub struct CrateTestOptions {
    /// The VM settings, the same for each kernel.
    pub vm: VmOptions,
    /// The kernels, in the order they run.
    pub kernels: Vec<KernelChoice>,
    /// Arguments for `cargo test --no-run` (`--release`, `-p NAME`, `--features X`...).
    pub cargo_args: Vec<String>,
    /// Arguments for every test binary (a name filter, `--test-threads 1`...).
    pub test_args: Vec<String>,
    /// Variables set in the guest (`exec::passed_env`).
    pub env: Vec<(String, String)>,
    /// `--verifier-stats`: `None` when not asked, else the BPF objects whose programs the
    /// guest loads for the verifier's statistics (empty: those found in the crate's build
    /// output, [`find_objects`]).
    pub verifier_stats: Option<Vec<PathBuf>>,
    /// Run only this piece of the crate's plan (`results::plan`, cut from its
    /// `bpfvm-inventory.txt`), with the plan's hash the matrix was made from, if given.
    pub piece: Option<(PieceId, Option<String>)>,
}

/// What every kernel's run shares: the test binaries, the verifier statistics step, and the
/// time they took to build.
struct Built {
    binaries: Vec<CrateBinary>,
    verifier: Option<VerifierRun>,
    /// The workspace's `bpfvm-inventory.txt`, if it has one.
    inventory: Option<Inventory>,
    time: Duration,
}

/// Splits `bpfvm test -- ARGS` as `cargo test ARGS` does: cargo's before a `--`, the test
/// binaries' after it.
pub fn split_args(args: &[String]) -> (Vec<String>, Vec<String>) {
    match args.iter().position(|a| a == "--") {
        Some(i) => (args[..i].to_vec(), args[i + 1..].to_vec()),
        None => (args.to_vec(), vec![]),
    }
}

/// Runs the crate's tests on every kernel; a kernel that fails to fetch or boot is recorded
/// with why and the others still run. Returns the reports and the directory holding them.
pub fn crate_test(opts: &CrateTestOptions, events: &Events) -> Result<(Vec<Report>, PathBuf)> {
    let (runs, out) = crate_test_dirs(opts, events)?;
    Ok((runs.into_iter().map(|(r, _)| r).collect(), out))
}

/// A kernel's report and the directory it was written to (none for a kernel that did not run).
pub type KernelRun = (Report, Option<PathBuf>);

/// [`crate_test`], each report with its directory.
pub fn crate_test_dirs(
    opts: &CrateTestOptions,
    events: &Events,
) -> Result<(Vec<KernelRun>, PathBuf)> {
    let allow = health::allow::load(&health::allow::path())?;
    let dirs = cargo_dirs(events)?;
    let inventory = user_inventory(&dirs.workspace_root)?;
    if matches!(&opts.piece, Some((_, Some(_)))) && opts.kernels.len() > 1 {
        bail!("--plan names one kernel's plan: give one --kernel (each kernel's pieces are cut by its own costs)");
    }
    if opts.piece.is_some() && inventory.is_none() {
        bail!(
            "--piece deals out the tests of {}, which this workspace has not: `{}` writes it",
            inventory::CRATE_FILE,
            inventory::CRATE_BLESS
        );
    }
    // One build per architecture the kernels have, before the first boot.
    let mut builds: Vec<(Arch, Built)> = Vec::new();
    for choice in &opts.kernels {
        let arch = choice.arch();
        if builds.iter().any(|(a, _)| *a == arch) {
            continue;
        }
        let start = Instant::now();
        let binaries = build_tests(&opts.cargo_args, arch, &dirs, events)?;
        let verifier = match &opts.verifier_stats {
            Some(objects) => Some(verifier_run(objects, &dirs.target, arch, events)?),
            None => None,
        };
        let built = Built {
            binaries,
            verifier,
            inventory: inventory.clone(),
            time: start.elapsed(),
        };
        builds.push((arch, built));
    }
    let out = dirs.target.join(REPORTS);
    crate::support::paths::check_target_dir(&out)?;
    let mut reports = Vec::new();
    for choice in &opts.kernels {
        let kernel = choice.shown();
        if crate::support::proc::interrupted() {
            events.warn(format!("interrupted: kernel {kernel} and later not run"));
            break;
        }
        events.step(format!("=== kernel {kernel} ==="));
        let built = &builds
            .iter()
            .find(|(a, _)| *a == choice.arch())
            .expect("built for every kernel's architecture")
            .1;
        let piece = match &opts.piece {
            Some((id, expected)) => {
                let kvm = opts.vm.accel == crate::domain::options::Choice::Kvm;
                let inputs =
                    plan::Inputs::of(plan::Kind::Crate, &dirs.workspace_root, choice, kvm)?;
                Some(Assigned::of(&inputs, *id, expected.as_deref())?)
            }
            None => None,
        };
        match test_on(choice, opts, built, piece.as_ref(), &allow, &out, events) {
            Ok((r, dir)) => reports.push((r, Some(dir))),
            Err(e) if crate::support::proc::interrupted() => return Err(e),
            Err(e) => {
                events.warn(format!("kernel {kernel}: {e:#}"));
                reports.push((Report::not_run_because(&kernel, &e), None));
            }
        }
    }
    let all: Vec<&Report> = reports.iter().map(|(r, _)| r).collect();
    write_matrix(&out, &all)?;
    Ok((reports, out))
}

/// `<out>/matrix.json`: every kernel's report.
pub fn write_matrix(out: &Path, reports: &[&Report]) -> Result<()> {
    crate::support::fs::write_atomic(
        &out.join("matrix.json"),
        (serde_json::to_string_pretty(reports)? + "\n").as_bytes(),
    )
}

/// Whether the crate in the current directory's tests build for `arch` (`cargo test --no-run`
/// with `cargo_args`): the error when they do not.
pub fn build_check(cargo_args: &[String], arch: Arch, events: &Events) -> Result<()> {
    let dirs = cargo_dirs(events)?;
    build_tests(cargo_args, arch, &dirs, events).map(|_| ())
}

/// The workspace's `bpfvm-inventory.txt`, if it has one.
fn user_inventory(workspace_root: &Path) -> Result<Option<Inventory>> {
    let path = workspace_root.join(inventory::CRATE_FILE);
    path.exists().then(|| Inventory::load(&path)).transpose()
}

/// `bpfvm inventory`: the tests the crate in the current directory builds (`cargo test
/// --no-run` with `cargo_args`), and where its inventory file goes.
pub fn crate_inventory(cargo_args: &[String], events: &Events) -> Result<(Inventory, PathBuf)> {
    let dirs = cargo_dirs(events)?;
    let binaries = build_tests(cargo_args, Arch::host(), &dirs, events)?;
    let inv = inventory::of_binaries(binaries.iter().map(|b| (b.name.as_str(), b.path.as_path())))?;
    Ok((inv, dirs.workspace_root.join(inventory::CRATE_FILE)))
}

/// Builds the test binaries of the crate in the current directory for `arch` (for another
/// architecture than the host's, into `<target>/bpfvm-cross` as bpfvm's own guest binaries
/// are built: `build::guest_command`).
fn build_tests(
    cargo_args: &[String],
    arch: Arch,
    dirs: &CargoDirs,
    events: &Events,
) -> Result<Vec<CrateBinary>> {
    let how = if arch.is_host() {
        build::native_command()
    } else {
        let tools = crate::machine::provision::ensure(events)?;
        build::guest_command(arch, &dirs.target.join("bpfvm-cross"), &tools.ebpf)
    };
    let mut build: Vec<String> = ["test", "--no-run", "--message-format=json"]
        .map(String::from)
        .to_vec();
    build.extend(cargo_args.iter().cloned());
    events.step(format!(
        "building the crate's tests ({})",
        arch.rust_target()
    ));
    let args = how.argv(&build);
    let stdout = run_cargo(&how.program, &args, &how.env, events)?;
    let (arts, _) = parse_cargo_messages(&stdout);
    let binaries = crate_binaries(&arts);
    if binaries.is_empty() {
        bail!(
            "`cargo {}` built no test executable: is this a crate with tests?",
            args.join(" ")
        );
    }
    Ok(binaries)
}

/// The directories cargo uses for the crate in the current directory.
pub struct CargoDirs {
    pub target: PathBuf,
    pub workspace_root: PathBuf,
}

/// `cargo metadata`'s target directory and workspace root for the current directory.
pub fn cargo_dirs(events: &Events) -> Result<CargoDirs> {
    let meta = cargo(
        &["metadata", "--format-version", "1", "--no-deps"].map(String::from),
        events,
    )?;
    let meta: serde_json::Value = serde_json::from_str(&meta).context("cargo metadata's JSON")?;
    let dir = |key: &str| {
        meta[key]
            .as_str()
            .map(PathBuf::from)
            .with_context(|| format!("cargo metadata gave no {key}"))
    };
    Ok(CargoDirs {
        target: dir("target_directory")?,
        workspace_root: dir("workspace_root")?,
    })
}

/// The reports' directory under the crate's target directory.
pub const REPORTS: &str = "bpfvm-test";
/// Under [`REPORTS`]: the found objects that share a file name, copied under their crate's.
const STAGED_OBJECTS: &str = "verifier-objects";

/// Runs cargo (the user's, from PATH) in the current directory; its stdout, or an error with
/// the compiler's errors and the tail of its stderr.
fn cargo(args: &[String], events: &Events) -> Result<String> {
    run_cargo("cargo", args, &[], events)
}

/// [`cargo`] with `program` (a cargo) and `env` set.
fn run_cargo(
    program: &str,
    args: &[String],
    env: &[(String, String)],
    events: &Events,
) -> Result<String> {
    let shown_env: Vec<(&str, String)> = env.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
    let shown = shell::display(&shown_env, program, args);
    events.command(&shown);
    let mut cmd = Command::new(program);
    if !env.is_empty() {
        crate::machine::provision::scrub_cargo_env(&mut cmd);
    }
    let out = cmd
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("starting `{shown}` (is cargo in PATH?)"))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        let (_, errors) = parse_cargo_messages(&stdout);
        let mut msg = format!("`{shown}` failed ({})", out.status);
        for e in errors {
            msg.push('\n');
            msg.push_str(&e);
        }
        msg.push_str("\nlast lines of cargo's stderr:\n");
        msg.push_str(&tail_lines(&String::from_utf8_lossy(&out.stderr), 30));
        bail!(msg);
    }
    Ok(stdout)
}

/// The test executables among `arts`, each named after its target, made unique with a
/// number (a lib and an integration test may share a name), run from its package.
pub fn crate_binaries(arts: &[Artifact]) -> Vec<CrateBinary> {
    let mut out: Vec<CrateBinary> = Vec::new();
    for a in arts.iter().filter(|a| a.test) {
        if out.iter().any(|b| b.path == a.executable) {
            continue;
        }
        let mut name = a.name.clone();
        let mut n = 1;
        while out.iter().any(|b| b.name == name) {
            n += 1;
            name = format!("{}-{n}", a.name);
        }
        out.push(CrateBinary {
            name,
            path: a.executable.clone(),
            dir: a
                .manifest_path
                .parent()
                .map_or_else(|| PathBuf::from("/"), Path::to_path_buf),
        });
    }
    out
}

/// One kernel: boot, run every binary (or the tests of `piece`), judge the tests (against the
/// inventory, if the crate has one) and the kernel log, write
/// `<out>/<kernel>/{report.json,junit.xml,kernel.log}` (`<kernel>.piece-I-of-N/` for a piece).
fn test_on(
    kernel: &KernelChoice,
    opts: &CrateTestOptions,
    built: &Built,
    piece: Option<&Assigned>,
    allow: &Allowlist,
    out: &Path,
    events: &Events,
) -> Result<(Report, PathBuf)> {
    let binaries = &built.binaries;
    let clock = StepClock::start();
    let events = &clock.watch(events);
    let vm = &opts.vm;
    let mut p = prepare_any_arch(kernel, vm, events)?;
    let prepared = clock.started().elapsed();
    let dir = out.join(match piece {
        Some(a) => a.dir_name(&p.kernel.label),
        None => p.kernel.label.clone(),
    });
    let args = |binary: &str| {
        let mut args = opts.test_args.clone();
        if let Some(a) = piece {
            args.extend(a.piece.libtest_args(binary));
        }
        args
    };
    let files = run_dir_reading(&mut p, guest_reads(built), &dir)?;
    guest::write(
        &files.script,
        &guest::crate_test_script(
            &files.shared,
            &opts.env,
            binaries,
            &args,
            built.verifier.as_ref(),
        ),
    )?;
    let booted = boot_tests(&p, vm, files, &dir, events)?;
    let shared = booted.files.shared.clone();
    let mut tests = collect(&shared, binaries, &booted.ending());
    if booted.vm_ok() && !tests.iter().any(|t| report::is_test(&t.name)) {
        tests.push(report::no_test_ran(None));
    }
    let names: Vec<String> = binaries.iter().map(|b| b.name.clone()).collect();
    inventory::judge_ignored(
        &mut tests,
        &shared,
        &names,
        built.inventory.as_ref(),
        inventory::CRATE_FILE,
        |binary, test| format!("{binary}::{}", report::display_name(test)),
    );
    if let Some(inv) = &built.inventory {
        // Test arguments select tests in ways the inventory cannot replay: then only tests
        // it does not list are named.
        let full = opts.test_args.is_empty();
        let selected = |binary: &str, test: &str| piece.is_none_or(|a| a.piece.holds(binary, test));
        let diff = inv.compare_selected(&inventory::read_lists(&shared, &names), &selected, full);
        tests.extend(diff.entry(inventory::CRATE_FILE, inventory::CRATE_BLESS));
    }
    let rules = TestRun {
        report_name,
        verifier: built.verifier.is_some(),
        filter: None,
        // The one build every kernel's run shares.
        timings: (prepared, built.time),
        clock: &clock,
    };
    let report = conclude(&p, booted, tests, &rules, allow, events, |report| {
        report.piece = piece.map(Assigned::info);
    })?;
    Ok((report, dir))
}

/// What a guest with its own root reads of the host: each test binary and the package it
/// runs from, and the verifier statistics' binary and objects.
fn guest_reads(built: &Built) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for b in &built.binaries {
        dirs.push(b.dir.clone());
        dirs.extend(b.path.parent().map(Path::to_path_buf));
    }
    if let Some(v) = &built.verifier {
        dirs.extend(v.bin.parent().map(Path::to_path_buf));
        dirs.extend(
            v.objects
                .iter()
                .filter_map(|o| o.parent().map(Path::to_path_buf)),
        );
    }
    dirs
}

/// The verifier statistics step for `objects` (absolute paths: the guest runs it from
/// elsewhere), or for those [`find_objects`] finds under `target` when none is given. Builds
/// bpfvm's own guest binary for it, which embeds bpfvm's `ebpf/` objects (built first).
fn verifier_run(
    objects: &[PathBuf],
    target: &Path,
    arch: Arch,
    events: &Events,
) -> Result<VerifierRun> {
    let objects = if objects.is_empty() {
        let found = find_objects(target);
        if found.is_empty() {
            bail!(
                "--verifier-stats found no BPF object in {}/**/bpfel-unknown-none/release:                  name the objects (`--verifier-stats PATH...`)",
                target.display()
            );
        }
        staged(found, &target.join(REPORTS).join(STAGED_OBJECTS))?
    } else {
        objects
            .iter()
            .map(|o| {
                let abs = std::path::absolute(o).unwrap_or_else(|_| o.clone());
                if !bpfvm_common::objects::is_elf(&abs) {
                    bail!(
                        "--verifier-stats {}: not a readable ELF file (a BPF object, e.g. what                          `bpfvm build-ebpf` prints the directory of)",
                        o.display()
                    );
                }
                Ok(abs)
            })
            .collect::<Result<_>>()?
    };
    events.note(format!(
        "verifier statistics of {}",
        objects
            .iter()
            .map(|o| o.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let tools = crate::machine::provision::ensure(events)?;
    let ebpf_dir = crate::machine::build::build_ebpf(&tools.ebpf, events)?;
    let bin = crate::machine::build::build_guest_bin(
        &ebpf_dir,
        crate::machine::build::VERIFIER_BIN,
        crate::machine::build::GUEST_PROFILE,
        arch,
        &tools.ebpf,
        events,
    )?;
    Ok(VerifierRun { bin, objects })
}

/// A BPF object of a crate's build output ([`find_objects`]) and the name its programs are
/// reported under: its file name, or `<crate>-<file name>` when another crate's object has
/// the same file name (the guest names programs by their object's file name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundObject {
    pub path: PathBuf,
    pub name: String,
}

/// The BPF objects of a crate's build output, as cargo-veristat finds them: the ELF files of
/// every `bpfel-unknown-none/release` (or `bpfeb-`) directory under `target` (an aya-build or
/// `bpfvm build-ebpf` build script puts them under its OUT_DIR), the newest of each name per
/// crate (an older OUT_DIR of the same crate keeps its stale copy); two crates' objects of
/// one name are both kept, each named after its crate.
pub fn find_objects(target: &Path) -> Vec<FoundObject> {
    type Key = (String, std::ffi::OsString);
    let mut newest: std::collections::BTreeMap<Key, (std::time::SystemTime, PathBuf)> =
        Default::default();
    let mut dirs = vec![(target.to_path_buf(), 0)];
    while let Some((dir, depth)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        let is_objects = dir.file_name().is_some_and(|n| n == "release")
            && dir
                .parent()
                .and_then(Path::file_name)
                .is_some_and(|n| n == "bpfel-unknown-none" || n == "bpfeb-unknown-none");
        if is_objects {
            for o in bpfvm_common::objects::list(&dir).unwrap_or_default() {
                let time = o.metadata().and_then(|m| m.modified()).ok();
                let (Some(name), Some(time)) = (o.file_name(), time) else {
                    continue;
                };
                let e = newest
                    .entry((crate_of(&dir), name.to_os_string()))
                    .or_insert((time, o.clone()));
                if time > e.0 {
                    *e = (time, o);
                }
            }
            continue;
        }
        for e in entries.flatten() {
            let skip = ["deps", "incremental", ".fingerprint"];
            if depth < 8
                && e.file_type().is_ok_and(|t| t.is_dir())
                && !skip.iter().any(|s| e.file_name() == *s)
            {
                dirs.push((e.path(), depth + 1));
            }
        }
    }
    let shared = |name: &std::ffi::OsStr| newest.keys().filter(|(_, n)| n == name).count() > 1;
    newest
        .iter()
        .map(|((krate, name), (_, path))| FoundObject {
            path: path.clone(),
            name: match shared(name) {
                true => format!("{krate}-{}", name.to_string_lossy()),
                false => name.to_string_lossy().into_owned(),
            },
        })
        .collect()
}

/// The crate whose build script wrote the objects in `dir`: `<crate>` of the
/// `build/<crate>-<hash>` directory above it (the same for every OUT_DIR of that crate), else
/// the directory above `bpfel-unknown-none`.
fn crate_of(dir: &Path) -> String {
    let parts: Vec<String> = dir
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    match parts.iter().position(|p| p == "build") {
        Some(i) if i + 1 < parts.len() => {
            let d = &parts[i + 1];
            d.rsplit_once('-')
                .map_or(d.as_str(), |(c, _)| c)
                .to_string()
        }
        _ => dir
            .parent()
            .and_then(Path::parent)
            .and_then(Path::file_name)
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
    }
}

/// `found` as the guest is to load them: an object named other than its file name is copied
/// into `dir` under that name.
fn staged(found: Vec<FoundObject>, dir: &Path) -> Result<Vec<PathBuf>> {
    found
        .into_iter()
        .map(|o| {
            if o.path.file_name() == Some(std::ffi::OsStr::new(&o.name)) {
                return Ok(o.path);
            }
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
            let to = dir.join(&o.name);
            std::fs::copy(&o.path, &to)
                .with_context(|| format!("copy {} to {}", o.path.display(), to.display()))?;
            Ok(to)
        })
        .collect()
}

/// Every binary's results, each test named `<binary>::<test>` (two binaries may hold tests
/// of the same name).
fn collect(shared: &Path, binaries: &[CrateBinary], vm_ending: &str) -> Vec<report::TestResult> {
    let mut tests = Vec::new();
    for b in binaries {
        for mut t in report::parse_binary(&report::read_binary(shared, &b.name), vm_ending) {
            if !t.name.starts_with("binary:") {
                t.name = format!("{}::{}", b.name, t.name);
            }
            tests.push(t);
        }
    }
    tests
}

/// A test's name in the report from its name in the kernel log's markers
/// (`<binary>::<libtest name>`, `guest::crate_test_script`), as `collect` names it.
fn report_name(marked: &str) -> String {
    match marked.split_once("::") {
        Some((binary, test)) => format!("{binary}::{}", report::display_name(test)),
        None => marked.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two crates' objects of one file name are both found, each named after its crate, and
    /// staged under that name; of one crate's two OUT_DIRs only the newer copy counts.
    #[test]
    fn objects_of_one_name_from_two_crates_are_both_kept_and_named_apart() {
        let target = tempfile::tempdir().unwrap();
        let object = |out: &str, name: &str, bytes: &[u8]| {
            let dir = target
                .path()
                .join("debug/build")
                .join(out)
                .join("out/bpfel-unknown-none/release");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(name), [b"\x7fELF".as_slice(), bytes].concat()).unwrap();
        };
        object("alpha-0123", "probes", b"old");
        std::thread::sleep(std::time::Duration::from_millis(20));
        object("alpha-4567", "probes", b"a");
        object("beta-89ab", "probes", b"b");
        object("beta-89ab", "other", b"c");
        let found = find_objects(target.path());
        let names: Vec<&str> = found.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["alpha-probes", "other", "beta-probes"]);
        let alpha = &found[0];
        assert!(alpha
            .path
            .starts_with(target.path().join("debug/build/alpha-4567")));
        let stage = target.path().join("stage");
        let paths = staged(found, &stage).unwrap();
        assert_eq!(paths[0], stage.join("alpha-probes"));
        assert_eq!(std::fs::read(&paths[0]).unwrap(), b"\x7fELFa");
        assert!(paths[1].ends_with("beta-89ab/out/bpfel-unknown-none/release/other"));
        assert_eq!(paths[2], stage.join("beta-probes"));
    }

    #[test]
    fn cargo_args_and_test_args_split_at_the_first_double_dash() {
        let args: Vec<String> = ["--release", "--", "--test-threads", "1", "--", "x"]
            .map(String::from)
            .to_vec();
        let (cargo, test) = split_args(&args);
        assert_eq!(cargo, ["--release"]);
        assert_eq!(test, ["--test-threads", "1", "--", "x"]);
        assert_eq!(split_args(&cargo), (cargo.clone(), vec![]));
    }

    #[test]
    fn test_binaries_are_named_uniquely_and_run_from_their_package() {
        let messages = r#"{"reason":"compiler-artifact","manifest_path":"/u/Cargo.toml","target":{"name":"demo","kind":["lib"]},"profile":{"test":true},"executable":"/u/target/debug/deps/demo-1"}
{"reason":"compiler-artifact","manifest_path":"/u/Cargo.toml","target":{"name":"demo","kind":["lib"]},"profile":{"test":false},"executable":null}
{"reason":"compiler-artifact","manifest_path":"/u/Cargo.toml","target":{"name":"demo","kind":["test"]},"profile":{"test":true},"executable":"/u/target/debug/deps/demo-2"}
{"reason":"build-finished","success":true}"#;
        let (arts, _) = parse_cargo_messages(messages);
        let bins = crate_binaries(&arts);
        let names: Vec<&str> = bins.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["demo", "demo-2"]);
        assert_eq!(bins[1].path, Path::new("/u/target/debug/deps/demo-2"));
        assert!(bins.iter().all(|b| b.dir == Path::new("/u")));
    }

    #[test]
    fn a_failing_test_is_named_with_its_binary_and_its_panic() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(
            d.join("demo.list"),
            "maps::works: test\nmaps::fails: test\n",
        )
        .unwrap();
        std::fs::write(
            d.join("demo.jsonl"),
            r#"{ "type": "test", "event": "started", "name": "maps::works" }
{ "type": "test", "name": "maps::works", "event": "ok", "exec_time": 0.01 }
{ "type": "test", "event": "started", "name": "maps::fails" }
{ "type": "test", "name": "maps::fails", "event": "failed", "exec_time": 0.02, "stdout": "thread 'maps::fails' panicked at src/lib.rs:9:5:\nplanted\n" }
"#,
        )
        .unwrap();
        std::fs::write(d.join("demo.rc"), "101\n").unwrap();
        let bins = [CrateBinary {
            name: "demo".into(),
            path: "/u/demo-1".into(),
            dir: "/u".into(),
        }];
        let tests = collect(d, &bins, "exited");
        let failed: Vec<_> = tests
            .iter()
            .filter(|t| t.outcome == report::Outcome::Fail)
            .collect();
        assert_eq!(failed.len(), 1, "{tests:?}");
        assert_eq!(failed[0].name, "demo::maps::fails");
        let reason = failed[0].reason.as_deref().unwrap();
        assert!(reason.contains("panicked at src/lib.rs:9:5") && reason.contains("planted"));
        // The run fails, and JUnit names the test.
        let mut r = Report::not_run("6.1", "");
        r.vm.ending = report::VmEnding::Exited;
        r.summary = report::summarize(&tests);
        r.tests = tests;
        assert_eq!(r.why_failed().unwrap(), "1 test failed: demo::maps::fails");
        let junit = report::junit(&r).unwrap();
        assert!(junit.contains(r#"name="demo::maps::fails""#), "{junit}");
    }

    /// A binary named `tests` (tests/tests.rs): its tests are `tests::<name>` in the report,
    /// and a WARN logged while `b` ran fails `tests::b` (a `tests::` prefix is the binary's,
    /// not stripped as `vm-test` strips its own crate's).
    #[test]
    fn a_splat_fails_the_test_of_the_binary_that_ran_when_it_was_logged() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("tests.list"), "tests::a: test\nb: test\n").unwrap();
        std::fs::write(
            d.join("tests.jsonl"),
            r#"{ "type": "test", "event": "started", "name": "tests::a" }
{ "type": "test", "name": "tests::a", "event": "ok", "exec_time": 0.01 }
{ "type": "test", "event": "started", "name": "b" }
{ "type": "test", "name": "b", "event": "ok", "exec_time": 0.01 }
"#,
        )
        .unwrap();
        std::fs::write(d.join("tests.rc"), "0\n").unwrap();
        let bins = [CrateBinary {
            name: "tests".into(),
            path: "/u/tests-1".into(),
            dir: "/u".into(),
        }];
        let mut tests = collect(d, &bins, "exited");
        let log = "12,1,100,-;bpfvm: phase tests\n\
                   12,2,200,-;bpfvm: test start tests::tests::a\n\
                   12,3,300,-;bpfvm: test end tests::tests::a\n\
                   12,4,400,-;bpfvm: test start tests::b\n\
                   4,5,500,-;------------[ cut here ]------------\n\
                   4,6,501,-;WARNING: CPU: 0 PID: 9 at kernel/bpf/syscall.c:512 map_check_btf+0x1a2/0x1e0\n\
                   4,7,502,-;---[ end trace 0000000000000000 ]---\n\
                   12,8,600,-;bpfvm: test end tests::b\n\
                   12,9,700,-;bpfvm: phase end\n";
        let allow = health::allow::parse("").unwrap();
        let mut health = health::judge(log, &allow, "6.1", None);
        report::apply_kernel_health(&mut tests, &mut health, true, report_name);
        let outcome = |name: &str| {
            let t = tests.iter().find(|t| t.name == name);
            t.unwrap_or_else(|| panic!("{name} in {tests:?}")).outcome
        };
        assert_eq!(outcome("tests::a"), report::Outcome::Pass);
        assert_eq!(outcome("tests::b"), report::Outcome::Fail);
        assert_eq!(outcome("kernel:warning"), report::Outcome::Fail);
    }
}
