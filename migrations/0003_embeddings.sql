-- Sentence vectors for search by meaning.
--
-- embeddings: one vector per memory (kind 0 observation, 1 turn summary, 2 prompt), with
-- the model that made it. `bits` is one sign bit per dimension (the in-memory scan);
-- `vector` the int8 components scaled to the largest (the exact ranking of the closest).
-- `seq` grows with every write, so a long-lived reader catches up from the last seq seen.
CREATE TABLE embeddings (
    seq        INTEGER PRIMARY KEY,
    kind       INTEGER NOT NULL CHECK (kind IN (0, 1, 2)),
    ref_id     INTEGER NOT NULL,
    project    TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    model      TEXT NOT NULL,
    bits       BLOB NOT NULL,
    vector     BLOB NOT NULL,
    UNIQUE (kind, ref_id)
);
CREATE INDEX embeddings_model ON embeddings (model);

-- Memories waiting for a vector, newest first by ref_id. Filled by the triggers below and
-- by a model change; emptied by the embedder as it stores vectors. The triggers insert
-- with NOT EXISTS rather than OR IGNORE: a trigger's conflict clause gives way to the
-- firing statement's (an UPSERT's would make a repeat a constraint error).
CREATE TABLE embedding_queue (
    ref_id INTEGER NOT NULL,
    kind   INTEGER NOT NULL CHECK (kind IN (0, 1, 2)),
    PRIMARY KEY (ref_id, kind)
) WITHOUT ROWID;

INSERT INTO embedding_queue (ref_id, kind) SELECT id, 0 FROM observations;
INSERT INTO embedding_queue (ref_id, kind) SELECT id, 1 FROM session_summaries;
INSERT INTO embedding_queue (ref_id, kind) SELECT id, 2 FROM user_prompts;

CREATE TRIGGER observations_embed_insert AFTER INSERT ON observations BEGIN
    INSERT INTO embedding_queue (ref_id, kind) SELECT new.id, 0
        WHERE NOT EXISTS (SELECT 1 FROM embedding_queue WHERE ref_id = new.id AND kind = 0);
END;
CREATE TRIGGER observations_embed_update
AFTER UPDATE OF title, subtitle, narrative, facts_text, concepts_text, project, created_at ON observations BEGIN
    DELETE FROM embeddings WHERE kind = 0 AND ref_id = old.id;
    INSERT INTO embedding_queue (ref_id, kind) SELECT new.id, 0
        WHERE NOT EXISTS (SELECT 1 FROM embedding_queue WHERE ref_id = new.id AND kind = 0);
END;
CREATE TRIGGER observations_embed_delete AFTER DELETE ON observations BEGIN
    DELETE FROM embeddings WHERE kind = 0 AND ref_id = old.id;
    DELETE FROM embedding_queue WHERE ref_id = old.id AND kind = 0;
END;

CREATE TRIGGER session_summaries_embed_insert AFTER INSERT ON session_summaries BEGIN
    INSERT INTO embedding_queue (ref_id, kind) SELECT new.id, 1
        WHERE NOT EXISTS (SELECT 1 FROM embedding_queue WHERE ref_id = new.id AND kind = 1);
END;
CREATE TRIGGER session_summaries_embed_update
AFTER UPDATE OF request, investigated, learned, completed, next_steps, notes, project, created_at ON session_summaries BEGIN
    DELETE FROM embeddings WHERE kind = 1 AND ref_id = old.id;
    INSERT INTO embedding_queue (ref_id, kind) SELECT new.id, 1
        WHERE NOT EXISTS (SELECT 1 FROM embedding_queue WHERE ref_id = new.id AND kind = 1);
END;
CREATE TRIGGER session_summaries_embed_delete AFTER DELETE ON session_summaries BEGIN
    DELETE FROM embeddings WHERE kind = 1 AND ref_id = old.id;
    DELETE FROM embedding_queue WHERE ref_id = old.id AND kind = 1;
END;

CREATE TRIGGER user_prompts_embed_insert AFTER INSERT ON user_prompts BEGIN
    INSERT INTO embedding_queue (ref_id, kind) SELECT new.id, 2
        WHERE NOT EXISTS (SELECT 1 FROM embedding_queue WHERE ref_id = new.id AND kind = 2);
END;
CREATE TRIGGER user_prompts_embed_update
AFTER UPDATE OF prompt_text, project, created_at ON user_prompts BEGIN
    DELETE FROM embeddings WHERE kind = 2 AND ref_id = old.id;
    INSERT INTO embedding_queue (ref_id, kind) SELECT new.id, 2
        WHERE NOT EXISTS (SELECT 1 FROM embedding_queue WHERE ref_id = new.id AND kind = 2);
END;
CREATE TRIGGER user_prompts_embed_delete AFTER DELETE ON user_prompts BEGIN
    DELETE FROM embeddings WHERE kind = 2 AND ref_id = old.id;
    DELETE FROM embedding_queue WHERE ref_id = old.id AND kind = 2;
END;
