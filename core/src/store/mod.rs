//! The store: where cairn keeps its files and how it opens the database. Everything above
//! reads and writes through it.
//!
//! Owns the data dir layout (`paths`), connections, pragmas and migrations (`db`), the
//! SQL function every connection has for the best full-text matches (`bm25`), the
//! worker's single-instance lock (`lock`), the record of what went wrong
//! outside the database (`incidents`: events hooks could not keep, notices of repairs), the
//! private place hook events go when the data dir cannot take them (`fallback`) and online
//! backups and restores (`backup`).
//! Writes no table of its own: `db::migrate` creates the schema, and `backup::restore`
//! replaces the whole database file.
//!
//! Invariants: the data dir is `0700` and the database `0600`; every connection sets
//! `busy_timeout` first, then WAL, `foreign_keys=ON`, `synchronous=NORMAL`; every write is
//! one `BEGIN IMMEDIATE` transaction through `db::write`; a newer schema or a foreign
//! database is refused untouched; a backup file that exists is complete. Imports only the
//! leaves at the crate root.

pub mod backup;
pub mod bm25;
pub mod db;
pub mod fallback;
pub mod incidents;
pub mod lock;
pub mod paths;
pub mod recover;
pub mod repair;
