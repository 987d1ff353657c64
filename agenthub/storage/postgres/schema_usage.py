"""Migration 17: running usage totals per scope and day or month, and the budget check that reads them (design §15;
`storage.postgres.usage` keeps them)."""

from __future__ import annotations

USAGE_TOTALS_OF = """SELECT k.scope, p.period, sum(s.tokens) AS tokens FROM ({rows}) s
CROSS JOIN LATERAL (VALUES ('user:' || s.channel || ':' || s.sender_id), ('chat:' || s.channel || ':' || s.chat_id),
    ('agent:' || s.agent)) AS k(scope)
CROSS JOIN LATERAL (VALUES (to_char(s.day, 'YYYY-MM-DD')), (to_char(s.day, 'YYYY-MM'))) AS p(period)
GROUP BY k.scope, p.period ORDER BY k.scope, p.period"""
"""Each scope's tokens per day and month (the keys `Scope.key` and `period_key` name) of `{rows}`: a query giving
day, agent, channel, chat_id, sender_id and (signed) tokens; in key order, the order every writer locks them in."""
USAGE_TOTALS_ADD = (
    "INSERT INTO usage_totals AS t (scope, period, tokens) {totals} "
    "ON CONFLICT (scope, period) DO UPDATE SET tokens = t.tokens + excluded.tokens"
)
"""`{totals}` (scope, period, tokens) added to the running totals."""

USAGE_TOTALS_WHAT = (
    "running usage totals per scope and day or month, kept with every usage write; the budget check reads them"
)
USAGE_TOTALS_SQL = (
    # a scope's (`user:<channel>:<sender>`, `chat:<channel>:<chat>`, `agent:<agent>`) tokens in a day
    # (`2026-12-03`) or a month (`2026-12`): changed in the transaction of every change of `usage_days`
    """CREATE TABLE usage_totals (
            scope text NOT NULL,
            period text NOT NULL,
            tokens bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (scope, period)
        )""",
    USAGE_TOTALS_ADD.format(
        totals=USAGE_TOTALS_OF.format(
            rows="SELECT day, agent, channel, chat_id, sender_id, input + output + cache_read + cache_write "
            "AS tokens FROM usage_days"
        )
    ),
    # `usage_reserve_claims` (migration 16) reading two rows per scope (its own and its forget tag's) of the
    # totals instead of summing a month of `usage_days`; the totals and the reservations in one statement, so
    # one snapshot: a usage write that ends a reservation is seen whole or not at all
    """CREATE FUNCTION usage_reserve_totals(
            p_id text, p_claims text, p_day date, p_tokens bigint, p_ttl double precision
        ) RETURNS TABLE (o_scope text, o_day bigint, o_month bigint, o_reserved boolean) LANGUAGE plpgsql AS $$
        DECLARE
            c record;
            d bigint;
            m bigint;
            keys text[];
            refused boolean := false;
            day_key text := to_char(p_day, 'YYYY-MM-DD');
            month_key text := to_char(p_day, 'YYYY-MM');
        BEGIN
            FOR c IN SELECT t.e ->> 'key' AS key FROM json_array_elements(p_claims::json) WITH ORDINALITY AS t(e, n)
                     ORDER BY t.n LOOP
                PERFORM pg_advisory_xact_lock(hashtextextended('budget:' || c.key, 0));
            END LOOP;
            FOR c IN SELECT t.e ->> 'kind' AS kind, t.e ->> 'channel' AS channel, t.e ->> 'ident' AS ident,
                            t.e ->> 'key' AS key, (t.e ->> 'day')::bigint AS day, (t.e ->> 'month')::bigint AS month
                       FROM json_array_elements(p_claims::json) WITH ORDINALITY AS t(e, n) ORDER BY t.n LOOP
                keys := ARRAY[c.key];
                IF c.kind <> 'agent' THEN
                    keys := keys || (c.kind || ':' || c.channel || ':forgotten-'
                        || left(encode(sha256(convert_to(c.channel || E'\\n' || c.ident, 'UTF8')), 'hex'), 16));
                END IF;
                SELECT coalesce(sum(t.tokens) FILTER (WHERE t.period = day_key), 0) + h.held,
                       coalesce(sum(t.tokens) FILTER (WHERE t.period = month_key), 0) + h.held
                  INTO d, m
                  FROM (SELECT coalesce(sum(x.tokens), 0) AS held FROM usage_reservations x
                         WHERE x.scope = c.key AND x.expires_at > clock_timestamp()) h
                  LEFT JOIN usage_totals t ON t.scope = ANY(keys) AND t.period IN (day_key, month_key)
                 GROUP BY h.held;
                IF (c.day > 0 AND d >= c.day) OR (c.month > 0 AND m >= c.month) THEN
                    refused := true;
                END IF;
                o_scope := c.key; o_day := d; o_month := m; o_reserved := NOT refused;
                RETURN NEXT;
            END LOOP;
            IF NOT refused THEN
                INSERT INTO usage_reservations (id, scope, tokens, expires_at)
                SELECT p_id, x.key, p_tokens, clock_timestamp() + make_interval(secs => p_ttl)
                  FROM json_to_recordset(p_claims::json) AS x(key text);
            END IF;
        END $$""",
)
"""`usage_reserve_claims` (migration 16) stays for instances not upgraded yet; they do not keep the totals, so an
upgrade stops every instance first (docs/cost.md)."""

