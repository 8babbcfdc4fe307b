//! This device's side of sync in the local store (migration 0011): its place in the space
//! (`sync_state`), the outbox of sealed records not yet acknowledged (`sync_outbox`), what
//! went into or came out of a log (`sync_rows`), and how far each other device's log was
//! read (`sync_devices`). The only writer of those tables. Memories themselves are written
//! through `memory`, like any other writer's.

use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::hex::{hex, unhex};
use crate::memory::forget::{self, Memory};
use crate::memory::forgotten::{self, Key};
use crate::memory::kind::Kind;
use crate::memory::observations::{self, NewObservation, NewSummary};
use crate::memory::rows::ObservationContent;
use crate::memory::sessions::{self, PromptRecord, SessionRecord};
use crate::recall::embed::store::{self as vectors, Carried};

/// What one record of a log says, sealed before it leaves the device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Record {
    /// A session (project, start, end): another device's session reads as a history.
    /// Merged, never replaced: the earlier start and the later end win.
    Session { s: SessionRecord },
    /// A user prompt, only with `sync.prompts`.
    Prompt { p: PromptRecord },
    Observation {
        o: NewObservation,
        /// Its vector, when it has one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        v: Option<Vector>,
    },
    /// A turn summary; a later record of the same turn supersedes it.
    Summary {
        s: NewSummary,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        v: Option<Vector>,
    },
    /// A tombstone: the `forgotten` row `(kind, key)`, applied by every device.
    Forget { kind: String, key: String },
}

/// A memory's vector as a record carries it: the model that made it, and its sign bits,
/// int8 components and its parts' int8 components in hex (a record of a cairn from before
/// parts has none). Kept by a device whose vectors come from the same model; any other
/// embeds the memory itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vector {
    pub model: String,
    pub bits: String,
    pub vector: String,
    #[serde(default)]
    pub parts: String,
}

impl Vector {
    fn of(c: Carried) -> Self {
        Vector {
            model: c.model,
            bits: hex(&c.bits),
            vector: hex(&c.vector),
            parts: hex(&c.parts),
        }
    }

    /// `None` when the hex is damaged: the memory is then embedded here.
    fn carried(&self) -> Option<Carried> {
        Some(Carried {
            model: self.model.clone(),
            bits: unhex(&self.bits)?,
            vector: unhex(&self.vector)?,
            parts: unhex(&self.parts)?,
        })
    }
}

/// A record with the name of the device that wrote it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    pub device_name: String,
    pub record: Record,
}

impl Record {
    /// `(kind, origin id)` in `sync_rows`, and the content hash to compare.
    fn origin(&self) -> (&'static str, String, String) {
        match self {
            Record::Session { s } => (
                SESSION,
                s.session_id.clone(),
                session_hash(s.started_at, s.ended_at),
            ),
            Record::Prompt { p } => {
                let (_, key) =
                    Key::prompt(&p.session_id, p.prompt_id.as_deref(), p.prompt_number).stored();
                (PROMPT, key, String::new())
            }
            Record::Observation { o, .. } => {
                let hash = o.content_hash();
                (
                    OBSERVATION,
                    format!("{}:{hash}", o.session_id.as_deref().unwrap_or("")),
                    hash,
                )
            }
            Record::Summary { s, .. } => (
                SUMMARY,
                format!("{}:{}", s.session_id, s.prompt_number),
                s.content_hash(),
            ),
            Record::Forget { kind, key } => (FORGET, format!("{kind} {key}"), String::new()),
        }
    }
}

const SESSION: &str = "session";
const PROMPT: &str = "prompt";
const OBSERVATION: &str = "observation";
const SUMMARY: &str = "summary";
const FORGET: &str = "forget";

/// Keys of `sync_state`.
pub const SPACE: &str = "space";
pub const DEVICE: &str = "device";
pub const DEVICE_NAME: &str = "device_name";
/// The host this device entered its space on, or last went on as a new device on.
pub const DEVICE_HOST: &str = "device_host";
pub const NEXT_SEQ: &str = "next_seq";
pub const LAST_PUSH: &str = "last_push_at";
pub const LAST_PULL: &str = "last_pull_at";
pub const LAST_ERROR: &str = "last_error";
/// This data dir's earlier ids, space-separated: the logs it wrote before it went on as a
/// new device ([`become_device`]) or left its space ([`leave`]).
pub const FORMER_DEVICES: &str = "former_devices";

pub fn get(conn: &Connection, key: &str) -> Result<Option<String>> {
    Ok(conn
        .prepare_cached("SELECT value FROM sync_state WHERE key = ?1")?
        .query_row([key], |r| r.get(0))
        .optional()?)
}

pub fn set(tx: &Transaction, key: &str, value: &str) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO sync_state (key, value) VALUES (?1, ?2)
         ON CONFLICT (key) DO UPDATE SET value = excluded.value",
    )?
    .execute([key, value])?;
    Ok(())
}

/// Which projects sync: all, or those named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Projects {
    All,
    Named(Vec<String>),
}

