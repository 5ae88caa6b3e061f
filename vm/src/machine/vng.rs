//! Runs one guest through virtme-ng: its own process group, piped output, a timeout, Ctrl-C,
//! and the tail of the kernel console kept for diagnosing a dead VM.
//!
//! With `--verbose` vng sends the serial console to stderr, beside the guest's own stderr
//! (a second serial port is not enumerated by the cloud kernels). Console lines carry the
//! printk timestamp (`[    1.234567] `), which is how the two are told apart; everything before
//! the guest script's [`START_MARKER`] is boot chatter (vng, the kernel's decompressor).
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::domain::arch::Arch;
use crate::machine::accel::Accel;
use crate::machine::own_root::{self, OwnRoot};
use crate::machine::qemu::{self, QemuEnd};
use crate::support::guest_files;
use crate::support::output::{Events, Output};
use crate::support::proc::{self, Group, Stream};
use crate::support::shell::quote;

/// What to boot and what to run in it.
#[derive(Debug, Clone)]
pub struct VmSpec {
    /// The kernel's architecture: the qemu that boots it, and vng's `--arch` for a guest with
    /// a root of its own.
    pub arch: Arch,
    pub vmlinuz: PathBuf,
    pub accel: Accel,
    pub cpus: u32,
    /// qemu's `-m` syntax, e.g. `1G`.
    pub memory: String,
    /// Extra kernel command line, e.g. `spectre_v2=retpoline`.
    pub append: Vec<String>,
    /// A host directory the guest can write (results, the exit status).
    pub rwdir: PathBuf,
    /// A shell script the guest runs as root (long commands overflow the kernel command line).
    pub script: PathBuf,
    pub timeout: Duration,
    /// How long the guest script may take to start: longer is a boot hang.
    pub boot_timeout: Duration,
    /// Extra qemu arguments, each passed as its own `--qemu-opts=` (e.g. bench-vm's
    /// `-icount`, `shift=0,sleep=off`); host-written constants only.
    pub qemu_opts: Vec<String>,
    /// The root of a guest that cannot run the host's (another architecture's kernel).
    pub own_root: Option<OwnRoot>,
    /// Stops a guest whose test runs longer than its limit (the kernel's selftests).
    pub watchdog: Option<Watchdog>,
    /// Set by another thread to stop the VM at the next poll, which then ends as
    /// [`Ending::Interrupted`] (a kept guest's keeper, `warm_guest::keeper`).
    pub stop: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
    /// Where the guest script's stdin can be written while the VM runs (virtme-ng's
    /// `virtme.stdin` port): filled when vng starts, emptied when it ends. A kept guest's keeper
    /// speaks through it.
    pub input: Option<Input>,
}

/// A writer to a running guest script's stdin ([`VmSpec::input`]).
pub type Input = std::sync::Arc<std::sync::Mutex<Option<std::process::ChildStdin>>>;

/// A per-test watchdog on the host: the guest prints a line starting with `start` and the
/// test's name before each test and one starting with `end` after it, on its stdout; a test
/// still running after its limit stops the VM. On the host, because a hung test may take the
/// guest's own timers with it.
#[derive(Debug, Clone)]
pub struct Watchdog {
    pub start: &'static str,
    pub end: &'static str,
    /// Each test's limit; [`Watchdog::default`] for a test not named.
    pub limits: BTreeMap<String, Duration>,
    pub default: Duration,
}

impl Watchdog {
    fn limit(&self, test: &str) -> Duration {
        self.limits.get(test).copied().unwrap_or(self.default)
    }
}

/// How the VM ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// The guest script ran to its end and wrote this exit status.
    Exited(i32),
    /// The kernel panicked (the console says so).
    Panic,
    /// Still running when the timeout struck (a hang, or too short a timeout).
    Timeout(Duration),
    /// The guest script had not started this long after vng did: the boot hung.
    BootHang(Duration),
    /// Ctrl-C.
    Interrupted,
    /// vng/qemu ended without the guest script finishing (boot failure).
    VmFailed(String),
    /// qemu itself died of a signal (an assertion's SIGABRT, a SIGSEGV): its message and the
    /// signal.
    QemuCrashed(String),
    /// The guest wrote more into the shared directory than a run may (`guest_files`).
    TooMuchOutput(String),
    /// The [`Watchdog`] stopped this test: it ran longer than its limit.
    TestHung { test: String, limit: Duration },
}

