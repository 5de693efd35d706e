-- {{ notice }}
--
-- evc runtime tables, eighth step: replay and discard idempotency keys are scoped per consumer
-- (docs/runtime.md, "Replay"): one key may name one decision for each consumer. It follows
-- `NNNN_evc_runtime_v7.sql`. It adds `evc_replays.consumer`, fills it from each replay's items
-- (a replay recorded before the third step, or whose items retention purged, has none and
-- keeps NULL: its key no longer matches an apply), requires it of new rows, and replaces the
-- unique constraints on the key alone, which the first and sixth steps created, by unique
-- indexes on (consumer, key). No row is removed. Every statement is guarded, so running this
-- file again is a no-op; sqlx runs it once, in one transaction.

ALTER TABLE evc_replays ADD COLUMN IF NOT EXISTS consumer text;

-- `evc_replays` is append-only; its trigger is held off, inside this transaction, for the one
-- fill of the new column.
ALTER TABLE evc_replays DISABLE TRIGGER evc_replays_append_only;
UPDATE evc_replays AS r SET consumer = i.consumer
FROM (SELECT replay_id, min(consumer) AS consumer FROM evc_replay_items GROUP BY replay_id) AS i
WHERE r.id = i.replay_id AND r.consumer IS NULL;
ALTER TABLE evc_replays ENABLE TRIGGER evc_replays_append_only;

-- Every replay from here on names its consumer, also one a process of an earlier release
-- writes during a rolling deploy (refused, not stored without one). `NOT VALID`: the rows
-- left NULL above stay as they are.
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_constraint WHERE conname = 'evc_replays_consumer_named'
    ) THEN
        ALTER TABLE evc_replays ADD CONSTRAINT evc_replays_consumer_named
            CHECK (consumer IS NOT NULL) NOT VALID;
    END IF;
END;
$$;

CREATE UNIQUE INDEX IF NOT EXISTS evc_replays_consumer_key
    ON evc_replays (consumer, idempotency_key);
ALTER TABLE evc_replays DROP CONSTRAINT IF EXISTS evc_replays_idempotency_key;

CREATE UNIQUE INDEX IF NOT EXISTS evc_discards_consumer_key
    ON evc_discards (consumer, idempotency_key);
ALTER TABLE evc_discards DROP CONSTRAINT IF EXISTS evc_discards_idempotency_key;
