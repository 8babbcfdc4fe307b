-- cairn schema, version 18: the words of code in the full-text indexes.
--
-- Code writes several words as one (`RedundantParentheses`, `parseHttpHeader`, `sha256`),
-- and the tokenizer keeps each as one word, so a question in prose ("redundant
-- parentheses") did not match a memory naming the code, only the other way round (a query
-- is split into its pieces, `recall::query`). Each searchable row now keeps the pieces of
-- its words written as code (`pieces_text`: `text::code_pieces`, written with the row,
-- filled here by the function of the same rule that cairn registers for migrations), and
-- its full-text table indexes them as one more column, before the project's key; bm25
-- weighs it as a body (`recall::sql`).
--
-- The full-text tables are rebuilt from their rows: seconds per 100,000 memories, once.
-- Never edit a migration once shipped: add a new numbered file instead.

ALTER TABLE observations ADD COLUMN pieces_text TEXT NOT NULL DEFAULT '';
ALTER TABLE session_summaries ADD COLUMN pieces_text TEXT NOT NULL DEFAULT '';
ALTER TABLE user_prompts ADD COLUMN pieces_text TEXT NOT NULL DEFAULT '';

DROP TRIGGER observations_fts_insert;
DROP TRIGGER observations_fts_delete;
DROP TRIGGER observations_fts_update;
DROP TABLE observations_fts;
UPDATE observations SET pieces_text = cairn_code_pieces(title, subtitle, narrative, facts_text);
CREATE VIRTUAL TABLE observations_fts USING fts5 (
    title, subtitle, narrative, facts_text, concepts_text, pieces_text, project_key,
    content = 'observations', content_rowid = 'id', tokenize = 'porter unicode61'
);
INSERT INTO observations_fts (observations_fts) VALUES ('rebuild');
CREATE TRIGGER observations_fts_insert AFTER INSERT ON observations BEGIN
    INSERT INTO observations_fts (rowid, title, subtitle, narrative, facts_text, concepts_text, pieces_text, project_key)
    VALUES (new.id, new.title, new.subtitle, new.narrative, new.facts_text, new.concepts_text, new.pieces_text, new.project_key);
END;
CREATE TRIGGER observations_fts_delete AFTER DELETE ON observations BEGIN
    INSERT INTO observations_fts (observations_fts, rowid, title, subtitle, narrative, facts_text, concepts_text, pieces_text, project_key)
    VALUES ('delete', old.id, old.title, old.subtitle, old.narrative, old.facts_text, old.concepts_text, old.pieces_text, old.project_key);
END;
CREATE TRIGGER observations_fts_update AFTER UPDATE ON observations BEGIN
    INSERT INTO observations_fts (observations_fts, rowid, title, subtitle, narrative, facts_text, concepts_text, pieces_text, project_key)
    VALUES ('delete', old.id, old.title, old.subtitle, old.narrative, old.facts_text, old.concepts_text, old.pieces_text, old.project_key);
    INSERT INTO observations_fts (rowid, title, subtitle, narrative, facts_text, concepts_text, pieces_text, project_key)
    VALUES (new.id, new.title, new.subtitle, new.narrative, new.facts_text, new.concepts_text, new.pieces_text, new.project_key);
END;

DROP TRIGGER session_summaries_fts_insert;
DROP TRIGGER session_summaries_fts_delete;
DROP TRIGGER session_summaries_fts_update;
DROP TABLE session_summaries_fts;
UPDATE session_summaries
    SET pieces_text = cairn_code_pieces(request, investigated, learned, completed, next_steps, notes);
CREATE VIRTUAL TABLE session_summaries_fts USING fts5 (
    request, investigated, learned, completed, next_steps, notes, pieces_text, project_key,
    content = 'session_summaries', content_rowid = 'id', tokenize = 'porter unicode61'
);
INSERT INTO session_summaries_fts (session_summaries_fts) VALUES ('rebuild');
CREATE TRIGGER session_summaries_fts_insert AFTER INSERT ON session_summaries BEGIN
    INSERT INTO session_summaries_fts (rowid, request, investigated, learned, completed, next_steps, notes, pieces_text, project_key)
    VALUES (new.id, new.request, new.investigated, new.learned, new.completed, new.next_steps, new.notes, new.pieces_text, new.project_key);
END;
CREATE TRIGGER session_summaries_fts_delete AFTER DELETE ON session_summaries BEGIN
    INSERT INTO session_summaries_fts (session_summaries_fts, rowid, request, investigated, learned, completed, next_steps, notes, pieces_text, project_key)
    VALUES ('delete', old.id, old.request, old.investigated, old.learned, old.completed, old.next_steps, old.notes, old.pieces_text, old.project_key);
END;
CREATE TRIGGER session_summaries_fts_update AFTER UPDATE ON session_summaries BEGIN
    INSERT INTO session_summaries_fts (session_summaries_fts, rowid, request, investigated, learned, completed, next_steps, notes, pieces_text, project_key)
    VALUES ('delete', old.id, old.request, old.investigated, old.learned, old.completed, old.next_steps, old.notes, old.pieces_text, old.project_key);
    INSERT INTO session_summaries_fts (rowid, request, investigated, learned, completed, next_steps, notes, pieces_text, project_key)
    VALUES (new.id, new.request, new.investigated, new.learned, new.completed, new.next_steps, new.notes, new.pieces_text, new.project_key);
END;

DROP TRIGGER user_prompts_fts_insert;
DROP TRIGGER user_prompts_fts_delete;
DROP TRIGGER user_prompts_fts_update;
DROP TABLE user_prompts_fts;
UPDATE user_prompts SET pieces_text = cairn_code_pieces(prompt_text);
CREATE VIRTUAL TABLE user_prompts_fts USING fts5 (
    prompt_text, pieces_text, project_key,
    content = 'user_prompts', content_rowid = 'id', tokenize = 'porter unicode61'
);
INSERT INTO user_prompts_fts (user_prompts_fts) VALUES ('rebuild');
CREATE TRIGGER user_prompts_fts_insert AFTER INSERT ON user_prompts BEGIN
    INSERT INTO user_prompts_fts (rowid, prompt_text, pieces_text, project_key)
    VALUES (new.id, new.prompt_text, new.pieces_text, new.project_key);
END;
CREATE TRIGGER user_prompts_fts_delete AFTER DELETE ON user_prompts BEGIN
    INSERT INTO user_prompts_fts (user_prompts_fts, rowid, prompt_text, pieces_text, project_key)
    VALUES ('delete', old.id, old.prompt_text, old.pieces_text, old.project_key);
END;
CREATE TRIGGER user_prompts_fts_update AFTER UPDATE ON user_prompts BEGIN
    INSERT INTO user_prompts_fts (user_prompts_fts, rowid, prompt_text, pieces_text, project_key)
    VALUES ('delete', old.id, old.prompt_text, old.pieces_text, old.project_key);
    INSERT INTO user_prompts_fts (rowid, prompt_text, pieces_text, project_key)
    VALUES (new.id, new.prompt_text, new.pieces_text, new.project_key);
END;
