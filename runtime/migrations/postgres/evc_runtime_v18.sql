-- {{ notice }}
--
-- evc runtime tables, eighteenth step: which transaction wrote each event, so a reader can
-- follow the events in an order that late commits never fall behind (docs/runtime.md, "The
-- event feed"). It follows `NNNN_evc_runtime_v17.sql`.
--
-- `seq` is drawn when a row is built, not when its transaction commits: a reader that tails
-- `seq` can pass a number whose transaction is still open and never see its event. Each new
-- row records its transaction id instead; a reader takes only rows whose transaction is older
-- than every transaction still open (`pg_snapshot_xmin`), ordered by that id and then `seq`,
-- and no row can later appear before a position it has passed. Rows written before this step
-- keep NULL and sort first, as finished long ago. Adding a nullable column and then its
-- default rewrites nothing.
ALTER TABLE evc_events ADD COLUMN IF NOT EXISTS writer_xid xid8;
ALTER TABLE evc_events ALTER COLUMN writer_xid SET DEFAULT pg_current_xact_id();

CREATE INDEX IF NOT EXISTS evc_events_feed_idx
    ON evc_events ((coalesce(writer_xid, '0'::xid8)), seq);
