//! The code shared by cairn's three binaries: command-line parsing, logging setup and exit
//! codes. Decisions live in `cairn_core`; this crate wires them to processes.

pub mod cli;
pub mod entry;
pub mod exit;
pub mod logging;
