-- {{ notice }}
--
-- evc runtime tables, twelfth step: a settled delivery changes only with the audit row of the
-- decision that changes it, written by the same transaction (docs/runtime.md, "Settled
-- deliveries"). It follows `NNNN_evc_runtime_v11.sql`. Dead and quarantined deliveries wait for
-- an operator's decision, and replayed and discarded ones are the record of one; the
-- dispatcher's and the approver's grants let them insert and update delivery rows, so without
-- this a login in either role could bring a dead letter back, hide it or delete it with
-- hand-written SQL and no audit.
--
--   dead, quarantined -> replayed    only with this transaction's replay item for the delivery
--   dead, quarantined -> discarded   only with `discard_id` naming this transaction's discard of
--                                    the consumer that lists the delivery
--   a new generation (> 0)           only with `replay_id` naming this transaction's replay of
--                                    the consumer, written `pending`
--   any other change of a settled row, any other move into replayed or discarded, and any
--   delete of a settled row: refused, except the delete of a retention purge
--   (`evc_purge_events`)

-- The transaction that wrote each replay and discard, as `evc_purges.txid` records a purge's;
-- set by trigger, whatever the insert says. Rows written before this step keep NULL, which no
-- transaction matches.
ALTER TABLE evc_replays ADD COLUMN IF NOT EXISTS txid bigint;
ALTER TABLE evc_discards ADD COLUMN IF NOT EXISTS txid bigint;
CREATE INDEX IF NOT EXISTS evc_replays_txid_idx ON evc_replays (txid, consumer);

CREATE OR REPLACE FUNCTION evc_record_txid() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    NEW.txid := txid_current();
    RETURN NEW;
END;
$$;

CREATE OR REPLACE TRIGGER evc_replays_txid
    BEFORE INSERT ON evc_replays
    FOR EACH ROW EXECUTE FUNCTION evc_record_txid();
CREATE OR REPLACE TRIGGER evc_discards_txid
    BEFORE INSERT ON evc_discards
    FOR EACH ROW EXECUTE FUNCTION evc_record_txid();

-- Whether this transaction wrote a replay of `consumer` that lists (event, generation) as an
-- item; `generation` NULL: any replay of the consumer.
CREATE OR REPLACE FUNCTION evc_replay_open(consumer text, event uuid, generation integer)
    RETURNS boolean
    LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM evc_replays r
        WHERE r.txid = txid_current() AND r.consumer = evc_replay_open.consumer
            AND (evc_replay_open.generation IS NULL OR EXISTS (
                SELECT 1 FROM evc_replay_items i
                WHERE i.replay_id = r.id AND i.event_id = evc_replay_open.event
                    AND i.consumer = evc_replay_open.consumer
                    AND i.generation = evc_replay_open.generation))
    )
$$;

CREATE OR REPLACE FUNCTION evc_settled_move() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF evc_purge_open('evc_events') THEN
            RETURN OLD;
        END IF;
    ELSIF TG_OP = 'INSERT' THEN
        IF NEW.generation > 0 AND NEW.status = 'pending' AND NEW.discard_id IS NULL
            AND EXISTS (
                SELECT 1 FROM evc_replays r
                WHERE r.id = NEW.replay_id AND r.consumer = NEW.consumer
                    AND r.txid = txid_current()
            ) THEN
            RETURN NULL;
        END IF;
    ELSIF OLD.status IN ('dead', 'quarantined')
        AND (NEW.event_id, NEW.consumer, NEW.generation, NEW.replay_id, NEW.tenant_scope)
            IS NOT DISTINCT FROM
            (OLD.event_id, OLD.consumer, OLD.generation, OLD.replay_id, OLD.tenant_scope) THEN
        IF NEW.status = 'replayed' AND NEW.discard_id IS NOT DISTINCT FROM OLD.discard_id
            AND evc_replay_open(OLD.consumer, OLD.event_id, OLD.generation) THEN
            RETURN NEW;
        END IF;
        IF NEW.status = 'discarded' AND EXISTS (
            SELECT 1 FROM evc_discards x
            WHERE x.id = NEW.discard_id AND x.consumer = OLD.consumer
                AND x.txid = txid_current()
                AND x.items @> jsonb_build_array(jsonb_build_object(
                    'event_id', OLD.event_id::text, 'generation', OLD.generation))
        ) THEN
            RETURN NEW;
        END IF;
    END IF;
    RAISE EXCEPTION '% of delivery % of % refused: %', lower(TG_OP),
            coalesce(NEW.event_id, OLD.event_id), coalesce(NEW.consumer, OLD.consumer),
            CASE TG_OP
                WHEN 'INSERT' THEN 'a new generation needs its replay'
                WHEN 'DELETE' THEN 'a settled delivery leaves only through a purge'
                ELSE 'a settled delivery changes only through a replay or a discard'
            END
        USING ERRCODE = 'restrict_violation',
            HINT = 'apply a replay or a discard (evc replay, evc dlq discard); purge with '
                'evc_purge_events';
END;
$$;

CREATE OR REPLACE TRIGGER evc_deliveries_settled_update
    BEFORE UPDATE ON evc_deliveries
    FOR EACH ROW
    WHEN (OLD.status IN ('dead', 'quarantined', 'replayed', 'discarded')
        OR NEW.status IN ('replayed', 'discarded'))
    EXECUTE FUNCTION evc_settled_move();

CREATE OR REPLACE TRIGGER evc_deliveries_settled_delete
    BEFORE DELETE ON evc_deliveries
    FOR EACH ROW
    WHEN (OLD.status IN ('dead', 'quarantined', 'replayed', 'discarded'))
    EXECUTE FUNCTION evc_settled_move();

-- An AFTER trigger: a BEFORE row trigger on inserts would stop `COPY` from inserting deliveries
-- in batches. Appends write generation 0 `pending` without a replay, which the WHEN clause
-- passes without calling the function.
CREATE OR REPLACE TRIGGER evc_deliveries_replayed_insert
    AFTER INSERT ON evc_deliveries
    FOR EACH ROW
    WHEN (NEW.generation <> 0 OR NEW.status <> 'pending' OR NEW.replay_id IS NOT NULL
        OR NEW.discard_id IS NOT NULL)
    EXECUTE FUNCTION evc_settled_move();
