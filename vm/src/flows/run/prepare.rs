//! The first step of a run: the options checked, the kernel made ready to boot, the
//! accelerator chosen.
use std::path::PathBuf;

use anyhow::Result;

use crate::domain::arch::X86Only;
use crate::domain::options::{self, VmOptions};
use crate::kernel::choice::KernelChoice;
use crate::kernel::ready::{self, Ready};
use crate::machine::accel::{self, Accel};
use crate::machine::provision::Tools;
use crate::machine::vng::{self};
use crate::support::output::Events;
use crate::support::paths::target_dir;

/// A booted-to-be kernel: the tools, the kernel made ready and the accelerator chosen for it.
pub(crate) struct Prepared {
    pub tools: Tools,
    pub kernel: Ready,
    pub accel: Accel,
    /// The host directories a guest with its own root reads (`OwnRoot::reads`).
    pub guest_reads: Vec<PathBuf>,
    /// The per-test watchdog of the next boots (the kernel's selftests set one per boot).
    pub watchdog: Option<vng::Watchdog>,
}

/// [`prepare_any_arch`] for the commands that boot x86_64 kernels only: another
/// architecture's pin is refused before anything is fetched.
pub(crate) fn prepare(
    choice: &KernelChoice,
    opts: &VmOptions,
    events: &Events,
) -> Result<Prepared> {
    if let KernelChoice::Pin(pin) = choice {
        pin.arch.refuse(X86Only::Command)?;
    }
    prepare_any_arch(choice, opts, events)
}

/// Checks the VM options and the places bpfvm writes, makes `choice` ready to boot (checking
/// it before anything is installed) and chooses the accelerator.
pub(crate) fn prepare_any_arch(
    choice: &KernelChoice,
    opts: &VmOptions,
    events: &Events,
) -> Result<Prepared> {
    options::check(opts)?;
    accel::check(opts.accel, choice.arch())?;
    crate::support::fs::writable(&target_dir(), "the build directory", "CARGO_TARGET_DIR")?;
    crate::support::fs::writable(
        &crate::support::paths::cache_dir(),
        "the cache",
        "XDG_CACHE_HOME",
    )?;
    let (tools, kernel) = ready::ready(choice, events)?;
    events.step("choosing the accelerator");
    let accel = accel::decide(
        opts.accel,
        opts.tcg_thread,
        &kernel.bootable.vmlinuz,
        kernel.arch,
    )?;
    events.note(format!("accelerator: {}", accel.describe()));
    Ok(Prepared {
        tools,
        kernel,
        accel,
        guest_reads: vec![],
        watchdog: None,
    })
}
