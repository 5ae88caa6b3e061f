//! Flows: each runs a command from start to end (prepare, build, boot, judge, write), calling the layers below in sequence.
pub mod bench;
pub mod change;
pub mod crate_test;
pub mod exec;
pub mod interactive;
pub mod pieces;
pub mod run;
pub mod selftests;
#[cfg(test)]
mod status_table;
pub mod vm_guest;
