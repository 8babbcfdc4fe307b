-- Transcripts: reconciliation's bookkeeping.
--
-- transcript_sync: per session, the transcript last compared with what was captured (its
-- size and modification time then), so a finished session is compared once, and again
-- only when it changed (a resumed session).
CREATE TABLE transcript_sync (
    session_id TEXT PRIMARY KEY,
    path       TEXT NOT NULL,                 -- '' when no transcript was found
    size       INTEGER NOT NULL,
    mtime_ms   INTEGER NOT NULL,
    synced_at  INTEGER NOT NULL
) WITHOUT ROWID;

-- transcript_recovered: one row per comparison that found events the hooks had missed,
-- and how many; `cairn status` sums the last 7 days.
CREATE TABLE transcript_recovered (
    id         INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    events     INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX transcript_recovered_time ON transcript_recovered (created_at);

-- The tombstones of what the user deleted are the `forgotten` table of 0006_forgotten,
-- which `memory::forgotten` reads and writes under the keys import and reconciliation use.
