#![warn(unreachable_pub)]
//! Host side of bpfvm, in layers: each folder imports only from the folders below it, and
//! `vm/tests/layers.rs` fails when an import runs upward or two modules import each other. See
//! `docs/architecture.md`.
//!
//! | layer | modules | what they are |
//! | --- | --- | --- |
//! | `flows` | `run`, `exec`, `crate_test`, `interactive`, `bench` | a command from start to end: prepare, build, boot, judge, write |
//! | `results` | `report`, `health`, `verifier` | the guest's files and kernel log turned into verdicts and rendered; the verifier's statistics, baselines and matrix |
//! | `machine` | `provision`, `build`, `kernel_tree`, `accel`, `guest`, `qemu`, `vng` | what installs, builds and boots |
//! | `domain` | `options`, `kernels`, `custom`, `expect` | the user's input checked, pins, kernel trees, expectations |
//! | `support` | `paths`, `fs`, `shell`, `proc`, `wait`, `output`, `guest_files` | leaves: files, processes, events |
//!
//! `ui` renders the events for the CLIs; nothing in the library imports it.
mod domain;
mod flows;
mod machine;
mod results;
mod support;
pub mod ui;

pub use domain::{custom, expect, kernels, options};
pub use flows::{bench, crate_test, exec, interactive, run};
pub use machine::{accel, build, guest, kernel_tree, provision, qemu, tcg_thread, vng};
pub use results::{health, inventory, report, verifier};
pub use support::{fs, guest_files, output, paths, proc, shell, wait};
