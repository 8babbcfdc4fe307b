-- Transcripts: reconciliation's bookkeeping, and what the user asked to forget.
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

-- forgotten: tombstones of what the user deleted, keyed by what an import, a
-- reconciliation or a salvage would otherwise recreate:
--   'session:<session_id>'              everything of a session
--   'prompt:<session_id>:<prompt_id>'   a prompt, and the turn it started
--   'tool:<tool_use_id>'                a tool call's observation job (its dedupe key)
--   'turn:<session_id>:<prompt_number>' a turn's summary job (its dedupe key)
--   'hash:<session_id>:<content_hash>'  an observation's content
CREATE TABLE forgotten (
    key          TEXT PRIMARY KEY,
    forgotten_at INTEGER NOT NULL
) WITHOUT ROWID;
