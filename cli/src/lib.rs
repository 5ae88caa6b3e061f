//! What the two command lines share: `main`'s body ([`run_main`]), the VM options (`cargo xtask
//! vm-run`, `bpfvm exec`, ...), the exit status of a command run in the guest, and the signal
//! handlers that stop a VM on Ctrl-C; then one module per command (its options and its `run`,
//! as in aya's xtask): those of `bpfvm`, and those `cargo xtask` has too. `bpfvm-host` stays
//! free of clap.
#![warn(unreachable_pub)]

pub mod against;
pub mod build_ebpf;
pub mod exec;
pub mod github;
pub mod github_summary;
pub mod inventory;
pub mod kernels;
pub mod mcp;
pub mod pieces;
pub mod selftests;
pub mod setup;
pub mod shell;
pub mod test;
pub mod verifier_compare;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use bpfvm_host::domain::options::{defaults, VmOptions};
use bpfvm_host::domain::options::{Choice, TcgThread};
use bpfvm_host::kernel::choice::{KernelArgs, KernelChoice};
use bpfvm_host::machine::vng::{Ending, RunOutcome};
use bpfvm_host::results::health::Health;
use bpfvm_host::results::report::{self, TestResult};
use bpfvm_host::support::output::Events;
use bpfvm_host::support::status::Status;
use clap::Args;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// The body of both binaries' `main`: the signal handlers, the environment checked, the
/// events shown on the terminal, then `run`; its exit status as [`main_status`] makes it.
pub fn run_main(verbose: bool, run: impl FnOnce(&Events) -> anyhow::Result<ExitCode>) -> ExitCode {
    main_status(|| {
        install_signal_handlers()?;
        bpfvm_host::support::paths::check_env()?;
        run(&bpfvm_host::ui::terminal(verbose))
    })
}

/// The exit code of a command whose checks passed (`ok`) or not.
pub fn exit_if(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// What a run of several kernels prints after each kernel's table: the kernels' matrix, the
/// verifier's (when programs were loaded) and each kernel that failed, with why.
pub fn print_kernels(reports: &[report::Report]) {
    if reports.len() > 1 {
        bpfvm_host::ui::print_stdout(&report::matrix_table(reports));
    }
    let verifier = bpfvm_host::results::verifier::matrix::of_reports(reports);
    if !verifier.is_empty() {
        bpfvm_host::ui::print_stdout(&bpfvm_host::results::verifier::matrix::table(&verifier));
    }
    for r in reports {
        if let Some(why) = r.why_failed() {
            bpfvm_host::ui::print_stdout(&format!("kernel {} FAILED: {why}", r.kernel.version));
        }
    }
}

/// The exit status of a command that failed with `e` before it judged anything: 125 when the
/// kernel cannot be judged at this commit (a tree that does not build or cannot have the
/// suite's config: `git bisect run` skips it), else 255 (bad input, the host, qemu or the
/// tools: `git bisect run` stops). Never 1, which would blame the commit. docs/exit-status.md.
pub fn error_status(e: &anyhow::Error) -> ExitCode {
    ExitCode::from(Status::of_error(e).code())
}

/// The exit code of a whole command: `run`'s status, 128 + N when a signal interrupted it, the
/// error's (`error_status`, printed) when it failed, and 255 when it panicked. A panic is a bug
/// of bpfvm's, never the kernel's, and Rust's own 101 would read as "bad" to `git bisect run`.
/// Unwinding (not `exit` from a panic hook) drops what kills a running VM first.
pub fn main_status(run: impl FnOnce() -> anyhow::Result<ExitCode>) -> ExitCode {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
    let code = match result {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => {
            bpfvm_host::ui::print_stderr(&format!("error: {e:#}"));
            error_status(&e)
        }
        Err(_) => {
            bpfvm_host::ui::print_stderr(&format!(
                "error: bpfvm panicked (a bug in bpfvm, not a verdict on the kernel): exit status {}",
                Status::Stopped.code()
            ));
            ExitCode::from(Status::Stopped.code())
        }
    };
    // Interrupted, the run ends as the shell would report the signal, whatever it returned
    // (its error, printed above, says what was stopped).
    match bpfvm_host::support::proc::interrupt_status() {
        Some(status) => ExitCode::from(status),
        None => code,
    }
}

/// The command line parsed, or the process ended: help and version exit 0; a usage error exits
/// 255 like every error that judged nothing (clap's own 2 would read as "bad" to `git bisect
/// run`).
pub fn parse_or_exit<P: clap::Parser>() -> P {
    P::try_parse().unwrap_or_else(|e| {
        let _ = e.print();
        let code = match e.kind() {
            clap::error::ErrorKind::DisplayHelp
            | clap::error::ErrorKind::DisplayVersion
            | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => 0,
            _ => i32::from(bpfvm_host::support::status::STOP),
        };
        std::process::exit(code)
    })
}

/// The exit status of a run that judged kernels (one, or each of a matrix).
pub fn judged_status<'a>(reports: impl IntoIterator<Item = &'a report::Report>) -> ExitCode {
    ExitCode::from(Status::combine(reports.into_iter().map(|r| r.status())).code())
}

