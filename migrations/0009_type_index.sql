-- cairn schema, version 9: observations by project and type.
--
-- Search by meaning with a type filter needs every id of the project's observations of
-- that type (the vector scan applies the filter exactly, before taking neighbours). Read
-- through the (project, created_at) index, that was one row lookup per observation of the
-- project; this index holds exactly those ids, with the time for a date filter beside them.
-- Never edit a migration once shipped: add a new numbered file instead.

CREATE INDEX observations_project_type ON observations (project, type, created_at);
