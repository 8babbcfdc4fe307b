//! The worker: running (holding its lock) with a fresh heartbeat, or not needed.

use rusqlite::Connection;

use super::{Env, Finding, Level, finding, ok};
use crate::settings::Settings;
use crate::store::paths::DataDir;

pub(super) fn check_worker(
    dir: &DataDir,
    settings: &Settings,
    conn: Option<&Connection>,
    now: i64,
    out: &mut Vec<Finding>,
) {
    let holder = match crate::store::lock::holder(&dir.worker_lock()) {
        Ok(h) => h,
        Err(e) => {
            out.push(finding(
                "worker",
                Level::Warn,
                format!("cannot check the worker lock: {e}"),
                Some(format!("check {}", dir.worker_lock().display())),
            ));
            return;
        }
    };
    let heartbeat: Option<i64> = conn.and_then(|c| {
        crate::ops::liveness::last_heartbeat(c, holder.as_ref().map(|h| h.pid))
            .ok()
            .flatten()
    });
    let waiting: i64 = conn
        .and_then(|c| {
            c.query_row(
                "SELECT count(*) FROM pending_messages WHERE status IN ('pending', 'claimed')",
                [],
                |r| r.get(0),
            )
            .ok()
        })
        .unwrap_or(0);
    let stale_ms = (settings.worker.heartbeat_secs as i64).max(1) * 3 * 1000;
    match holder {
        Some(h) => match heartbeat.map(|t| now - t) {
            Some(age) if age > stale_ms => out.push(finding(
                "worker",
                Level::Warn,
                format!(
                    "worker pid {} holds the lock but its last heartbeat was {}s ago",
                    h.pid,
                    age / 1000
                ),
                Some(format!("it may be stuck: restart it (kill {}; it is restarted by its service or the next hook)", h.pid)),
            )),
            Some(age) => out.push(ok(
                "worker",
                format!("worker pid {} running, heartbeat {}s ago", h.pid, age / 1000),
            )),
            None if now - h.started_at > stale_ms => out.push(finding(
                "worker",
                Level::Warn,
                format!(
                    "worker pid {} holds the lock but has recorded no heartbeat since it started {}s ago",
                    h.pid,
                    (now - h.started_at) / 1000
                ),
                Some(format!("it may be stuck: restart it (kill {})", h.pid)),
            )),
            None => out.push(ok(
                "worker",
                format!("worker pid {} running (no heartbeat recorded yet)", h.pid),
            )),
        },
        None if waiting > 0 => out.push(finding(
            "worker",
            Level::Warn,
            format!("no worker is running and {waiting} jobs are waiting"),
            Some(if settings.worker.autostart {
                "start `cairn-worker` (the next hook also starts one)".into()
            } else {
                "start `cairn-worker`, or set worker.autostart to true".into()
            }),
        )),
        None => out.push(ok(
            "worker",
            "no worker running and no work waiting".into(),
        )),
    }
}

/// The provider and model the running worker uses, as it recorded them (it chose them
/// from its own environment: a worker started by a hook has Claude Code's), and a warning
/// when this shell's environment would pick another provider, since `check_provider`
/// above judged the shell's choice.
pub(super) fn check_worker_provider(
    dir: &DataDir,
    settings: &Settings,
    conn: Option<&Connection>,
    env: &Env,
    out: &mut Vec<Finding>,
) {
    let Some(holder) = crate::store::lock::holder(&dir.worker_lock())
        .ok()
        .flatten()
    else {
        return;
    };
    let Some(w) = conn
        .and_then(|c| crate::queue::workers::latest(c).ok().flatten())
        .filter(|w| w.pid == holder.pid && w.stopped_at.is_none())
    else {
        return;
    };
    let (Some(provider), Some(model)) = (w.provider, w.model) else {
        return;
    };
    out.push(ok(
        "provider",
        format!(
            "the running worker (pid {}) uses {provider} ({model})",
            w.pid
        ),
    ));
    let shell = super::model::resolve_provider(settings, env).provider;
    if shell != provider {
        out.push(finding(
            "provider",
            Level::Warn,
            format!(
                "this shell's environment would pick {shell}, but the running worker uses {provider}: it was started with another environment (by a hook, with Claude Code's)"
            ),
            Some("set model.provider in the data dir's settings.json to choose one for every worker, then restart the worker".into()),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{env, levels};
    use super::super::{Level, run};
    use crate::settings::Settings;
    use crate::store::db::{self, OpenOptions};
    use crate::store::paths::DataDir;

    #[test]
    fn worker_heartbeat_freshness() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dd = DataDir::new(tmp.path().join("d"));
        let conn = db::open_data_dir(&dd, OpenOptions::default()).expect("open");
        let e = env(tmp.path());
        let now = 1_000_000_000;
        let _lock = crate::store::lock::WorkerLock::try_acquire(&dd.worker_lock(), now - 1_000)
            .expect("lock")
            .expect("free");
        let f = run(&dd, &Settings::default(), &[], &e, now);
        assert_eq!(levels(&f, "worker"), vec![Level::Ok], "just started");
        let f = run(&dd, &Settings::default(), &[], &e, now + 3_600_000);
        assert_eq!(levels(&f, "worker"), vec![Level::Warn], "never beat");
        conn.execute(
            "INSERT INTO workers (worker_id, pid, started_at, heartbeat_at) VALUES ('w', ?1, ?2, ?3)",
            rusqlite::params![std::process::id(), now - 1_000, now + 3_590_000],
        )
        .expect("row");
        let f = run(&dd, &Settings::default(), &[], &e, now + 3_600_000);
        assert_eq!(levels(&f, "worker"), vec![Level::Ok], "fresh beat: {f:#?}");
        let f = run(&dd, &Settings::default(), &[], &e, now + 7_200_000);
        assert_eq!(levels(&f, "worker"), vec![Level::Warn], "stale beat");
    }
}
