-- A recorded plan is applied once in the embedded SQLite store, as PostgreSQL's thirteenth
-- runtime step has it (docs/runtime.md, "Replay"). The two-person trigger checks that a
-- replay names a plan someone else proposed, but not that no earlier replay took it: code
-- writing to the file could apply an approved plan again under a new idempotency key, with no
-- one proposing again. Writers are serialized, so the trigger sees every earlier replay.
-- Never edited once released.

CREATE INDEX evc_replays_plan ON evc_replays (plan_id);

CREATE TRIGGER evc_replays_plan_once BEFORE INSERT ON evc_replays
WHEN NEW.plan_id IS NOT NULL
    AND EXISTS (SELECT 1 FROM evc_replays r WHERE r.plan_id = NEW.plan_id)
BEGIN
    SELECT RAISE(ABORT, 'evc_replays: the plan was applied already, propose it again');
END;
