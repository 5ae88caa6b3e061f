//! Support: leaves every layer uses: paths, atomic writes, shell quoting, process groups, polled waits, events, bounded reads of guest files.
pub mod fs;
pub mod guest_files;
pub mod output;
pub mod paths;
pub mod proc;
pub mod shell;
pub mod status;
pub mod wait;