/// The options of every command that boots a VM.
#[derive(Args, Debug, Clone)]
pub struct VmArgs {
    /// A pinned kernel version (see `kernels list`), `all` (vm-test, soak, bpfvm test), a
    /// comma-separated list (bpfvm test), or the path of a kernel image you built (a value
    /// with a `/`, e.g. arch/x86/boot/bzImage or ./bzImage). Default: $BPFVM_KERNEL, else 6.1.
    #[arg(long)]
    pub kernel: Option<String>,
    /// Modules for a kernel image you built: the INSTALL_MOD_PATH of `make modules_install`.
    #[arg(long)]
    pub modules: Option<PathBuf>,
    /// A kernel source tree to configure (the suite's config), build out of tree in bpfvm's
    /// cache and boot: see docs/kernel-tree.md. A failed build exits 125 (`git bisect run`
    /// skips the commit); BPFVM_KERNEL does not count against it.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["kernel", "modules"])]
    pub kernel_tree: Option<PathBuf>,
    /// The guest's architecture: x86_64 or arm64 (pins only, under TCG; see docs/arm64.md),
    /// or `all` with vm-test. Default: the host's.
    #[arg(long, env = "BPFVM_ARCH")]
    pub arch: Option<String>,
    /// A config fragment of yours merged last over the suite's config (repeatable; with
    /// --kernel-tree).
    #[arg(long, value_name = "FRAGMENT", requires = "kernel_tree")]
    pub kconfig: Vec<PathBuf>,
    /// auto (KVM if a probe boots under it, else TCG), kvm (an error where KVM does not
    /// work) or tcg.
    #[arg(long, env = "BPFVM_ACCEL", default_value_t = Choice::Auto)]
    pub accel: Choice,
    /// Under TCG: auto (one host thread for all vCPUs on qemu 10.0.4 and later, whose
    /// multi-threaded TCG can crash while the guest remaps PCI devices: docs/hosts.md; a thread
    /// per vCPU before), single or multi.
    #[arg(long, env = "BPFVM_TCG_THREAD", default_value_t = TcgThread::Auto)]
    pub tcg_thread: TcgThread,
    /// Extra kernel command line (repeatable).
    #[arg(long)]
    pub append: Vec<String>,
    #[arg(long, default_value_t = defaults::CPUS)]
    pub cpus: u32,
    /// Guest memory, qemu syntax.
    #[arg(long, default_value = defaults::MEMORY)]
    pub memory: String,
    /// Do not boot again when a TCG boot panics or hangs before the guest script starts.
    #[arg(long)]
    pub no_retry: bool,
    /// Boot with panic_on_warn=1: the first kernel WARN ends the run with the console's tail
    /// (for bisecting a splat).
    #[arg(long)]
    pub panic_on_warn: bool,
}