USAGE_NAMES_WHAT = (
    "the senders' display names, so that per-person usage rows name them; month roll-ups of the usage past retention"
)
USAGE_NAMES_SQL = (
    # the latest display name a channel gave for a sender (an API token's name is its sender id); a forget deletes
    # the person's row with the rest of their identity
    """CREATE TABLE usage_names (
            channel text NOT NULL,
            sender_id text NOT NULL,
            name text NOT NULL,
            named_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (channel, sender_id)
        )""",
    # retention: a month whose days are past `USAGE_KEEP_DAYS` keeps only its calls summed per who, model and
    # purpose (as `usage_days` per day); its `usage_calls`, `usage_days`, day totals and warning marks go
    """CREATE TABLE usage_months (
            month text NOT NULL,
            agent text NOT NULL,
            channel text NOT NULL,
            chat_id text NOT NULL,
            sender_id text NOT NULL,
            model text NOT NULL,
            purpose text NOT NULL,
            input bigint NOT NULL DEFAULT 0,
            output bigint NOT NULL DEFAULT 0,
            cache_read bigint NOT NULL DEFAULT 0,
            cache_write bigint NOT NULL DEFAULT 0,
            calls bigint NOT NULL DEFAULT 0,
            estimated bigint NOT NULL DEFAULT 0,
            PRIMARY KEY (month, agent, channel, chat_id, sender_id, model, purpose)
        )""",
)
"""Migration 20."""


def _reserve_except() -> str:
    """`usage_reserve_totals` (migration 17) with the reservations `p_ignore` left out of what is held."""
    sql = USAGE_TOTALS_SQL[2]
    for old, new in (
        (
            "usage_reserve_totals(\n            p_id text, p_claims text, p_day date, p_tokens bigint, p_ttl double "
            "precision\n        )",
            "usage_reserve_except(\n            p_id text, p_claims text, p_day date, p_tokens bigint, p_ttl double "
            "precision,\n            p_ignore text[]\n        )",
        ),
        (
            "WHERE x.scope = c.key AND x.expires_at > clock_timestamp()) h",
            "WHERE x.scope = c.key AND x.expires_at > clock_timestamp() AND x.id <> ALL(p_ignore)) h",
        ),
    ):
        if sql.count(old) != 1:
            raise AssertionError(f"migration 22 no longer matches migration 17: {old!r}")
        sql = sql.replace(old, new)
    return sql


USAGE_RESERVE_EXCEPT_WHAT = "the budget check leaving out the reservations an instance settled and stored the usage of"
USAGE_RESERVE_EXCEPT_SQL = (
    # an instance's settled turn (or ended lease) whose usage it stored still holds its reservation until the
    # writer's next write ends it; the instance's own check leaves it out (`p_ignore`) instead of writing first
    _reserve_except(),
)
"""Migration 22; `usage_reserve_totals` stays for instances not upgraded yet."""