#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub ending: Ending,
    /// The last lines of the kernel console and of vng's own stderr.
    pub console_tail: Vec<String>,
    pub elapsed: Duration,
    /// From starting vng to the guest script's first line: boot and vng's own setup.
    pub boot: Option<Duration>,
    /// The guest script itself, from its first line to its last.
    pub guest: Option<Duration>,
    /// Earlier boots of this run that failed before the guest script started (see
    /// `run::boot`, which retries them).
    pub retries: Vec<FailedBoot>,
}

/// A boot that failed before the guest script started, as `report.json` records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedBoot {
    /// Why it failed (the diagnosis' first line).
    pub ending: String,
    pub console_tail: Vec<String>,
}

impl RunOutcome {
    /// From the guest script's end to vng's exit: power-off and teardown.
    pub fn shutdown(&self) -> Option<Duration> {
        self.elapsed.checked_sub(self.boot? + self.guest?)
    }
}

impl RunOutcome {
    /// A kernel panic or a hang before the guest script's first line: nothing of the user's
    /// ran yet, so booting again cannot hide a failure of theirs. A qemu crash is not one:
    /// it is qemu's defect or its configuration's, which a second boot would only hide.
    pub fn failed_before_start(&self) -> bool {
        self.boot.is_none()
            && matches!(
                self.ending,
                Ending::Panic | Ending::BootHang(_) | Ending::Timeout(_)
            )
    }

    /// This boot as a retried attempt, for the report.
    pub fn as_failed_boot(&self) -> FailedBoot {
        FailedBoot {
            ending: self.diagnosis().lines().next().unwrap_or("").to_string(),
            console_tail: self.console_tail.clone(),
        }
    }

    /// A one-line description plus the console tail, for errors shown to the user.
    pub fn diagnosis(&self) -> String {
        let what = match &self.ending {
            Ending::Exited(code) => format!("guest command exited with status {code}"),
            Ending::Panic => "the guest kernel panicked".into(),
            Ending::Timeout(t) => format!(
                "the guest did not finish within {} s (a hang, or raise --timeout)",
                t.as_secs()
            ),
            Ending::BootHang(t) => format!(
                "the guest kernel hung while booting: the guest script had not started after {} s",
                t.as_secs()
            ),
            Ending::Interrupted => "interrupted (Ctrl-C); the VM was killed".into(),
            Ending::VmFailed(why) => format!("the VM failed before the guest finished: {why}"),
            Ending::QemuCrashed(what) => format!("qemu crashed: {what}"),
            Ending::TooMuchOutput(why) => format!("{why}; the VM was killed"),
            Ending::TestHung { test, limit } => format!(
                "{test} was still running after {} s, its limit: the VM was killed",
                limit.as_secs()
            ),
        };
        format!(
            "{what}\n--- last {} lines of the console ---\n{}",
            self.console_tail.len(),
            self.console_tail.join("\n")
        )
    }
}

/// Lines of console kept for diagnosis.
const TAIL: usize = 60;
/// How often the guest's use of the shared directory is measured.
const USAGE_CHECK: Duration = Duration::from_secs(1);
/// The guest script prints [`START_MARKER`] to stderr first (later non-console lines are the
/// guest's) and [`END_MARKER`] last, after writing its exit status into `rwdir`'s
/// [`STATUS_FILE`].
pub use bpfvm_common::protocol::files::STATUS as STATUS_FILE;
pub use bpfvm_common::protocol::{END_MARKER, START_MARKER};