impl VmArgs {
    /// The kernel options as given, with `BPFVM_KERNEL` as the default (`kernel::choice`
    /// parses them).
    pub fn kernel_args(&self) -> KernelArgs {
        KernelArgs {
            kernel: self.kernel.clone(),
            env: None,
            modules: self.modules.clone(),
            kernel_tree: self.kernel_tree.clone(),
            kconfig: self.kconfig.clone(),
            arch: self.arch.clone(),
        }
        .with_env()
    }

    /// The one kernel these options name.
    pub fn kernel(&self) -> anyhow::Result<KernelChoice> {
        self.kernel_args().one()
    }

    pub fn options(self, timeout: u64) -> VmOptions {
        VmOptions {
            accel: self.accel,
            tcg_thread: self.tcg_thread,
            append: self
                .append
                .into_iter()
                .chain(self.panic_on_warn.then(|| "panic_on_warn=1".to_string()))
                .collect(),
            timeout: Duration::from_secs(timeout),
            cpus: self.cpus,
            memory: self.memory,
            retry: !self.no_retry,
            qemu_opts: vec![],
        }
    }
}

/// The exit status of a command run in the guest (`vm-run`, `bpfvm exec`): the command's own
/// (1 for one above 127); 1 when the kernel panicked, or, whatever the command's status, when
/// the run fails as `vm-test`'s verdict would (`report::apply_kernel_health`: a splat no allow
/// entry excuses, in any phase; records the log lost; a log that stops early or cannot be read,
/// all excused by `allow_splats`; another release booted than asked for). Every splat is shown
/// (an allowed one as a note, with its reason); a VM that did not end with the command's
/// status is an error, and so is a command's 0 when the log's only failures judge nothing (a
/// stall report under TCG: `report::only_not_judged`, as for a test run).
pub fn command_status(
    outcome: &RunOutcome,
    health: &Health,
    allow_splats: bool,
    events: &Events,
) -> anyhow::Result<ExitCode> {
    command_code(outcome, health, allow_splats, events).map(ExitCode::from)
}

