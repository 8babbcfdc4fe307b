//! The data dir: the database (there, the schema version cairn supports, integrity), the
//! permissions of the dir and the database, and the free disk space.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::{Finding, Level, finding, ok};
use crate::store::db::{self, OpenOptions};
use crate::store::paths::free_bytes;
use crate::store::paths::{DataDir, mode_of};

/// What to do about a damaged database: the automatic recovery (which restores the newest
/// sound backup and salvages the newer rows), or a restore of a backup (which does not).
fn restore_hint(dir: &DataDir) -> String {
    let auto = "the next cairn command (or the worker's start) recovers it: the newest sound backup restored and every readable newer row salvaged (`cairn status` runs it)";
    match crate::store::backup::daily_backups(dir)
        .ok()
        .and_then(|b| b.last().cloned())
    {
        Some(latest) => format!(
            "{auto}; or restore a backup as it is: cairn restore {}",
            latest.display()
        ),
        None => format!("{auto}; or restore a backup with `cairn restore PATH`"),
    }
}

/// A read-only data dir or database is not a damaged one: say so, and never advise a
/// restore that would roll the user back.
fn read_only_finding(dir: &DataDir) -> Option<Finding> {
    let why = [dir.root().to_path_buf(), dir.db()]
        .iter()
        .find_map(|p| crate::store::paths::read_only_reason(p))?;
    Some(finding(
        "database",
        Level::Fail,
        format!(
            "read-only: {why}; cairn cannot write its database (hooks keep their events outside the data dir, in {}, until it can; the worker cannot run)",
            crate::store::fallback::location(dir).display()
        ),
        Some(format!(
            "make {} writable again (remount it read-write, or give it back its write permission); the database was not changed",
            dir.root().display()
        )),
    ))
}

pub(super) fn check_database(dir: &DataDir, out: &mut Vec<Finding>) -> Option<Connection> {
    let path = dir.db();
    if !path.exists() {
        out.push(finding(
            "database",
            Level::Fail,
            format!("no cairn database at {}", path.display()),
            Some("check CAIRN_DATA_DIR; hooks create the database on their first event (or run `cairn install`)".into()),
        ));
        return None;
    }
    // Read-write without create, like every cairn connection: a read-only connection to a
    // WAL database would leave -wal and -shm files behind.
    let version =
        Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_WRITE).and_then(|mut c| {
            db::trace_if_asked(&mut c);
            db::schema_version(&c).map(|v| (c, v))
        });
    match version {
        Ok((c, v)) if v > db::SCHEMA_VERSION => {
            let why = db::too_new(&c, &path, v);
            if why.is_corrupt() {
                out.push(finding(
                    "database",
                    Level::Fail,
                    why.to_string(),
                    Some(restore_hint(dir)),
                ));
                return None;
            }
            out.push(finding(
                "schema",
                Level::Fail,
                format!(
                    "schema version {v} is newer than this cairn supports ({})",
                    db::SCHEMA_VERSION
                ),
                Some("upgrade cairn (every binary: cairn, cairn-hook, cairn-worker)".into()),
            ));
            return None;
        }
        Ok((_, v)) if v < db::SCHEMA_VERSION => out.push(finding(
            "schema",
            Level::Warn,
            format!(
                "schema version {v}, older than this cairn's {}",
                db::SCHEMA_VERSION
            ),
            Some("nothing to do: it is migrated the next time cairn opens it".into()),
        )),
        Ok((_, v)) => out.push(ok("schema", format!("schema version {v} (current)"))),
        Err(_) if read_only_finding(dir).is_some() => {
            out.extend(read_only_finding(dir));
            return None;
        }
        Err(e) => {
            out.push(finding(
                "database",
                Level::Fail,
                format!("{} is not a usable cairn database: {e}", path.display()),
                Some(restore_hint(dir)),
            ));
            return None;
        }
    }
    let opts = OpenOptions {
        busy_timeout: Duration::from_secs(2),
        create: false,
        ..OpenOptions::default()
    };
    let conn = match db::open_data_dir(dir, opts) {
        Ok(c) => c,
        Err(_) if read_only_finding(dir).is_some() => {
            out.extend(read_only_finding(dir));
            return None;
        }
        Err(e) => {
            let fix = if e.is_busy() {
                "another process holds the database; try again when it is done".into()
            } else {
                restore_hint(dir)
            };
            out.push(finding("database", Level::Fail, e.to_string(), Some(fix)));
            return None;
        }
    };
    match db::integrity_problems(&conn) {
        Ok(p) if p.is_empty() => out.push(ok(
            "integrity",
            "integrity_check and FTS integrity are clean".into(),
        )),
        Ok(p) => out.push(finding(
            "integrity",
            Level::Fail,
            format!("{} problems: {}", p.len(), p.join("; ")),
            Some(restore_hint(dir)),
        )),
        Err(e) => out.push(finding(
            "integrity",
            Level::Fail,
            format!("cannot run the integrity check: {e}"),
            Some(restore_hint(dir)),
        )),
    }
    Some(conn)
}

pub(super) fn check_permissions(dir: &DataDir, out: &mut Vec<Finding>) {
    for (path, want) in [(dir.root().to_path_buf(), 0o700), (dir.db(), 0o600)] {
        match mode_of(&path) {
            None => {}
            Some(mode) if mode & 0o077 == 0 => {
                out.push(ok("permissions", format!("{} is {mode:o}", path.display())))
            }
            Some(mode) => out.push(finding(
                "permissions",
                Level::Warn,
                format!(
                    "{} is {mode:o}: other users can read your prompts and code",
                    path.display()
                ),
                Some(format!("chmod {want:o} {}", path.display())),
            )),
        }
    }
}

pub(super) fn check_disk(dir: &DataDir, out: &mut Vec<Finding>) {
    let probe = dir
        .root()
        .ancestors()
        .find(|p| p.exists())
        .unwrap_or(Path::new("/"));
    let Some(free) = free_bytes(probe) else {
        out.push(finding(
            "disk",
            Level::Warn,
            format!("cannot tell the free space at {}", probe.display()),
            None,
        ));
        return;
    };
    let mib = free / (1024 * 1024);
    let (level, fix) = if mib < 100 {
        (Level::Fail, Some("free disk space: SQLite fails writes when the disk is full and hooks then spool events".to_string()))
    } else if mib < 1024 {
        (Level::Warn, Some("free some disk space soon".to_string()))
    } else {
        (Level::Ok, None)
    };
    out.push(finding(
        "disk",
        level,
        format!("{mib} MiB free at {}", probe.display()),
        fix,
    ));
}

#[cfg(test)]
mod tests {
    use super::super::run;
    use super::super::testing::{env, levels};
    use super::*;
    use crate::settings::Settings;

    #[test]
    fn broken_database_and_loose_permissions() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let e = env(tmp.path());
        let f = run(&dd, &Settings::default(), &[], &e, 1);
        assert_eq!(levels(&f, "database"), vec![Level::Fail]);

        dd.ensure().expect("dir");
        std::fs::write(dd.db(), vec![b'x'; 4096]).expect("garbage");
        std::fs::set_permissions(dd.db(), std::os::unix::fs::PermissionsExt::from_mode(0o644))
            .expect("chmod");
        let f = run(&dd, &Settings::default(), &[], &e, 1);
        assert_eq!(levels(&f, "database"), vec![Level::Fail], "{f:#?}");
        assert_eq!(
            levels(&f, "permissions"),
            vec![Level::Ok, Level::Warn],
            "{f:#?}"
        );
        assert!(f.iter().all(|x| x.level == Level::Ok || x.fix.is_some()));
    }
}
