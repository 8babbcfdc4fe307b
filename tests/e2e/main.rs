//! End-to-end tests: the real binaries on temp data dirs. One test binary; each area in a
//! module of its own.

mod mcp;
mod recall;
mod support;
