-- A compaction replaces the main conversation's context with a summary of it: what that
-- conversation was told before is no longer in front of the model, and may be given again.
-- Its rows stay (cairn status and the viewer count what was given) and are retired: the
-- time of the compaction. Never edit a migration once shipped: add a new numbered file instead.

ALTER TABLE memory_given ADD COLUMN retired_at INTEGER;