impl Projects {
    pub fn from_setting(list: &[String]) -> Self {
        if list.iter().any(|p| p == "*") {
            Projects::All
        } else {
            Projects::Named(list.to_vec())
        }
    }

    fn sql_args(&self) -> (bool, String) {
        match self {
            Projects::All => (true, "[]".into()),
            Projects::Named(l) => (
                false,
                serde_json::to_string(l).unwrap_or_else(|_| "[]".into()),
            ),
        }
    }
}

/// What of a session a record carries that can change: its start and its end (both merge
/// one way, so two devices stop sending once they agree). [`unsent`] compares the same
/// text built in SQL.
fn session_hash(started_at: i64, ended_at: Option<i64>) -> String {
    format!("{started_at}:{}", ended_at.unwrap_or(0))
}

fn list(text: String) -> Vec<String> {
    serde_json::from_str(&text).unwrap_or_default()
}

// What no log carries yet, as `FROM … WHERE …` with the projects as `?1` (all) and `?2`
// (a JSON list): one text for [`unsent`], which stages it, and [`unsent_count`], which
// counts it for `status` and `leave`.
macro_rules! unsent_sessions {
    () => {
        "FROM sessions m
         WHERE (?1 OR project IN (SELECT value FROM json_each(?2)))
           AND NOT EXISTS (SELECT 1 FROM sync_rows s WHERE s.kind = 'session'
                           AND s.origin = m.session_id
                           AND s.hash = m.started_at || ':' || coalesce(m.ended_at, 0))"
    };
}
macro_rules! unsent_prompts {
    () => {
        "FROM user_prompts p
         WHERE (?1 OR project IN (SELECT value FROM json_each(?2)))
           AND NOT EXISTS (SELECT 1 FROM sync_rows s WHERE s.kind = 'prompt'
                           AND s.origin = p.session_id || ':'
                               || coalesce(p.prompt_id, '#' || p.prompt_number))"
    };
}
macro_rules! unsent_observations {
    () => {
        "FROM observations o
         WHERE (?1 OR project IN (SELECT value FROM json_each(?2)))
           AND NOT EXISTS (SELECT 1 FROM sync_rows s WHERE s.kind = 'observation'
                           AND s.origin = coalesce(o.session_id, '') || ':' || o.content_hash)"
    };
}
macro_rules! unsent_summaries {
    () => {
        "FROM session_summaries m
         WHERE (?1 OR project IN (SELECT value FROM json_each(?2)))
           AND NOT EXISTS (SELECT 1 FROM sync_rows s WHERE s.kind = 'summary'
                           AND s.origin = m.session_id || ':' || m.prompt_number
                           AND s.hash = m.content_hash)"
    };
}
// Only tombstones of memories that went into a log: what never left never leaves. Takes
// no parameters.
macro_rules! unsent_forgets {
    () => {
        "FROM forgotten f
         WHERE EXISTS (SELECT 1 FROM sync_rows s
                       WHERE s.kind = CASE f.kind WHEN 'observation_hash' THEN 'observation'
                                                  WHEN 'summary' THEN 'summary'
                                                  WHEN 'prompt' THEN 'prompt' END
                         AND s.origin = f.key)
           AND NOT EXISTS (SELECT 1 FROM sync_rows s
                           WHERE s.kind = 'forget' AND s.origin = f.kind || ' ' || f.key)"
    };
}

/// How many records [`unsent`] would stage now, without building them.
pub fn unsent_count(conn: &Connection, projects: &Projects, prompts: bool) -> Result<i64> {
    let (all, named) = projects.sql_args();
    let count = |sql: &str| -> Result<i64> {
        Ok(conn
            .prepare_cached(sql)?
            .query_row(params![all, named], |r| r.get(0))?)
    };
    let mut n = count(concat!("SELECT count(*) ", unsent_sessions!()))?
        + count(concat!("SELECT count(*) ", unsent_observations!()))?
        + count(concat!("SELECT count(*) ", unsent_summaries!()))?;
    if prompts {
        n += count(concat!("SELECT count(*) ", unsent_prompts!()))?;
    }
    n += conn
        .prepare_cached(concat!("SELECT count(*) ", unsent_forgets!()))?
        .query_row([], |r| r.get::<_, i64>(0))?;
    Ok(n)
}