/// Boots the VM, forwards guest output as events, and returns how it ended.
pub fn run(
    spec: &VmSpec,
    vng: &Path,
    path_prefix: &[PathBuf],
    events: &Events,
) -> Result<RunOutcome> {
    let status_file = spec.rwdir.join(STATUS_FILE);
    let _ = std::fs::remove_file(&status_file);
    let mut group = start_vng(spec, vng, path_prefix, events)?;
    let start = Instant::now();
    let mut tail = VecDeque::new();
    let panicked = Cell::new(false);
    let started = Cell::new(None);
    let finished = Cell::new(None);
    let qemu_end = RefCell::new(qemu::Watch::default());
    let running: RefCell<Option<(String, Instant)>> = RefCell::new(None);
    let forward = |stream: Stream, line: String, tail: &mut VecDeque<String>| match stream {
        Stream::Stdout => {
            if let Some(w) = &spec.watchdog {
                if let Some(test) = line.strip_prefix(w.start) {
                    *running.borrow_mut() = Some((test.trim().to_string(), Instant::now()));
                } else if line.starts_with(w.end) {
                    *running.borrow_mut() = None;
                }
            }
            events.emit(Output::GuestStdout(line))
        }
        Stream::Stderr => {
            if line.contains("Kernel panic - not syncing") {
                panicked.set(true);
            }
            qemu_end.borrow_mut().see(&line);
            if tail.len() == TAIL {
                tail.pop_front();
            }
            tail.push_back(line.clone());
            if line == START_MARKER {
                started.set(Some(start.elapsed()));
            } else if line == END_MARKER {
                finished.set(Some(start.elapsed()));
            } else if started.get().is_none() || is_console(&line) {
                events.emit(Output::Console(line));
            } else {
                events.emit(Output::GuestStderr(line));
            }
        }
    };
    // Every turn checks the deadlines, Ctrl-C and the guest's disk use, however fast the
    // guest prints: a line handled is never a reason to skip them.
    let mut next_usage_check = start;
    let ending = loop {
        match group.lines.recv_timeout(Duration::from_millis(100)) {
            Ok((stream, line)) => forward(stream, line, &mut tail),
            Err(RecvTimeoutError::Timeout) => {}
            // Both pipes closed while vng still runs: nothing to read, poll at the same pace.
            Err(RecvTimeoutError::Disconnected) => std::thread::sleep(Duration::from_millis(100)),
        }
        let booted = started.get().is_some();
        if let Some(e) = stopped(
            spec,
            start,
            booted,
            &running.borrow(),
            &mut next_usage_check,
        ) {
            break e;
        }
        if let Some(status) = group.try_wait()? {
            break match read_status(&status_file) {
                Some(code) => Ending::Exited(code),
                None => Ending::VmFailed(format!("vng exited with {status}")),
            };
        }
    };
    if let Some(input) = &spec.input {
        input.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
    for (stream, line) in group.finish() {
        forward(stream, line, &mut tail);
    }
    if spec.own_root.is_some() {
        let _ = std::fs::remove_dir_all(own_root::staged_path(&spec.script));
    }
    let ending = explained(ending, qemu_end.borrow().end(), panicked.get());
    let (started, finished) = (started.get(), finished.get());
    Ok(RunOutcome {
        ending,
        console_tail: tail.into(),
        elapsed: start.elapsed(),
        boot: started,
        guest: started.zip(finished).and_then(|(s, f)| f.checked_sub(s)),
        retries: vec![],
    })
}

/// Starts vng on `spec`, qemu through the wrapper that says how it ended (written beside the
/// guest script), a guest with a root of its own staged first.
fn start_vng(spec: &VmSpec, vng: &Path, path_prefix: &[PathBuf], events: &Events) -> Result<Group> {
    let wrapper = qemu::write_wrapper(spec.script.parent().unwrap_or(&spec.rwdir), spec.arch)?;
    if let Some(own) = &spec.own_root {
        own_root::stage(own, &spec.rwdir, &spec.script)?;
    }
    let mut args = vec![
        "--qemu".to_string(),
        quote(vng_path(&wrapper, "the qemu wrapper")?),
    ];
    args.extend(vng_args(spec)?);
    events.command(format!(
        "{} {}",
        vng.display(),
        crate::support::shell::join(&args)
    ));
    let mut cmd = Command::new(vng);
    cmd.args(&args).env("PATH", path_with(path_prefix));
    let cannot = || {
        format!(
            "cannot start {} (run `cargo xtask setup` to install virtme-ng)",
            vng.display()
        )
    };
    let Some(input) = &spec.input else {
        return Group::spawn(&mut cmd).with_context(cannot);
    };
    let (group, stdin) = Group::spawn_fed(&mut cmd).with_context(cannot)?;
    *input.lock().unwrap_or_else(|e| e.into_inner()) = Some(stdin);
    Ok(group)
}

/// Why the VM must stop now, if it must: Ctrl-C, the timeout, a boot that has not reached the
/// guest script (`booted`), a test past its watchdog's limit (`running`: the test and since
/// when), or the guest's files grown too large (checked every [`USAGE_CHECK`]).
fn stopped(
    spec: &VmSpec,
    start: Instant,
    booted: bool,
    running: &Option<(String, Instant)>,
    next_usage_check: &mut Instant,
) -> Option<Ending> {
    if proc::interrupted() {
        return Some(Ending::Interrupted);
    }
    if let Some(stop) = &spec.stop {
        if stop.load(std::sync::atomic::Ordering::SeqCst) {
            return Some(Ending::Interrupted);
        }
    }
    if start.elapsed() > spec.timeout {
        return Some(Ending::Timeout(spec.timeout));
    }
    if !booted && start.elapsed() > spec.boot_timeout {
        return Some(Ending::BootHang(spec.boot_timeout));
    }
    if let (Some(w), Some((test, since))) = (&spec.watchdog, running) {
        let limit = w.limit(test);
        if since.elapsed() > limit {
            return Some(Ending::TestHung {
                test: test.clone(),
                limit,
            });
        }
    }
    if Instant::now() >= *next_usage_check {
        *next_usage_check = Instant::now() + USAGE_CHECK;
        if let Err(why) = guest_files::check_usage(&spec.rwdir) {
            return Some(Ending::TooMuchOutput(why));
        }
    }
    None
}

/// `ending` with qemu's own end, when it was not 0, as why the VM failed (the wrapper says
/// which), and a kernel panic seen on the console as the ending it explains.
fn explained(ending: Ending, qemu_end: Option<QemuEnd>, panicked: bool) -> Ending {
    match (ending, qemu_end) {
        (Ending::VmFailed(_), Some(QemuEnd::Crashed(what))) => Ending::QemuCrashed(what),
        (Ending::VmFailed(_), Some(QemuEnd::Failed(why))) => Ending::VmFailed(why),
        // The panic line may arrive after the timeout or just before qemu exits.
        (Ending::Timeout(_) | Ending::BootHang(_) | Ending::VmFailed(_), _) if panicked => {
            Ending::Panic
        }
        (e, _) => e,
    }
}

/// How an interactive shell ([`shell`]) ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShellEnding {
    /// vng exited (the shell ended and the guest powered off) with this status.
    Exited(std::process::ExitStatus),
    /// The timeout struck; the VM was killed.
    Timeout(Duration),
    /// SIGTERM or SIGHUP reached bpfvm; the VM was killed.
    Interrupted,
}

