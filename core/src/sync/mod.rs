//! Sync: one memory across a person's machines and a team, through a PostgreSQL server
//! the user runs, end-to-end encrypted (ARCHITECTURE.md, "Sync").
//!
//! Each device appends the memories it stores (observations, turn summaries) and the
//! tombstones of what it forgot to its own log in a space, as records sealed with the
//! space's key ([`crypto`]); it reads the other devices' logs from a cursor each and
//! applies them to the local store through `memory`, like any other writer. No record is
//! ever changed, so there is nothing to conflict: a summary redone is a later record of
//! the same turn (it supersedes), a forget is a tombstone record every device applies.
//!
//! - [`crypto`]: the space's key, sealing and opening records (pure but for randomness).
//! - [`server`]: the PostgreSQL side, which sees ids, sequence numbers, sizes and times.
//! - [`tls`]: TLS to it as libpq reads `sslmode` and `sslrootcert`.
//! - [`local`]: this device's sync tables (migration 0011) and applying records.
//! - [`live`]: continuous sync as the worker runs it: a listening connection, the retry
//!   delays, and what the worker records for `status`.
//!
//! The data dir holds the space's key (`sync.key`) and the server URL (`sync.url`), both
//! owner-only files: the URL may carry the database password, so it is never logged or
//! shown (`server::Url::display` leaves it out).
//!
//! Invariants: only stored rows are synced, so what capture and the privacy filter kept
//! off the machine's store (private spans, excluded projects, secrets) never reaches a log;
//! only projects named in `sync.projects` are pushed; a record keeps its sequence number
//! and bytes from the moment it is queued, so pushing is idempotent; a pulled record and
//! its cursor move are one local transaction, so pulling is too.

pub mod crypto;
pub mod live;
pub mod local;
pub mod server;
pub mod tls;

use std::path::{Path, PathBuf};

use rusqlite::Connection;
use serde::Serialize;

use crate::settings::SyncSettings;
use crate::store::db;
use crate::store::paths::{DataDir, create_private};

pub use crypto::SpaceKey;
pub use server::Url;