/// The stored sessions and memories of synced projects (prompts only when `prompts`) and
/// the tombstones of synced memories that no log carries yet (or, for a summary or a
/// session, carries in an older version), as records; sessions first, so that a device
/// applying them in order knows a session before its memories.
pub fn unsent(tx: &Transaction, projects: &Projects, prompts: bool) -> Result<Vec<Record>> {
    let (all, named) = projects.sql_args();
    let mut out = Vec::new();
    let mut stmt = tx.prepare_cached(concat!(
        "SELECT session_id, project, prompt_counter, status, started_at, updated_at, ended_at ",
        unsent_sessions!(),
        " ORDER BY started_at, session_id"
    ))?;
    let rows = stmt.query_map(params![all, named], |r| {
        Ok(SessionRecord {
            session_id: r.get(0)?,
            project: r.get(1)?,
            // Where the session ran is this machine's business.
            cwd: String::new(),
            prompt_counter: r.get(2)?,
            status: r.get(3)?,
            started_at: r.get(4)?,
            updated_at: r.get(5)?,
            ended_at: r.get(6)?,
        })
    })?;
    for s in rows {
        out.push(Record::Session { s: s? });
    }
    if prompts {
        // A prompt's origin is its tombstone's key (`forgotten::Key::prompt`), built here.
        let mut stmt = tx.prepare_cached(concat!(
            "SELECT session_id, project, prompt_number, prompt_id, prompt_text, created_at ",
            unsent_prompts!(),
            " ORDER BY id"
        ))?;
        let rows = stmt.query_map(params![all, named], |r| {
            Ok(PromptRecord {
                session_id: r.get(0)?,
                project: r.get(1)?,
                prompt_number: r.get(2)?,
                prompt_id: r.get(3)?,
                prompt_text: r.get(4)?,
                created_at: r.get(5)?,
            })
        })?;
        for p in rows {
            out.push(Record::Prompt { p: p? });
        }
    }
    let mut stmt = tx.prepare_cached(
        concat!(
            "SELECT session_id, project, prompt_number, type, original_type, title, subtitle,
                    narrative, facts, concepts, files_read, files_modified, origin, created_at, id ",
            unsent_observations!(),
            " ORDER BY id"
        ),
    )?;
    let rows = stmt.query_map(params![all, named], |r| {
        let id: i64 = r.get(14)?;
        Ok((
            id,
            NewObservation {
                session_id: r.get(0)?,
                project: r.get(1)?,
                prompt_number: r.get(2)?,
                kind: r.get(3)?,
                original_type: r.get(4)?,
                content: ObservationContent {
                    title: r.get(5)?,
                    subtitle: r.get(6)?,
                    narrative: r.get(7)?,
                    facts: list(r.get(8)?),
                    concepts: list(r.get(9)?),
                    files_read: list(r.get(10)?),
                    files_modified: list(r.get(11)?),
                },
                source_job_ids: Vec::new(),
                origin: r.get(12)?,
                created_at: r.get(13)?,
            },
        ))
    })?;
    for row in rows {
        let (id, o) = row?;
        let v = vectors::carried(tx, Kind::Observation, id)?.map(Vector::of);
        out.push(Record::Observation { o, v });
    }
    let mut stmt = tx.prepare_cached(concat!(
        "SELECT session_id, project, prompt_number, request, investigated, learned, completed,
                    next_steps, notes, files_read, files_edited, origin, created_at, id ",
        unsent_summaries!(),
        " ORDER BY id"
    ))?;
    let rows = stmt.query_map(params![all, named], |r| {
        let id: i64 = r.get(13)?;
        Ok((
            id,
            NewSummary {
                session_id: r.get(0)?,
                project: r.get(1)?,
                prompt_number: r.get(2)?,
                request: r.get(3)?,
                investigated: r.get(4)?,
                learned: r.get(5)?,
                completed: r.get(6)?,
                next_steps: r.get(7)?,
                notes: r.get(8)?,
                files_read: list(r.get(9)?),
                files_edited: list(r.get(10)?),
                source_job_ids: Vec::new(),
                origin: r.get(11)?,
                created_at: r.get(12)?,
            },
        ))
    })?;
    for row in rows {
        let (id, s) = row?;
        let v = vectors::carried(tx, Kind::Summary, id)?.map(Vector::of);
        out.push(Record::Summary { s, v });
    }
    let mut stmt = tx.prepare_cached(concat!(
        "SELECT kind, key ",
        unsent_forgets!(),
        " ORDER BY forgotten_at, kind, key"
    ))?;
    let rows = stmt.query_map([], |r| {
        Ok(Record::Forget {
            kind: r.get(0)?,
            key: r.get(1)?,
        })
    })?;
    for f in rows {
        out.push(f?);
    }
    Ok(out)
}

/// Notes that `record` is in `device`'s log (so it is not sent again).
pub fn mark(tx: &Transaction, record: &Record, device: &str) -> Result<()> {
    let (kind, origin, hash) = record.origin();
    tx.prepare_cached(
        "INSERT INTO sync_rows (kind, origin, device, hash) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (kind, origin) DO UPDATE SET device = excluded.device, hash = excluded.hash",
    )?
    .execute(params![kind, origin, device, hash])?;
    Ok(())
}

/// Notes that `record` came from `device`'s log; a memory already listed with the same
/// content keeps the device it was listed with (the same words saved on two machines stay
/// this machine's own here).
fn mark_pulled(tx: &Transaction, record: &Record, device: &str) -> Result<()> {
    let (kind, origin, hash) = record.origin();
    tx.prepare_cached(
        "INSERT INTO sync_rows (kind, origin, device, hash) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (kind, origin) DO UPDATE SET hash = excluded.hash,
             device = CASE WHEN sync_rows.hash = excluded.hash THEN sync_rows.device
                           ELSE excluded.device END",
    )?
    .execute(params![kind, origin, device, hash])?;
    Ok(())
}

