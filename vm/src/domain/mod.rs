//! Domain: the user's VM options, checked before anything is installed or booted.
pub mod arch;
pub mod options;
