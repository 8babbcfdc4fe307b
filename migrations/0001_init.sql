-- cairn schema, version 1.
-- Times are INTEGER milliseconds since the Unix epoch (UTC). JSON arrays are TEXT.
-- Never edit a migration once shipped: add a new numbered file instead.

CREATE TABLE sessions (
    session_id     TEXT PRIMARY KEY,              -- Claude Code's session id
    project        TEXT NOT NULL,
    cwd            TEXT NOT NULL DEFAULT '',
    prompt_counter INTEGER NOT NULL DEFAULT 0,
    status         TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'ended')),
    started_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    ended_at       INTEGER
) WITHOUT ROWID;
CREATE INDEX sessions_project_recent ON sessions (project, updated_at DESC);

CREATE TABLE user_prompts (
    id             INTEGER PRIMARY KEY,
    session_id     TEXT NOT NULL REFERENCES sessions (session_id),
    project        TEXT NOT NULL,
    prompt_number  INTEGER NOT NULL,
    prompt_id      TEXT,                           -- Claude Code's prompt_id, when sent
    prompt_text    TEXT NOT NULL,
    created_at     INTEGER NOT NULL,
    UNIQUE (session_id, prompt_number)
);
CREATE UNIQUE INDEX user_prompts_prompt_id ON user_prompts (session_id, prompt_id)
    WHERE prompt_id IS NOT NULL;
CREATE INDEX user_prompts_project_time ON user_prompts (project, created_at);

CREATE TABLE pending_messages (
    id             INTEGER PRIMARY KEY,
    session_id     TEXT NOT NULL REFERENCES sessions (session_id),
    project        TEXT NOT NULL,
    kind           TEXT NOT NULL CHECK (kind IN ('observation', 'summarize')),
    prompt_number  INTEGER NOT NULL,
    payload        TEXT NOT NULL CHECK (json_valid(payload)),
    dedupe_key     TEXT NOT NULL UNIQUE,
    status         TEXT NOT NULL DEFAULT 'pending'
                   CHECK (status IN ('pending', 'claimed', 'done', 'skipped')),
    attempts       INTEGER NOT NULL DEFAULT 0,
    max_attempts   INTEGER NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    available_at   INTEGER NOT NULL,
    claimed_by     TEXT,
    claim_token    INTEGER,                        -- fences acks: unique per claim
    lease_until    INTEGER,
    last_error     TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    done_at        INTEGER
);
-- Claim: scan due pending rows in id order, probe per session.
CREATE INDEX pending_messages_pending ON pending_messages (session_id, kind, prompt_number, id)
    WHERE status = 'pending';
CREATE INDEX pending_messages_pending_order ON pending_messages (id, available_at)
    WHERE status = 'pending';
-- In-flight check per session, lease rescue.
CREATE INDEX pending_messages_claimed ON pending_messages (session_id, lease_until)
    WHERE status = 'claimed';
CREATE INDEX pending_messages_claimed_lease ON pending_messages (lease_until)
    WHERE status = 'claimed';
-- Purge of done jobs, replay of skipped ones. Partial indexes only: a plain index on
-- status tempts the planner away from the per-session ones above.
CREATE INDEX pending_messages_done_time ON pending_messages (updated_at) WHERE status = 'done';
CREATE INDEX pending_messages_skipped_time ON pending_messages (updated_at) WHERE status = 'skipped';

-- Every failed attempt of a job, for `cairn queue show`.
CREATE TABLE job_errors (
    id             INTEGER PRIMARY KEY,
    job_id         INTEGER NOT NULL REFERENCES pending_messages (id) ON DELETE CASCADE,
    attempt        INTEGER NOT NULL,
    error          TEXT NOT NULL,
    created_at     INTEGER NOT NULL
);
CREATE INDEX job_errors_job ON job_errors (job_id, id);

