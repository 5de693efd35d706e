-- The whole registry a SQLite outbox file was last opened with, as a JSON document beside its
-- project and digest, so that a process without the application's compiled registry (the
-- `evc` command line) can open the file on it (`SqliteStore::recorded`; docs/runtime.md,
-- "SQLite store"). Applied after 0002 when the store opens its file; never edited once
-- released. NULL in a file recorded before this step until the application opens it again.
ALTER TABLE evc_registry_state ADD COLUMN registry TEXT
    CHECK (registry IS NULL OR json_type(registry) = 'object');
