#![warn(unreachable_pub)]
//! Host side of bpfvm, in layers: each folder imports only from the folders below it, and
//! `vm/tests/layers.rs` fails when an import runs upward or two modules, or two parts of one
//! module's folder, import each other.
//! Imports name their layer (`crate::kernel::pins`), so a reader sees the layers the test
//! enforces. See `docs/architecture.md`.
//!
//! | layer | modules | what they are |
//! | --- | --- | --- |
//! | `flows` | `run`, `exec`, `crate_test`, `interactive`, `bench`, `pieces`, `selftests`, `vm_guest`, `change` | a command from start to end: prepare, build, boot, judge, write |
//! | `results` | `report`, `health`, `inventory`, `costs`, `plan`, `merge`, `verifier`, `upstream`, `bench`, `freshness`, `change` | the guest's files and kernel log turned into verdicts and rendered; the verifier's statistics, baselines and matrix; the kernel's own selftests' output; a run cut into pieces by cost and the pieces merged; the benchmarks' figures and comparisons; whether a kept guest is as its boot left it; what a change did against its base |
//! | `kernel` | `choice`, `pins`, `image`, `source_tree`, `expect`, `ready` | which kernel to boot, parsed once, made ready to boot: pinned packages, a user's image, a source tree built; what each kernel must have |
//! | `machine` | `provision`, `build`, `accel`, `tcg_thread`, `guest`, `qemu`, `vng`, `warm_guest` | what installs, builds the guest code and boots |
//! | `domain` | `options` | the user's VM options checked |
//! | `support` | `paths`, `fs`, `shell`, `proc`, `wait`, `output`, `guest_files`, `status` | leaves: files, processes, events, exit statuses |
//!
//! `ui` renders the events for the CLIs; nothing in the library imports it.
pub mod domain;
pub mod flows;
pub mod kernel;
pub mod machine;
pub mod results;
pub mod support;
pub mod ui;