/// Why sync could not do what was asked. Callers branch on the variant.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error(
        "this data dir is not in a sync space: run `cairn sync init --url URL` on the first machine and `cairn sync join --url URL --key KEY` on the others"
    )]
    NotSetUp,
    #[error(
        "this data dir is already in sync space {0} (`cairn sync leave` first to join another)"
    )]
    AlreadySetUp(String),
    #[error(
        "not a cairn sync key (it looks like cairn1-<32 hex>-<64 hex>, as `cairn sync init` printed it)"
    )]
    BadKey,
    #[error(
        "wrong key: it does not open space {0}'s key check; copy the key again from a machine already in the space"
    )]
    WrongKey(String),
    #[error(
        "the server has no sync space {0}: check the URL, or create the space with `cairn sync init`"
    )]
    NoSuchSpace(String),
    #[error("not a PostgreSQL URL: {0}")]
    BadUrl(String),
    #[error(
        "the server's sync schema is version {found}, newer than this cairn supports ({supported}); upgrade cairn"
    )]
    ServerTooNew { found: i32, supported: i32 },
    #[error(
        "the server is not reachable: {0} (check that it is running and the URL's host and port)"
    )]
    Unreachable(String),
    #[error(
        "the server refused the login: {0} (check the user and the password in the URL, PGPASSWORD or the password file)"
    )]
    LoginRefused(String),
    #[error(
        "the server's certificate is not trusted: {0} (name the server's CA with sslrootcert=/path/to/ca.pem in the URL, or use sslmode=require: encrypted, the certificate not checked)"
    )]
    Certificate(String),
    #[error(
        "the server offers no TLS, which the URL's sslmode asks for: {0} (turn ssl on in the server, or use sslmode=prefer or disable)"
    )]
    NoTls(String),
    #[error("{0} (check sslrootcert in the URL: a file of PEM certificates)")]
    RootCerts(String),
    #[error(
        "the database user may not do this: {0} (`cairn sync init` needs a user allowed to create tables in the database; the other machines need only SELECT, INSERT and UPDATE on the tables, as the README says)"
    )]
    NotAllowed(String),
    #[error("the server has no such database: {0} (check the database name at the end of the URL)")]
    NoDatabase(String),
    #[error(
        "the server has not answered for {0} s: it accepted the connection, but is frozen, overloaded, or not PostgreSQL"
    )]
    NotAnswering(u64),
    #[error("server error: {0}")]
    Server(String),
    #[error("a record of device {device} (#{seq}) does not open with this space's key")]
    Unreadable { device: String, seq: i64 },
    #[error(
        "{} not reached the space yet: run `cairn sync` first to send them, or leave with --force (they stay here, and go to the next space joined)", crate::text::plural(*.0, "record or memory has", "records or memories have")
    )]
    Unsent(i64),
    #[error("{0}")]
    Random(String),
    #[error(transparent)]
    Store(#[from] crate::Error),
    #[error("{action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl SyncError {
    fn from_postgres(e: postgres::Error) -> Self {
        let text = describe(&e);
        match e.as_db_error().map(|d| d.code().code()) {
            // invalid_password, invalid_authorization_specification
            Some("28P01" | "28000") => SyncError::LoginRefused(text),
            // invalid_catalog_name
            Some("3D000") => SyncError::NoDatabase(text),
            // insufficient_privilege
            Some("42501") => SyncError::NotAllowed(text),
            Some(_) => SyncError::Server(text),
            // The server answered with a certificate the URL's sslmode does not take.
            None if text.contains("invalid peer certificate") => SyncError::Certificate(text),
            None if text.contains("server does not support TLS") => SyncError::NoTls(text),
            // No answer from the server at all: refused, timed out, cut off.
            None => SyncError::Unreachable(text),
        }
    }
}

/// What went wrong, down to its cause: the server's own message (`password authentication
/// failed for user "cairn"`, `database "x" does not exist`) rather than the driver's
/// "db error", and the causes under a connection's or a URL's failure.
pub(crate) fn describe(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = db.message().to_string();
        if let Some(detail) = db.detail() {
            text.push_str(&format!(" ({detail})"));
        }
        return text;
    }
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let said = c.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = c.source();
    }
    text
}

impl SyncError {
    /// What to do about it, as `status` and `doctor` show it.
    pub fn fix(&self) -> Option<&'static str> {
        Some(match self {
            SyncError::Unreachable(_) => {
                "start the server, or check the host and port in the data dir's sync.url and the network; the worker retries on its own and catches up, nothing is lost"
            }
            SyncError::LoginRefused(_) => {
                "fix the user or the password (in the data dir's sync.url, PGPASSWORD or the password file); the worker tries again when sync.url changes"
            }
            SyncError::WrongKey(_) | SyncError::BadKey | SyncError::Unreadable { .. } => {
                "this data dir's sync.key is not the space's key: copy sync.key from the data dir of a machine in the space"
            }
            SyncError::NoSuchSpace(_) => {
                "check that sync.url names the server and database the space was created on"
            }
            SyncError::ServerTooNew { .. } => "upgrade cairn on this machine",
            SyncError::BadUrl(_) => "fix the URL in the data dir's sync.url",
            SyncError::NoDatabase(_) => {
                "fix the database name in the data dir's sync.url, or create the database on the server"
            }
            SyncError::Server(_) => {
                "see the server's log; the worker retries on its own and catches up"
            }
            SyncError::Certificate(_) => {
                "add sslrootcert=/path/to/the-server-ca.pem to the URL in the data dir's sync.url, or use sslmode=require (encrypted, the certificate not checked; memories are sealed before they leave)"
            }
            SyncError::NoTls(_) => {
                "turn ssl on in the server, or change sslmode in the data dir's sync.url to prefer or disable"
            }
            SyncError::RootCerts(_) => "fix the sslrootcert path in the data dir's sync.url",
            SyncError::NotAllowed(_) => {
                "grant the database user SELECT, INSERT and UPDATE on the cairn_* tables (see the README)"
            }
            SyncError::NotAnswering(_) => {
                "check that the server runs and answers (its log, its load) and that sync.url's port is PostgreSQL's; sync goes on when it answers"
            }
            _ => return None,
        })
    }

    /// An error only the user can fix (trying again soon would fail the same way).
    pub fn is_lasting(&self) -> bool {
        matches!(
            self,
            SyncError::LoginRefused(_)
                | SyncError::WrongKey(_)
                | SyncError::BadKey
                | SyncError::Unreadable { .. }
                | SyncError::NoSuchSpace(_)
                | SyncError::ServerTooNew { .. }
                | SyncError::BadUrl(_)
                | SyncError::Certificate(_)
                | SyncError::NoTls(_)
                | SyncError::RootCerts(_)
                | SyncError::NotAllowed(_)
                | SyncError::NoDatabase(_)
        )
    }
}

