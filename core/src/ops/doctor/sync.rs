//! Sync: this device's space as the worker (or `cairn sync`) last recorded it. Reads the
//! local store only; the server is asked by `cairn sync status`.

use rusqlite::Connection;

use super::{Finding, Level, finding, ok};
use crate::settings::Settings;
use crate::store::paths::DataDir;

pub(super) fn check_sync(
    dir: &DataDir,
    settings: &Settings,
    conn: Option<&Connection>,
    out: &mut Vec<Finding>,
) {
    let Some(conn) = conn else { return };
    let s = match crate::sync::status(dir, conn, &settings.sync) {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(e) => {
            out.push(finding(
                "sync",
                Level::Fail,
                format!("this device's sync setup cannot be read: {e}"),
                e.fix().map(str::to_string),
            ));
            return;
        }
    };
    let place = format!("space {} on {}", s.space, s.server);
    if let Some(e) = &s.last_error {
        let since = s.last_error_at.map_or(String::new(), |t| {
            format!(" since {}", crate::clock::minute_utc(t))
        });
        out.push(finding(
            "sync",
            Level::Fail,
            format!("{place}: {e}{since}; {} records wait to be sent", s.unsent),
            s.fix.clone(),
        ));
        return;
    }
    if settings.sync.projects.is_empty() {
        out.push(finding(
            "sync",
            Level::Warn,
            format!("{place}: no project syncs (sync.projects is empty)"),
            Some("name the projects to sync in sync.projects (\"*\" for all)".into()),
        ));
        return;
    }
    let when = |t: Option<i64>| t.map_or("never".into(), crate::clock::minute_utc);
    out.push(ok(
        "sync",
        format!(
            "{place}: seen {}, last push {}, last pull {}, {} behind, {} unsent{}",
            s.devices_in_words(),
            when(s.last_push_at),
            when(s.last_pull_at),
            crate::text::plural(s.behind, "record", "records"),
            s.unsent,
            match s.listening {
                Some(true) => ", listening",
                Some(false) => ", polling",
                None => "",
            }
        ),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::db::{self, OpenOptions};
    use crate::sync::{SpaceKey, SyncError, live, local};

    fn checks(dir: &DataDir, settings: &Settings, conn: &Connection) -> Vec<Finding> {
        let mut out = Vec::new();
        check_sync(dir, settings, Some(conn), &mut out);
        out
    }

    #[test]
    fn sync_is_ok_warned_without_projects_and_failed_with_the_fix_of_its_error() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let mut conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let mut settings = Settings::default();
        assert_eq!(
            checks(&dd, &settings, &conn),
            vec![],
            "in no space: nothing to say"
        );

        let key = SpaceKey::generate().expect("key");
        std::fs::write(dd.root().join("sync.key"), key.encode()).expect("key file");
        std::fs::write(
            dd.root().join("sync.url"),
            "postgres://ann:s3cret@db.example/mem",
        )
        .expect("url file");
        db::write(&mut conn, |tx| local::set(tx, local::DEVICE, "d1")).expect("device");
        let f = checks(&dd, &settings, &conn);
        assert_eq!(
            f.iter().map(|f| f.level).collect::<Vec<_>>(),
            vec![Level::Warn]
        );

        settings.sync.projects = vec!["*".into()];
        live::record_ok(&mut conn, live::Step::Pulled, 1_000).expect("pulled");
        let f = checks(&dd, &settings, &conn);
        assert_eq!(f[0].level, Level::Ok, "{f:?}");
        assert!(f[0].message.contains("ann@db.example:5432/mem"), "{f:?}");
        assert!(!f[0].message.contains("s3cret"), "{f:?}");

        let refused = SyncError::LoginRefused("password authentication failed".into());
        live::record_error(&mut conn, &refused, Some(9_000), 2_000).expect("error");
        let f = checks(&dd, &settings, &conn);
        assert_eq!(f[0].level, Level::Fail, "{f:?}");
        assert!(f[0].message.contains("refused the login"), "{f:?}");
        assert_eq!(f[0].fix.as_deref(), refused.fix());
    }
}
