-- {{ notice }}
--
-- evc runtime tables, third step: replay and shadow mode (docs/design.md, "Replay and shadow
-- mode"). It follows `NNNN_evc_runtime_v2.sql` and only adds: columns with defaults (no row is
-- rewritten), a wider status check, a wider primary key and two tables. Every statement is
-- `IF EXISTS`, `IF NOT EXISTS` or guarded, so running this file again is a no-op; sqlx runs it
-- once, in one transaction.

-- A replay creates a new delivery of the same event for the same consumer: the next
-- generation. The original stays as it was written, with status `replayed` (its attempts and
-- error code are its record); the new one points at the replay that made it. Generation 0 is
-- the delivery the append wrote.
ALTER TABLE evc_deliveries
    ADD COLUMN IF NOT EXISTS generation integer NOT NULL DEFAULT 0 CHECK (generation >= 0);
ALTER TABLE evc_deliveries ADD COLUMN IF NOT EXISTS replay_id bigint;
ALTER TABLE evc_delivery_attempts
    ADD COLUMN IF NOT EXISTS generation integer NOT NULL DEFAULT 0 CHECK (generation >= 0);

DO $$
BEGIN
    -- One delivery per event, consumer and generation.
    IF NOT EXISTS (
        SELECT 1 FROM pg_constraint
        WHERE conrelid = 'evc_deliveries'::regclass AND conname = 'evc_deliveries_generation_key'
    ) THEN
        ALTER TABLE evc_deliveries DROP CONSTRAINT IF EXISTS evc_deliveries_pkey;
        ALTER TABLE evc_deliveries ADD CONSTRAINT evc_deliveries_generation_key
            PRIMARY KEY (event_id, consumer, generation);
    END IF;
    -- `replayed`: settled, and superseded by the next generation.
    IF NOT EXISTS (
        SELECT 1 FROM pg_constraint
        WHERE conrelid = 'evc_deliveries'::regclass AND conname = 'evc_deliveries_status_known'
    ) THEN
        ALTER TABLE evc_deliveries DROP CONSTRAINT IF EXISTS evc_deliveries_status_check;
        ALTER TABLE evc_deliveries ADD CONSTRAINT evc_deliveries_status_known CHECK (
            status IN ('pending', 'leased', 'acked', 'dead', 'quarantined', 'replayed')
        );
    END IF;
END;
$$;

-- What each replay re-delivered: the original delivery (event, consumer, generation), the
-- status it was replayed from and the version it carried. Immutable, like attempts.
CREATE TABLE IF NOT EXISTS evc_replay_items (
    replay_id bigint NOT NULL REFERENCES evc_replays (id),
    event_id uuid NOT NULL,
    consumer text NOT NULL,
    generation integer NOT NULL CHECK (generation >= 0),
    replayed_from text NOT NULL CHECK (replayed_from IN ('dead', 'quarantined')),
    schema_version text NOT NULL,
    PRIMARY KEY (replay_id, event_id, consumer)
);

CREATE INDEX IF NOT EXISTS evc_replay_items_event_idx ON evc_replay_items (event_id);

CREATE OR REPLACE TRIGGER evc_replay_items_immutable
    BEFORE UPDATE ON evc_replay_items
    FOR EACH ROW EXECUTE FUNCTION evc_refuse_update();

-- The replay's approver and plan size, beside the digest, reason and key of the first step.
ALTER TABLE evc_replays ADD COLUMN IF NOT EXISTS deliveries integer NOT NULL DEFAULT 0;

-- Shadow mode: a consumer's handler runs, its writes are rolled back, and what it meant to do
-- is kept here: one row per delivery it handled in shadow mode, with the effects it would
-- have recorded (effect key and outcome digest each; never a payload).
CREATE TABLE IF NOT EXISTS evc_reconciliations (
    consumer text NOT NULL,
    event_id uuid NOT NULL,
    generation integer NOT NULL DEFAULT 0,
    fencing_token bigint NOT NULL,
    -- [{"effect_key": "...", "outcome_digest": "..."}], in the order the handler recorded them.
    intended jsonb NOT NULL CHECK (jsonb_typeof(intended) = 'array'),
    recorded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id, generation)
);

-- Stale-token rejections, counted in the database so every process's refusals add up
-- (`evc status`); one row per consumer, bumped only when a refusal happens.
CREATE TABLE IF NOT EXISTS evc_stale_rejections (
    consumer text PRIMARY KEY,
    rejected bigint NOT NULL DEFAULT 0 CHECK (rejected >= 0),
    last_at timestamptz NOT NULL DEFAULT now()
);