/// [`command_status`] as a number, for a caller that tallies runs (`cargo xtask soak`).
pub fn command_code(
    outcome: &RunOutcome,
    health: &Health,
    allow_splats: bool,
    events: &Events,
) -> anyhow::Result<u8> {
    for s in &health.splats {
        match &s.allowed {
            Some(why) => events.note(format!("allowed {} ({why})", s.describe())),
            None => events.warn(format!("{}\n{}", s.describe(), s.text)),
        }
    }
    let mut entries = Vec::new();
    let vm_ok = matches!(outcome.ending, Ending::Exited(_));
    report::apply_kernel_health(&mut entries, &mut health.clone(), vm_ok, str::to_string);
    for e in entries.iter().filter(|e| e.name.starts_with("guest:")) {
        events.warn(format!("{}: {}", e.name, e.reason.as_deref().unwrap_or("")));
    }
    // --allow-splats excuses what the kernel log says, never another kernel than asked for.
    let about_the_log = |name: &str| name.starts_with("kernel:") || name == "guest:kernel.log";
    let against: Vec<&TestResult> = entries
        .iter()
        .filter(|e| !(allow_splats && about_the_log(&e.name)))
        .collect();
    // Under TCG a stall report judges nothing (`Health::under_tcg`): when the log holds nothing
    // else against the kernel, the command's own status is the only verdict.
    let judged_nothing = report::only_not_judged(against.iter().copied());
    if judged_nothing {
        // Each entry says the same reason: once is enough.
        let mut why = format!(
            "{}: {}",
            against[0].name,
            against[0].reason.as_deref().unwrap_or("")
        );
        if against.len() > 1 {
            let rest: Vec<&str> = against[1..].iter().map(|e| e.name.as_str()).collect();
            why += &format!(" (and {}, the same)", rest.join(", "));
        }
        events.warn(why);
    }
    let failing = !against.is_empty() && !judged_nothing;
    match outcome.ending {
        // The kernel's evidence beats whatever the command said, a 125 (skip) included.
        Ending::Exited(code) if failing => {
            events.warn(format!(
                "the command exited with status {code}, and the run fails (see above): exit \
                 status 1 (--allow-splats keeps the command's when only the kernel log fails it)"
            ));
            Ok(Status::Bad.code())
        }
        // Above 127 is a signal's status in the guest, or 255: git bisect would stop on it
        // and read it as bpfvm's own. The command failed: that is 1.
        Ending::Exited(code) if !(0..=127).contains(&code) => {
            events.warn(format!(
                "the command exited with status {code}: exit status 1 (statuses above 127 are \
                 bpfvm's own, docs/exit-status.md)"
            ));
            Ok(Status::Bad.code())
        }
        // Its success is no verdict on a kernel whose log a stall report under TCG left
        // unjudged: 255 stops a bisect (a failure's status above stands).
        Ending::Exited(0) if judged_nothing => anyhow::bail!(
            "the command exited with status 0, but under TCG bpfvm cannot judge the stall the \
             kernel reported (see above): nothing is judged (exit status 255); to judge it, run \
             it again under KVM (--accel kvm)"
        ),
        Ending::Exited(code) => Ok(code as u8),
        // The kernel's doing: the command's run is judged bad.
        Ending::Panic | Ending::TooMuchOutput(_) => {
            events.warn(outcome.diagnosis());
            Ok(Status::Bad.code())
        }
        _ if failing && health.blames_the_kernel() => {
            events.warn(outcome.diagnosis());
            Ok(Status::Bad.code())
        }
        // qemu crashed or failed, the timeout struck, the boot hung: nothing judged (255).
        _ => anyhow::bail!("{}", outcome.diagnosis()),
    }
}

