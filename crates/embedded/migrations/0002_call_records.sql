-- The proxy's call records, one document per function (its totals and recent calls, as
-- the proxy encodes them): saved every few seconds, read at start.
CREATE TABLE IF NOT EXISTS call_records (
    namespace TEXT NOT NULL,
    name      TEXT NOT NULL,
    document  BLOB NOT NULL,
    PRIMARY KEY (namespace, name)
);