/// Boots the VM with a root shell on this process's terminal instead of `spec.script` (vng
/// starts one when given nothing to run) and `spec.rwdir` writable; waits for it to end, or
/// kills it at `timeout` or on an interrupt. The terminal is the guest's meanwhile (its
/// Ctrl-C too), and gets its settings back whatever happened (`proc::Group::spawn_on_terminal`).
pub fn shell(
    spec: &VmSpec,
    timeout: Option<Duration>,
    vng: &Path,
    path_prefix: &[PathBuf],
    events: &Events,
) -> Result<ShellEnding> {
    let args = shell_args(spec)?;
    if let Some(own) = &spec.own_root {
        own_root::stage(own, &spec.rwdir, &spec.script)?;
    }
    events.command(format!(
        "{} {}",
        vng.display(),
        crate::support::shell::join(&args)
    ));
    let mut cmd = Command::new(vng);
    cmd.args(&args).env("PATH", path_with(path_prefix));
    let mut group = Group::spawn_on_terminal(&mut cmd).with_context(|| {
        format!(
            "cannot start {} (run `bpfvm setup` to install virtme-ng)",
            vng.display()
        )
    })?;
    let start = Instant::now();
    let ending = loop {
        if let Some(status) = group.try_wait()? {
            break ShellEnding::Exited(status);
        }
        if proc::interrupted() {
            break ShellEnding::Interrupted;
        }
        if let Some(t) = timeout.filter(|t| start.elapsed() > *t) {
            break ShellEnding::Timeout(t);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    group.finish();
    if spec.own_root.is_some() {
        let _ = std::fs::remove_dir_all(own_root::staged_path(&spec.script));
    }
    Ok(ending)
}

/// The vng command line of [`shell`]: [`vng_args`] without the guest script (vng then gives a
/// shell) and without `--verbose` (the console would write over the shell).
fn shell_args(spec: &VmSpec) -> Result<Vec<String>> {
    let mut args = vng_args(spec)?;
    let exec = args
        .iter()
        .position(|a| a == "--exec")
        .unwrap_or(args.len());
    args.truncate(exec);
    args.retain(|a| a != "--verbose");
    Ok(args)
}

/// The vng command line.
///
/// vng 1.42 joins its `virtme-run` command line as a string and runs it with `/bin/sh -c`
/// (`virtme_ng/run.py`, `KernelSource.run`), interpolating `--run`, `--rwdir` and `--memory`
/// unquoted; so those are shell-quoted here, and a path vng or qemu cannot carry is refused.
/// `--exec` is quoted by vng itself and run by the guest's shell, which reads the script path.
fn vng_args(spec: &VmSpec) -> Result<Vec<String>> {
    let rwdir = quote(vng_path(&spec.rwdir, "the run directory")?);
    let mut args = vec![
        "--user".to_string(),
        "root".into(),
        "--cpus".into(),
        spec.cpus.to_string(),
        "--memory".into(),
        quote(&spec.memory),
    ];
    match &spec.own_root {
        None => args.push(format!("--rwdir={rwdir}")),
        // With a root of its own, each directory is mounted at its host path (`GUEST=HOST`:
        // the plain form would be read as a path inside that root).
        Some(own) => {
            let root = own_root::staged_path(&spec.script);
            args.extend([
                "--arch".to_string(),
                spec.arch.name().to_string(),
                "--root".into(),
                quote(vng_path(&root, "the guest's root")?),
                format!("--rwdir={rwdir}={rwdir}"),
            ]);
            for r in &own.reads {
                let r = quote(vng_path(r, "a directory the guest reads")?);
                args.push(format!("--rodir={r}={r}"));
            }
        }
    }
    args.push("--verbose".into());
    if !spec.accel.is_kvm() {
        args.push("--disable-kvm".into());
    }
    // loglevel=5: warnings and worse reach the console (a WARN is `pr_warn`), where a run
    // without a kernel.log looks for splats, and not everything (--verbose's default slows TCG).
    // panic=-1: a panic exits at once instead of hanging.
    // cryptomgr.notests=1: the coldplugged crypto drivers' self-tests, which nothing here uses,
    // cost seconds of every TCG boot and once warned under load, spoiling bench boots.
    // log_buf_len=16M: the record ring holds a flood until the guest's slow copy of /dev/kmsg
    // reads it (128 KiB lost records).
    // modprobe.blacklist: see UNUSED_HARDWARE_MODULES.
    let append = [
        "loglevel=5".to_string(),
        "log_buf_len=16M".into(),
        "panic=-1".into(),
        "cryptomgr.notests=1".into(),
        format!("modprobe.blacklist={}", UNUSED_HARDWARE_MODULES.join(",")),
    ]
    .into_iter()
    .chain(spec.append.iter().cloned())
    .collect::<Vec<_>>()
    .join(" ");
    args.extend(
        spec.accel
            .qemu_opts()
            .iter()
            .chain(&spec.qemu_opts)
            .map(|o| format!("--qemu-opts={}", quote(o))),
    );
    args.extend([
        "--append".into(),
        append,
        "--run".into(),
        quote(vng_path(&spec.vmlinuz, "the kernel image")?),
        "--exec".into(),
        format!("sh {}", quote(vng_path(&spec.script, "the guest script")?)),
    ]);
    Ok(args)
}

/// The modules udev's coldplug loads in a TCG guest for the CPU's features and qemu's devices
/// (read in the 6.1 and 6.12 pins' `/proc/modules`), none of which a BPF test uses: KVM (SVM
/// or VMX is offered), the accelerated crypto and CRC drivers, the q35 machine's AHCI, CD-ROM
/// and watchdog, input and firmware devices. kmod, which udev loads modules by alias through,
/// refuses a module on this list (libkmod reads `modprobe.blacklist=` on the kernel command
/// line); an explicit `modprobe NAME` still loads it. Their loading was most of the coldplug
/// that every boot waits for (`udevadm settle`).
const UNUSED_HARDWARE_MODULES: &[&str] = &[
    "kvm_amd",
    "kvm_intel",
    "aesni_intel",
    "ghash_clmulni_intel",
    "polyval_clmulni",
    "sha1_ssse3",
    "sha256_ssse3",
    "sha512_ssse3",
    "crc32c_intel",
    "crc32_pclmul",
    "crct10dif_pclmul",
    "ahci",
    "i6300esb",
    "evdev",
    "serio_raw",
    "qemu_fw_cfg",
    "button",
    "powernow_k8",
    "acpi_cpufreq",
];

/// `path` as vng can pass it on: UTF-8, with no control character (it reaches the kernel
/// command line), no `=` (virtme-run's `--rwdir GUEST=HOST`) and no `,` (qemu's option
/// separator). Spaces and shell syntax are fine: the callers quote.
fn vng_path<'a>(path: &'a Path, what: &str) -> Result<&'a str> {
    let s = path.to_str().with_context(|| {
        format!(
            "{what} {} is not valid UTF-8, which virtme-ng cannot pass on; move the checkout \
             (or CARGO_TARGET_DIR, XDG_CACHE_HOME) to a path that is",
            path.display()
        )
    })?;
    if let Some(c) = s.chars().find(|&c| c.is_control() || c == '=' || c == ',') {
        anyhow::bail!(
            "{what} {s:?} holds {c:?}, which virtme-ng or qemu cannot pass on; move the \
             checkout (or CARGO_TARGET_DIR, XDG_CACHE_HOME) to a path without it"
        );
    }
    Ok(s)
}

