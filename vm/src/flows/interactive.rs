//! `bpfvm shell`: a root shell in a pinned kernel, on the user's terminal, with the current
//! directory shared writable, for debugging a failure by hand. The kernel, tools and
//! accelerator are prepared as for every run; the VM is never left behind (it dies with
//! bpfvm, at the optional timeout, and on SIGTERM or SIGHUP: `vng::shell`).
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use crate::domain::options::VmOptions;
use crate::flows::run::{prepare_any_arch, vm_spec, RunDir};
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
    let p = prepare_any_arch(kernel, opts, events)?;
    // A shell runs no script, and its deadline is `timeout`. A guest with a root of its own
    // gets it staged in a run directory of the cache (`own_root`), beside an empty script.
    let files = match p.kernel.guest_root {
        Some(_) => Some(RunDir::new(
            &crate::support::paths::cache_dir().join("runs"),
        )?),
        None => None,
    };
    let script = match &files {
        Some(f) => {
            crate::machine::guest::write(&f.script, "")?;
            f.script.clone()
        }
        None => PathBuf::new(),
    };
    let spec = vm_spec(&p, opts, &cwd, &script, opts.timeout);
    events.step(format!(
        "booting {} under {} with a root shell (exit or Ctrl-D to power off)",
        p.kernel.bootable.release,
        p.accel.kind.name().to_uppercase()
    ));
    vng::shell(&spec, timeout, &p.tools.vng, &p.tools.path_prefix, events)
}
