-- cairn schema, version 8: the project in the full-text indexes.
--
-- Search is almost always scoped to one project. With the project only in the row tables,
-- every row matching a word was joined to its row to read the project: one B-tree descent
-- per match, most of a search's time at a million observations. Each searchable table now
-- has `project_key`, a word made of the project's name ('x' and the hex of its bytes,
-- lowercase once tokenized), and its full-text table indexes it as a last column, so that a
-- search intersects the words' doclists with the project's and never reads another
-- project's rows. bm25 gives that column weight 0 (`recall::search`).
--
-- The key is exact: hex is one-to-one, and of the porter stemmer's rules only dropping a
-- final 'e' can apply to [0-9a-f], the same way to the stored and the searched key; a key
-- so stemmed has even length, every other key odd.
--
-- The full-text tables are rebuilt from their rows: seconds per 100,000 memories, once.
-- Never edit a migration once shipped: add a new numbered file instead.

ALTER TABLE observations ADD COLUMN project_key TEXT
    GENERATED ALWAYS AS ('x' || hex(project)) VIRTUAL;
ALTER TABLE session_summaries ADD COLUMN project_key TEXT
    GENERATED ALWAYS AS ('x' || hex(project)) VIRTUAL;
ALTER TABLE user_prompts ADD COLUMN project_key TEXT
    GENERATED ALWAYS AS ('x' || hex(project)) VIRTUAL;

DROP TRIGGER observations_fts_insert;
DROP TRIGGER observations_fts_delete;
DROP TRIGGER observations_fts_update;
DROP TABLE observations_fts;
CREATE VIRTUAL TABLE observations_fts USING fts5 (
    title, subtitle, narrative, facts_text, concepts_text, project_key,
    content = 'observations', content_rowid = 'id', tokenize = 'porter unicode61'
);
INSERT INTO observations_fts (observations_fts) VALUES ('rebuild');
CREATE TRIGGER observations_fts_insert AFTER INSERT ON observations BEGIN
    INSERT INTO observations_fts (rowid, title, subtitle, narrative, facts_text, concepts_text, project_key)
    VALUES (new.id, new.title, new.subtitle, new.narrative, new.facts_text, new.concepts_text, new.project_key);
END;
CREATE TRIGGER observations_fts_delete AFTER DELETE ON observations BEGIN
    INSERT INTO observations_fts (observations_fts, rowid, title, subtitle, narrative, facts_text, concepts_text, project_key)
    VALUES ('delete', old.id, old.title, old.subtitle, old.narrative, old.facts_text, old.concepts_text, old.project_key);
END;
CREATE TRIGGER observations_fts_update AFTER UPDATE ON observations BEGIN
    INSERT INTO observations_fts (observations_fts, rowid, title, subtitle, narrative, facts_text, concepts_text, project_key)
    VALUES ('delete', old.id, old.title, old.subtitle, old.narrative, old.facts_text, old.concepts_text, old.project_key);
    INSERT INTO observations_fts (rowid, title, subtitle, narrative, facts_text, concepts_text, project_key)
    VALUES (new.id, new.title, new.subtitle, new.narrative, new.facts_text, new.concepts_text, new.project_key);
END;

DROP TRIGGER session_summaries_fts_insert;
DROP TRIGGER session_summaries_fts_delete;
DROP TRIGGER session_summaries_fts_update;
DROP TABLE session_summaries_fts;
CREATE VIRTUAL TABLE session_summaries_fts USING fts5 (
    request, investigated, learned, completed, next_steps, notes, project_key,
    content = 'session_summaries', content_rowid = 'id', tokenize = 'porter unicode61'
);
INSERT INTO session_summaries_fts (session_summaries_fts) VALUES ('rebuild');
CREATE TRIGGER session_summaries_fts_insert AFTER INSERT ON session_summaries BEGIN
    INSERT INTO session_summaries_fts (rowid, request, investigated, learned, completed, next_steps, notes, project_key)
    VALUES (new.id, new.request, new.investigated, new.learned, new.completed, new.next_steps, new.notes, new.project_key);
END;
CREATE TRIGGER session_summaries_fts_delete AFTER DELETE ON session_summaries BEGIN
    INSERT INTO session_summaries_fts (session_summaries_fts, rowid, request, investigated, learned, completed, next_steps, notes, project_key)
    VALUES ('delete', old.id, old.request, old.investigated, old.learned, old.completed, old.next_steps, old.notes, old.project_key);
END;
CREATE TRIGGER session_summaries_fts_update AFTER UPDATE ON session_summaries BEGIN
    INSERT INTO session_summaries_fts (session_summaries_fts, rowid, request, investigated, learned, completed, next_steps, notes, project_key)
    VALUES ('delete', old.id, old.request, old.investigated, old.learned, old.completed, old.next_steps, old.notes, old.project_key);
    INSERT INTO session_summaries_fts (rowid, request, investigated, learned, completed, next_steps, notes, project_key)
    VALUES (new.id, new.request, new.investigated, new.learned, new.completed, new.next_steps, new.notes, new.project_key);
END;

DROP TRIGGER user_prompts_fts_insert;
DROP TRIGGER user_prompts_fts_delete;
DROP TRIGGER user_prompts_fts_update;
DROP TABLE user_prompts_fts;
CREATE VIRTUAL TABLE user_prompts_fts USING fts5 (
    prompt_text, project_key,
    content = 'user_prompts', content_rowid = 'id', tokenize = 'porter unicode61'
);
INSERT INTO user_prompts_fts (user_prompts_fts) VALUES ('rebuild');
CREATE TRIGGER user_prompts_fts_insert AFTER INSERT ON user_prompts BEGIN
    INSERT INTO user_prompts_fts (rowid, prompt_text, project_key)
    VALUES (new.id, new.prompt_text, new.project_key);
END;
CREATE TRIGGER user_prompts_fts_delete AFTER DELETE ON user_prompts BEGIN
    INSERT INTO user_prompts_fts (user_prompts_fts, rowid, prompt_text, project_key)
    VALUES ('delete', old.id, old.prompt_text, old.project_key);
END;
CREATE TRIGGER user_prompts_fts_update AFTER UPDATE ON user_prompts BEGIN
    INSERT INTO user_prompts_fts (user_prompts_fts, rowid, prompt_text, project_key)
    VALUES ('delete', old.id, old.prompt_text, old.project_key);
    INSERT INTO user_prompts_fts (rowid, prompt_text, project_key)
    VALUES (new.id, new.prompt_text, new.project_key);
END;
