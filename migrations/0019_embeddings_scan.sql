-- What a searching process reads of every stored vector when it starts (the kind, row,
-- project and time the filters need and the sign bits the scan compares, in the order
-- they were stored), in an index of its own: read from the table, each 48 bytes of bits
-- came with the 1 KB of int8 vectors beside them in the row. It leads with the model, so
-- it serves every lookup by model the index it replaces did.
CREATE INDEX embeddings_scan ON embeddings (model, seq, kind, ref_id, project, created_at, bits);
DROP INDEX embeddings_model;