/// Ctrl-C, SIGTERM and SIGHUP: the runner kills its VM's whole process group and stops what it
/// waits for, then the command exits with 128 + the signal
/// (`bpfvm_host::support::proc::interrupt_status`). Without the handler they would kill only this
/// process and leave qemu running.
pub fn install_signal_handlers() -> anyhow::Result<()> {
    for signal in [SIGINT, SIGTERM, SIGHUP] {
        // SAFETY: the action only stores an atomic, which is async-signal-safe.
        unsafe {
            signal_hook::low_level::register(signal, move || {
                bpfvm_host::support::proc::request_interrupt(signal)
            })
        }
        .map_err(|e| anyhow::anyhow!("cannot install the signal handler that stops the VM: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bpfvm_host::flows::run::judge_kernel_log;
    use bpfvm_host::machine::accel::{Accel, Kind};
    use bpfvm_host::results::health::allow;

    fn exited(code: i32) -> RunOutcome {
        RunOutcome {
            ending: Ending::Exited(code),
            console_tail: vec![],
            elapsed: Duration::from_secs(1),
            boot: None,
            guest: None,
            retries: vec![],
        }
    }

    fn status(log: &str, allow_splats: bool) -> ExitCode {
        status_of(0, log, allow_splats)
    }

    fn status_of(code: i32, log: &str, allow_splats: bool) -> ExitCode {
        let allow = allow::parse("").unwrap();
        let health = bpfvm_host::results::health::judge(log, &allow, "6.1", None);
        command_status(&exited(code), &health, allow_splats, &Events::silent()).unwrap()
    }

    const WARN: &str = "4,3,3,-;------------[ cut here ]------------\n\
                        4,4,4,-;WARNING: CPU: 0 PID: 9 at kernel/bpf/syscall.c:512 f+0x1/0x2\n\
                        4,5,5,-;---[ end trace 0000000000000000 ]---\n";

    /// A splat after the command (deferred work), records the log lost, and a log that stops
    /// early each turn a command's exit 0 into 1, as they fail a `vm-test` run.
    #[test]
    fn a_shutdown_splat_a_lost_record_or_a_cut_log_fails_a_command_that_succeeded() {
        let clean = "12,0,0,-;bpfvm: phase command\n12,1,1,-;bpfvm: phase shutdown\n";
        let end = "12,6,6,-;bpfvm: phase end\n";
        let ok = format!("{clean}12,2,2,-;x\n12,3,3,-;bpfvm: phase end\n");
        assert_eq!(status(&ok, false), ExitCode::SUCCESS);
        let shutdown_warn = format!("{clean}12,2,2,-;x\n{WARN}{end}");
        assert_eq!(status(&shutdown_warn, false), ExitCode::FAILURE);
        assert_eq!(status(&shutdown_warn, true), ExitCode::SUCCESS);
        let lost = format!("{clean}12,5,5,-;x\n{end}");
        assert_eq!(status(&lost, false), ExitCode::FAILURE);
        assert_eq!(status(clean, false), ExitCode::FAILURE, "no `phase end`");
    }

    /// The kernel's evidence beats the command's status: a command that exits 125 (skip) or
    /// 3 after an unexcused splat or a lost record is judged bad (1), as `vm-test` would be;
    /// on a clean log, or with --allow-splats, its status passes on.
    #[test]
    fn the_kernels_evidence_beats_the_commands_status() {
        let clean = "12,0,0,-;bpfvm: phase command\n12,1,1,-;bpfvm: phase shutdown\n";
        let ok = format!("{clean}12,2,2,-;x\n12,3,3,-;bpfvm: phase end\n");
        let warn = format!("{clean}12,2,2,-;x\n{WARN}12,6,6,-;bpfvm: phase end\n");
        let lost = format!("{clean}12,5,5,-;x\n12,6,6,-;bpfvm: phase end\n");
        for code in [125, 3] {
            assert_eq!(status_of(code, &ok, false), ExitCode::from(code as u8));
            assert_eq!(status_of(code, &warn, false), ExitCode::FAILURE, "{code}");
            assert_eq!(status_of(code, &lost, false), ExitCode::FAILURE, "{code}");
            assert_eq!(status_of(code, &warn, true), ExitCode::from(code as u8));
        }
    }

    /// The exit status table (docs/exit-status.md) for `vm-run` and `bpfvm exec`, which both
    /// decide in `command_code` and end through `error_status`: a clean run passes the
    /// command's status on (0, a failing command's 1, a script's 125); a splat, a panic or a
    /// status above 127 is 1; a tree that does not build is 125; a VM that ended without the
    /// command's status and without a splat (qemu crashed, a timeout), or a host failure, 255.
    /// (128 + N: cli/tests/exit_on_signal.rs.)
    #[test]
    fn vm_run_and_bpfvm_exec_status_table() {
        use bpfvm_host::support::status::Untestable;
        let clean = "12,0,0,-;bpfvm: phase command\n12,1,1,-;bpfvm: phase end\n";
        let warn = format!("12,0,0,-;bpfvm: phase command\n{WARN}12,6,6,-;bpfvm: phase end\n");
        let judged_on = |accel: Kind, ending: Ending, log: &str| {
            let code = command_code(
                &RunOutcome {
                    ending,
                    ..exited(0)
                },
                &health_on(accel, log),
                false,
                &Events::silent(),
            );
            match code {
                Ok(code) => code,
                Err(e) => Status::of_error(&e).code(),
            }
        };
        let judged = |ending: Ending, log: &str| judged_on(Kind::Tcg, ending, log);
        assert_eq!(judged(Ending::Exited(0), clean), 0);
        assert_eq!(judged(Ending::Exited(1), clean), 1);
        assert_eq!(judged(Ending::Exited(125), clean), 125);
        assert_eq!(judged(Ending::Exited(0), &warn), 1);
        assert_eq!(judged(Ending::Exited(125), &warn), 1);
        assert_eq!(judged(Ending::Exited(255), clean), 1);
        assert_eq!(judged(Ending::Panic, clean), 1);
        let crashed = Ending::QemuCrashed("qemu: SIGABRT".into());
        assert_eq!(judged(crashed.clone(), clean), 255);
        assert_eq!(judged(crashed, &warn), 1);
        assert_eq!(judged(Ending::Timeout(Duration::from_secs(60)), clean), 255);
        // A soft lockup under TCG judges nothing (docs/kernel-log.md, "Stalls under TCG"): a
        // command that succeeded on it stops a bisect, one that failed keeps its status; under
        // KVM, or beside a WARN, the lockup is the kernel's.
        let lockup = recorded_lockup();
        assert_eq!(judged(Ending::Exited(0), &lockup), 255);
        assert_eq!(judged(Ending::Exited(3), &lockup), 3);
        assert_eq!(judged(Ending::Exited(125), &lockup), 125);
        assert_eq!(
            judged(Ending::Timeout(Duration::from_secs(60)), &lockup),
            255
        );
        assert_eq!(judged_on(Kind::Kvm, Ending::Exited(0), &lockup), 1);
        let beside_a_warn = format!(
            "12,0,0,-;bpfvm: phase command\n\
             0,1,1,-;watchdog: BUG: soft lockup - CPU#0 stuck for 45s! [spin:99]\n\
             4,2,2,-;RIP: 0010:bpf_loop+0x4e/0xa0\n{WARN}12,6,6,-;bpfvm: phase end\n"
        );
        assert_eq!(judged(Ending::Exited(0), &beside_a_warn), 1);
        let not_built = anyhow::Error::new(Untestable("`make bzImage` failed".into()));
        assert_eq!(error_status(&not_built), ExitCode::from(125));
        let host = anyhow::anyhow!("write bzImage: No space left on device");
        assert_eq!(error_status(&host), ExitCode::from(255));
    }

    /// The kernel log of a boot of `kernel` under `accel`, judged as `vm-run` and `bpfvm exec`
    /// judge theirs (`judge_kernel_log`, through `run::kernel_health`).
    fn health_on(accel: Kind, log: &str) -> Health {
        let accel = Accel {
            kind: accel,
            reason: "the test's".into(),
            tcg_thread: None,
        };
        judge_kernel_log(log, &allow::parse("").unwrap(), "6.1", &accel, &None)
    }

    /// `cargo xtask vm-run --kernel 6.1 -- spin` under TCG, recorded: a BPF_PROG_TEST_RUN of a
    /// flow dissector whose `bpf_loop` callback runs another `bpf_loop`, with preemption off
    /// (vm/testdata/health/vm-run-soft-lockup.kmsg: a soft lockup, then its taint `L`).
    fn recorded_lockup() -> String {
        let path = bpfvm_host::support::paths::workspace_root()
            .join("vm/testdata/health/vm-run-soft-lockup.kmsg");
        std::fs::read_to_string(path).unwrap()
    }

    /// A command that exited 0 on a kernel log whose only evidence is a stall report under TCG
    /// judged nothing: the error (exit status 255) says why and what to run instead.
    #[test]
    fn a_stall_under_tcg_says_it_judges_nothing_and_to_run_under_kvm() {
        let health = health_on(Kind::Tcg, &recorded_lockup());
        let e = command_code(&exited(0), &health, false, &Events::silent()).unwrap_err();
        let why = e.to_string();
        assert!(
            why.contains("under TCG bpfvm cannot judge") && why.contains("--accel kvm"),
            "{why}"
        );
        assert_eq!(Status::of_error(&e), Status::Stopped);
    }

    /// `bpfvm test --kernel-tree` on a tree that does not build: the kernel's report says
    /// why it did not run and the command exits 125, as `vm-test` does; a host failure 255;
    /// with another kernel that failed a test, 1.
    #[test]
    fn a_kernel_that_did_not_build_exits_125_and_a_host_failure_255() {
        use bpfvm_host::results::report::Report;
        use bpfvm_host::support::status::Untestable;
        let untestable = anyhow::Error::new(Untestable("`make bzImage` failed".into()));
        let not_built = Report::not_run_because("/src/linux", &untestable);
        assert_eq!(judged_status([&not_built]), ExitCode::from(125));
        let crashed = Report::not_run_because("6.1", &anyhow::anyhow!("qemu crashed"));
        assert_eq!(judged_status([&not_built, &crashed]), ExitCode::from(255));
        let mut failed = Report::not_run("6.12", "a test failed");
        failed.status = Some(Status::Bad);
        assert_eq!(
            judged_status([&not_built, &crashed, &failed]),
            ExitCode::FAILURE
        );
        assert_eq!(error_status(&untestable), ExitCode::from(125));
    }

    /// A panic anywhere in a command is bpfvm's bug: 255 (stop), never Rust's 101, which
    /// `git bisect run` reads as a bad commit. An error keeps its own status.
    #[test]
    fn a_panic_exits_255_and_an_error_its_status() {
        let panicked = main_status(|| panic!("a bug"));
        assert_eq!(panicked, ExitCode::from(255));
        let failed = main_status(|| Err(anyhow::anyhow!("qemu crashed")));
        assert_eq!(failed, ExitCode::from(255));
        assert_eq!(main_status(|| Ok(ExitCode::from(125))), ExitCode::from(125));
        assert_eq!(main_status(|| Ok(ExitCode::SUCCESS)), ExitCode::SUCCESS);
    }

    /// The release the guest booted is checked on every run, `vm-run`'s and `bpfvm exec`'s too,
    /// whatever the command's status.
    #[test]
    fn another_release_than_asked_for_fails_the_command() {
        let log = "12,0,0,-;bpfvm: phase command\n12,1,1,-;bpfvm: phase end\n";
        let mut health =
            bpfvm_host::results::health::judge(log, &allow::parse("").unwrap(), "6.1", None);
        let ok = command_status(&exited(0), &health, false, &Events::silent()).unwrap();
        assert_eq!(ok, ExitCode::SUCCESS);
        health.wrong_release = Some("the guest booted 6.1.0-9, not 6.1.0-57 (6.1)".into());
        for (code, allow_splats) in [(0, false), (0, true), (125, false), (125, true)] {
            let bad = command_status(&exited(code), &health, allow_splats, &Events::silent());
            assert_eq!(bad.unwrap(), ExitCode::FAILURE, "{code}");
        }
    }
}

#[cfg(test)]
mod cache_key {
    /// The action caches the installed `bpfvm` under a key of the sources it compiles in
    /// (ci/action-cache-keys.sh): every workspace crate it depends on (the root Cargo.toml's
    /// `path = "..."` dependencies) must be hashed, or a change to one reuses a stale binary.
    #[test]
    fn the_binary_cache_key_hashes_every_crate_the_binary_compiles_in() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let script = std::fs::read_to_string(root.join("ci/action-cache-keys.sh")).unwrap();
        let line = script
            .lines()
            .find(|l| l.starts_with("echo \"bin="))
            .unwrap();
        let hashed: Vec<&str> = line
            .split("$(hash ")
            .nth(1)
            .and_then(|h| h.split(')').next())
            .unwrap()
            .split_whitespace()
            .collect();
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
        let dirs: Vec<&str> = manifest
            .lines()
            .filter_map(|l| l.split("path = \"").nth(1)?.split('"').next())
            .collect();
        assert!(dirs.contains(&"common") && dirs.contains(&"vm"), "{dirs:?}");
        for d in dirs.iter().chain(&["cli", "Cargo.toml", "Cargo.lock"]) {
            assert!(hashed.contains(d), "{d} is not in the bin key: {line}");
        }
    }
}
