//! Test helpers shared by recall's tests: a migrated database in a temp dir, and memories
//! of every kind stored through `memory` as the worker and capture store them. Builds on
//! memory and the store only, so every file of recall can use it.

use rusqlite::{Connection, params};

use crate::memory;
use crate::memory::observations::{NewObservation, NewSummary};
use crate::store::db;

/// One day, in ms.
pub const DAY: i64 = 86_400_000;
/// 2026-09-21T14:13:20Z, when the test memories are stored.
pub const T0: i64 = 1_790_000_000_000;

/// The unit vector of 8 dimensions along `axis` (modulo 8).
pub fn unit(axis: usize) -> Vec<f32> {
    let mut v = vec![0.0f32; 8];
    v[axis % 8] = 1.0;
    v
}

/// A migrated database in a temp dir, deleted with the fixture.
pub struct Fixture {
    _tmp: tempfile::TempDir,
    pub conn: Connection,
}

pub fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dd = crate::store::paths::DataDir::new(tmp.path());
    let conn = db::open_data_dir(&dd, db::OpenOptions::default()).expect("open");
    Fixture { _tmp: tmp, conn }
}

/// An observation of the project's session `s-<project>`, turn 1.
pub fn obs(project: &str, kind: &str, title: &str, narrative: &str, at: i64) -> NewObservation {
    NewObservation {
        session_id: Some(format!("s-{project}")),
        project: project.into(),
        prompt_number: Some(1),
        kind: kind.into(),
        origin: "model".into(),
        created_at: at,
        content: crate::memory::rows::ObservationContent {
            title: title.into(),
            narrative: narrative.into(),
            ..Default::default()
        },
        ..Default::default()
    }
}

impl Fixture {
    /// Stores the observation (and its session); its id.
    pub fn add(&mut self, o: NewObservation) -> i64 {
        db::write(&mut self.conn, |tx| {
            if let Some(s) = &o.session_id {
                crate::memory::sessions::ensure(tx, s, &o.project, "/x", o.created_at)?;
            }
            Ok(memory::observations::insert_observation(tx, &o)?.id())
        })
        .expect("insert")
    }

    /// Stores a turn summary of the project's session; its id.
    pub fn summary(
        &mut self,
        project: &str,
        n: i64,
        request: &str,
        completed: &str,
        at: i64,
    ) -> i64 {
        let s = NewSummary {
            session_id: format!("s-{project}"),
            project: project.into(),
            prompt_number: n,
            request: request.into(),
            completed: completed.into(),
            files_edited: vec!["core/src/queue.rs".into()],
            origin: "model".into(),
            created_at: at,
            ..Default::default()
        };
        db::write(&mut self.conn, |tx| {
            crate::memory::sessions::ensure(tx, &s.session_id, project, "/x", at)?;
            Ok(memory::observations::upsert_summary(tx, &s)?.id())
        })
        .expect("summary")
    }

    /// Stores a prompt of the project's session; its id.
    pub fn prompt(&mut self, project: &str, n: i64, text: &str, at: i64) -> i64 {
        let session = format!("s-{project}");
        db::write(&mut self.conn, |tx| {
            crate::memory::sessions::ensure(tx, &session, project, "/x", at)?;
            tx.execute(
                "INSERT INTO user_prompts (session_id, project, prompt_number, prompt_text, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![session, project, n, text, at],
            )?;
            Ok(tx.last_insert_rowid())
        })
        .expect("prompt")
    }
}
