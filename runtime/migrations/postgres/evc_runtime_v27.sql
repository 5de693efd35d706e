-- {{ notice }}
--
-- evc runtime tables, twenty-seventh step: inventory rules declared in the contracts
-- (docs/runtime.md, "Inventory"). It follows `NNNN_evc_runtime_v26.sql`.
--
-- The settings migrations record each consumer's inventory rules in the settings row, so that
-- `evc inventory` classifies the events a consumer would receive on going live by the rules
-- the database deploys, with no build of the application. `inventory_digest` is the settings
-- digest of the file that wrote them; they count only while it is the row's `settings_digest`.
ALTER TABLE evc_settings ADD COLUMN IF NOT EXISTS inventory_rules jsonb;
ALTER TABLE evc_settings ADD COLUMN IF NOT EXISTS inventory_digest text;