impl From<postgres::Error> for SyncError {
    fn from(e: postgres::Error) -> Self {
        SyncError::from_postgres(e)
    }
}

impl From<rusqlite::Error> for SyncError {
    fn from(e: rusqlite::Error) -> Self {
        SyncError::Store(e.into())
    }
}

/// Records sent to the server per round trip.
const PUSH_BATCH: i64 = 500;
/// Records read from the server per round trip.
const PULL_BATCH: i64 = 1000;

fn key_file(dir: &DataDir) -> PathBuf {
    dir.root().join("sync.key")
}

fn url_file(dir: &DataDir) -> PathBuf {
    dir.root().join("sync.url")
}

fn write_private(path: &Path, text: &str) -> Result<(), SyncError> {
    use std::io::Write;
    let io = |source| SyncError::Io {
        action: "failed to write",
        path: path.to_owned(),
        source,
    };
    let mut f = create_private(path).map_err(io)?;
    f.write_all(text.as_bytes()).map_err(io)?;
    f.sync_all().map_err(io)
}

fn read_file(path: &Path) -> Result<Option<String>, SyncError> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(SyncError::Io {
            action: "failed to read",
            path: path.to_owned(),
            source,
        }),
    }
}

/// This device's place in a space: the key, the server, its device id and name.
#[derive(Debug)]
pub struct Setup {
    pub key: SpaceKey,
    pub url: Url,
    pub device: String,
    pub device_name: String,
}

impl Setup {
    /// Reads the setup of this data dir; `None` when it is in no space (no key file). The
    /// device is empty when the store has none in that space ([`ensure_device`]).
    pub fn load(dir: &DataDir, conn: &Connection) -> Result<Option<Setup>, SyncError> {
        let (Some(key), Some(url)) = (read_file(&key_file(dir))?, read_file(&url_file(dir))?)
        else {
            return Ok(None);
        };
        let key = SpaceKey::parse(&key)?;
        let in_space = local::get(conn, local::SPACE)?.as_deref() == Some(key.space.as_str());
        let device = local::get(conn, local::DEVICE)?.filter(|_| in_space);
        Ok(Some(Setup {
            key,
            url: Url::parse(&url)?,
            device: device.unwrap_or_default(),
            device_name: local::get(conn, local::DEVICE_NAME)?
                .filter(|n| !n.is_empty())
                .unwrap_or_else(host_name),
        }))
    }
}

/// This machine's host name (`HOSTNAME`, else the kernel's, else `/etc/hostname`): the
/// default device name, and the first part of a worker's id.
pub fn host_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "device".into())
}

