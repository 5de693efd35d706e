-- {{ notice }}
--
-- evc runtime tables, nineteenth step: the relay's cursors (docs/relay.md). It follows
-- `NNNN_evc_runtime_v18.sql`. A relay publishes the event feed to a broker and records here,
-- after the broker acknowledged them, how far it got. One relay holds a cursor at a time: taking
-- it draws a new fencing token, and a position is written only under the token that holds it,
-- so a relay that lost the cursor (paused, partitioned, its lease run out) can no longer move
-- it. The position is a feed position (`writer_xid`, `seq`), as `Observe::feed` orders events.
-- Cursors span every tenant: the relay runs as a dispatcher, not in a tenant's session.
CREATE TABLE IF NOT EXISTS evc_relay_cursors (
    name text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9._-]{0,63}$'),
    writer_xid xid8 NOT NULL DEFAULT '0',
    seq bigint NOT NULL DEFAULT 0 CHECK (seq >= 0),
    owner text NOT NULL CHECK (char_length(owner) BETWEEN 1 AND 200),
    token bigint NOT NULL CHECK (token >= 1),
    lease_until timestamptz NOT NULL,
    advanced_at timestamptz NOT NULL DEFAULT now()
);

-- Relays run as dispatchers; every job reads where they are.
DO $$
DECLARE
    item record;
BEGIN
    FOR item IN
        SELECT * FROM (VALUES
            ('evc_reader', 'SELECT ON evc_relay_cursors'),
            ('evc_dispatcher', 'SELECT, INSERT, UPDATE ON evc_relay_cursors'),
            ('evc_operator', 'SELECT ON evc_relay_cursors'),
            ('evc_approver', 'SELECT ON evc_relay_cursors')
        ) AS grants (job, privileges)
    LOOP
        IF to_regrole(item.job) IS NOT NULL THEN
            EXECUTE format('GRANT %s TO %I', item.privileges, item.job);
        END IF;
    END LOOP;
END
$$;
