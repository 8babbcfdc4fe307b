-- What each session was already told: one row per memory cairn gave a session, at the
-- session start index, with a prompt or before a file was read or edited. Read so that
-- nothing is given twice in a session, and by `cairn status` and the viewer (how often
-- memories were given and what they cost). Holds ids and sizes only, never text.
CREATE TABLE memory_given (
    id INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    -- memory::kind::Kind::code: 0 observation, 1 summary, 2 prompt
    kind INTEGER NOT NULL,
    memory_id INTEGER NOT NULL,
    -- 'session_start', 'prompt' or 'file'
    moment TEXT NOT NULL,
    -- the file read or edited, for the 'file' moment
    file TEXT,
    given_at INTEGER NOT NULL,
    -- estimated tokens (characters / 4) of the line that gave it
    tokens INTEGER NOT NULL
);
CREATE INDEX memory_given_session ON memory_given (session_id, kind, memory_id);
CREATE INDEX memory_given_time ON memory_given (given_at);
