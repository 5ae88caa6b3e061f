//! A [`KernelChoice`] made ready to boot: what the user gave is checked first (a wrong path or
//! pin fails before anything is installed), then the host tools are provisioned and the kernel
//! fetched (a pin, alongside the tools), staged (an image) or configured and built (a tree).
use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::domain::arch::Arch;
use crate::kernel::bootable::Bootable;
use crate::kernel::choice::KernelChoice;
use crate::kernel::expect::Expectation;
use crate::kernel::image;
use crate::kernel::pins;
use crate::kernel::source_tree::{self, TreeInfo};
use crate::machine::provision::{self, Tools};
use crate::support::output::Events;
use crate::support::paths::target_dir;

/// A kernel ready to boot and what the report says of it.
#[derive(Debug, Clone)]
pub struct Ready {
    pub bootable: Bootable,
    /// Names the kernel in reports and output directories: the pin version, `custom-<release>`
    /// or `tree-<release>`.
    pub label: String,
    /// The release the pin promises (none for an image or a tree).
    pub pinned_release: Option<String>,
    /// The BPF features this kernel must have.
    pub expected: Expectation,
    /// The source tree the kernel was built from.
    pub built_from: Option<TreeInfo>,
    /// The kernel's architecture.
    pub arch: Arch,
    /// The root the guest boots into when it cannot run the host's (another architecture's
    /// kernel: its pin's extracted tree, `pins::userland`).
    pub guest_root: Option<PathBuf>,
    /// A tree's build slot, locked while the run uses its build (the selftests build against
    /// its vmlinux and read its `.config`): another run cannot rebuild it meanwhile.
    pub build_lock: Option<source_tree::SlotLock>,
}

/// Makes `choice` ready to boot, provisioning the host tools on the way.
pub fn ready(choice: &KernelChoice, events: &Events) -> Result<(Tools, Ready)> {
    match choice {
        KernelChoice::Pin(pin) => {
            let expected = Expectation::for_pin(pin)?;
            if !pin.arch.boots_host_root() {
                // The root is made with qemu's user-mode emulator while the kernel is fetched.
                provision::ensure_packages(&provision::arch_packages(pin.arch), events)?;
            }
            events.step("checking host tools");
            let (tools, bootable) = provision::ensure_alongside(events, || {
                events.step(format!("kernel {} ({})", pin.version, pin.description));
                pins::fetch(pin, events)
            })?;
            let label = pin.arch.label(&pin.version);
            let guest_root = (!pin.arch.boots_host_root()).then(|| bootable.root.clone());
            let ready = Ready {
                bootable,
                label,
                pinned_release: Some(pin.release.clone()),
                expected,
                built_from: None,
                arch: pin.arch,
                guest_root,
                build_lock: None,
            };
            Ok((tools, ready))
        }
        KernelChoice::Image { path, modules } => {
            let bootable = image::stage(path, modules.as_deref(), &staging())?;
            events.step(format!(
                "custom kernel {} ({})",
                path.display(),
                bootable.release
            ));
            let expected = Expectation::for_release(&bootable.release)?;
            events.step("checking host tools");
            let tools = provision::ensure(events)?;
            let label = format!("custom-{}", bootable.release);
            Ok((tools, of_image(bootable, label, expected, None)))
        }
        KernelChoice::Tree { dir, kconfig } => tree(dir, kconfig, events),
        KernelChoice::TreeRef { dir, rev, kconfig } => {
            let checkout = source_tree::checkout_ref(dir, rev)?;
            events.step(format!(
                "{rev} of {} checked out at {}",
                dir.display(),
                checkout.display()
            ));
            tree(&checkout, kconfig, events)
        }
    }
}

fn tree(dir: &Path, kconfig: &[std::path::PathBuf], events: &Events) -> Result<(Tools, Ready)> {
    // The tree, its state and the fragments first: a wrong path fails before anything is
    // installed.
    let checked = source_tree::check(dir, kconfig)?;
    let expected = Expectation::for_release(checked.kernelversion())?;
    events.step("checking host tools");
    let tools = provision::ensure(events)?;
    let built = source_tree::build(&checked, events)?;
    // Copied out of the build slot: another run's eviction never removes a kernel that boots.
    let bootable = image::stage(&built.image, None, &staging())?;
    events.step(format!(
        "kernel {} built from {}",
        bootable.release,
        dir.display()
    ));
    let label = format!("tree-{}", bootable.release);
    let ready = Ready {
        build_lock: Some(built.lock),
        ..of_image(bootable, label, expected, Some(built.info))
    };
    Ok((tools, ready))
}

fn of_image(
    bootable: Bootable,
    label: String,
    expected: Expectation,
    built_from: Option<TreeInfo>,
) -> Ready {
    Ready {
        bootable,
        label,
        pinned_release: None,
        expected,
        built_from,
        arch: Arch::X86_64,
        guest_root: None,
        build_lock: None,
    }
}

fn staging() -> std::path::PathBuf {
    target_dir().join("custom-kernels")
}
