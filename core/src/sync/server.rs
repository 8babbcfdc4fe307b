//! The PostgreSQL side: connecting (password from the URL, `PGPASSWORD` or a password file;
//! TLS as the URL's `sslmode` and `sslrootcert` ask, through `tls`), the server's versioned
//! schema, and the three things a device does there: create or find a space, append to its
//! own log, read other logs from a cursor. The server only ever holds space and device
//! ids, sequence numbers, sealed bytes, sizes and times.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use postgres::config::SslMode;
use postgres::{Client, Config, NoTls};

use crate::sync::SyncError;
use crate::sync::tls::Tls;

/// The server's migrations, applied in order under an advisory lock; never edited once
/// shipped.
const MIGRATIONS: &[&str] = &["
CREATE TABLE cairn_spaces (
    space_id    text PRIMARY KEY,
    key_check   bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE cairn_devices (
    space_id    text NOT NULL REFERENCES cairn_spaces ON DELETE CASCADE,
    device_id   text NOT NULL,
    last_seq    bigint NOT NULL DEFAULT 0,
    first_seen  timestamptz NOT NULL DEFAULT now(),
    last_push   timestamptz,
    PRIMARY KEY (space_id, device_id)
);
CREATE TABLE cairn_records (
    space_id    text NOT NULL,
    device_id   text NOT NULL,
    seq         bigint NOT NULL,
    body        bytea NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (space_id, device_id, seq)
);
"];

/// Any number: the advisory lock that serialises the server's migrations.
const MIGRATION_LOCK: i64 = 0x6361_6972_6e73;

/// How long connecting may take before the server counts as away.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How a connection notices a server gone without a word (a network dropped, a laptop
/// asleep, a NAT entry expired): probed after 30 s idle, every 10 s, dead after 3
/// unanswered probes, and dead when data sent waits 60 s unacknowledged. Without them a
/// worker listening for changes would wait on a dead connection for hours (the system's
/// defaults). A URL that sets its own (`keepalives_idle=…`, `tcp_user_timeout=…`) keeps it.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_RETRIES: u32 = 3;
const USER_TIMEOUT: Duration = Duration::from_secs(60);

/// When this process's call to the server now waiting for its answer began (ms since the
/// epoch; 0: none waits). A server that accepts a connection and then never answers (frozen,
/// overloaded, or not PostgreSQL) holds a call forever: TCP keepalives are answered by its
/// kernel, and the driver has no per-call deadline. `live::watch` reads this to say so.
static WAITING_SINCE: AtomicI64 = AtomicI64::new(0);

/// Marks a call to the server as waiting until dropped.
struct Waiting;

impl Waiting {
    fn begin() -> Waiting {
        WAITING_SINCE.store(crate::clock::now_ms().max(1), Ordering::SeqCst);
        Waiting
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        WAITING_SINCE.store(0, Ordering::SeqCst);
    }
}

/// When this process's call to the server now waiting for its answer began (ms since the
/// epoch), if one waits.
pub fn waiting_since() -> Option<i64> {
    Some(WAITING_SINCE.load(Ordering::SeqCst)).filter(|&t| t > 0)
}

/// A parsed server URL. Its `Debug` and [`Url::display`] never show the password.
#[derive(Clone)]
pub struct Url {
    config: Config,
    tls: Tls,
}

impl std::fmt::Debug for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.display())
    }
}

impl Url {
    /// Reads a `postgres://` URL or a `key=value` connection string.
    pub fn parse(text: &str) -> Result<Self, SyncError> {
        let (rest, tls) = super::tls::take(text).map_err(SyncError::BadUrl)?;
        let mut config: Config = rest
            .parse()
            .map_err(|e: postgres::Error| SyncError::BadUrl(super::describe(&e)))?;
        if !text.contains("keepalives") {
            config
                .keepalives_idle(KEEPALIVE_IDLE)
                .keepalives_interval(KEEPALIVE_INTERVAL)
                .keepalives_retries(KEEPALIVE_RETRIES);
        }
        if !text.contains("tcp_user_timeout") {
            config.tcp_user_timeout(USER_TIMEOUT);
        }
        Ok(Url { config, tls })
    }

    /// `user@host:port/dbname`, no password.
    pub fn display(&self) -> String {
        let c = &self.config;
        let host = c
            .get_hosts()
            .first()
            .map(|h| match h {
                postgres::config::Host::Tcp(s) => s.clone(),
                postgres::config::Host::Unix(p) => p.display().to_string(),
            })
            .unwrap_or_else(|| "localhost".into());
        let port = c.get_ports().first().copied().unwrap_or(5432);
        format!(
            "{}@{host}:{port}/{}",
            c.get_user().unwrap_or(""),
            c.get_dbname().unwrap_or("")
        )
    }