/// Takes the next sequence number of this device's log.
pub fn next_seq(tx: &Transaction) -> Result<i64> {
    take_seqs(tx, 1)
}

/// Takes the next `n` sequence numbers of this device's log; returns the first.
pub fn take_seqs(tx: &Transaction, n: usize) -> Result<i64> {
    let seq = next_untaken(tx)?;
    set(tx, NEXT_SEQ, &(seq + n as i64).to_string())?;
    Ok(seq)
}

/// The sequence number this device takes next (1 before its first).
fn next_untaken(conn: &Connection) -> Result<i64> {
    Ok(get(conn, NEXT_SEQ)?
        .and_then(|v| v.parse().ok())
        .unwrap_or(1))
}

/// Fails unless this store is still in `space`: a `cairn sync leave` may have taken it out
/// while a worker's step was under way, whose writes would then mark memories as sent to
/// a space they never reach.
pub fn ensure_in(tx: &Transaction, space: &str) -> Result<()> {
    match get(tx, SPACE)? {
        Some(s) if s == space => Ok(()),
        _ => Err(crate::Error::Invalid(format!(
            "this data dir left sync space {space}"
        ))),
    }
}

/// Puts this store in `space` as `device` named `name`.
pub fn enter(tx: &Transaction, space: &str, device: &str, name: &str, host: &str) -> Result<()> {
    set(tx, SPACE, space)?;
    set(tx, DEVICE, device)?;
    set(tx, DEVICE_NAME, name)?;
    set(tx, DEVICE_HOST, host)
}

/// Forgets this device's place in its space: its state, outbox, what went into or came
/// out of logs, and the cursors. The memories stay, as this store's own, so a space joined
/// next receives them all. Its id joins the data dir's earlier ones ([`FORMER_DEVICES`]):
/// rejoined, the space holds its old log.
pub fn leave(tx: &Transaction) -> Result<()> {
    let device = get(tx, DEVICE)?;
    let former = get(tx, FORMER_DEVICES)?;
    tx.execute_batch(
        "DELETE FROM sync_state; DELETE FROM sync_outbox; DELETE FROM sync_rows;
         DELETE FROM sync_devices;",
    )?;
    if let Some(former) = former {
        set(tx, FORMER_DEVICES, &former)?;
    }
    match device {
        Some(device) => add_former(tx, &device),
        None => Ok(()),
    }
}

/// The last sequence number this device took (0 before its first).
pub fn numbered(conn: &Connection) -> Result<i64> {
    Ok(next_untaken(conn)? - 1)
}

/// Makes this device `new` in its space, when the server holds records of its old log
/// that it did not write as they are there (its store was restored from a backup, or
/// copied to another machine): its outbox renumbered from 1 and resealed by
/// `reseal(old seq, body, new seq)`, its numbering restarted after that, and what its old
/// log carried counted as the new device's own. The old log is then another device's, read
/// from its start like any other: what the restored store lacks comes back from it.
pub fn become_device(
    tx: &Transaction,
    new: &str,
    mut reseal: impl FnMut(i64, &[u8], i64) -> Result<Vec<u8>>,
) -> Result<()> {
    let old = get(tx, DEVICE)?.unwrap_or_default();
    let queued: Vec<(i64, Vec<u8>, i64)> = tx
        .prepare_cached("SELECT seq, body, created_at FROM sync_outbox ORDER BY seq")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    tx.execute("DELETE FROM sync_outbox", [])?;
    let mut next = 1;
    for (seq, body, created_at) in queued {
        queue(tx, next, &reseal(seq, &body, next)?, created_at)?;
        next += 1;
    }
    set(tx, NEXT_SEQ, &next.to_string())?;
    tx.execute(
        "UPDATE sync_rows SET device = ?1 WHERE device = ?2",
        [new, old.as_str()],
    )?;
    add_former(tx, &old)?;
    set(tx, DEVICE, new)
}

/// Counts `device` among this data dir's earlier ids (see [`FORMER_DEVICES`]).
fn add_former(tx: &Transaction, device: &str) -> Result<()> {
    let mut former = former_devices(tx)?;
    if device.is_empty() || former.iter().any(|d| d == device) {
        return Ok(());
    }
    former.push(device.to_string());
    set(tx, FORMER_DEVICES, &former.join(" "))
}

/// This data dir's earlier ids in its space (see [`FORMER_DEVICES`]).
pub fn former_devices(conn: &Connection) -> Result<Vec<String>> {
    Ok(get(conn, FORMER_DEVICES)?
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect())
}

pub fn queue(tx: &Transaction, seq: i64, body: &[u8], now: i64) -> Result<()> {
    tx.prepare_cached("INSERT INTO sync_outbox (seq, body, created_at) VALUES (?1, ?2, ?3)")?
        .execute(params![seq, body, now])?;
    Ok(())
}

