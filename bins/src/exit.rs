//! Exit codes, in one place.

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