fn path_with(prefix: &[PathBuf]) -> std::ffi::OsString {
    let rest = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs: Vec<PathBuf> = prefix.to_vec();
    dirs.extend(std::env::split_paths(&rest));
    std::env::join_paths(dirs).expect("PATH entries contain no ':'")
}

fn read_status(path: &Path) -> Option<i32> {
    guest_files::read(path).ok()?.trim().parse().ok()
}

/// A kernel console line: it starts with the printk timestamp.
fn is_console(line: &str) -> bool {
    let Some(rest) = line.strip_prefix('[') else {
        return false;
    };
    let Some((stamp, _)) = rest.split_once(']') else {
        return false;
    };
    let stamp = stamp.trim_start();
    !stamp.is_empty() && stamp.chars().all(|c| c.is_ascii_digit() || c == '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(kind: crate::machine::accel::Kind) -> VmSpec {
        VmSpec {
            arch: Arch::host(),
            vmlinuz: "/k/boot/vmlinuz-6.1".into(),
            accel: Accel {
                kind,
                reason: String::new(),
                tcg_thread: None,
            },
            cpus: 2,
            memory: "1G".into(),
            append: vec!["spectre_v2=off".into()],
            rwdir: "/run/out".into(),
            script: "/run/guest.sh".into(),
            timeout: Duration::from_secs(5),
            boot_timeout: Duration::from_secs(5),
            qemu_opts: vec![],
            own_root: None,
            watchdog: None,
            stop: None,
            input: None,
        }
    }

    #[test]
    fn a_guest_with_its_own_root_mounts_each_directory_at_its_host_path() {
        let args = vng_args(&VmSpec {
            arch: Arch::Arm64,
            own_root: Some(OwnRoot {
                root: "/c/kernels/6.12-arm64-x".into(),
                reads: vec!["/w/target/cross".into(), "/w/target/ebpf".into()],
            }),
            ..spec(crate::machine::accel::Kind::Tcg)
        })
        .unwrap();
        let line = args.join(" ");
        assert!(
            line.contains(
                "--arch arm64 --root /run/root --rwdir=/run/out=/run/out \
                 --rodir=/w/target/cross=/w/target/cross --rodir=/w/target/ebpf=/w/target/ebpf"
            ),
            "{line}"
        );
        assert!(!args.iter().any(|a| a == "--rwdir=/run/out"));
        // The script keeps its host path: the staged root holds a copy there.
        assert!(line.ends_with("--exec sh /run/guest.sh"), "{line}");
    }

    #[test]
    fn tcg_runs_disable_kvm_and_append_the_mode() {
        let args = vng_args(&spec(crate::machine::accel::Kind::Tcg)).unwrap();
        assert!(args.contains(&"--disable-kvm".to_string()));
        let append = &args[args.iter().position(|a| a == "--append").unwrap() + 1];
        assert!(
            append.starts_with(
                "loglevel=5 log_buf_len=16M panic=-1 cryptomgr.notests=1 \
                                modprobe.blacklist=kvm_amd,kvm_intel,aesni_intel,"
            ),
            "{append}"
        );
        assert!(append.ends_with(",acpi_cpufreq spectre_v2=off"), "{append}");
        assert_eq!(args.last().unwrap(), "sh /run/guest.sh");
    }

    /// qemu 10.0.4 and later under TCG: `-accel tcg,thread=single` (`tcg_thread`), as two
    /// arguments, before bench-vm's own; never under KVM, nor on qemu 7.2.
    #[test]
    fn single_threaded_tcg_is_passed_to_qemu_where_its_version_needs_it() {
        use crate::machine::tcg_thread::{for_version, Version};
        let with = |kind, version: Option<Version>| {
            let mut s = spec(kind);
            s.accel.tcg_thread = version.map(for_version);
            s.qemu_opts = vec!["-icount".into(), "shift=0,sleep=off".into()];
            vng_args(&s)
                .unwrap()
                .into_iter()
                .filter(|a| a.starts_with("--qemu-opts="))
                .collect::<Vec<_>>()
        };
        let icount = ["--qemu-opts=-icount", "--qemu-opts=shift=0,sleep=off"];
        assert_eq!(
            with(crate::machine::accel::Kind::Tcg, Some(Version(10, 0, 13))),
            [
                "--qemu-opts=-accel",
                "--qemu-opts=tcg,thread=single",
                icount[0],
                icount[1]
            ]
        );
        assert_eq!(
            with(crate::machine::accel::Kind::Tcg, Some(Version(7, 2, 22))),
            icount
        );
        assert_eq!(with(crate::machine::accel::Kind::Kvm, None), icount);
    }

    #[test]
    fn each_qemu_option_is_its_own_argument() {
        let args = vng_args(&VmSpec {
            qemu_opts: vec!["-icount".into(), "shift=0,sleep=off".into()],
            ..spec(crate::machine::accel::Kind::Tcg)
        })
        .unwrap();
        let at = args
            .iter()
            .position(|a| a == "--qemu-opts=-icount")
            .unwrap();
        assert_eq!(args[at + 1], "--qemu-opts=shift=0,sleep=off");
    }

    #[test]
    fn a_shell_runs_no_script_and_keeps_the_console_off_the_terminal() {
        let args = shell_args(&spec(crate::machine::accel::Kind::Tcg)).unwrap();
        assert!(
            !args.iter().any(|a| a == "--exec" || a == "--verbose"),
            "{args:?}"
        );
        assert_eq!(args[args.len() - 2], "--run");
        assert!(args.iter().any(|a| a.starts_with("--rwdir=")));
    }

    #[test]
    fn kvm_runs_keep_kvm() {
        let args = vng_args(&spec(crate::machine::accel::Kind::Kvm)).unwrap();
        assert!(!args.contains(&"--disable-kvm".to_string()));
    }

    /// vng runs its virtme-run line through `sh -c`: what sh makes of our arguments there
    /// must be the paths themselves, whatever they hold.
    #[test]
    fn paths_reach_virtme_run_whole_through_vngs_shell() {
        let t = tempfile::tempdir().unwrap();
        let pwned = t.path().join("pwned");
        let mut s = spec(crate::machine::accel::Kind::Tcg);
        s.vmlinuz = format!("/k/my proj/6.1$(touch {})/vmlinuz", pwned.display()).into();
        s.rwdir = "/run/a b;`touch x`".into();
        s.memory = "1G".into();
        let args = vng_args(&s).unwrap();
        let at = |flag: &str| args[args.iter().position(|a| a == flag).unwrap() + 1].clone();
        let rwdir = args
            .iter()
            .find_map(|a| a.strip_prefix("--rwdir="))
            .unwrap();
        // As vng 1.42 does: "--kimg " + args.run, f"--rwdir {item}", unquoted, then sh -c.
        let line = format!("printf '%s\\n' --kimg {} --rwdir {}", at("--run"), rwdir);
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(line)
            .output()
            .unwrap();
        let words = String::from_utf8(out.stdout).unwrap();
        let words: Vec<&str> = words.lines().collect();
        assert_eq!(
            words,
            [
                "--kimg",
                s.vmlinuz.to_str().unwrap(),
                "--rwdir",
                "/run/a b;`touch x`"
            ]
        );
        assert!(!pwned.exists());
    }

    #[test]
    fn paths_vng_cannot_carry_are_refused_naming_the_character() {
        for (bad, c) in [("/a,b", "','"), ("/a=b", "'='"), ("/a\nb", "'\\n'")] {
            let mut s = spec(crate::machine::accel::Kind::Tcg);
            s.rwdir = bad.into();
            let err = format!("{:#}", vng_args(&s).unwrap_err());
            assert!(
                err.contains(c) && err.contains("the run directory"),
                "{err}"
            );
        }
    }

    fn outcome(ending: Ending, boot: Option<u64>) -> RunOutcome {
        RunOutcome {
            ending,
            console_tail: vec!["[    1.7] Oops: int3".into()],
            elapsed: Duration::from_secs(3),
            boot: boot.map(Duration::from_secs),
            guest: None,
            retries: vec![],
        }
    }

    #[test]
    fn only_panics_and_hangs_before_the_guest_script_count_as_boot_failures() {
        let hang = Duration::from_secs(180);
        assert!(outcome(Ending::Panic, None).failed_before_start());
        assert!(outcome(Ending::BootHang(hang), None).failed_before_start());
        assert!(outcome(Ending::Timeout(hang), None).failed_before_start());
        // After the start marker the user's code ran: never a boot failure.
        assert!(!outcome(Ending::Panic, Some(2)).failed_before_start());
        assert!(!outcome(Ending::Timeout(hang), Some(2)).failed_before_start());
        assert!(!outcome(Ending::Interrupted, None).failed_before_start());
        assert!(!outcome(Ending::Exited(1), None).failed_before_start());
        // qemu's own crash is qemu's, not a race of the guest kernel: booting again hides it.
        let crash = Ending::QemuCrashed("signal 6 (SIGABRT)".into());
        assert!(!outcome(crash, None).failed_before_start());
        let f = outcome(Ending::Panic, None).as_failed_boot();
        assert_eq!(f.ending, "the guest kernel panicked");
        assert_eq!(f.console_tail, vec!["[    1.7] Oops: int3".to_string()]);
    }

    #[test]
    fn console_lines_are_told_from_guest_stderr() {
        assert!(is_console(
            "[   11.125062] Kernel panic - not syncing: sysrq triggered crash"
        ));
        assert!(is_console("[0.000000] Linux version"));
        assert!(!is_console("[ERROR] from a test"));
        assert!(!is_console("error: something"));
    }

    /// A stand-in for vng that starts the guest script, names a test and never ends it: the
    /// watchdog stops it at the test's limit, by name; a test that ends in time is no hang.
    #[test]
    fn the_watchdog_stops_a_test_that_outruns_its_limit_by_name() {
        let d = tempfile::tempdir().unwrap();
        let vng = d.path().join("vng");
        let run_with = |body: &str, limit: u64| {
            std::fs::write(
                &vng,
                format!("#!/bin/sh\necho '{START_MARKER}' >&2\n{body}\n"),
            )
            .unwrap();
            std::fs::set_permissions(&vng, std::os::unix::fs::PermissionsExt::from_mode(0o755))
                .unwrap();
            let spec = VmSpec {
                rwdir: d.path().into(),
                script: d.path().join("guest.sh"),
                timeout: Duration::from_secs(6),
                watchdog: Some(Watchdog {
                    start: "start ",
                    end: "end ",
                    limits: BTreeMap::from([("slow".to_string(), Duration::from_secs(limit))]),
                    default: Duration::from_secs(30),
                }),
                ..spec(crate::machine::accel::Kind::Tcg)
            };
            run(&spec, &vng, &[], &Events::silent()).unwrap()
        };
        let t0 = Instant::now();
        let hung = run_with("echo 'start slow'; sleep 30", 1);
        assert_eq!(
            hung.ending,
            Ending::TestHung {
                test: "slow".into(),
                limit: Duration::from_secs(1)
            }
        );
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        assert!(hung
            .diagnosis()
            .starts_with("slow was still running after 1 s"));
        let ended = run_with("echo 'start slow'; sleep 1; echo 'end slow 0'; sleep 30", 3);
        assert_eq!(ended.ending, Ending::Timeout(Duration::from_secs(6)));
    }

    /// A stand-in for vng that echoes its stdin until it closes: what is written to the
    /// spec's input while it runs reaches it, and the input is empty once it has ended.
    #[test]
    fn the_input_reaches_the_guest_while_it_runs_and_is_gone_after() {
        let d = tempfile::tempdir().unwrap();
        let vng = d.path().join("vng");
        std::fs::write(
            &vng,
            format!(
                "#!/bin/sh\necho '{START_MARKER}' >&2\nwhile read -r w; do echo \"got $w\"; \
                 [ \"$w\" = bye ] && exit 0; done\necho eof\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&vng, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let input = Input::default();
        let spec = VmSpec {
            rwdir: d.path().into(),
            script: d.path().join("guest.sh"),
            timeout: Duration::from_secs(20),
            input: Some(input.clone()),
            ..spec(crate::machine::accel::Kind::Tcg)
        };
        let writer = {
            let input = input.clone();
            std::thread::spawn(move || {
                for word in ["check.0", "bye"] {
                    let deadline = Instant::now() + Duration::from_secs(10);
                    loop {
                        if let Some(w) = input.lock().unwrap().as_mut() {
                            std::io::Write::write_all(w, format!("{word}\n").as_bytes()).unwrap();
                            break;
                        }
                        assert!(Instant::now() < deadline, "the input never opened");
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
            })
        };
        let said = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let events = {
            let said = said.clone();
            Events::new(move |o| {
                if let Output::GuestStdout(l) = o {
                    said.lock().unwrap().push(l);
                }
            })
        };
        run(&spec, &vng, &[], &events).unwrap();
        writer.join().unwrap();
        assert_eq!(*said.lock().unwrap(), ["got check.0", "got bye"]);
        assert!(input.lock().unwrap().is_none());
    }
}
