//! What the two command lines share: the VM options (`cargo xtask vm-run`, `bpfvm exec`, ...),
//! the exit status of a command run in the guest, and the signal handlers that stop a VM on
//! Ctrl-C. `bpfvm-host` stays free of clap.
#![warn(unreachable_pub)]

pub mod github;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use bpfvm_host::health::Health;
use bpfvm_host::options::Choice;
use bpfvm_host::options::{defaults, VmOptions};
use bpfvm_host::output::Events;
use bpfvm_host::vng::{Ending, RunOutcome};
use clap::Args;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// `setup`'s options, the same for `bpfvm` and `cargo xtask`.
#[derive(Args, Debug, Clone)]
pub struct SetupArgs {
    /// Only report what is present and what is missing.
    #[arg(long)]
    pub check: bool,
}

/// `setup`: installs what is missing, or with `--check` lists what is present and missing
/// (non-zero exit when something is missing).
pub fn setup(args: &SetupArgs, events: &Events) -> anyhow::Result<ExitCode> {
    if !args.check {
        bpfvm_host::provision::ensure(events)?;
        return Ok(ExitCode::SUCCESS);
    }
    let items = bpfvm_host::provision::check();
    for i in &items {
        let mark = if i.present { "ok     " } else { "MISSING" };
        bpfvm_host::ui::print_stdout(&format!("{mark} {:<28} {}", i.name, i.detail));
    }
    Ok(if items.iter().all(|i| i.present) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The options of every command that boots a VM.
#[derive(Args, Debug, Clone)]
pub struct VmArgs {
    /// A pinned kernel version (see `kernels list`), `all` (vm-test, soak, bpfvm test), a
    /// comma-separated list (bpfvm test), or the path of a kernel image you built (e.g.
    /// arch/x86/boot/bzImage).
    #[arg(long, env = "BPFVM_KERNEL", default_value = "6.1")]
    pub kernel: String,
    /// Modules for a kernel image you built: the INSTALL_MOD_PATH of `make modules_install`.
    #[arg(long)]
    pub modules: Option<PathBuf>,
    /// auto (KVM if a probe boots under it, else TCG), kvm (an error where KVM does not
    /// work) or tcg.
    #[arg(long, env = "BPFVM_ACCEL", default_value_t = Choice::Auto)]
    pub accel: Choice,
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
    pub fn options(self, timeout: u64) -> VmOptions {
        VmOptions {
            kernel: self.kernel,
            modules: self.modules,
            accel: self.accel,
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

/// The exit status of a command run in the guest (`vm-run`, `bpfvm exec`): the command's own,
/// or 1 when it succeeded but the kernel splatted while it ran and `allow_splats` is off.
/// Every splat is shown (an allowed one as a note, with its reason); a VM that did not end
/// with the command's status is an error.
pub fn command_status(
    outcome: &RunOutcome,
    health: &Health,
    allow_splats: bool,
    events: &Events,
) -> anyhow::Result<ExitCode> {
    let mut failing = false;
    for s in &health.splats {
        match &s.allowed {
            Some(why) => events.note(format!("allowed {} ({why})", s.describe())),
            None => {
                events.warn(format!("{}\n{}", s.describe(), s.text));
                failing |= s.phase == "command";
            }
        }
    }
    match outcome.ending {
        Ending::Exited(0) if failing && !allow_splats => {
            events.warn("the kernel splatted while the command ran: exit status 1 (--allow-splats keeps the command's)");
            Ok(ExitCode::FAILURE)
        }
        Ending::Exited(code) => Ok(ExitCode::from(code.clamp(0, 255) as u8)),
        _ => anyhow::bail!("{}", outcome.diagnosis()),
    }
}

/// Ctrl-C, SIGTERM and SIGHUP: the runner kills its VM's whole process group and stops what it
/// waits for, then the command exits with 128 + the signal
/// (`bpfvm_host::proc::interrupt_status`). Without the handler they would kill only this
/// process and leave qemu running.
pub fn install_signal_handlers() -> std::io::Result<()> {
    for signal in [SIGINT, SIGTERM, SIGHUP] {
        // SAFETY: the action only stores an atomic, which is async-signal-safe.
        unsafe {
            signal_hook::low_level::register(signal, move || {
                bpfvm_host::proc::request_interrupt(signal)
            })?;
        }
    }
    Ok(())
}
