-- Tombstones of memories a person chose to forget (`cairn forget`, the viewer's forget
-- page), so that no later import brings them back. Keys:
--   observation_hash  session_id || ':' || content_hash  (session '' for a memory saved by hand)
--   tool_use          the tool_use_id of the tool call an observation came from
--   prompt            session_id || ':' || prompt_id     ('#' || prompt_number without one)
--   summary           session_id || ':' || prompt_number
-- Never edit a migration once shipped: add a new numbered file instead.

CREATE TABLE IF NOT EXISTS forgotten (
    kind          TEXT NOT NULL,
    key           TEXT NOT NULL,
    forgotten_at  INTEGER NOT NULL,
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