/// Gives the store a device in the space its key file names when it has none there: a
/// store restored from a backup taken before it joined (by hand, or by damage recovery),
/// or while it was in another space, lies beside the key and URL files of its space. It
/// goes on as a new device, its sync tables emptied (what they said was about another
/// time or space): its memories are all sent, and its old log, if any, is read like
/// another device's. True when it did.
pub fn ensure_device(conn: &mut Connection, setup: &mut Setup) -> Result<bool, SyncError> {
    if !setup.device.is_empty() {
        return Ok(false);
    }
    let device = settle(conn, &setup.key.space, &setup.device_name)?;
    log::info!(
        "sync: this store has no device in space {} (restored from a backup taken before it joined, or in another space); it goes on as new device {device}",
        setup.key.space
    );
    setup.device = device;
    Ok(true)
}

/// Puts the store in `space` as a new device named `name`, its sync tables emptied; returns
/// the device's id.
fn settle(conn: &mut Connection, space: &str, name: &str) -> Result<String, SyncError> {
    let device = new_device_id()?;
    db::write(conn, |tx| {
        local::leave(tx)?;
        local::enter(tx, space, &device, name, &host_name())
    })?;
    Ok(device)
}

/// A device's id: 16 random bytes in hex.
fn new_device_id() -> Result<String, SyncError> {
    Ok(crate::hex::hex(&crypto::random::<16>()?))
}

/// Refuses a data dir already in a space (its key file says so; no store needed).
fn ensure_not_set_up(dir: &DataDir) -> Result<(), SyncError> {
    if let Some(key) = read_file(&key_file(dir))? {
        let space = SpaceKey::parse(&key).map_or_else(|_| "(unreadable key)".into(), |k| k.space);
        return Err(SyncError::AlreadySetUp(space));
    }
    Ok(())
}

/// Puts this data dir in the space of `key` on `url_text`: the URL file, then this device
/// in the store, then the key file (a data dir with a key file is in the space).
pub fn enter(
    dir: &DataDir,
    conn: &mut Connection,
    key: &SpaceKey,
    url_text: &str,
    device_name: &str,
) -> Result<Setup, SyncError> {
    ensure_not_set_up(dir)?;
    let url = Url::parse(url_text)?;
    write_private(&url_file(dir), url_text.trim())?;
    let device = settle(conn, &key.space, device_name)?;
    write_private(&key_file(dir), &key.encode())?;
    Ok(Setup {
        key: key.clone(),
        url,
        device,
        device_name: device_name.to_string(),
    })
}

/// Creates a new space on the server and returns its key, to be shown once and copied to
/// the other machines; nothing local is written ([`enter`] does).
pub fn create_space(dir: &DataDir, url_text: &str) -> Result<SpaceKey, SyncError> {
    ensure_not_set_up(dir)?;
    let url = Url::parse(url_text)?;
    let key = SpaceKey::generate()?;
    let mut client = url.connect()?;
    server::migrate(&mut client)?;
    server::create_space(&mut client, &key.space, &key.key_check()?)?;
    Ok(key)
}

/// Checks that `key_text` opens a space on the server; nothing is written, locally or
/// there ([`enter`] puts the data dir in it).
pub fn check_space(dir: &DataDir, url_text: &str, key_text: &str) -> Result<SpaceKey, SyncError> {
    ensure_not_set_up(dir)?;
    let url = Url::parse(url_text)?;
    let key = SpaceKey::parse(key_text)?;
    open_space(&url, &key)?;
    Ok(key)
}

/// [`create_space`] and [`enter`].
pub fn init(
    dir: &DataDir,
    conn: &mut Connection,
    url_text: &str,
    device_name: &str,
) -> Result<Setup, SyncError> {
    let key = create_space(dir, url_text)?;
    enter(dir, conn, &key, url_text, device_name)
}

/// [`check_space`] and [`enter`].
pub fn join(
    dir: &DataDir,
    conn: &mut Connection,
    url_text: &str,
    key_text: &str,
    device_name: &str,
) -> Result<Setup, SyncError> {
    let key = check_space(dir, url_text, key_text)?;
    enter(dir, conn, &key, url_text, device_name)
}

