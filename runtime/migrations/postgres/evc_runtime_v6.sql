-- {{ notice }}
--
-- evc runtime tables, sixth step: operators discard dead-lettered and quarantined deliveries
-- (docs/runtime.md, "Discard"). It follows `NNNN_evc_runtime_v5.sql` and only adds: a wider
-- status check (`NOT VALID`: the rows present passed the narrower one), a nullable column, the
-- discard audit table and its append-only triggers; no row is rewritten or removed. Every
-- statement is `IF NOT EXISTS`, `OR REPLACE` or guarded, so running this file again is a no-op;
-- sqlx runs it once, in one transaction.

-- Discards, one row each: which consumer, the plan digest the operator approved, why, the
-- approval reference, the idempotency key, the database role, when, and what was discarded
-- (`items`: [{"event_id", "generation", "status", "event_type", "version"}], in plan order;
-- never a payload). Kept by retention, like `evc_replays`: the audit of operators' decisions.
CREATE TABLE IF NOT EXISTS evc_discards (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer text NOT NULL,
    plan_digest text NOT NULL,
    reason text NOT NULL CHECK (char_length(btrim(reason)) BETWEEN 1 AND 500),
    approval_ref text NOT NULL CHECK (char_length(btrim(approval_ref)) BETWEEN 1 AND 200),
    idempotency_key text NOT NULL CHECK (char_length(btrim(idempotency_key)) BETWEEN 1 AND 200),
    db_role text NOT NULL DEFAULT session_user,
    discarded_at timestamptz NOT NULL DEFAULT now(),
    deliveries integer NOT NULL CHECK (deliveries >= 1),
    items jsonb NOT NULL CHECK (jsonb_typeof(items) = 'array'),
    CONSTRAINT evc_discards_idempotency_key UNIQUE (idempotency_key)
);

CREATE OR REPLACE TRIGGER evc_discards_append_only
    BEFORE UPDATE OR DELETE ON evc_discards
    FOR EACH ROW EXECUTE FUNCTION evc_append_only();
CREATE OR REPLACE TRIGGER evc_discards_no_truncate
    BEFORE TRUNCATE ON evc_discards
    FOR EACH STATEMENT EXECUTE FUNCTION evc_append_only();

-- A discarded delivery keeps its row (attempts, last error code, generation) with status
-- `discarded` and the discard that settled it: no claim, listing or replay takes it again.
ALTER TABLE evc_deliveries ADD COLUMN IF NOT EXISTS discard_id bigint;

DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_constraint
        WHERE conrelid = 'evc_deliveries'::regclass AND conname = 'evc_deliveries_status_v6'
    ) THEN
        ALTER TABLE evc_deliveries DROP CONSTRAINT IF EXISTS evc_deliveries_status_known;
        ALTER TABLE evc_deliveries ADD CONSTRAINT evc_deliveries_status_v6 CHECK (
            status IN ('pending', 'leased', 'acked', 'dead', 'quarantined', 'replayed', 'discarded')
        ) NOT VALID;
    END IF;
END;
$$;
