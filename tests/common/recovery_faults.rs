//! Fault injection for the recovery of a damaged database, shared by the core test
//! (`core/tests/recovery_faults.rs`, a few hundred cases) and the benchmark
//! (`cargo bench -p cairn --bench recovery -- --cases N`).
//!
//! A template data dir is built once through the real hook path (`capture::handle`): a
//! database with a WAL, a daily backup older than some of its rows (or none), spool files
//! applied since the backup (`spool/applied/`) and spool files waiting. Each case copies
//! it, damages the copy in one layout chosen by its seed (header bytes, random pages,
//! page-type bytes, table and index pages, the schema, the free list, truncation at a
//! random offset, WAL frames torn or garbled, or two at once), then runs what the worker
//! runs: the start's check (`store::recover::check`), the recovery when it finds damage
//! (`store::recover::recover`) and the spool ingestion (`worker::ingest`). It proves that
//! every event the hooks took ends stored, or reported: counted as unreadable in the
//! recovery record (`Recovery::unreadable_total`), or in a table whose unreadable end the
//! record names (`Recovery::cut_off`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use cairn_core::capture::handle::{HookInput, Stored, handle};
use cairn_core::settings::Settings;
use cairn_core::store::db::{self, OpenOptions};
use cairn_core::store::paths::DataDir;
use cairn_core::store::{backup, recover};
use cairn_core::worker::ingest;

/// A small deterministic generator (SplitMix64): a case is its seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// The ways a case damages the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    HeaderBytes,
    HeaderWhole,
    RandomPage,
    PageType,
    TablePage,
    IndexPage,
    SchemaPage,
    FreeList,
    Truncate,
    WalTorn,
    WalGarbled,
    Two,
}

pub const LAYOUTS: &[Layout] = &[
    Layout::HeaderBytes,
    Layout::HeaderWhole,
    Layout::RandomPage,
    Layout::PageType,
    Layout::TablePage,
    Layout::IndexPage,
    Layout::SchemaPage,
    Layout::FreeList,
    Layout::Truncate,
    Layout::WalTorn,
    Layout::WalGarbled,
    Layout::Two,
];

/// A page of the template's database: its number and the b-tree it belongs to.
#[derive(Debug, Clone)]
struct Page {
    no: u64,
    name: String,
    /// `table` or `index`.
    kind: String,
}

/// A data dir to copy for each case, and the events its hooks took.
pub struct Template {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    /// A unique word in each event's stored text.
    pub markers: Vec<String>,
    pages: Vec<Page>,
    page_size: u64,
    pub with_backup: bool,
    /// The WAL was checkpointed into the file before the copies: damage to the file is
    /// not masked by newer copies of its pages in the WAL.
    pub checkpointed: bool,
}

const START: i64 = 1_800_000_000_000;

fn hook(dd: &DataDir, s: &Settings, json: &str, now: i64) -> Stored {
    handle(
        dd,
        s,
        &HookInput {
            bytes: json.as_bytes(),
            total_len: json.len() as u64,
            incomplete: None,
            explicit_event: None,
            project_dir: None,
            settings_error: None,
        },
        now,
    )
    .stored
}

/// One turn of session `sid` (a prompt, `tools` tool calls, a Stop), each event carrying a
/// marker. Returns how each was stored.
fn turn(
    dd: &DataDir,
    s: &Settings,
    sid: &str,
    n: usize,
    tools: usize,
    at: &mut i64,
    markers: &mut Vec<String>,
) -> Vec<Stored> {
    let pad = "lorem ipsum dolor sit amet ".repeat(12);
    let mut out = Vec::new();
    let mut send = |json: String, marker: String, out: &mut Vec<Stored>| {
        *at += 1_000;
        out.push(hook(dd, s, &json, *at));
        markers.push(marker);
    };
    let common = |name: &str| {
        format!(
            r#""hook_event_name":"{name}","session_id":"{sid}","cwd":"/work/acme-api","prompt_id":"{sid}-p{n}""#
        )
    };
    let m = format!("mk{sid}p{n}zq");
    send(
        format!(r#"{{{},"prompt":"{m} {pad}"}}"#, common("UserPromptSubmit")),
        m,
        &mut out,
    );
    for k in 0..tools {
        let m = format!("mk{sid}p{n}t{k}zq");
        send(
            format!(
                r#"{{{},"tool_name":"Bash","tool_use_id":"{sid}-{n}-{k}","tool_input":{{"command":"echo {m} {pad}"}},"tool_response":{{"stdout":"ok"}}}}"#,
                common("PostToolUse")
            ),
            m,
            &mut out,
        );
    }
    let m = format!("mk{sid}p{n}szq");
    send(
        format!(
            r#"{{{},"last_assistant_message":"{m} done"}}"#,
            common("Stop")
        ),
        m,
        &mut out,
    );
    out
}

/// Holds the database's write lock (hooks spool meanwhile), without checkpointing the
/// WAL when released.
fn locker(dd: &DataDir) -> rusqlite::Connection {
    let c = db::open_data_dir(dd, OpenOptions::default()).expect("open");
    c.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )
    .expect("no checkpoint on close");
    c.execute_batch("BEGIN IMMEDIATE").expect("lock");
    c
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir").flatten() {
        let target = to.join(e.file_name());
        if e.file_type().expect("type").is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), &target).expect("copy");
        }
    }
}

