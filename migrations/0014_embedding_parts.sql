-- The vectors of a memory's parts beside its whole (`recall::embed::parts_of`: its head,
-- then its body, when it has both), int8 like `vector`, one after another; empty when the
-- memory is one part. Observations and summaries embedded before are queued again for
-- theirs (their vectors serve search until replaced; a prompt is one part).
ALTER TABLE embeddings ADD COLUMN parts BLOB NOT NULL DEFAULT x'';

INSERT OR IGNORE INTO embedding_queue (ref_id, kind) SELECT ref_id, kind FROM embeddings WHERE kind IN (0, 1);