/// Takes this data dir out of its space: the key and URL files, and this device's sync
/// tables (`local::leave`); memories stay. What the space has not received from here yet
/// (records queued, memories of synced projects not staged) would never reach it: refused
/// unless `force`. Returns the space left and how many records or memories it missed.
/// Touches nothing on the server.
pub fn leave(
    dir: &DataDir,
    conn: &mut Connection,
    settings: &SyncSettings,
    force: bool,
) -> Result<(String, i64), SyncError> {
    let Some(setup) = Setup::load(dir, conn)? else {
        return Err(SyncError::NotSetUp);
    };
    let unsent = unsent(conn, settings)?;
    if unsent > 0 && !force {
        return Err(SyncError::Unsent(unsent));
    }
    // The key first: a data dir without it is in no space, whatever else is left.
    for file in [key_file(dir), url_file(dir)] {
        match std::fs::remove_file(&file) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(SyncError::Io {
                    action: "failed to remove",
                    path: file,
                    source: e,
                });
            }
            _ => {}
        }
    }
    db::write(conn, local::leave)?;
    Ok((setup.key.space, unsent))
}

/// Connects, brings an older server schema up to date and checks that `key` opens the
/// space's key check: a wrong key is found here, before anything is sent or applied (a
/// record sealed with it would stop every other device's pull). A database with no sync
/// schema holds no space, and is left as it is (only `init` creates the schema).
pub(crate) fn open_space(url: &Url, key: &SpaceKey) -> Result<postgres::Client, SyncError> {
    let mut client = url.connect()?;
    match server::schema_version(&mut client)? {
        None => return Err(SyncError::NoSuchSpace(key.space.clone())),
        Some(v) if v < server::known_version() => server::migrate(&mut client)?,
        Some(v) if v > server::known_version() => {
            return Err(SyncError::ServerTooNew {
                found: v,
                supported: server::known_version(),
            });
        }
        Some(_) => {}
    }
    let check = server::key_check(&mut client, &key.space)?
        .ok_or_else(|| SyncError::NoSuchSpace(key.space.clone()))?;
    if !key.verify(&check) {
        return Err(SyncError::WrongKey(key.space.clone()));
    }
    Ok(client)
}

/// What one sync moved.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Moved {
    /// Records this device sent.
    pub pushed: usize,
    /// Records read from other devices' logs.
    pub pulled: usize,
    /// Memories those records added here.
    pub added: usize,
    /// Memories those records forgot here.
    pub forgotten: usize,
    /// This device's new id, when the data dir was restored from a backup or copied to
    /// another machine ([`ensure_device`], [`push`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new_device: Option<String>,
}

/// Seals the memories and tombstones no log carries yet into the outbox.
pub fn stage(
    conn: &mut Connection,
    setup: &Setup,
    settings: &SyncSettings,
    now: i64,
) -> Result<usize, SyncError> {
    let projects = local::Projects::from_setting(&settings.projects);
    let staged = db::write(conn, |tx| {
        local::ensure_in(tx, &setup.key.space)?;
        let records = local::unsent(tx, &projects, settings.prompts)?;
        let mut sealed = Vec::with_capacity(records.len());
        let first = local::take_seqs(tx, records.len())?;
        for (seq, record) in (first..).zip(records) {
            let env = local::Envelope {
                device_name: setup.device_name.clone(),
                record,
            };
            let plain =
                serde_json::to_vec(&env).map_err(|e| crate::Error::Invalid(e.to_string()))?;
            let body = setup
                .key
                .seal(&setup.key.record_ad(&setup.device, seq), &plain)
                .map_err(|e| crate::Error::Invalid(e.to_string()))?;
            local::queue(tx, seq, &body, now)?;
            local::mark(tx, &env.record, &setup.device)?;
            sealed.push(seq);
        }
        Ok(sealed.len())
    })?;
    Ok(staged)
}

