-- cairn schema, version 2: covering indexes for search.
--
-- A search walks the full-text index newest first and keeps the matches that pass its
-- filters (project, dates, observation type). Reading those columns from the tables
-- themselves cost one descent into a large row B-tree per candidate, most of a search's
-- time at a million observations; these indexes hold exactly the columns the filters and
-- the ranking read, keyed by id, in a few dense pages.

CREATE INDEX observations_search ON observations (id, project, created_at, type);
CREATE INDEX session_summaries_search ON session_summaries (id, project, created_at);
CREATE INDEX user_prompts_search ON user_prompts (id, project, created_at);