CREATE TABLE observations (
    id             INTEGER PRIMARY KEY,
    session_id     TEXT REFERENCES sessions (session_id),
    project        TEXT NOT NULL,
    prompt_number  INTEGER,
    type           TEXT NOT NULL,
    original_type  TEXT,                           -- the model's word when it was not a known type
    title          TEXT NOT NULL,
    subtitle       TEXT NOT NULL DEFAULT '',
    narrative      TEXT NOT NULL DEFAULT '',
    facts          TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(facts)),
    concepts       TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(concepts)),
    files_read     TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(files_read)),
    files_modified TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(files_modified)),
    -- facts and concepts as plain text (one fact per line; concepts comma-separated), for
    -- the full-text index: it must hold words, not JSON escapes, and snippets show them.
    facts_text     TEXT NOT NULL DEFAULT '',
    concepts_text  TEXT NOT NULL DEFAULT '',
    content_hash   TEXT NOT NULL,
    source_job_ids TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(source_job_ids)),
    origin         TEXT NOT NULL DEFAULT 'model',  -- model | offline | manual | import
    created_at     INTEGER NOT NULL,
    UNIQUE (session_id, content_hash)
);
CREATE INDEX observations_project_time ON observations (project, created_at);
CREATE INDEX observations_time ON observations (created_at);
CREATE INDEX observations_session ON observations (session_id, prompt_number);

CREATE TABLE session_summaries (
    id             INTEGER PRIMARY KEY,
    session_id     TEXT NOT NULL REFERENCES sessions (session_id),
    project        TEXT NOT NULL,
    prompt_number  INTEGER NOT NULL,
    request        TEXT NOT NULL DEFAULT '',
    investigated   TEXT NOT NULL DEFAULT '',
    learned        TEXT NOT NULL DEFAULT '',
    completed      TEXT NOT NULL DEFAULT '',
    next_steps     TEXT NOT NULL DEFAULT '',
    notes          TEXT NOT NULL DEFAULT '',
    files_read     TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(files_read)),
    files_edited   TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(files_edited)),
    content_hash   TEXT NOT NULL,
    source_job_ids TEXT NOT NULL DEFAULT '[]' CHECK (json_valid(source_job_ids)),
    origin         TEXT NOT NULL DEFAULT 'model',
    created_at     INTEGER NOT NULL,
    UNIQUE (session_id, prompt_number)             -- one summary per turn; a newer one replaces it
);
CREATE INDEX session_summaries_project_time ON session_summaries (project, created_at);
CREATE INDEX session_summaries_time ON session_summaries (created_at);

CREATE TABLE model_calls (
    id             INTEGER PRIMARY KEY,
    provider       TEXT NOT NULL,
    model          TEXT NOT NULL,
    purpose        TEXT NOT NULL,                  -- observation | summarize | test
    session_id     TEXT,
    job_ids        TEXT NOT NULL DEFAULT '[]',
    prompt_chars   INTEGER NOT NULL DEFAULT 0,
    input_tokens   INTEGER NOT NULL DEFAULT 0,
    output_tokens  INTEGER NOT NULL DEFAULT 0,
    latency_ms     INTEGER NOT NULL,
    outcome        TEXT NOT NULL,                  -- ok | empty | unusable | error
    error          TEXT,
    created_at     INTEGER NOT NULL
);
CREATE INDEX model_calls_time ON model_calls (created_at);

-- Hook inputs that could not be turned into events (bad JSON, missing fields...).
CREATE TABLE quarantine (
    id             INTEGER PRIMARY KEY,
    event          TEXT,                           -- hook_event_name when it could be read
    -- invalid: input cairn could not read (a problem to look at); uncaptured: a well-formed
    -- event cairn does not capture (kept for inspection, harmless)
    kind           TEXT NOT NULL DEFAULT 'invalid' CHECK (kind IN ('invalid', 'uncaptured')),
    reason         TEXT NOT NULL,
    raw            BLOB NOT NULL,                  -- bounded copy of the input
    raw_len        INTEGER NOT NULL,               -- full length of the input in bytes
    created_at     INTEGER NOT NULL
);

-- One row per worker process that ever ran; the live one heartbeats.
CREATE TABLE workers (
    worker_id      TEXT PRIMARY KEY,
    pid            INTEGER NOT NULL,
    started_at     INTEGER NOT NULL,
    heartbeat_at   INTEGER NOT NULL,
    stopped_at     INTEGER
) WITHOUT ROWID;