impl Template {
    /// The four templates: with a backup and without, with the WAL kept and checkpointed.
    pub fn all() -> Vec<Template> {
        [(true, false), (false, false), (true, true), (false, true)]
            .into_iter()
            .map(|(b, c)| Template::build(b, c))
            .collect()
    }

    /// Builds the template (see the module comment).
    pub fn build(with_backup: bool, checkpointed: bool) -> Template {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("data");
        let dd = DataDir::new(&root);
        let mut s = Settings::default();
        s.capture.lock_wait_ms = 5;
        let mut markers = Vec::new();
        let mut at = START;
        // Before the backup.
        for sid in ["a0", "a1"] {
            for n in 1..=2 {
                turn(&dd, &s, sid, n, 2, &mut at, &mut markers);
            }
        }
        if with_backup {
            let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
            backup::daily(&dd, &conn, 7, at).expect("backup");
        }
        // Spooled while the database was locked, then applied (kept in spool/applied/).
        let lock = locker(&dd);
        for st in turn(&dd, &s, "b0", 1, 2, &mut at, &mut markers) {
            assert!(matches!(st, Stored::Spooled(_)), "{st:?}");
        }
        lock.execute_batch("ROLLBACK").expect("unlock");
        drop(lock);
        {
            let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
            at += 1_000;
            ingest::ingest(&dd, &mut conn, &s, at).expect("ingest");
        }
        // Newer than the backup, in the database (its WAL).
        for sid in ["c0", "c1", "c2"] {
            for n in 1..=2 {
                turn(&dd, &s, sid, n, 3, &mut at, &mut markers);
            }
        }
        // Spooled and waiting.
        let lock = locker(&dd);
        for st in turn(&dd, &s, "d0", 1, 2, &mut at, &mut markers) {
            assert!(matches!(st, Stored::Spooled(_)), "{st:?}");
        }
        lock.execute_batch("ROLLBACK").expect("unlock");
        drop(lock);
        assert!(
            std::fs::metadata(root.join("cairn.db-wal")).is_ok_and(|m| m.len() > 0),
            "the template keeps a WAL"
        );
        if checkpointed {
            let c = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
            c.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
                .expect("checkpoint");
        }

        // The pages of each b-tree, read on a throwaway copy (reading the template would
        // checkpoint its WAL).
        let probe = tmp.path().join("probe");
        copy_dir(&root, &probe);
        let conn = db::open(&probe.join("cairn.db"), OpenOptions::default()).expect("probe");
        conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .expect("checkpoint");
        let page_size: u64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get::<_, i64>(0))
            .expect("page size") as u64;
        let pages = conn
            .prepare(
                "SELECT d.pageno, d.name, coalesce(m.type, 'table') FROM dbstat d
                 LEFT JOIN sqlite_master m ON m.name = d.name ORDER BY d.pageno",
            )
            .expect("dbstat")
            .query_map([], |r| {
                Ok(Page {
                    no: r.get::<_, i64>(0)? as u64,
                    name: r.get(1)?,
                    kind: r.get(2)?,
                })
            })
            .expect("pages")
            .collect::<rusqlite::Result<Vec<_>>>()
            .expect("rows");
        drop(conn);
        let _ = std::fs::remove_dir_all(&probe);
        Template {
            _tmp: tmp,
            root,
            markers,
            pages,
            page_size,
            with_backup,
            checkpointed,
        }
    }
}

