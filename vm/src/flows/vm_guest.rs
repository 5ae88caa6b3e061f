//! `vm-guest`: keeps a guest of one kernel up for this checkout's `vm-test` runs, until
//! Ctrl-C or `idle` without a run (`machine::warm_guest`, docs/warm-guest.md). It boots the VM
//! `vm-test` would boot with the same options, and judges each check by
//! `results::freshness`. A guest with a root of its own (an arm64 pin's) boots it with no
//! host directory to read: each run stages its binaries in the share (`client::stage`).
use std::time::Duration;

use anyhow::Result;

use crate::domain::options::VmOptions;
use crate::flows::run::{self, BOOT_TIMEOUT};
use crate::kernel::choice::KernelChoice;
use crate::machine::warm_guest::{keeper, key::Key, script, wire};
use crate::results::freshness::{self, Evidence};
use crate::support::output::Events;
use crate::support::paths::target_dir;

/// How long a kept guest's VM may live before it boots again (its keeper ends sooner when
/// idle).
const LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// Keeps `kernel`'s guest with `opts` up until Ctrl-C or `idle` without a run.
pub fn vm_guest(
    kernel: &KernelChoice,
    opts: &VmOptions,
    idle: Duration,
    events: &Events,
) -> Result<()> {
    let p = run::prepare_any_arch(kernel, opts, events)?;
    let vm = run::with_offline_cpus(opts);
    let dir = wire::dir(&target_dir());
    let share = dir.join(wire::SHARE);
    let mut spec = run::vm_spec(&p, &vm, &share, &dir.join("guest-loop.sh"), BOOT_TIMEOUT);
    spec.timeout = LIFETIME;
    let loop_script = script::loop_script(&share, p.kernel.arch);
    let key = Key::of(
        &spec,
        &p.kernel.bootable.release,
        &p.tools.vng,
        &loop_script,
    )?;
    events.note(format!(
        "keeping a guest of {} for `vm-test` in this checkout (same VM options); it stops after \
         {} min without a run, or on Ctrl-C",
        p.kernel.label,
        idle.as_secs() / 60
    ));
    let judge: keeper::Judge = Box::new(|c: &keeper::Check| {
        freshness::judge(&Evidence {
            boot: c.boot,
            now: c.now,
            log: c.log,
            after: c.after,
            log_bytes: c.log_bytes,
        })
    });
    keeper::serve(
        keeper::Keeper {
            spec,
            vng: p.tools.vng.clone(),
            path_prefix: p.tools.path_prefix.clone(),
            key,
            idle,
            judge,
        },
        &dir,
        events,
    )
}
