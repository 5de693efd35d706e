-- {{ notice }}
--
-- evc runtime tables, twenty-first step: a dispatcher role per consumer (docs/runtime.md,
-- "A dispatcher role per consumer"). It follows `NNNN_evc_runtime_v20.sql`; deploy a runtime
-- that knows this step before applying it (an earlier runtime's batch appends `COPY` into
-- evc_deliveries, which row-level security on that table refuses to a role's session).
--
-- Each consumer of the registry mirror gets a NOLOGIN role, `evc_dispatcher_<consumer>`
-- (`evc_dispatcher_<md5 of the name>` when that would pass PostgreSQL's 63 bytes), a member of
-- `evc_dispatcher` and of the marker role `evc_consumer_scoped`. A login that holds a consumer
-- role (so the marker) is scoped: it locks, updates and deletes only the deliveries of the
-- consumers whose roles it holds and that this database maps (`evc_consumer_roles`), and
-- writes attempts, effects and reconciliations only for them. The scope follows the login
-- (the session user), not the role a connection takes, so `SET ROLE` does not lift it; and it
-- fails closed: in a database that maps none of its roles, a scoped login works on no
-- consumer. A login holding no consumer role, or a superuser login, works on every consumer.
--
-- The scope is restrictive row-level security policies, so row-level security stays enabled on
-- evc_deliveries, evc_delivery_attempts, evc_consumer_effects and evc_reconciliations whatever
-- the tenancy setting; while no tenant scope is required, a permissive policy passes every row
-- the tenant policy would hide, and the tables' owner is not subject to them (superusers never
-- are). Reads and inserts of deliveries stay open: a scoped dispatcher sees every delivery's
-- state and appends lifecycle events whose deliveries go to other consumers, as a producer may.

DO $$
BEGIN
    IF to_regrole('evc_consumer_scoped') IS NULL
        AND EXISTS (
            SELECT 1 FROM pg_roles WHERE rolname = current_user AND (rolsuper OR rolcreaterole)
        ) THEN
        BEGIN
            CREATE ROLE evc_consumer_scoped NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            -- Another database's migration created it meanwhile.
            NULL;
        END;
    END IF;
END
$$;

-- Which role scopes a login to which consumer. Every session reads it: the policies do.
CREATE TABLE IF NOT EXISTS evc_consumer_roles (
    -- No foreign key: a consumer's row may leave the mirror; its scope stays.
    consumer text PRIMARY KEY,
    role_name text NOT NULL UNIQUE
);
GRANT SELECT ON evc_consumer_roles TO PUBLIC;

CREATE OR REPLACE FUNCTION evc_consumer_role_name(consumer text) RETURNS text
    LANGUAGE sql IMMUTABLE AS $$
    SELECT 'evc_dispatcher_' || CASE WHEN octet_length(consumer) <= 48 THEN consumer
        ELSE md5(consumer) END
$$;

-- Records the role of `consumer` (always, so a role a database administrator creates later
-- scopes its logins at once), creates it when it is missing and the migrating role may, and
-- makes it a member of evc_dispatcher and evc_consumer_scoped where it may. What it may not do
-- is a notice: an administrator creates the role (or grants the memberships) and runs
-- `SELECT evc_ensure_consumer_role('<consumer>')` again. A role of that name that can log in is
-- not a consumer role: it gets no membership.
CREATE OR REPLACE FUNCTION evc_ensure_consumer_role(consumer text) RETURNS void
    LANGUAGE plpgsql AS $$
DECLARE
    role_name constant text := evc_consumer_role_name(consumer);
    parent text;
BEGIN
    INSERT INTO evc_consumer_roles (consumer, role_name) VALUES (consumer, role_name)
    ON CONFLICT DO NOTHING;
    IF to_regrole(quote_ident(role_name)) IS NULL THEN
        IF NOT EXISTS (
            SELECT 1 FROM pg_roles WHERE rolname = current_user AND (rolsuper OR rolcreaterole)
        ) THEN
            RAISE NOTICE 'evc: role % does not exist and % may not create it: consumer % has no '
                'dispatcher role of its own', role_name, current_user, consumer;
            RETURN;
        END IF;
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN', role_name);
        EXCEPTION WHEN duplicate_object OR unique_violation OR deadlock_detected THEN
            -- Another database's migration created it meanwhile (or is creating it, and
            -- grants it what it needs when it commits).
            RETURN;
        END;
    END IF;
    IF (SELECT rolcanlogin FROM pg_roles WHERE rolname = role_name) THEN
        RAISE NOTICE 'evc: role % can log in, so it is not made a dispatcher role of consumer %',
            role_name, consumer;
        RETURN;
    END IF;
    FOREACH parent IN ARRAY ARRAY['evc_dispatcher', 'evc_consumer_scoped']
    LOOP
        CONTINUE WHEN to_regrole(parent) IS NULL
            OR pg_has_role(role_name, parent, 'MEMBER');
        BEGIN
            EXECUTE format('GRANT %I TO %I', parent, role_name);
        EXCEPTION
            WHEN duplicate_object OR unique_violation OR deadlock_detected THEN
                NULL;
            WHEN insufficient_privilege THEN
                RAISE NOTICE 'evc: % may not grant % to %: a database administrator grants it',
                    current_user, parent, role_name;
        END;
    END LOOP;
END;
$$;

REVOKE ALL ON FUNCTION evc_ensure_consumer_role(text) FROM PUBLIC;

-- A consumer that enters the registry (a registry migration, or `install_registry`) gets its
-- role in the same transaction.
CREATE OR REPLACE FUNCTION evc_consumers_role() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    PERFORM evc_ensure_consumer_role(NEW.name);
    RETURN NULL;
