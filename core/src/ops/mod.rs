//! Operations: what a person runs around the pipeline. `status` and `doctor` look at a
//! data dir, `install` merges cairn's hooks into Claude Code's settings (`claude_settings`
//! tells which hooks there are cairn's, for install and doctor alike), `exchange`
//! exports and imports JSONL (and exports Markdown), `claude_mem` imports claude-mem's
//! database. `liveness` replaces a worker that holds the lock but is stopped (the hook's
//! autostart asks it).
//!
//! `status`, `doctor` and `install` write nothing (install is pure; the CLI writes the
//! settings file). The importers write `sessions`, `user_prompts`, `observations` and
//! `session_summaries` only through `memory`.
//!
//! Invariants: reads are read-only and take the environment as arguments; importing twice
//! adds nothing; a bad import file writes nothing; the claude-mem source is opened
//! read-only. Sits on top: it may use every stage below, and none of them uses it.

pub mod claude_mem;
pub mod claude_settings;
pub mod doctor;
pub mod exchange;
pub mod install;
pub mod liveness;
pub mod status;
