//! `bpfvm shell`: a root shell in a pinned kernel, on the user's terminal, with the current
//! directory shared writable, for debugging a failure by hand. The kernel, tools and
//! accelerator are prepared as for every run; the VM is never left behind (it dies with
//! bpfvm, at the optional timeout, and on SIGTERM or SIGHUP: `vng::shell`).
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use crate::domain::options::VmOptions;
use crate::flows::run::{prepare, vm_spec};
use crate::kernel::choice::KernelChoice;
use crate::machine::vng::{self, ShellEnding};
use crate::support::output::Events;

/// Boots `kernel` with a root shell in the current directory; `timeout` kills it.
pub fn vm_shell(
    kernel: &KernelChoice,
    opts: &VmOptions,
    timeout: Option<Duration>,
    events: &Events,
) -> Result<ShellEnding> {
    let cwd = crate::support::paths::guest_cwd()?;
    let p = prepare(kernel, opts, events)?;
    // A shell runs no script, and its deadline is `timeout`.
    let spec = vm_spec(&p, opts, &cwd, &PathBuf::new(), opts.timeout);
    events.step(format!(
        "booting {} under {} with a root shell (exit or Ctrl-D to power off)",
        p.kernel.bootable.release,
        p.accel.kind.name().to_uppercase()
    ));
    vng::shell(&spec, timeout, &p.tools.vng, &p.tools.path_prefix, events)
}
