-- {{ notice }}
--
-- evc runtime settings for settings digest {{ digest }}
-- (the `settings` of registry.json: payload policy, envelope requirements, dispatcher block,
-- handler timeouts). One row, replaced whole; a row whose values are unchanged is not rewritten,
-- so running this file again changes nothing.
{%- for table in tables %}

-- {{ table.comment }}
INSERT INTO {{ table.name }} ({{ table.columns|join(", ") }})
VALUES
{%- for row in table.rows %}
    ({{ row|join(", ") }}){% if !loop.last %},{% endif %}
{%- endfor %}
ON CONFLICT ({{ table.key|join(", ") }}) DO UPDATE SET
{%- for column in table.updated() %}
    {{ column }} = EXCLUDED.{{ column }},
{%- endfor %}
    applied_at = now()
WHERE ({% for column in table.updated() %}{{ table.name }}.{{ column }}{% if !loop.last %}, {% endif %}{% endfor %})
    IS DISTINCT FROM ({% for column in table.updated() %}EXCLUDED.{{ column }}{% if !loop.last %}, {% endif %}{% endfor %});
{%- endfor %}