/// What one case found.
#[derive(Debug)]
pub struct Outcome {
    pub layout: Layout,
    /// The start's check found damage and the recovery ran.
    pub recovered: bool,
    pub events: usize,
    /// Events stored after the recovery and ingestion.
    pub stored: usize,
    /// Events missing, all reported by the recovery record.
    pub reported: usize,
    /// Rows and WAL transactions the record counted unreadable.
    pub unreadable: u64,
    /// Rows the record says were salvaged from damaged pages.
    pub suspect: u64,
    /// The record names a table whose end could not be read.
    pub cut_off: bool,
}

fn write_at(path: &Path, at: u64, bytes: &[u8]) {
    use std::io::{Seek, SeekFrom, Write};
    let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(path) else {
        return;
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if at >= len {
        return;
    }
    let n = bytes.len().min((len - at) as usize);
    f.seek(SeekFrom::Start(at)).expect("seek");
    f.write_all(&bytes[..n]).expect("write");
}

fn random_bytes(rng: &mut Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.next() as u8).collect()
}

/// Damages the data dir at `root` in `layout`.
fn damage(t: &Template, root: &Path, layout: Layout, rng: &mut Rng) -> String {
    let db = root.join("cairn.db");
    let wal = root.join("cairn.db-wal");
    let len = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0);
    let ps = t.page_size;
    let page_count = (len / ps).max(1);
    let garble_page = |rng: &mut Rng, no: u64| {
        let from = rng.below(ps / 2);
        let n = 1 + rng.below(ps - from) as usize;
        write_at(&db, (no - 1) * ps + from, &random_bytes(rng, n));
        format!("page {no} bytes {from}..+{n}")
    };
    let pick = |rng: &mut Rng, f: &dyn Fn(&Page) -> bool| -> Option<u64> {
        let pages: Vec<&Page> = t.pages.iter().filter(|p| f(p)).collect();
        (!pages.is_empty()).then(|| pages[rng.below(pages.len() as u64) as usize].no)
    };
    match layout {
        Layout::HeaderBytes => {
            let mut what = Vec::new();
            for _ in 0..1 + rng.below(6) {
                let at = rng.below(100);
                write_at(&db, at, &[rng.next() as u8]);
                what.push(at.to_string());
            }
            format!("header bytes {}", what.join(","))
        }
        Layout::HeaderWhole => {
            write_at(&db, 0, &[0u8; 100]);
            "header zeroed".into()
        }
        Layout::RandomPage => {
            let no = 1 + rng.below(page_count);
            write_at(&db, (no - 1) * ps, &random_bytes(rng, ps as usize));
            format!("page {no} random")
        }
        Layout::PageType => {
            let no = 1 + rng.below(page_count);
            let at = (no - 1) * ps + if no == 1 { 100 } else { 0 };
            let b = rng.next() as u8;
            write_at(&db, at, &[b]);
            format!("page {no} type byte {b}")
        }
        Layout::TablePage => {
            let no = pick(rng, &|p| {
                ["user_prompts", "pending_messages", "sessions"].contains(&p.name.as_str())
            })
            .unwrap_or(2);
            garble_page(rng, no)
        }
        Layout::IndexPage => {
            let no = pick(rng, &|p| p.kind == "index").unwrap_or(2);
            garble_page(rng, no)
        }
        Layout::SchemaPage => {
            let no = pick(rng, &|p| p.name == "sqlite_schema").unwrap_or(1);
            let from = if no == 1 { 100 } else { 0 } + rng.below(ps / 2);
            let n = 1 + rng.below(ps - from) as usize;
            write_at(&db, (no - 1) * ps + from, &random_bytes(rng, n));
            format!("schema page {no} bytes {from}..+{n}")
        }
        Layout::FreeList => {
            write_at(&db, 32, &random_bytes(rng, 8));
            "free list fields".into()
        }
        Layout::Truncate => {
            let to = rng.below(len.max(1));
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .open(&db)
                .and_then(|f| f.set_len(to));
            format!("truncated at {to} of {len}")
        }
        Layout::WalTorn => {
            let wlen = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
            let to = rng.below(wlen.max(1));
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .open(&wal)
                .and_then(|f| f.set_len(to));
            format!("WAL torn at {to} of {wlen}")
        }
        Layout::WalGarbled => {
            let wlen = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
            let frame = 24 + ps;
            let frames = wlen.saturating_sub(32) / frame;
            let k = rng.below(frames.max(1));
            let from = 32 + k * frame + rng.below(frame);
            let n = 1 + rng.below(64) as usize;
            write_at(&wal, from, &random_bytes(rng, n));
            format!("WAL frame {k} garbled at {from}..+{n}")
        }
        Layout::Two => {
            let a = LAYOUTS[rng.below(LAYOUTS.len() as u64 - 1) as usize];
            let b = LAYOUTS[rng.below(LAYOUTS.len() as u64 - 1) as usize];
            let x = damage(t, root, a, rng);
            let y = damage(t, root, b, rng);
            format!("{x}; and {y}")
        }
    }
}