/// Up to `limit` records of the outbox, oldest first.
pub fn outbox(conn: &Connection, limit: i64) -> Result<Vec<(i64, Vec<u8>)>> {
    Ok(conn
        .prepare_cached("SELECT seq, body FROM sync_outbox ORDER BY seq LIMIT ?1")?
        .query_map([limit], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?)
}

pub fn outbox_len(conn: &Connection) -> Result<i64> {
    Ok(conn
        .prepare_cached("SELECT count(*) FROM sync_outbox")?
        .query_row([], |r| r.get(0))?)
}

/// Drops the outbox records up to `seq`: the server holds them.
pub fn acknowledge(tx: &Transaction, seq: i64) -> Result<()> {
    tx.prepare_cached("DELETE FROM sync_outbox WHERE seq <= ?1")?
        .execute([seq])?;
    Ok(())
}

/// How far `device`'s log was read.
pub fn cursor(conn: &Connection, device: &str) -> Result<i64> {
    Ok(conn
        .prepare_cached("SELECT seq FROM sync_devices WHERE device = ?1")?
        .query_row([device], |r| r.get(0))
        .optional()?
        .unwrap_or(0))
}

fn advance(tx: &Transaction, device: &str, name: &str, seq: i64) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO sync_devices (device, name, seq) VALUES (?1, ?2, ?3)
         ON CONFLICT (device) DO UPDATE SET name = excluded.name, seq = max(seq, excluded.seq)",
    )?
    .execute(params![device, name, seq])?;
    Ok(())
}

/// The other devices seen: id, name, how far their log was read.
pub fn devices(conn: &Connection) -> Result<Vec<(String, String, i64)>> {
    Ok(conn
        .prepare_cached("SELECT device, name, seq FROM sync_devices ORDER BY device")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?)
}

/// What applying one record changed, and to which memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Applied {
    Added(Memory),
    Forgot(Memory),
    #[default]
    Nothing,
}

/// Applies record `seq` of `device`'s log and moves the cursor past it, in one transaction
/// with the memory it writes: a pull cut short resumes exactly where it stopped.
pub fn apply(
    tx: &Transaction,
    device: &str,
    seq: i64,
    env: &Envelope,
    now: i64,
) -> Result<Applied> {
    let applied = match &env.record {
        // A session is where memories live, not one: it counts as nothing added.
        Record::Session { s } => {
            sessions::merge(tx, s)?;
            Applied::Nothing
        }
        Record::Prompt { p } => {
            if forgotten::prompt_forgotten(tx, p)? {
                Applied::Nothing
            } else {
                sessions::ensure(tx, &p.session_id, &p.project, "", p.created_at)?;
                if sessions::import_prompt(tx, p)? {
                    Applied::Added(Memory::Prompt(tx.last_insert_rowid()))
                } else {
                    Applied::Nothing
                }
            }
        }
        Record::Observation { o, v } => {
            if forgotten::observation_forgotten(tx, o)? {
                Applied::Nothing
            } else {
                if let Some(sid) = &o.session_id {
                    sessions::ensure(tx, sid, &o.project, "", o.created_at)?;
                }
                match observations::save_manual(tx, o)? {
                    observations::Stored::Added(id) => {
                        keep_vector(tx, v, Kind::Observation, id, &o.project, o.created_at)?;
                        Applied::Added(Memory::Observation(id))
                    }
                    observations::Stored::Duplicate(_) => Applied::Nothing,
                }
            }
        }
        Record::Summary { s, v } => {
            if forgotten::summary_forgotten(tx, s)? {
                Applied::Nothing
            } else {
                sessions::ensure(tx, &s.session_id, &s.project, "", s.created_at)?;
                match observations::upsert_summary(tx, s)? {
                    observations::Stored::Added(id) => {
                        keep_vector(tx, v, Kind::Summary, id, &s.project, s.created_at)?;
                        Applied::Added(Memory::Summary(id))
                    }
                    observations::Stored::Duplicate(_) => Applied::Nothing,
                }
            }
        }
        Record::Forget { kind, key } => match Key::parse(kind, key) {
            Some(k) => forget_key(tx, &k, now)?,
            None => Applied::Nothing,
        },
    };
    mark_pulled(tx, &env.record, device)?;
    advance(tx, device, &env.device_name, seq)?;
    Ok(applied)
}

/// Keeps the vector a pulled memory came with, when this store's vectors come from the
/// same model; else the memory stays in the embedding queue (its insert put it there).
fn keep_vector(
    tx: &Transaction,
    v: &Option<Vector>,
    kind: Kind,
    id: i64,
    project: &str,
    created_at: i64,
) -> Result<()> {
    if let Some(c) = v.as_ref().and_then(Vector::carried) {
        vectors::keep_carried(tx, kind, id, project, created_at, &c)?;
    }
    Ok(())
}

