-- {{ notice }}
--
-- evc runtime tables, seventh step: the project's runtime settings in the registry mirror, and
-- where each running worker's settings came from (docs/runtime.md, "Settings in the database").
-- It follows `NNNN_evc_runtime_v6.sql` and only adds: the settings table (its one row is
-- written by the settings migration, `NNNN_evc_settings_<digest12>.sql`) and two nullable
-- heartbeat columns; no row is rewritten or removed. Every statement is `IF NOT EXISTS`, so
-- running this file again is a no-op; sqlx runs it once, in one transaction.

-- The settings of `evc.yaml` and the consumers' handler timeouts, as the runtime applies them:
-- a process without the application's build (`evc dispatch`) reads them from here. One row.
CREATE TABLE IF NOT EXISTS evc_settings (
    id boolean PRIMARY KEY DEFAULT true CHECK (id),
    settings_digest text NOT NULL,
    denied_keys text[] NOT NULL,
    credential_key_names text[] NOT NULL,
    default_max_bytes bigint NOT NULL CHECK (default_max_bytes >= 0),
    hard_max_bytes bigint NOT NULL CHECK (hard_max_bytes >= 0),
    require_tenant_scope boolean NOT NULL,
    batch_size bigint NOT NULL CHECK (batch_size >= 1),
    lease_ms bigint NOT NULL CHECK (lease_ms >= 1),
    heartbeat_ms bigint NOT NULL CHECK (heartbeat_ms >= 1),
    max_attempts bigint NOT NULL CHECK (max_attempts >= 1),
    backoff_ceiling_ms bigint NOT NULL CHECK (backoff_ceiling_ms >= 0),
    -- {"<consumer>": <milliseconds>} for the consumers that set `handler_timeout`.
    handler_timeouts jsonb NOT NULL DEFAULT '{}'::jsonb,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- Where a worker's process took its settings from (NULL: a process older than this step).
-- `payload_policy`: 'registry' or 'override' (the application replaced the contracts' policy).
-- `dispatcher_overrides`: the dispatcher settings its configuration sets apart from the
-- registry's (`batch`, `lease`, `heartbeat`, `handler_timeout`); empty: all the registry's.
ALTER TABLE evc_heartbeats ADD COLUMN IF NOT EXISTS payload_policy text;
ALTER TABLE evc_heartbeats ADD COLUMN IF NOT EXISTS dispatcher_overrides text[];