/// Sends the outbox to the server; returns how many records went. When the server holds
/// records of this device's log that it did not write as they are there, the device
/// becomes a new one first ([`become_new_device`]) and `setup` says so.
pub fn push(
    conn: &mut Connection,
    client: &mut postgres::Client,
    setup: &mut Setup,
) -> Result<usize, SyncError> {
    let mut sent = 0;
    let mut renamed = false;
    loop {
        let batch = local::outbox(conn, PUSH_BATCH)?;
        let numbered = local::numbered(conn)?;
        let appended = match batch.last() {
            None if server::last_seq(client, &setup.key.space, &setup.device)? > numbered => {
                server::Appended::Diverged
            }
            None => return Ok(sent),
            Some(_) => server::append(client, &setup.key.space, &setup.device, numbered, &batch)?,
        };
        match appended {
            server::Appended::Done => {
                let last = batch.last().map_or(0, |r| r.0);
                db::write(conn, |tx| local::acknowledge(tx, last))?;
                sent += batch.len();
            }
            // A new random id has no log yet: a second divergence is not a copy.
            server::Appended::Diverged if renamed => {
                return Err(SyncError::Server(format!(
                    "the server refused the records of new device {}",
                    setup.device
                )));
            }
            server::Appended::Diverged => {
                become_new_device(conn, setup)?;
                renamed = true;
            }
        }
    }
}

/// Gives this device a new id in its space, its outbox resealed for the new log (a
/// record's place is part of what is sealed). Its old log stays on the server and is
/// pulled like another device's, so nothing either copy wrote is lost.
fn become_new_device(conn: &mut Connection, setup: &mut Setup) -> Result<(), SyncError> {
    let new = new_device_id()?;
    log::info!(
        "sync: the server holds records of this device's log ({}) that this data dir did not write; it was restored from a backup or copied to another machine. It goes on as new device {new}, and reads its old log like another device's",
        setup.device
    );
    let key = &setup.key;
    let old = setup.device.clone();
    let renamed = renamed_on_another_host(conn, &setup.device_name)?;
    let invalid = |e: &dyn std::fmt::Display| crate::Error::Invalid(e.to_string());
    db::write(conn, |tx| {
        local::become_device(tx, &new, |seq, body, new_seq| {
            let mut plain = key.open(&key.record_ad(&old, seq), body).ok_or_else(|| {
                crate::Error::Invalid(format!("queued record #{seq} does not open"))
            })?;
            // The records still to send go under the new name too.
            if let Some((name, _)) = &renamed {
                let mut env: local::Envelope =
                    serde_json::from_slice(&plain).map_err(|e| invalid(&e))?;
                env.device_name = name.clone();
                plain = serde_json::to_vec(&env).map_err(|e| invalid(&e))?;
            }
            key.seal(&key.record_ad(&new, new_seq), &plain)
                .map_err(|e| invalid(&e))
        })?;
        if let Some((name, host)) = &renamed {
            local::set(tx, local::DEVICE_NAME, name)?;
            local::set(tx, local::DEVICE_HOST, host)?;
        }
        Ok(())
    })?;
    setup.device = new;
    if let Some((name, _)) = renamed {
        log::info!(
            "sync: this data dir was copied from {}; it is named {name} in the space",
            setup.device_name
        );
        setup.device_name = name;
    }
    Ok(())
}

/// The name and host a device going on as a new one takes when its data dir is on another
/// host than the one it entered the space on (a copy to another machine, which would
/// otherwise show under the first machine's name): the host name, or a name given by hand
/// followed by it. `None` on the same host (a restore) or when the host is not known.
fn renamed_on_another_host(
    conn: &Connection,
    name: &str,
) -> Result<Option<(String, String)>, SyncError> {
    let here = host_name();
    Ok(match local::get(conn, local::DEVICE_HOST)? {
        Some(there) if there != here => {
            let name = if name == there {
                here.clone()
            } else {
                format!("{name} on {here}")
            };
            Some((name, here))
        }
        _ => None,
    })
}

