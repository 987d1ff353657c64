"""Migrations 8, 11 and 16: model usage per call and per day, budget reservations and warnings, and the budget
check's functions before the running totals (`storage.postgres.usage`)."""

from __future__ import annotations

USAGE_RESERVE = """CREATE FUNCTION usage_reserve(
    p_id text, p_kinds text[], p_channels text[], p_idents text[], p_keys text[],
    p_day_limits bigint[], p_month_limits bigint[], p_day date, p_tokens bigint, p_ttl double precision
) RETURNS TABLE (o_scope text, o_day bigint, o_month bigint, o_reserved boolean) LANGUAGE plpgsql AS $$
DECLARE
    i int;
    d bigint;
    m bigint;
    r bigint;
    refused boolean := false;
    first date := date_trunc('month', p_day)::date;
BEGIN
    -- one budget check at a time per scope, across instances; the caller sorts the keys (no ring of waits)
    FOR i IN 1 .. coalesce(array_length(p_keys, 1), 0) LOOP
        PERFORM pg_advisory_xact_lock(hashtextextended('budget:' || p_keys[i], 0));
    END LOOP;
    -- each query below takes a new snapshot: it sees what was committed while this call waited for a lock
    FOR i IN 1 .. coalesce(array_length(p_keys, 1), 0) LOOP
        SELECT coalesce(sum(u.input + u.output + u.cache_read + u.cache_write) FILTER (WHERE u.day = p_day), 0),
               coalesce(sum(u.input + u.output + u.cache_read + u.cache_write), 0)
          INTO d, m FROM usage_days u
         WHERE u.day >= first AND u.day <= p_day AND CASE p_kinds[i]
               WHEN 'agent' THEN u.agent = p_idents[i]
               WHEN 'user' THEN u.channel = p_channels[i] AND u.sender_id = p_idents[i]
               ELSE u.channel = p_channels[i] AND u.chat_id = p_idents[i] END;
        SELECT coalesce(sum(x.tokens), 0) INTO r FROM usage_reservations x
         WHERE x.scope = p_keys[i] AND x.expires_at > clock_timestamp();
        IF (p_day_limits[i] > 0 AND d + r >= p_day_limits[i]) OR (p_month_limits[i] > 0 AND m + r >= p_month_limits[i])
        THEN
            refused := true;
        END IF;
        o_scope := p_keys[i]; o_day := d + r; o_month := m + r; o_reserved := NOT refused;
        RETURN NEXT;
    END LOOP;
    IF NOT refused THEN
        INSERT INTO usage_reservations (id, scope, tokens, expires_at)
        SELECT p_id, k, p_tokens, clock_timestamp() + make_interval(secs => p_ttl) FROM unnest(p_keys) AS k;
    END IF;
END $$"""

USAGE_WHAT = "model usage per call and per day, budget reservations and warnings"
USAGE_SQL = (
    # the journal: one row per model call, as the vendor reported it (`estimated`: it reported nothing)
    """CREATE TABLE usage_calls (
            id bigserial PRIMARY KEY,
            at timestamptz NOT NULL DEFAULT now(),
            day date NOT NULL,
            purpose text NOT NULL,
            agent text NOT NULL,
            channel text NOT NULL,
            chat_id text NOT NULL,
            sender_id text NOT NULL,
            model text NOT NULL,
            input bigint NOT NULL,
            output bigint NOT NULL,
            cache_read bigint NOT NULL,
            cache_write bigint NOT NULL,
            estimated boolean NOT NULL DEFAULT false
        )""",
    "CREATE INDEX usage_calls_by_day ON usage_calls (day)",
    # the daily roll-up every view and budget check reads (day in `scheduler.timezone`)
    """CREATE TABLE usage_days (
            day date NOT NULL,
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
            PRIMARY KEY (day, agent, channel, chat_id, sender_id, model, purpose)
        )""",
    "CREATE INDEX usage_days_by_sender ON usage_days (channel, sender_id, day)",
    "CREATE INDEX usage_days_by_chat ON usage_days (channel, chat_id, day)",
    "CREATE INDEX usage_days_by_agent ON usage_days (agent, day)",
    # what running turns reserved, one row per scope; a dead instance's rows lapse at `expires_at`
    """CREATE TABLE usage_reservations (
            id text NOT NULL,
            scope text NOT NULL,
            tokens bigint NOT NULL,
            expires_at timestamptz NOT NULL,
            PRIMARY KEY (id, scope)
        )""",
    "CREATE INDEX usage_reservations_by_scope ON usage_reservations (scope, expires_at)",
    # the warning notice went out for this scope and period (once per period, whichever instance sent it)
    """CREATE TABLE usage_warnings (
            scope text NOT NULL,
            period text NOT NULL,
            PRIMARY KEY (scope, period)
        )""",
    USAGE_RESERVE,
)

