-- The two-person rule of replay in the embedded SQLite store, as PostgreSQL's ninth runtime
-- step has it (docs/runtime.md, "Replay"): a plan is recorded when a person proposes it, and
-- an apply names the recorded plan and the person who approves it. The trigger refuses an
-- apply without a plan of its consumer and digest, or whose approver proposed it (names are
-- printable ASCII, which the store checks, and compare trimmed and lower-cased, as the store
-- compares them). Replays recorded before keep NULL plan and approver. Never edited once
-- released.

CREATE TABLE evc_plans (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL CHECK (kind IN ('replay')),
    consumer TEXT NOT NULL,
    plan_digest TEXT NOT NULL,
    deliveries INTEGER NOT NULL CHECK (deliveries >= 1),
    planned_by TEXT NOT NULL CHECK (length(trim(planned_by)) BETWEEN 1 AND 200),
    planned_at REAL NOT NULL
);

CREATE INDEX evc_plans_digest ON evc_plans (consumer, plan_digest);

CREATE TRIGGER evc_plans_immutable BEFORE UPDATE ON evc_plans
BEGIN
    SELECT RAISE(ABORT, 'evc_plans is append-only: rows are never updated');
END;

CREATE TRIGGER evc_plans_kept BEFORE DELETE ON evc_plans
BEGIN
    SELECT RAISE(ABORT, 'evc_plans is append-only: rows are never deleted');
END;

ALTER TABLE evc_replays ADD COLUMN plan_id INTEGER REFERENCES evc_plans (id);
ALTER TABLE evc_replays ADD COLUMN approved_by TEXT;

CREATE TRIGGER evc_replays_two_person BEFORE INSERT ON evc_replays
WHEN NOT EXISTS (
    SELECT 1 FROM evc_plans p
    WHERE p.id = NEW.plan_id AND p.kind = 'replay' AND p.consumer = NEW.consumer
        AND p.plan_digest = NEW.plan_digest
        AND length(trim(coalesce(NEW.approved_by, ''))) > 0
        AND lower(trim(p.planned_by)) <> lower(trim(NEW.approved_by))
)
BEGIN
    SELECT RAISE(ABORT, 'evc_replays needs a plan proposed by another person than its approver (two-person rule)');
END;
