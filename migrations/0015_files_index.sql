-- The files of each memory in an index of their own, beside the project and the time: a
-- file filter on a search by meaning tests every row of the project (the vector index
-- does not hold files), and reads them here, not in rows long with narratives.
CREATE INDEX observations_files ON observations (project, created_at, files_read, files_modified);
CREATE INDEX session_summaries_files ON session_summaries (project, created_at, files_read, files_edited);
