//! `bpfvm shell`: a root shell in a pinned kernel, on the user's terminal, with the current
//! directory shared writable, for debugging a failure by hand. The kernel, tools and
//! accelerator are prepared as for every run; the VM is never left behind (it dies with
//! bpfvm, at the optional timeout, and on SIGTERM or SIGHUP: `vng::shell`).
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};

use crate::options::VmOptions;
use crate::output::Events;
use crate::run::prepare;
use crate::vng::{self, ShellEnding, VmSpec};

/// Boots `opts.kernel` with a root shell in the current directory; `timeout` kills it.
pub fn vm_shell(
    opts: &VmOptions,
    timeout: Option<Duration>,
    events: &Events,
) -> Result<ShellEnding> {
    let p = prepare(opts, events)?;
    let cwd = std::env::current_dir().context("the current directory")?;
    let spec = VmSpec {
        vmlinuz: p.tree.vmlinuz.clone(),
        accel: p.accel.clone(),
        cpus: opts.cpus,
        memory: opts.memory.clone(),
        append: opts.append.clone(),
        rwdir: cwd,
        // A shell runs no script, and its deadline is `timeout`.
        script: PathBuf::new(),
        timeout: opts.timeout,
        boot_timeout: opts.timeout,
        qemu_opts: opts.qemu_opts.clone(),
    };
    events.step(format!(
        "booting {} under {} with a root shell (exit or Ctrl-D to power off)",
        p.tree.release,
        p.accel.kind.name().to_uppercase()
    ));
    vng::shell(&spec, timeout, &p.tools.vng, &p.tools.path_prefix, events)
}
