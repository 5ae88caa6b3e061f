//! `vm-run`: any command as root in the guest.

use anyhow::Result;

use crate::domain::options::VmOptions;
use crate::kernel::choice::KernelChoice;
use crate::machine::guest;
use crate::machine::vng::RunOutcome;
use crate::results::health::{self, Health};
use crate::results::report::{self};
use crate::support::output::Events;
use crate::support::paths::target_dir;

use super::boot::boot;
use super::conclude::kernel_health;
use super::dir::run_dir_reading;
use super::prepare::prepare_any_arch;

/// `vm-run`: runs `argv` as root in the guest from the current directory; returns how the VM
/// ended (the caller exits with the command's status) and the kernel's health, its log kept
/// as `target/vm-run/kernel.log`.
pub fn vm_run(
    kernel: &KernelChoice,
    opts: &VmOptions,
    argv: &[String],
    events: &Events,
) -> Result<(RunOutcome, Health)> {
    let allow = health::allow::load(&health::allow::path())?;
    let cwd = crate::support::paths::guest_cwd()?;
    let mut p = prepare_any_arch(kernel, opts, events)?;
    let parent = target_dir().join("vm-run");
    let files = run_dir_reading(&mut p, vec![cwd.clone()], &parent)?;
    guest::write(
        &files.script,
        &guest::command_script(&files.shared, &cwd, argv),
    )?;
    let outcome = boot(&p, opts, &files.shared, &files.script, events)?;
    let release = report::read_fact(&files.shared, guest::files::RELEASE);
    let health = kernel_health(&files.shared, &parent, &outcome, &allow, &p, &release)?;
    Ok((outcome, health))
}