/// Reads every other device's log from its cursor and applies it. A memory added and
/// forgotten within the pull counts in neither [`Moved::added`] nor [`Moved::forgotten`].
pub fn pull(
    conn: &mut Connection,
    client: &mut postgres::Client,
    setup: &Setup,
    now: i64,
) -> Result<Moved, SyncError> {
    let mut moved = Moved::default();
    let mut added_here = std::collections::HashSet::new();
    for (device, last) in server::devices(client, &setup.key.space, &setup.device)? {
        loop {
            let after = local::cursor(conn, &device)?;
            if after >= last {
                break;
            }
            let batch = server::read(client, &setup.key.space, &device, after, PULL_BATCH)?;
            if batch.is_empty() {
                break;
            }
            let mut envelopes = Vec::with_capacity(batch.len());
            for (seq, body) in &batch {
                let unreadable = || SyncError::Unreadable {
                    device: device.clone(),
                    seq: *seq,
                };
                let plain = setup
                    .key
                    .open(&setup.key.record_ad(&device, *seq), body)
                    .ok_or_else(unreadable)?;
                let env: local::Envelope =
                    serde_json::from_slice(&plain).map_err(|_| unreadable())?;
                envelopes.push((*seq, env));
            }
            let applied = db::write(conn, |tx| {
                local::ensure_in(tx, &setup.key.space)?;
                envelopes
                    .iter()
                    .map(|(seq, env)| local::apply(tx, &device, *seq, env, now))
                    .collect::<crate::error::Result<Vec<_>>>()
            })?;
            moved.pulled += envelopes.len();
            for a in applied {
                match a {
                    local::Applied::Added(m) => {
                        added_here.insert(m);
                        moved.added += 1;
                    }
                    // Added and forgotten in the same pull (a fresh device reading a
                    // log where both happened): never here, counted as neither.
                    local::Applied::Forgot(m) if added_here.remove(&m) => moved.added -= 1,
                    local::Applied::Forgot(_) => moved.forgotten += 1,
                    local::Applied::Nothing => {}
                }
            }
        }
    }
    Ok(moved)
}

/// One sync: stage, push, then pull. The outcome (or the error) is kept for `status`.
pub fn sync_once(
    dir: &DataDir,
    conn: &mut Connection,
    settings: &SyncSettings,
    now: i64,
) -> Result<Moved, SyncError> {
    let mut setup = Setup::load(dir, conn)?.ok_or(SyncError::NotSetUp)?;
    let device = setup.device.clone();
    ensure_device(conn, &mut setup)?;
    let result = (|| -> Result<Moved, SyncError> {
        let opened = open_space(&setup.url, &setup.key);
        // A key that is not the space's seals nothing. The server away or a refused login
        // leave what is new sealed and queued, to go when they can.
        if !matches!(
            opened,
            Err(SyncError::WrongKey(_) | SyncError::NoSuchSpace(_))
        ) {
            stage(conn, &setup, settings, now)?;
        }
        let mut client = opened?;
        let pushed = push(conn, &mut client, &mut setup)?;
        if pushed > 0 {
            server::notify(&mut client, &setup.key.space, &setup.device)?;
        }
        let mut moved = pull(conn, &mut client, &setup, now)?;
        moved.pushed = pushed;
        moved.new_device = (setup.device != device).then(|| setup.device.clone());
        Ok(moved)
    })();
    match &result {
        Ok(_) => {
            live::record_ok(conn, live::Step::Pushed, now)?;
            live::record_ok(conn, live::Step::Pulled, now)?;
        }
        Err(e) => live::record_error(conn, e, None, now)?,
    }
    result
}

