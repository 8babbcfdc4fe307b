//! Capture: the hook's side of the pipeline. One Claude Code hook event in, its rows out:
//! decoded (`hook`), made a cleaned `record` (`record::prepare`, through `privacy` at the
//! crate root) and written (`record::apply`) in one transaction by the hook's run
//! (`handle`), or spooled to a file when the database cannot take it (`spool`), or kept in
//! the quarantine when it is not a capturable event (`quarantine`). `record` is the plain
//! cleaned event and the one way it becomes rows: the hook, the worker's spool ingestion
//! and transcript imports all write through `record::apply`. `project` names the project
//! of a working directory; `transcript` reads Claude Code's transcripts back into hook
//! events and writes them through `record` (imports, and the worker's reconciliation).
//!
//! Writes `sessions` and `user_prompts` (through `memory::sessions`), `pending_messages`
//! (through `queue::claim::enqueue`), `quarantine`, `transcript_sync` and
//! `transcript_recovered` (their only writer); renders the
//! SessionStart context through `recall::context`.
//!
//! Invariants: one `db::write` per event; nothing is written before the privacy filter
//! ran; the hook never talks to the worker; an event the database cannot take is spooled,
//! already cleaned, and written later by the same `record::apply` (idempotent: dedupe keys,
//! prompt ids). Data flows down into the queue and memory; the worker drives the spool's
//! ingestion, so nothing here imports the worker.

pub mod fingerprints;
pub mod handle;
pub mod hook;
pub mod project;
pub mod quarantine;
pub mod record;
pub mod spool;
pub mod tell;
#[cfg(test)]
pub(crate) mod testing;
pub mod transcript;
