-- What each subagent was told, apart from its session's main conversation: a subagent
-- starts with a context of its own, so a memory given to one is unknown to the other.
-- Never edit a migration once shipped: add a new numbered file instead.

-- Claude Code's id of the subagent that was told; '' for the main conversation.
ALTER TABLE memory_given ADD COLUMN agent_id TEXT NOT NULL DEFAULT '';
DROP INDEX memory_given_session;
CREATE INDEX memory_given_session ON memory_given (session_id, agent_id, kind, memory_id);
