//! The queue: the durable hand-over between the hook (producer) and the worker (consumer).
//!
//! Owns the `pending_messages` and `job_errors` tables: `claim` is a job's life (enqueue,
//! claim, ack, fail, release, heartbeat, rescue), `admin` what a person decides about
//! skipped jobs (replay, discard) and the purge of done ones, `stats` the reads (list, show,
//! counts). Also the `workers` table (`workers`) and what a job carries between the two
//! processes (`payload`). The only writer of those tables.
//!
//! Invariants: a job moves `pending → claimed → done`, back to `pending` on a failed
//! attempt, `skipped` after `max_attempts`; a claim is one `BEGIN IMMEDIATE` transaction
//! ending in one guarded `UPDATE … RETURNING`; one in-flight batch per session, so a
//! turn's summary follows its observations; every change to a claimed job is fenced by
//! its batch's claim token; no automatic step removes an unprocessed event. Reads the
//! store only; knows nothing of capture, the worker or memory.

pub mod admin;
pub mod claim;
pub mod payload;
pub mod stats;
pub mod workers;
