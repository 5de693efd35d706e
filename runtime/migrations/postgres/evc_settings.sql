-- {{ notice }}
--
-- evc runtime settings for settings digest {{ digest }}
-- (the `settings` of registry.json: payload policy, envelope requirements, dispatcher block,
-- handler timeouts). One row, replaced whole; a row whose values are unchanged is not rewritten,
-- so running this file again changes nothing.

-- The settings the runtime applies; `evc dispatch` reads them.
INSERT INTO evc_settings (id, settings_digest, denied_keys, credential_key_names, default_max_bytes, hard_max_bytes, require_tenant_scope, batch_size, lease_ms, heartbeat_ms, max_attempts, backoff_ceiling_ms, handler_timeouts)
VALUES
    ({{ settings|join(", ") }})
ON CONFLICT (id) DO UPDATE SET
    settings_digest = EXCLUDED.settings_digest,
    denied_keys = EXCLUDED.denied_keys,
    credential_key_names = EXCLUDED.credential_key_names,
    default_max_bytes = EXCLUDED.default_max_bytes,
    hard_max_bytes = EXCLUDED.hard_max_bytes,
    require_tenant_scope = EXCLUDED.require_tenant_scope,
    batch_size = EXCLUDED.batch_size,
    lease_ms = EXCLUDED.lease_ms,
    heartbeat_ms = EXCLUDED.heartbeat_ms,
    max_attempts = EXCLUDED.max_attempts,
    backoff_ceiling_ms = EXCLUDED.backoff_ceiling_ms,
    handler_timeouts = EXCLUDED.handler_timeouts,
    applied_at = now()
WHERE (evc_settings.settings_digest, evc_settings.denied_keys, evc_settings.credential_key_names, evc_settings.default_max_bytes, evc_settings.hard_max_bytes, evc_settings.require_tenant_scope, evc_settings.batch_size, evc_settings.lease_ms, evc_settings.heartbeat_ms, evc_settings.max_attempts, evc_settings.backoff_ceiling_ms, evc_settings.handler_timeouts)
    IS DISTINCT FROM (EXCLUDED.settings_digest, EXCLUDED.denied_keys, EXCLUDED.credential_key_names, EXCLUDED.default_max_bytes, EXCLUDED.hard_max_bytes, EXCLUDED.require_tenant_scope, EXCLUDED.batch_size, EXCLUDED.lease_ms, EXCLUDED.heartbeat_ms, EXCLUDED.max_attempts, EXCLUDED.backoff_ceiling_ms, EXCLUDED.handler_timeouts);
{%- if !scheduling.is_empty() %}

-- The schedules and lag thresholds the dispatchers run, for readers of the database
-- (`evc dispatch`, `evc serve`), with the settings digest that wrote them: a later settings
-- file without them leaves them behind under an older digest, and readers ignore them then.
UPDATE evc_settings
SET schedules = {{ scheduling[0] }}, lag_thresholds = {{ scheduling[1] }},
    scheduling_digest = {{ scheduling[2] }}
WHERE id AND scheduling_digest IS DISTINCT FROM {{ scheduling[2] }};
{%- endif %}
{%- if !gates.is_empty() %}

-- The cut-over gates operators' moves to `live` must pass, for readers of the database
-- (`evc consumer`, `evc serve`), with the settings digest that wrote them, as above.
UPDATE evc_settings
SET cutover_gates = {{ gates[0] }}, gates_digest = {{ gates[1] }}
WHERE id AND gates_digest IS DISTINCT FROM {{ gates[1] }};
{%- endif %}
{%- if !retention.is_empty() %}

-- The retention periods `evc purge` applies, for readers of the database, with the settings
-- digest that wrote them, as above.
UPDATE evc_settings
SET retention = {{ retention[0] }}, retention_digest = {{ retention[1] }}
WHERE id AND retention_digest IS DISTINCT FROM {{ retention[1] }};
{%- endif %}
{%- if !inventory.is_empty() %}

-- The inventory rules `evc inventory` classifies a consumer's events by, for readers of the
-- database, with the settings digest that wrote them, as above.
UPDATE evc_settings
SET inventory_rules = {{ inventory[0] }}, inventory_digest = {{ inventory[1] }}
WHERE id AND inventory_digest IS DISTINCT FROM {{ inventory[1] }};
{%- endif %}
{%- if !evidence.is_empty() %}

-- The usage evidence the dispatchers record, for readers of the database (`evc dispatch`,
-- `evc serve`), with the settings digest that wrote it, as above.
UPDATE evc_settings
SET evidence_recording = {{ evidence[0] }}, evidence_digest = {{ evidence[1] }}
WHERE id AND evidence_digest IS DISTINCT FROM {{ evidence[1] }};
{%- endif %}