-- Full-text search: external-content FTS5 tables kept in step by triggers.
CREATE VIRTUAL TABLE observations_fts USING fts5 (
    title, subtitle, narrative, facts_text, concepts_text,
    content = 'observations', content_rowid = 'id', tokenize = 'porter unicode61'
);
CREATE TRIGGER observations_fts_insert AFTER INSERT ON observations BEGIN
    INSERT INTO observations_fts (rowid, title, subtitle, narrative, facts_text, concepts_text)
    VALUES (new.id, new.title, new.subtitle, new.narrative, new.facts_text, new.concepts_text);
END;
CREATE TRIGGER observations_fts_delete AFTER DELETE ON observations BEGIN
    INSERT INTO observations_fts (observations_fts, rowid, title, subtitle, narrative, facts_text, concepts_text)
    VALUES ('delete', old.id, old.title, old.subtitle, old.narrative, old.facts_text, old.concepts_text);
END;
CREATE TRIGGER observations_fts_update AFTER UPDATE ON observations BEGIN
    INSERT INTO observations_fts (observations_fts, rowid, title, subtitle, narrative, facts_text, concepts_text)
    VALUES ('delete', old.id, old.title, old.subtitle, old.narrative, old.facts_text, old.concepts_text);
    INSERT INTO observations_fts (rowid, title, subtitle, narrative, facts_text, concepts_text)
    VALUES (new.id, new.title, new.subtitle, new.narrative, new.facts_text, new.concepts_text);
END;

CREATE VIRTUAL TABLE session_summaries_fts USING fts5 (
    request, investigated, learned, completed, next_steps, notes,
    content = 'session_summaries', content_rowid = 'id', tokenize = 'porter unicode61'
);
CREATE TRIGGER session_summaries_fts_insert AFTER INSERT ON session_summaries BEGIN
    INSERT INTO session_summaries_fts (rowid, request, investigated, learned, completed, next_steps, notes)
    VALUES (new.id, new.request, new.investigated, new.learned, new.completed, new.next_steps, new.notes);
END;
CREATE TRIGGER session_summaries_fts_delete AFTER DELETE ON session_summaries BEGIN
    INSERT INTO session_summaries_fts (session_summaries_fts, rowid, request, investigated, learned, completed, next_steps, notes)
    VALUES ('delete', old.id, old.request, old.investigated, old.learned, old.completed, old.next_steps, old.notes);
END;
CREATE TRIGGER session_summaries_fts_update AFTER UPDATE ON session_summaries BEGIN
    INSERT INTO session_summaries_fts (session_summaries_fts, rowid, request, investigated, learned, completed, next_steps, notes)
    VALUES ('delete', old.id, old.request, old.investigated, old.learned, old.completed, old.next_steps, old.notes);
    INSERT INTO session_summaries_fts (rowid, request, investigated, learned, completed, next_steps, notes)
    VALUES (new.id, new.request, new.investigated, new.learned, new.completed, new.next_steps, new.notes);
END;

CREATE VIRTUAL TABLE user_prompts_fts USING fts5 (
    prompt_text,
    content = 'user_prompts', content_rowid = 'id', tokenize = 'porter unicode61'
);
CREATE TRIGGER user_prompts_fts_insert AFTER INSERT ON user_prompts BEGIN
    INSERT INTO user_prompts_fts (rowid, prompt_text) VALUES (new.id, new.prompt_text);
END;
CREATE TRIGGER user_prompts_fts_delete AFTER DELETE ON user_prompts BEGIN
    INSERT INTO user_prompts_fts (user_prompts_fts, rowid, prompt_text)
    VALUES ('delete', old.id, old.prompt_text);
END;
CREATE TRIGGER user_prompts_fts_update AFTER UPDATE ON user_prompts BEGIN
    INSERT INTO user_prompts_fts (user_prompts_fts, rowid, prompt_text)
    VALUES ('delete', old.id, old.prompt_text);
    INSERT INTO user_prompts_fts (rowid, prompt_text) VALUES (new.id, new.prompt_text);
END;
