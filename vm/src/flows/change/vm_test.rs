//! `vm-test --against BASE`: this repository's suite, head in the checkout (as `vm-test`
//! runs), the base by its own `cargo xtask vm-test` in its worktree.
use std::path::PathBuf;

use anyhow::Result;

use super::{base, compare, Against, Suite};
use crate::domain::options;
use crate::flows::run::{self, TestOptions};
use crate::kernel::choice::KernelChoice;
use crate::machine::build;
use crate::results::change::{Change, DIR};
use crate::results::report::Report;
use crate::support::output::Events;
use crate::support::paths::{target_dir, workspace_root};
use crate::support::status::Status;

/// Compares head against `against.base` (a ref of this repository) on every kernel of
/// `kernels`; returns the change and the directory its files are in (`target/vm-test/change/`).
pub fn vm_test_against(
    kernels: &[KernelChoice],
    opts: &TestOptions,
    against: &Against,
    events: &Events,
) -> Result<(Change, PathBuf)> {
    options::check(&opts.vm)?;
    let root = workspace_root();
    let (base, head) = base::revisions(&root, &against.base, "this repository")?;
    compare(&VmTest { opts }, kernels, base, head, against, events)
}

struct VmTest<'a> {
    opts: &'a TestOptions,
}

impl VmTest<'_> {
    fn on(&self, kernel: &KernelChoice) -> TestOptions {
        TestOptions {
            kernel: kernel.clone(),
            piece: None,
            ..self.opts.clone()
        }
    }
}

impl Suite for VmTest<'_> {
    fn out(&self) -> PathBuf {
        target_dir().join(DIR)
    }

    fn head(
        &self,
        kernel: &KernelChoice,
        test: Option<&str>,
        events: &Events,
    ) -> Result<(Report, PathBuf)> {
        let mut opts = self.on(kernel);
        if let Some(t) = test {
            opts.filter = Some(t.to_string());
            opts.fresh = true;
        }
        run::vm_test(&opts, events)
    }

    fn head_error(
        &self,
        kernel: &KernelChoice,
        e: anyhow::Error,
        events: &Events,
    ) -> (Status, String) {
        head_error(&self.on(kernel), e, events)
    }

    fn base(
        &self,
        commit: &str,
        kernel: &KernelChoice,
        label: &str,
        test: Option<&str>,
        events: &Events,
    ) -> Result<Report> {
        let filter = test.or(self.opts.filter.as_deref());
        base::vm_test(commit, kernel, label, &self.opts.vm, filter, events)
    }

    fn verifier(&self) -> bool {
        true
    }

    fn scope(&self) -> String {
        match &self.opts.filter {
            Some(f) => base::scope(&[f]),
            None => base::scope(&[]),
        }
    }
}

/// Why head was not judged, and the status it makes: when head's own build fails (built
/// again here to tell), head cannot be built (125); anything else stops (255).
pub(super) fn head_error(
    opts: &TestOptions,
    e: anyhow::Error,
    events: &Events,
) -> (Status, String) {
    let built = || -> Option<anyhow::Error> {
        let p = run::prepare::prepare_any_arch(&opts.kernel, &opts.vm, events).ok()?;
        let ebpf = match build::build_ebpf(&p.tools.ebpf, events) {
            Ok(dir) => dir,
            Err(e) => return Some(e),
        };
        build::build_guest(&ebpf, p.kernel.arch, &p.tools.ebpf, events).err()
    };
    match built() {
        Some(b) => (Status::Untestable, format!("head cannot be built: {b:#}")),
        None => (Status::Stopped, format!("head cannot be judged: {e:#}")),
    }
}