/// How many times each marker is stored.
fn stored(conn: &rusqlite::Connection, marker: &str) -> i64 {
    conn.query_row(
        "SELECT (SELECT count(*) FROM user_prompts WHERE instr(prompt_text, ?1) > 0)
              + (SELECT count(*) FROM pending_messages WHERE instr(payload, ?1) > 0)",
        [marker],
        |r| r.get(0),
    )
    .unwrap_or(0)
}

/// Runs case `seed` on a copy of the template under `scratch` (see the module comment).
/// `Err` says what failed, with the seed, for a replay.
pub fn run_case(t: &Template, scratch: &Path, seed: u64) -> Result<Outcome, String> {
    let mut rng = Rng::new(seed);
    let layout = LAYOUTS[rng.below(LAYOUTS.len() as u64) as usize];
    let root = scratch.join(format!("case-{seed}"));
    let _ = std::fs::remove_dir_all(&root);
    copy_dir(&t.root, &root);
    let what = damage(t, &root, layout, &mut rng);
    let fail = |msg: String| {
        Err(format!(
            "seed {seed} ({layout:?}: {what}; backup: {}, WAL checkpointed: {}): {msg}",
            t.with_backup, t.checkpointed
        ))
    };
    let dd = DataDir::new(&root);
    let now = START + 10_000_000;
    let found = match recover::check(&dd, Duration::from_secs(5)) {
        Ok(f) => f,
        Err(e) => return fail(format!("the start's check failed: {e}")),
    };
    let record = match &found {
        Some(_) => match recover::recover(&dd, now, Duration::ZERO) {
            Ok(r) => Some(r),
            Err(e) => return fail(format!("recovery failed: {e}")),
        },
        None => None,
    };
    let mut conn = match db::open_data_dir(&dd, OpenOptions::default()) {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot open after recovery: {e}")),
    };
    let mut s = Settings::default();
    s.capture.lock_wait_ms = 50;
    if let Err(e) = ingest::ingest(&dd, &mut conn, &s, now + 1) {
        return fail(format!("ingestion failed: {e}"));
    }
    match db::integrity_problems(&conn) {
        Ok(p) if p.is_empty() => {}
        Ok(p) => return fail(format!("the database is not sound: {}", p.join("; "))),
        Err(e) => return fail(format!("the integrity check failed: {e}")),
    }
    let missing: Vec<&String> = t.markers.iter().filter(|m| stored(&conn, m) == 0).collect();
    let (unreadable, suspect, cut_off) = record
        .as_ref()
        .map(|r| {
            let suspect: u64 = r.suspect.iter().map(|(_, n)| n).sum();
            (r.unreadable_total(), suspect, !r.cut_off.is_empty())
        })
        .unwrap_or((0, 0, false));
    if !missing.is_empty() && (missing.len() as u64) > unreadable + suspect && !cut_off {
        return fail(format!(
            "{} events lost and not reported ({} counted unreadable, {} salvaged from damaged pages; record: {}): {:?}",
            missing.len(),
            unreadable,
            suspect,
            record
                .as_ref()
                .map(|r| r.describe())
                .unwrap_or_else(|| "no damage found, no recovery".into()),
            missing
        ));
    }
    drop(conn);
    let _ = std::fs::remove_dir_all(&root);
    Ok(Outcome {
        layout,
        recovered: found.is_some(),
        events: t.markers.len(),
        stored: t.markers.len() - missing.len(),
        reported: missing.len(),
        unreadable,
        suspect,
        cut_off,
    })
}
