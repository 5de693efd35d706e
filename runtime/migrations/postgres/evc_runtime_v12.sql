-- {{ notice }}
--
-- evc runtime tables, twelfth step: a settled delivery leaves its status only with an audit row
-- of the same transaction (docs/runtime.md, "Settled deliveries"). It follows
-- `NNNN_evc_runtime_v11.sql`. Dead and quarantined deliveries wait for an operator's decision,
-- and replayed and discarded ones are the record of one; the dispatcher's and the approver's
-- grants let them update delivery rows, so without this a login in either role could move a
-- dead delivery back to `pending`, or delete it, with hand-written SQL and no audit.
--
--   dead, quarantined  ->  replayed    only beside an `evc_replays` row of this consumer
--                                      written by this transaction
--   dead, quarantined  ->  discarded   only with `discard_id` naming an `evc_discards` row of
--                                      this consumer written by this transaction
--   any other change of status, and any delete, of a settled row: refused, except the delete
--                                      of a retention purge (`evc_purge_events`)

-- The transaction that wrote each replay and discard, as `evc_purges.txid` records a purge's.
-- Set after the column exists, so earlier rows keep NULL (no transaction matches it).
ALTER TABLE evc_replays ADD COLUMN IF NOT EXISTS txid bigint;
ALTER TABLE evc_replays ALTER COLUMN txid SET DEFAULT txid_current();
ALTER TABLE evc_discards ADD COLUMN IF NOT EXISTS txid bigint;
ALTER TABLE evc_discards ALTER COLUMN txid SET DEFAULT txid_current();

CREATE OR REPLACE FUNCTION evc_settled_move() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF evc_purge_open('evc_events') THEN
            RETURN OLD;
        END IF;
    ELSIF OLD.status IN ('dead', 'quarantined') AND NEW.status = 'replayed' THEN
        IF EXISTS (
            SELECT 1 FROM evc_replays r
            WHERE r.consumer = NEW.consumer AND r.txid = txid_current()
        ) THEN
            RETURN NEW;
        END IF;
    ELSIF OLD.status IN ('dead', 'quarantined') AND NEW.status = 'discarded' THEN
        IF EXISTS (
            SELECT 1 FROM evc_discards x
            WHERE x.id = NEW.discard_id AND x.consumer = NEW.consumer
                AND x.txid = txid_current()
        ) THEN
            RETURN NEW;
        END IF;
    END IF;
    RAISE EXCEPTION 'delivery % of % is %: % refused', OLD.event_id, OLD.consumer, OLD.status,
            CASE WHEN TG_OP = 'DELETE' THEN 'delete' ELSE 'status ' || NEW.status END
        USING ERRCODE = 'restrict_violation',
            HINT = 'a settled delivery leaves its status through a replay or a discard '
                'applied with its audit row, and its row through a retention purge';
END;
$$;

CREATE OR REPLACE TRIGGER evc_deliveries_settled_update
    BEFORE UPDATE OF status ON evc_deliveries
    FOR EACH ROW
    WHEN (OLD.status IN ('dead', 'quarantined', 'replayed', 'discarded')
        AND NEW.status IS DISTINCT FROM OLD.status)
    EXECUTE FUNCTION evc_settled_move();

CREATE OR REPLACE TRIGGER evc_deliveries_settled_delete
    BEFORE DELETE ON evc_deliveries
    FOR EACH ROW
    WHEN (OLD.status IN ('dead', 'quarantined', 'replayed', 'discarded'))
    EXECUTE FUNCTION evc_settled_move();