/// What `cairn sync status`, `cairn status` and `cairn doctor` show: what `cairn sync`
/// and the worker recorded in the local store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Status {
    pub server: String,
    pub space: String,
    pub device: String,
    pub device_name: String,
    /// Records and memories not on the server yet: sealed in the outbox, or of synced
    /// projects and not staged yet.
    pub unsent: i64,
    pub last_sync_at: Option<i64>,
    pub last_push_at: Option<i64>,
    pub last_pull_at: Option<i64>,
    /// Records of the other devices' logs that were on the server at the last pull and
    /// are not applied here.
    pub behind: i64,
    pub last_error: Option<String>,
    /// Since when the errors last without a success in between.
    pub last_error_at: Option<i64>,
    /// What to do about the error.
    pub fix: Option<String>,
    /// When the worker tries again.
    pub retry_at: Option<i64>,
    /// Whether the worker listens for the other devices' pushes (`None`: it never
    /// connected).
    pub listening: Option<bool>,
    pub devices: Vec<DeviceStatus>,
}

impl Status {
    /// The other devices seen, in words: "2 other devices", and how many of them are this
    /// data dir's own earlier logs.
    pub fn devices_in_words(&self) -> String {
        let all = crate::text::plural(self.devices.len() as i64, "other device", "other devices");
        match self.devices.iter().filter(|d| d.former).count() {
            0 => all,
            1 if self.devices.len() == 1 => format!("{all} (this data dir's earlier log)"),
            1 => format!("{all} (1 of them this data dir's earlier log)"),
            n => format!("{all} ({n} of them this data dir's earlier logs)"),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeviceStatus {
    pub device: String,
    pub name: String,
    /// The last record of its log applied here.
    pub read_to: i64,
    /// The last record of its log on the server at the last pull.
    pub last_seq: Option<i64>,
    /// This data dir's own earlier log: it went on as a new device after a restore or a
    /// copy (a copy may still write the old log on another machine).
    pub former: bool,
}

/// What the space has not received from here: records queued in the outbox, and memories
/// (sessions, tombstones) of synced projects not staged yet.
fn unsent(conn: &Connection, settings: &SyncSettings) -> Result<i64, SyncError> {
    let projects = local::Projects::from_setting(&settings.projects);
    Ok(local::outbox_len(conn)? + local::unsent_count(conn, &projects, settings.prompts)?)
}

/// This device's sync state, from the local store only (no network).
pub fn status(
    dir: &DataDir,
    conn: &Connection,
    settings: &SyncSettings,
) -> Result<Option<Status>, SyncError> {
    let Some(setup) = Setup::load(dir, conn)? else {
        return Ok(None);
    };
    let r = live::recorded(conn)?;
    let former = local::former_devices(conn)?;
    let mut devices: Vec<DeviceStatus> = local::devices(conn)?
        .into_iter()
        .map(|(device, name, read_to)| DeviceStatus {
            former: former.contains(&device),
            device,
            name,
            read_to,
            last_seq: None,
        })
        .collect();
    for (device, last) in &r.server_logs {
        match devices.iter_mut().find(|d| d.device == *device) {
            Some(d) => d.last_seq = Some(*last),
            None => devices.push(DeviceStatus {
                former: former.contains(device),
                device: device.clone(),
                name: String::new(),
                read_to: 0,
                last_seq: Some(*last),
            }),
        }
    }
    let behind = devices
        .iter()
        .map(|d| (d.last_seq.unwrap_or(0) - d.read_to).max(0))
        .sum();
    Ok(Some(Status {
        server: setup.url.display(),
        space: setup.key.space.clone(),
        device: setup.device,
        device_name: setup.device_name,
        unsent: unsent(conn, settings)?,
        last_sync_at: r.last_pull_at,
        last_push_at: r.last_push_at,
        last_pull_at: r.last_pull_at,
        behind,
        last_error: r.last_error,
        last_error_at: r.last_error_at,
        fix: r.fix,
        retry_at: r.retry_at,
        // Listening is a running worker's: with none running, none listens.
        listening: r
            .listening
            .filter(|_| crate::store::lock::holder(&dir.worker_lock()).is_ok_and(|h| h.is_some())),
        devices,
    }))
}
