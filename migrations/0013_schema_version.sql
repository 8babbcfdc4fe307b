-- The schema version a second time, in a row: the header's `user_version` is four bytes
-- a damaged file can garble into any number, and a number above this cairn's would read
-- as a database from a newer cairn, refused untouched. A newer cairn keeps this row equal
-- to the header (`store::db::migrate`); a header that disagrees with it is damage, which
-- recovery repairs.
CREATE TABLE schema_version (version INTEGER NOT NULL);
INSERT INTO schema_version (version) VALUES (13);
