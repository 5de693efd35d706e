-- {{ notice }}
--
-- evc registry rows for registry digest {{ digest }}
-- (the `digest` of registry.json). Upserts only, never a DELETE: rows of types, consumers or
-- subscriptions that left the contracts stay, with the digest of the last registry that held them.
-- A row whose values are unchanged is not rewritten, so running this file again changes nothing.
{%- for table in tables %}

-- {{ table.comment }}
INSERT INTO {{ table.name }} ({{ table.columns|join(", ") }})
VALUES
{%- for row in table.rows %}
    ({{ row|join(", ") }}){% if !loop.last %},{% endif %}
{%- endfor %}
ON CONFLICT ({{ table.key|join(", ") }}) DO UPDATE SET
{%- for column in table.updated() %}
    {{ column }} = EXCLUDED.{{ column }}{% if !loop.last %},{% endif %}
{%- endfor %}
WHERE ({% for column in table.updated() %}{{ table.name }}.{{ column }}{% if !loop.last %}, {% endif %}{% endfor %})
    IS DISTINCT FROM ({% for column in table.updated() %}EXCLUDED.{{ column }}{% if !loop.last %}, {% endif %}{% endfor %});
{%- endfor %}

-- The registry this database holds, compared at start-up with the one the runtime was built with.
INSERT INTO evc_registry_state (id, digest)
VALUES (true, {{ digest_literal }})
ON CONFLICT (id) DO UPDATE SET
    digest = EXCLUDED.digest,
    applied_at = now()
WHERE evc_registry_state.digest IS DISTINCT FROM EXCLUDED.digest;