END;
$$;

CREATE OR REPLACE TRIGGER evc_consumers_role
    AFTER INSERT ON evc_consumers
    FOR EACH ROW EXECUTE FUNCTION evc_consumers_role();

-- In byte order, as the registry's rows are: concurrent migrations create roles in one order.
SELECT evc_ensure_consumer_role(name) FROM evc_consumers ORDER BY name COLLATE "C";

-- Whether the session's login holds `role` (NULL: no such role). From PostgreSQL 16 on, a
-- membership that neither passes privileges nor allows `SET ROLE` (the one a role's creator
-- gets) does not count.
CREATE OR REPLACE FUNCTION evc_login_holds(role oid) RETURNS boolean
    LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN current_setting('server_version_num')::int >= 160000
        THEN pg_has_role(session_user, role, 'USAGE') OR pg_has_role(session_user, role, 'SET')
        ELSE pg_has_role(session_user, role, 'MEMBER') END
$$;

-- The consumers the session's login is scoped to, or NULL when it is not scoped (it holds no
-- consumer role, or it is a superuser).
CREATE OR REPLACE FUNCTION evc_login_consumers() RETURNS text[]
    LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN (SELECT rolsuper FROM pg_roles WHERE rolname = session_user) THEN NULL
        WHEN coalesce(evc_login_holds(to_regrole('evc_consumer_scoped')), false) THEN ARRAY(
            SELECT r.consumer FROM evc_consumer_roles r
            WHERE evc_login_holds(to_regrole(quote_ident(r.role_name))))
    END
$$;

-- The policies. `(SELECT evc_login_consumers())` is a subquery of no table: it runs once per
-- statement, not per row (the cast makes `ANY` take its array, not its rows).
DO $$
DECLARE
    scope constant text := '(SELECT evc_login_consumers()) IS NULL '
        'OR consumer = ANY ((SELECT evc_login_consumers())::text[])';
    tbl text;
    command text;
BEGIN
    FOREACH command IN ARRAY ARRAY['update', 'delete']
    LOOP
        EXECUTE format('DROP POLICY IF EXISTS evc_consumer_scope_%s ON evc_deliveries', command);
        EXECUTE format('CREATE POLICY evc_consumer_scope_%1$s ON evc_deliveries AS RESTRICTIVE '
            'FOR %1$s USING (%2$s)', command, scope);
    END LOOP;
    FOREACH tbl IN ARRAY ARRAY['evc_delivery_attempts', 'evc_consumer_effects',
        'evc_reconciliations']
    LOOP
        EXECUTE format('DROP POLICY IF EXISTS evc_consumer_scope_insert ON %I', tbl);
        EXECUTE format('CREATE POLICY evc_consumer_scope_insert ON %I AS RESTRICTIVE '
            'FOR INSERT WITH CHECK (%s)', tbl, scope);
    END LOOP;
END
$$;

-- As the seventeenth step's function, but the tables of the consumer scope keep row-level
-- security enabled: tenancy forces it and drops their permissive `evc_untenanted` policy;
-- without tenancy the policy passes every row and the owner is not subject to the policies.
-- A table already in the wanted state is left alone (no lock taken).
CREATE OR REPLACE FUNCTION evc_apply_tenancy(required boolean) RETURNS void
    LANGUAGE plpgsql AS $$
DECLARE
    tbl text;
    scoped constant regclass[] := ARRAY['evc_deliveries'::regclass,
        'evc_delivery_attempts'::regclass, 'evc_consumer_effects'::regclass,
        'evc_reconciliations'::regclass];
BEGIN
    FOR tbl IN
        SELECT c.relname FROM pg_class c
        WHERE c.oid IN ('evc_events'::regclass,
                'evc_validation_rejects'::regclass, 'evc_replays'::regclass,
                'evc_discards'::regclass, 'evc_plans'::regclass, 'evc_purges'::regclass,
                'evc_tenant_pauses'::regclass, 'evc_state_changes'::regclass,
                'evc_replay_items'::regclass)
            AND (c.relrowsecurity, c.relforcerowsecurity) IS DISTINCT FROM (required, required)
    LOOP
        IF required THEN
            EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY',
                tbl);
        ELSE
            EXECUTE format('ALTER TABLE %I DISABLE ROW LEVEL SECURITY, NO FORCE ROW LEVEL SECURITY',
                tbl);
        END IF;
    END LOOP;
    FOR tbl IN
        SELECT c.relname FROM pg_class c
        WHERE c.oid = ANY (scoped) AND required = EXISTS (
            SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polname = 'evc_untenanted')
    LOOP
        IF required THEN
            EXECUTE format('DROP POLICY evc_untenanted ON %I', tbl);
        ELSE
            EXECUTE format('CREATE POLICY evc_untenanted ON %I USING (true)', tbl);
        END IF;
    END LOOP;
    FOR tbl IN
        SELECT c.relname FROM pg_class c
        WHERE c.oid = ANY (scoped)
            AND (c.relrowsecurity, c.relforcerowsecurity) IS DISTINCT FROM (true, required)
    LOOP
        IF required THEN
            EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY',
                tbl);
        ELSE
            EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY, NO FORCE ROW LEVEL SECURITY',
                tbl);
        END IF;
    END LOOP;
END;
$$;

REVOKE ALL ON FUNCTION evc_apply_tenancy(boolean) FROM PUBLIC;

SELECT evc_apply_tenancy(coalesce((SELECT require_tenant_scope FROM evc_settings), false));
