-- Sync through PostgreSQL (core::sync): this device's side of it.
-- Never edit a migration once shipped: add a new numbered file instead.

-- This device in its space: space id, device id, the next sequence number of its log,
-- last push and pull times, the last error.
CREATE TABLE IF NOT EXISTS sync_state (
    key    TEXT PRIMARY KEY,
    value  TEXT NOT NULL
) WITHOUT ROWID;

-- Records of this device's log, sealed and numbered, not yet acknowledged by the server.
-- A record keeps its number and bytes until pushed, so a push repeated after a crash is
-- the same push.
CREATE TABLE IF NOT EXISTS sync_outbox (
    seq         INTEGER PRIMARY KEY,
    body        BLOB NOT NULL,
    created_at  INTEGER NOT NULL
);

-- Every memory and tombstone that went into or came out of a log, by its origin id
-- (kind, origin), with the device whose log carried it and the content hash last seen:
-- what is here is not pushed again unless its hash changed (a summary redone).
CREATE TABLE IF NOT EXISTS sync_rows (
    kind    TEXT NOT NULL,                 -- observation | summary | forget
    origin  TEXT NOT NULL,
    device  TEXT NOT NULL,
    hash    TEXT NOT NULL,
    PRIMARY KEY (kind, origin)
) WITHOUT ROWID;

-- The other devices of the space: how far this one has read each log, and its name.
CREATE TABLE IF NOT EXISTS sync_devices (
    device  TEXT PRIMARY KEY,
    name    TEXT NOT NULL DEFAULT '',
    seq     INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