fn forget_key(tx: &Transaction, key: &Key, now: i64) -> Result<Applied> {
    let id: Option<i64> = match *key {
        Key::Observation {
            session_id,
            content_hash,
        } => tx
            .prepare_cached(
                "SELECT id FROM observations WHERE session_id IS ?1 AND content_hash = ?2",
            )?
            .query_row(params![session_id, content_hash], |r| r.get(0))
            .optional()?,
        Key::Summary {
            session_id,
            prompt_number,
        } => tx
            .prepare_cached(
                "SELECT id FROM session_summaries WHERE session_id = ?1 AND prompt_number = ?2",
            )?
            .query_row(params![session_id, prompt_number], |r| r.get(0))
            .optional()?,
        Key::Prompt { session_id, prompt } => {
            let (prompt_id, number) = match prompt {
                forgotten::PromptRef::Id(id) => (Some(id), None),
                forgotten::PromptRef::Number(n) => (None, Some(n)),
            };
            tx.prepare_cached(
                "SELECT id FROM user_prompts WHERE session_id = ?1
                   AND (prompt_id = ?2 OR (?2 IS NULL AND prompt_id IS NULL AND prompt_number = ?3))",
            )?
            .query_row(params![session_id, prompt_id, number], |r| r.get(0))
            .optional()?
        }
        _ => None,
    };
    let memory = match (key, id) {
        (Key::Observation { .. }, Some(id)) => Memory::Observation(id),
        (Key::Summary { .. }, Some(id)) => Memory::Summary(id),
        (Key::Prompt { .. }, Some(id)) => Memory::Prompt(id),
        _ => {
            forgotten::forget(tx, key, now)?;
            return Ok(Applied::Nothing);
        }
    };
    forget::forget(tx, &[memory], now)?;
    Ok(Applied::Forgot(memory))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::origin::{any_devices, device_of};
    use crate::store::db;

    fn store(dir: &std::path::Path, name: &str) -> Connection {
        db::open(&dir.join(name), db::OpenOptions::default()).expect("db")
    }

    fn summary(learned: &str) -> NewSummary {
        NewSummary {
            session_id: "s1".into(),
            project: "p".into(),
            prompt_number: 1,
            learned: learned.into(),
            origin: "model".into(),
            created_at: 5,
            ..NewSummary::default()
        }
    }

    fn observation(project: &str, title: &str) -> NewObservation {
        NewObservation {
            session_id: Some("s1".into()),
            project: project.into(),
            kind: "discovery".into(),
            origin: "model".into(),
            created_at: 5,
            content: ObservationContent {
                title: title.into(),
                ..ObservationContent::default()
            },
            ..NewObservation::default()
        }
    }

    /// Stages what `from` has not sent (as device "a") and applies it to `to`.
    fn carry(
        from: &mut Connection,
        to: &mut Connection,
        seq: &mut i64,
        projects: &Projects,
    ) -> usize {
        let records = db::write(from, |tx| {
            let r = unsent(tx, projects, false)?;
            for rec in &r {
                mark(tx, rec, "a")?;
            }
            Ok(r)
        })
        .expect("stage");
        db::write(to, |tx| {
            for r in &records {
                *seq += 1;
                let env = Envelope {
                    device_name: "laptop".into(),
                    record: r.clone(),
                };
                apply(tx, "a", *seq, &env, 9)?;
            }
            Ok(())
        })
        .expect("apply");
        records.len()
    }

    fn count(c: &Connection, sql: &str) -> i64 {
        c.query_row(sql, [], |r| r.get(0)).expect(sql)
    }

    #[test]
    fn records_carry_memories_supersede_summaries_and_forget_everywhere() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (mut a, mut b) = (store(tmp.path(), "a.db"), store(tmp.path(), "b.db"));
        let only_p = Projects::from_setting(&["p".to_string()]);
        let mut seq = 0;
        db::write(&mut a, |tx| {
            sessions::ensure(tx, "s1", "p", "/w", 1)?;
            observations::insert_observation(tx, &observation("p", "shared"))?;
            observations::insert_observation(tx, &observation("q", "kept home"))?;
            observations::upsert_summary(tx, &summary("first version"))?;
            Ok(())
        })
        .expect("seed");
        // The session, the observation of p and the summary; not the observation of q.
        assert_eq!(carry(&mut a, &mut b, &mut seq, &only_p), 3);
        assert_eq!(count(&b, "SELECT count(*) FROM observations"), 1);
        assert_eq!(count(&b, "SELECT count(*) FROM session_summaries"), 1);
        // Nothing new, nothing staged; the same records again change nothing.
        assert_eq!(carry(&mut a, &mut b, &mut seq, &only_p), 0);

        // A summary redone is staged again and supersedes the first on the other side.
        db::write(&mut a, |tx| {
            observations::upsert_summary(tx, &summary("second version"))
        })
        .expect("redo");
        assert_eq!(carry(&mut a, &mut b, &mut seq, &only_p), 1);
        let learned: String = b
            .query_row("SELECT learned FROM session_summaries", [], |r| r.get(0))
            .expect("summary");
        assert_eq!(learned, "second version");
        let sid: i64 = b
            .query_row("SELECT id FROM session_summaries", [], |r| r.get(0))
            .expect("summary id");
        assert!(any_devices(&b).expect("any"));
        assert!(!any_devices(&a).expect("any"));
        assert_eq!(
            device_of(&b, Kind::Summary, sid)
                .expect("device")
                .as_deref(),
            Some("laptop")
        );

        // Forgetting on a carries the tombstones of synced memories only.
        db::write(&mut a, |tx| {
            let ids: Vec<i64> = tx
                .prepare("SELECT id FROM observations")?
                .query_map([], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            let sid: i64 = tx.query_row("SELECT id FROM session_summaries", [], |r| r.get(0))?;
            let mut all: Vec<Memory> = ids.into_iter().map(Memory::Observation).collect();
            all.push(Memory::Summary(sid));
            forget::forget(tx, &all, 8)
        })
        .expect("forget");
        assert_eq!(
            carry(&mut a, &mut b, &mut seq, &only_p),
            2,
            "two tombstones"
        );
        assert_eq!(count(&b, "SELECT count(*) FROM observations"), 0);
        assert_eq!(count(&b, "SELECT count(*) FROM session_summaries"), 0);
        // An old record of the forgotten memory does not bring it back.
        db::write(&mut b, |tx| {
            let env = Envelope {
                device_name: "laptop".into(),
                record: Record::Observation {
                    o: observation("p", "shared"),
                    v: None,
                },
            };
            apply(tx, "a", 1, &env, 9)
        })
        .expect("replay");
        assert_eq!(count(&b, "SELECT count(*) FROM observations"), 0);
        assert_eq!(
            devices(&b).expect("devices"),
            vec![("a".into(), "laptop".into(), seq)]
        );
        assert_eq!(cursor(&b, "a").expect("cursor"), seq);
    }

    /// Every unsent record of `from` (prompts when `prompts`), applied to `to` as device "a"'s.
    fn carry_all(from: &mut Connection, to: &mut Connection, prompts: bool) -> Vec<Record> {
        let records = db::write(from, |tx| {
            let r = unsent(tx, &Projects::All, prompts)?;
            for rec in &r {
                mark(tx, rec, "mine")?;
            }
            Ok(r)
        })
        .expect("stage");
        db::write(to, |tx| {
            let from_seq = cursor(tx, "a")?;
            for (i, r) in records.iter().enumerate() {
                let env = Envelope {
                    device_name: "laptop".into(),
                    record: r.clone(),
                };
                apply(tx, "a", from_seq + i as i64 + 1, &env, 9)?;
            }
            Ok(())
        })
        .expect("apply");
        records
    }

    #[test]
    fn sessions_travel_prompts_only_when_asked_and_memories_name_their_device() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (mut a, mut b) = (store(tmp.path(), "a.db"), store(tmp.path(), "b.db"));
        db::write(&mut a, |tx| {
            sessions::start(tx, "s1", "p", "/home/ann/p", 100)?;
            sessions::record_prompt(
                tx,
                &sessions::NewPrompt {
                    session_id: "s1",
                    project: "p",
                    cwd: "/home/ann/p",
                    prompt_id: Some("q1"),
                    text: "how do leases work",
                },
                110,
            )?;
            observations::insert_observation(tx, &observation("p", "leases expire"))?;
            Ok(())
        })
        .expect("seed");
        let sent = carry_all(&mut a, &mut b, false);
        assert!(
            matches!(sent.first(), Some(Record::Session { .. })),
            "{sent:?}"
        );
        assert!(!sent.iter().any(|r| matches!(r, Record::Prompt { .. })));
        assert_eq!(count(&b, "SELECT count(*) FROM user_prompts"), 0);
        let (started, cwd): (i64, String) = b
            .query_row(
                "SELECT started_at, cwd FROM sessions WHERE session_id = 's1'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("session on b");
        assert_eq!(
            (started, cwd.as_str()),
            (100, ""),
            "the start travels, the path does not"
        );

        // With prompts asked for, the prompt goes; forgetting it forgets it on b too.
        let sent = carry_all(&mut a, &mut b, true);
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert_eq!(count(&b, "SELECT count(*) FROM user_prompts"), 1);
        let (obs, prompt): (i64, i64) = b
            .query_row(
                "SELECT (SELECT id FROM observations), (SELECT id FROM user_prompts)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .expect("ids");
        assert_eq!(
            device_of(&b, Kind::Observation, obs)
                .expect("device")
                .as_deref(),
            Some("laptop")
        );
        assert_eq!(
            device_of(&b, Kind::Prompt, prompt)
                .expect("device")
                .as_deref(),
            Some("laptop")
        );
        let own: i64 = a
            .query_row("SELECT id FROM observations", [], |r| r.get(0))
            .expect("id");
        assert_eq!(device_of(&a, Kind::Observation, own).expect("device"), None);

        db::write(&mut a, |tx| {
            let id: i64 = tx.query_row("SELECT id FROM user_prompts", [], |r| r.get(0))?;
            forget::forget(tx, &[Memory::Prompt(id)], 120)
        })
        .expect("forget");
        assert_eq!(carry_all(&mut a, &mut b, true).len(), 1, "one tombstone");
        assert_eq!(count(&b, "SELECT count(*) FROM user_prompts"), 0);

        // The session ended on b (it went on there): the end travels back, and a sees one
        // session, ended; then both agree and nothing more is sent either way.
        db::write(&mut b, |tx| sessions::end(tx, "s1", "p", "", 500)).expect("end");
        let back = carry_all(&mut b, &mut a, true);
        assert!(
            back.iter().any(|r| matches!(r, Record::Session { .. })),
            "{back:?}"
        );
        let ended: Option<i64> = a
            .query_row(
                "SELECT ended_at FROM sessions WHERE session_id = 's1'",
                [],
                |r| r.get(0),
            )
            .expect("session on a");
        assert_eq!(ended, Some(500));
        assert_eq!(carry_all(&mut a, &mut b, true), Vec::new());
        assert_eq!(carry_all(&mut b, &mut a, true), Vec::new());
    }

    /// An observation titled `title` with a vector of `model` (bits 0x01, vector 0x0203,
    /// parts 0x0405).
    fn embedded(conn: &mut Connection, title: &str, model: &str) -> i64 {
        db::write(conn, |tx| {
            sessions::ensure(tx, "s1", "p", "", 1)?;
            let id = observations::insert_observation(tx, &observation("p", title))?.id();
            tx.execute(
                "INSERT INTO embeddings (kind, ref_id, project, created_at, model, bits, vector, parts)
                 VALUES (0, ?1, 'p', 5, ?2, x'01', x'0203', x'0405')",
                params![id, model],
            )?;
            tx.execute("DELETE FROM embedding_queue WHERE ref_id = ?1", [id])?;
            Ok(id)
        })
        .expect("embedded observation")
    }

    #[test]
    fn vectors_travel_to_devices_of_the_same_model_only() {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut a = store(tmp.path(), "a.db");
        let (mut same, mut other) = (store(tmp.path(), "b.db"), store(tmp.path(), "c.db"));
        embedded(&mut a, "leases expire", "m:1");
        embedded(&mut same, "already here", "m:1");
        embedded(&mut other, "already here", "m:2");
        let records = db::write(&mut a, |tx| unsent(tx, &Projects::All, false)).expect("stage");
        assert!(
            records
                .iter()
                .any(|r| matches!(r, Record::Observation { v: Some(v), .. } if v.model == "m:1")),
            "{records:?}"
        );
        for to in [&mut same, &mut other] {
            db::write(to, |tx| {
                for (i, r) in records.iter().enumerate() {
                    let env = Envelope {
                        device_name: "laptop".into(),
                        record: r.clone(),
                    };
                    apply(tx, "a", i as i64 + 1, &env, 9)?;
                }
                Ok(())
            })
            .expect("apply");
        }
        let vector_of = |c: &Connection| -> (Option<String>, i64) {
            let id: i64 = c
                .query_row(
                    "SELECT id FROM observations WHERE title = 'leases expire'",
                    [],
                    |r| r.get(0),
                )
                .expect("pulled");
            let model = c
                .query_row(
                    "SELECT model FROM embeddings WHERE kind = 0 AND ref_id = ?1
                     AND bits = x'01' AND vector = x'0203' AND parts = x'0405'",
                    [id],
                    |r| r.get(0),
                )
                .optional()
                .expect("vector");
            let queued = c
                .query_row(
                    "SELECT count(*) FROM embedding_queue WHERE kind = 0 AND ref_id = ?1",
                    [id],
                    |r| r.get(0),
                )
                .expect("queue");
            (model, queued)
        };
        // The same model: the vector is kept and nothing is left to embed.
        assert_eq!(vector_of(&same), (Some("m:1".into()), 0));
        // Another model: no foreign vector; the worker embeds it here.
        assert_eq!(vector_of(&other), (None, 1));
    }

    #[test]
    fn the_outbox_keeps_numbers_until_acknowledged() {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut a = store(tmp.path(), "a.db");
        db::write(&mut a, |tx| {
            for _ in 0..3 {
                let seq = next_seq(tx)?;
                queue(tx, seq, b"sealed", 1)?;
            }
            Ok(())
        })
        .expect("queue");
        let out = outbox(&a, 2).expect("outbox");
        assert_eq!(out.iter().map(|r| r.0).collect::<Vec<_>>(), vec![1, 2]);
        db::write(&mut a, |tx| acknowledge(tx, 2)).expect("ack");
        assert_eq!(outbox_len(&a).expect("len"), 1);
        assert_eq!(db::write(&mut a, next_seq).expect("seq"), 4);
        assert_eq!(get(&a, SPACE).expect("get"), None);
    }
}
