CREATE TABLE IF NOT EXISTS namespaces (
    name       TEXT PRIMARY KEY NOT NULL,
    created_at TEXT NOT NULL
);

-- One row per resource; spec, status and annotations are the model's types as JSON.
CREATE TABLE IF NOT EXISTS objects (
    kind             TEXT NOT NULL,
    namespace        TEXT NOT NULL,
    name             TEXT NOT NULL,
    uid              TEXT NOT NULL,
    resource_version INTEGER NOT NULL,
    created_at       TEXT NOT NULL,
    annotations      TEXT NOT NULL,
    spec             TEXT NOT NULL,
    status           TEXT NOT NULL,
    PRIMARY KEY (kind, namespace, name)
);