    /// Connects: the URL's password, else `PGPASSWORD`, else the matching line of the
    /// password file (`PGPASSFILE`, else `~/.pgpass`).
    pub fn connect(&self) -> Result<Client, SyncError> {
        let mut config = self.config.clone();
        // A password file others may read, left unused.
        let mut open_file = None;
        if config.get_password().is_none() {
            match password_from_env(&config) {
                Ok(Some(p)) => {
                    config.password(p);
                }
                Ok(None) => {}
                Err(file) => open_file = Some(file),
            }
        }
        config.connect_timeout(CONNECT_TIMEOUT);
        let no_password = config.get_password().is_none();
        let _waiting = Waiting::begin();
        let client = match config.get_ssl_mode() {
            SslMode::Disable => config.connect(NoTls),
            _ => config.connect(self.tls.connector().map_err(SyncError::RootCerts)?),
        };
        client.map_err(|e| {
            if no_password && asked_for_password(&e) {
                let why = match &open_file {
                    Some(f) => format!(
                        "the server asks for a password and none was given: {} is readable by others, so it is not used (chmod 600 it)",
                        f.display()
                    ),
                    None => "the server asks for a password and none was given".into(),
                };
                SyncError::LoginRefused(why)
            } else {
                SyncError::from_postgres(e)
            }
        })
    }
}

/// True when the server asked for a password the client did not have. The `postgres`
/// crate reports it as a configuration error whose source says so, with no kind a caller
/// can match: its message is the only sign.
fn asked_for_password(e: &postgres::Error) -> bool {
    e.as_db_error().is_none()
        && std::error::Error::source(e).is_some_and(|s| s.to_string().contains("password missing"))
}

/// `PGPASSWORD`, else the password file's line for this server; `Err(file)` when the
/// password file is readable by others, and so not used (as psql does: a password others
/// may read is no secret).
fn password_from_env(config: &Config) -> Result<Option<String>, PathBuf> {
    if let Ok(p) = std::env::var("PGPASSWORD") {
        return Ok(Some(p));
    }
    let Some(file) = password_file() else {
        return Ok(None);
    };
    if open_to_others(&file) {
        return Err(file);
    }
    let Ok(text) = std::fs::read_to_string(file) else {
        return Ok(None);
    };
    let host = match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        _ => "localhost".into(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let want = [
        host.as_str(),
        port.as_str(),
        config.get_dbname().unwrap_or(""),
        config.get_user().unwrap_or(""),
    ];
    Ok(pgpass_lookup(&text, &want))
}

/// The password file: `PGPASSFILE`, else `~/.pgpass`.
pub fn password_file() -> Option<PathBuf> {
    std::env::var_os("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pgpass")))
}

/// True when a file's group or others may read or write it.
fn open_to_others(file: &std::path::Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(file).is_ok_and(|m| m.permissions().mode() & 0o077 != 0)
}

/// The password of the first line of a `.pgpass` file matching host, port, database and
/// user (`*` matches anything; `\:` and `\\` are escapes).
fn pgpass_lookup(text: &str, want: &[&str; 4]) -> Option<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let fields = split_pgpass(line);
            if fields.len() != 5 {
                return None;
            }
            let matches = fields[..4]
                .iter()
                .zip(want)
                .all(|(f, w)| f == "*" || f == w);
            matches.then(|| fields[4].clone())
        })
}

fn split_pgpass(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(n), Some(last)) = (chars.next(), out.last_mut()) {
                    last.push(n);
                }
            }
            ':' => out.push(String::new()),
            c => {
                if let Some(last) = out.last_mut() {
                    last.push(c);
                }
            }
        }
    }
    out
}

/// The version of the server's sync schema; `None` when this database has none (no space
/// was ever made in it). A read: a database user allowed only to read and write the
/// tables (not to create) can sync.
pub fn schema_version(client: &mut Client) -> Result<Option<i32>, SyncError> {
    let _waiting = Waiting::begin();
    let there: bool = client
        .query_one(
            "SELECT to_regclass('cairn_sync_migrations') IS NOT NULL",
            &[],
        )?
        .get(0);
    if !there {
        return Ok(None);
    }
    Ok(Some(
        client
            .query_one(
                "SELECT coalesce(max(version), 0) FROM cairn_sync_migrations",
                &[],
            )?
            .get(0),
    ))
}

/// The schema version this cairn writes.
pub fn known_version() -> i32 {
    i32::try_from(MIGRATIONS.len()).unwrap_or(i32::MAX)
}

