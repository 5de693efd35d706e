-- {{ notice }}
--
-- evc runtime tables, fourth step: every ack deletes its delivery (docs/design.md, "Acks delete
-- the delivery"). It follows `NNNN_evc_runtime_v3.sql` and changes one index, never a row: a
-- delivery acked before this step keeps its `acked` row. Every statement is `IF EXISTS` or `IF
-- NOT EXISTS`, so running this file again is a no-op; sqlx runs it once, in one transaction.

-- Lease-expiry recovery finds expired leases by lease end. The first step's index was partial
-- on `status = 'leased'`, the very predicate every fenced statement (ack, fail, renewal, effect
-- write) names its delivery with, beside the delivery's key. With statistics that see few
-- leased rows, PostgreSQL planned those statements over the lease index (every lease in flight
-- read per statement) instead of the primary key: a batched ack of 100 went from one key lookup
-- per lease to comparing each lease in flight with the batch's entries. Partial on
-- `lease_until IS NOT NULL` instead, it holds the same rows (a lease sets `lease_until`; every
-- way out of `leased` clears it) and serves only the statements that ask by lease end
-- (`lease_until < now()` implies the predicate).
CREATE INDEX IF NOT EXISTS evc_deliveries_lease_expiry_idx
    ON evc_deliveries (lease_until) WHERE lease_until IS NOT NULL;
DROP INDEX IF EXISTS evc_deliveries_lease_idx;
