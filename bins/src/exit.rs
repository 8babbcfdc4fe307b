//! Exit codes, in one place, and the one-line error message printed before exit 2.

use std::process::ExitCode;

/// Success; for queries, at least one result.
pub const OK: u8 = 0;
/// The command worked but the answer is negative: no results (like grep), or `cairn status`
/// found something that needs attention.
pub const NEGATIVE: u8 = 1;
/// The command failed: bad arguments, missing or unusable database, I/O error.
pub const ERROR: u8 = 2;

pub fn code(c: u8) -> ExitCode {
    ExitCode::from(c)
}

/// The error and its causes on one line.
pub fn chain(e: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in e.chain() {
        let s = cause.to_string();
        if !parts.iter().any(|p| p.contains(&s)) {
            parts.push(s);
        }
    }
    parts.join(": ")
}