/// Brings the server's schema up to date, creating it in a database that has none
/// (several devices may try at once).
pub fn migrate(client: &mut Client) -> Result<(), SyncError> {
    let _waiting = Waiting::begin();
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS cairn_sync_migrations (
             version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())",
    )?;
    let done: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM cairn_sync_migrations",
            &[],
        )?
        .get(0);
    let known = known_version();
    if done > known {
        return Err(SyncError::ServerTooNew {
            found: done,
            supported: known,
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(done as usize) {
        tx.batch_execute(sql)?;
        let version = i as i32 + 1;
        tx.execute(
            "INSERT INTO cairn_sync_migrations (version) VALUES ($1)",
            &[&version],
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// Creates a space with its key check record.
pub fn create_space(client: &mut Client, space: &str, check: &[u8]) -> Result<(), SyncError> {
    let _waiting = Waiting::begin();
    client.execute(
        "INSERT INTO cairn_spaces (space_id, key_check) VALUES ($1, $2)",
        &[&space, &check],
    )?;
    Ok(())
}

/// The key check record of a space, `None` when the server has no such space.
pub fn key_check(client: &mut Client, space: &str) -> Result<Option<Vec<u8>>, SyncError> {
    let _waiting = Waiting::begin();
    Ok(client
        .query_opt(
            "SELECT key_check FROM cairn_spaces WHERE space_id = $1",
            &[&space],
        )?
        .map(|r| r.get(0)))
}

/// What the server made of an append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    Done,
    /// The server holds records of this log that this device did not write as they are
    /// there: a number past the last it took (`numbered`), or the same number with other
    /// bytes. Its store was restored from a backup, or copied to another machine that
    /// pushed first. Nothing was written.
    Diverged,
}

/// The last sequence number of `device`'s log on the server (0 when it has none).
pub fn last_seq(client: &mut Client, space: &str, device: &str) -> Result<i64, SyncError> {
    let _waiting = Waiting::begin();
    Ok(client
        .query_opt(
            "SELECT last_seq FROM cairn_devices WHERE space_id = $1 AND device_id = $2",
            &[&space, &device],
        )?
        .map_or(0, |r| r.get(0)))
}

/// Appends records to `device`'s log, whose sequence numbers this device has taken up to
/// `numbered`. Idempotent: a record the server already holds with the same bytes is left
/// as it is, so a push repeated after a crash or a lost reply adds nothing. Anything else
/// already there is [`Appended::Diverged`], checked under the log's row lock, so two
/// copies of one device pushing at once cannot both pass.
pub fn append(
    client: &mut Client,
    space: &str,
    device: &str,
    numbered: i64,
    records: &[(i64, Vec<u8>)],
) -> Result<Appended, SyncError> {
    let _waiting = Waiting::begin();
    let Some(last) = records.iter().map(|r| r.0).max() else {
        return Ok(Appended::Done);
    };
    let mut tx = client.transaction()?;
    tx.execute(
        "INSERT INTO cairn_devices (space_id, device_id) VALUES ($1, $2)
         ON CONFLICT (space_id, device_id) DO NOTHING",
        &[&space, &device],
    )?;
    let held: i64 = tx
        .query_one(
            "SELECT last_seq FROM cairn_devices WHERE space_id = $1 AND device_id = $2
             FOR UPDATE",
            &[&space, &device],
        )?
        .get(0);
    // The whole batch in one statement (one round trip), as two arrays.
    let seqs: Vec<i64> = records.iter().map(|r| r.0).collect();
    let bodies: Vec<&[u8]> = records.iter().map(|r| r.1.as_slice()).collect();
    if held > numbered {
        return Ok(Appended::Diverged);
    }
    // Nothing past `held` is on the server: only a batch that reaches back (a push
    // repeated after a lost reply, or another store's numbers) is compared.
    let first = seqs.iter().copied().min().unwrap_or(last);
    if first <= held {
        let clashes: i64 = tx
            .query_one(
                "SELECT count(*) FROM cairn_records c
                 JOIN unnest($3::bigint[], $4::bytea[]) AS r (seq, body) ON c.seq = r.seq
                 WHERE c.space_id = $1 AND c.device_id = $2 AND c.seq BETWEEN $5 AND $6
                   AND c.body <> r.body",
                &[&space, &device, &seqs, &bodies, &first, &held],
            )?
            .get(0);
        if clashes > 0 {
            return Ok(Appended::Diverged);
        }
    }
    tx.execute(
        "INSERT INTO cairn_records (space_id, device_id, seq, body)
         SELECT $1, $2, r.seq, r.body FROM unnest($3::bigint[], $4::bytea[]) AS r (seq, body)
         ON CONFLICT (space_id, device_id, seq) DO NOTHING",
        &[&space, &device, &seqs, &bodies],
    )?;
    tx.execute(
        "UPDATE cairn_devices SET last_seq = greatest(last_seq, $3), last_push = now()
         WHERE space_id = $1 AND device_id = $2",
        &[&space, &device, &last],
    )?;
    tx.commit()?;
    Ok(Appended::Done)
}

/// The devices of a space other than `me`, with the last sequence number of each log.
pub fn devices(
    client: &mut Client,
    space: &str,
    me: &str,
) -> Result<Vec<(String, i64)>, SyncError> {
    let _waiting = Waiting::begin();
    Ok(client
        .query(
            "SELECT device_id, last_seq FROM cairn_devices
             WHERE space_id = $1 AND device_id <> $2 ORDER BY device_id",
            &[&space, &me],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
}

/// Up to `limit` records of `device`'s log after `after`, in order.
pub fn read(
    client: &mut Client,
    space: &str,
    device: &str,
    after: i64,
    limit: i64,
) -> Result<Vec<(i64, Vec<u8>)>, SyncError> {
    let _waiting = Waiting::begin();
    Ok(client
        .query(
            "SELECT seq, body FROM cairn_records
             WHERE space_id = $1 AND device_id = $2 AND seq > $3 ORDER BY seq LIMIT $4",
            &[&space, &device, &after, &limit],
        )?
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect())
}

/// The space's notification channel: `cairn_` and its id (hex, so a plain identifier).
fn channel(space: &str) -> String {
    let id: String = space.chars().filter(char::is_ascii_alphanumeric).collect();
    format!("cairn_{}", id.to_ascii_lowercase())
}

/// Asks the server to tell this connection when a device of `space` pushed (`notify`).
/// Needs a session of its own: behind a pooler in transaction mode it is accepted but
/// nothing arrives, and polling does the work.
pub fn listen(client: &mut Client, space: &str) -> Result<(), SyncError> {
    let _waiting = Waiting::begin();
    client.batch_execute(&format!("LISTEN {}", channel(space)))?;
    Ok(())
}

/// Tells the devices listening on `space` that `device` pushed. The payload is the device
/// id, which the server already holds: no content.
pub fn notify(client: &mut Client, space: &str, device: &str) -> Result<(), SyncError> {
    let _waiting = Waiting::begin();
    client.execute("SELECT pg_notify($1, $2)", &[&channel(space), &device])?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_show_no_password() {
        let u =
            Url::parse("postgres://ann:s3cret@db.example:6543/mem?sslmode=require").expect("url");
        assert_eq!(u.display(), "ann@db.example:6543/mem");
        assert!(!format!("{u:?}").contains("s3cret"));
        assert!(Url::parse("postgres://[::1").is_err());
    }

    #[test]
    fn a_dead_connection_is_noticed_within_a_minute_or_two_unless_the_url_says_otherwise() {
        let c = Url::parse("postgres://ann@db.example/mem")
            .expect("url")
            .config;
        assert!(c.get_keepalives());
        assert_eq!(c.get_keepalives_idle(), KEEPALIVE_IDLE);
        assert_eq!(c.get_keepalives_interval(), Some(KEEPALIVE_INTERVAL));
        assert_eq!(c.get_keepalives_retries(), Some(KEEPALIVE_RETRIES));
        assert_eq!(c.get_tcp_user_timeout(), Some(&USER_TIMEOUT));
        let own =
            Url::parse("postgres://ann@db.example/mem?keepalives_idle=600&tcp_user_timeout=5")
                .expect("url")
                .config;
        assert_eq!(own.get_keepalives_idle(), Duration::from_secs(600));
        assert_eq!(own.get_tcp_user_timeout(), Some(&Duration::from_secs(5)));
    }

    #[test]
    fn password_files_match_by_field_with_wildcards_and_escapes() {
        let text = "# comment\nother:5432:*:ann:no\n*:5432:mem:ann:pa\\:ss\n";
        let want = ["db", "5432", "mem", "ann"];
        assert_eq!(pgpass_lookup(text, &want).as_deref(), Some("pa:ss"));
        assert_eq!(pgpass_lookup(text, &["db", "1", "mem", "ann"]), None);
    }

    #[test]
    fn channels_are_plain_identifiers() {
        assert_eq!(channel("0aF9"), "cairn_0af9");
        assert_eq!(channel("a\"; DROP"), "cairn_adrop");
    }
}
