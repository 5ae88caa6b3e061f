//! Host side of bpfvm. Each module does one step of a run; see the README's "How a run flows".
pub mod accel;
pub mod bench;
pub mod build;
pub mod custom;
pub mod expect;
pub mod guest;
pub mod input;
pub mod kernels;
pub mod output;
pub mod paths;
pub mod proc;
pub mod provision;
pub mod report;
pub mod run;
pub mod shell;
pub mod ui;
pub mod vng;
