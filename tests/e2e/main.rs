//! End-to-end tests: the real binaries on temp data dirs. One test binary; each area in a
//! module of its own.

mod browser;
mod canaries;
mod demo;
mod embed;
mod faults;
mod first_contact;
mod hook;
mod install;
mod liveness;
mod losses;
mod mcp;
mod ops;
mod pipeline;
mod plugin;
mod prompt_recall;
mod recall;
mod recovery;
mod secrets;
mod support;
mod sync;
mod terminal;
mod transcripts;
mod ui;
mod worker;