USAGE_RESERVE_FORGOTTEN_WHAT = (
    "a sender's budget also counts their usage rows redacted by a forget (named by their tag)"
)
USAGE_RESERVE_FORGOTTEN_SQL = (
    USAGE_RESERVE.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1).replace(
        "WHEN 'user' THEN u.channel = p_channels[i] AND u.sender_id = p_idents[i]",
        "WHEN 'user' THEN u.channel = p_channels[i] AND u.sender_id IN (p_idents[i], 'forgotten-' || "
        "left(encode(sha256(convert_to(p_channels[i] || E'\\n' || p_idents[i], 'UTF8')), 'hex'), 16))",
        1,
    ),
)

USAGE_RESERVE_CLAIMS_WHAT = (
    "a budget check in one cheap call: claims as one JSON text, each scope's usage read through its index, a chat "
    "also counting its rows renamed by a forget"
)
USAGE_RESERVE_CLAIMS_SQL = (
    # the claims in the caller's (sorted) order: [{"kind", "channel", "ident", "key", "day", "month"}, …]; one
    # text parameter instead of six arrays (cheaper to send), and one query per kind instead of a CASE in the
    # WHERE clause, so each reads its scope's rows by index; a user's or a direct chat's rows renamed by a forget
    # (`forgotten-` + the hash of channel and id, as `Person.tag`) still count against their budget
    """CREATE FUNCTION usage_reserve_claims(
            p_id text, p_claims text, p_day date, p_tokens bigint, p_ttl double precision
        ) RETURNS TABLE (o_scope text, o_day bigint, o_month bigint, o_reserved boolean) LANGUAGE plpgsql AS $$
        DECLARE
            c record;
            d bigint;
            m bigint;
            r bigint;
            tag text;
            refused boolean := false;
            first date := date_trunc('month', p_day)::date;
        BEGIN
            FOR c IN SELECT t.e ->> 'key' AS key FROM json_array_elements(p_claims::json) WITH ORDINALITY AS t(e, n)
                     ORDER BY t.n LOOP
                PERFORM pg_advisory_xact_lock(hashtextextended('budget:' || c.key, 0));
            END LOOP;
            FOR c IN SELECT t.e ->> 'kind' AS kind, t.e ->> 'channel' AS channel, t.e ->> 'ident' AS ident,
                            t.e ->> 'key' AS key, (t.e ->> 'day')::bigint AS day, (t.e ->> 'month')::bigint AS month
                       FROM json_array_elements(p_claims::json) WITH ORDINALITY AS t(e, n) ORDER BY t.n LOOP
                tag := 'forgotten-'
                    || left(encode(sha256(convert_to(c.channel || E'\\n' || c.ident, 'UTF8')), 'hex'), 16);
                IF c.kind = 'agent' THEN
                    SELECT coalesce(sum(u.input + u.output + u.cache_read + u.cache_write)
                                    FILTER (WHERE u.day = p_day), 0),
                           coalesce(sum(u.input + u.output + u.cache_read + u.cache_write), 0)
                      INTO d, m FROM usage_days u WHERE u.agent = c.ident AND u.day >= first AND u.day <= p_day;
                ELSIF c.kind = 'user' THEN
                    SELECT coalesce(sum(u.input + u.output + u.cache_read + u.cache_write)
                                    FILTER (WHERE u.day = p_day), 0),
                           coalesce(sum(u.input + u.output + u.cache_read + u.cache_write), 0)
                      INTO d, m FROM usage_days u
                     WHERE u.channel = c.channel AND u.sender_id IN (c.ident, tag)
                       AND u.day >= first AND u.day <= p_day;
                ELSE
                    SELECT coalesce(sum(u.input + u.output + u.cache_read + u.cache_write)
                                    FILTER (WHERE u.day = p_day), 0),
                           coalesce(sum(u.input + u.output + u.cache_read + u.cache_write), 0)
                      INTO d, m FROM usage_days u
                     WHERE u.channel = c.channel AND u.chat_id IN (c.ident, tag)
                       AND u.day >= first AND u.day <= p_day;
                END IF;
                SELECT coalesce(sum(x.tokens), 0) INTO r FROM usage_reservations x
                 WHERE x.scope = c.key AND x.expires_at > clock_timestamp();
                IF (c.day > 0 AND d + r >= c.day) OR (c.month > 0 AND m + r >= c.month) THEN
                    refused := true;
                END IF;
                o_scope := c.key; o_day := d + r; o_month := m + r; o_reserved := NOT refused;
                RETURN NEXT;
            END LOOP;
            IF NOT refused THEN
                INSERT INTO usage_reservations (id, scope, tokens, expires_at)
                SELECT p_id, x.key, p_tokens, clock_timestamp() + make_interval(secs => p_ttl)
                  FROM json_to_recordset(p_claims::json) AS x(key text);
            END IF;
        END $$""",
)
