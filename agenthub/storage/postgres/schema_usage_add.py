"""Migration 30: a usage write (its calls, day roll-ups, running totals and the reservations it ends) in one call."""

from __future__ import annotations

USAGE_ADD_WHAT = "a usage write in one call: calls, day roll-ups, running totals and the reservations it ends"
USAGE_ADD_SQL = (
    # what `PostgresUsageStore.add` sent as three or four statements in a transaction (five or six round trips
    # with BEGIN and COMMIT), in one function, statement by statement in the same order: the forget marks first
    # (read after the lock a forget waits for, by `usage_forget_marks` of migration 23: a snapshot of its own), the
    # calls each naming its sender's tag where a mark covers it, then the day roll-ups and the running totals of
    # the redacted rows, each summed per key and written in key order, byte order ("C"): the order of the Python
    # sort an instance from before sends them in, so writers of both kinds lock the rows in one order and never
    # deadlock; last, the reservations the write ends (a turn's usage and the end of its reservation, never
    # neither). `p_rows`: a JSON array of {at, day, purpose, agent, channel, chat_id, sender_id, model, tag, input,
    # output, cache_read, cache_write, calls, estimated (a count)}; `at` is made a timestamp once, as the instance
    # sent it, and carried as one (a float8 written as text follows `extra_float_digits`: 15 digits at 0, and a
    # recovered spool's rows are looked up by it); returns the 1-based positions of the rows a mark redacted
    """CREATE FUNCTION agenthub_usage_add(p_rows json, p_release text[]) RETURNS integer[] LANGUAGE plpgsql AS $$
        DECLARE
            v_rows json;
            v_redacted integer[];
        BEGIN
            WITH x AS MATERIALIZED (
                SELECT * FROM ROWS FROM (json_to_recordset(p_rows) AS (at float8, day date, purpose text,
                    agent text, channel text, chat_id text, sender_id text, model text, tag text, input bigint,
                    output bigint, cache_read bigint, cache_write bigint, calls bigint, estimated bigint))
                WITH ORDINALITY AS x(at, day, purpose, agent, channel, chat_id, sender_id, model, tag, input,
                    output, cache_read, cache_write, calls, estimated, n)
            ),
            m AS MATERIALIZED (
                SELECT * FROM usage_forget_marks(ARRAY(SELECT channel FROM x), ARRAY(SELECT tag FROM x))
            ),
            r AS (
                SELECT x.*, (SELECT m.o_tag FROM m WHERE m.o_channel = x.channel AND m.o_tag = x.tag
                    AND x.agent = ANY(m.o_agents) AND x.at <= m.o_at
                    AND (m.o_chat IS NULL OR m.o_chat = CASE WHEN x.chat_id = x.sender_id THEN x.tag
                        ELSE x.chat_id END) LIMIT 1) AS hit
                FROM x
            )
            SELECT json_agg(json_build_object('at', to_timestamp(at), 'day', day, 'purpose', purpose, 'agent', agent,
                    'channel', channel,
                    'chat_id', CASE WHEN hit IS NOT NULL AND chat_id = sender_id THEN hit ELSE chat_id END,
                    'sender_id', coalesce(hit, sender_id), 'model', model, 'input', input, 'output', output,
                    'cache_read', cache_read, 'cache_write', cache_write, 'calls', calls, 'estimated', estimated)
                    ORDER BY n),
                array_agg(n::integer ORDER BY n) FILTER (WHERE hit IS NOT NULL)
            INTO v_rows, v_redacted FROM r;
            IF v_rows IS NULL THEN
                DELETE FROM usage_reservations WHERE id = ANY(p_release);
                RETURN '{}';
            END IF;
            INSERT INTO usage_calls (at, day, purpose, agent, channel, chat_id, sender_id, model, input, output,
                cache_read, cache_write, estimated)
            SELECT at, day, purpose, agent, channel, chat_id, sender_id, model, input, output,
                cache_read, cache_write, estimated > 0
            FROM json_to_recordset(v_rows) AS (at timestamptz, day date, purpose text, agent text, channel text,
                chat_id text, sender_id text, model text, input bigint, output bigint, cache_read bigint,
                cache_write bigint, estimated bigint);
            INSERT INTO usage_days AS d (day, agent, channel, chat_id, sender_id, model, purpose, input, output,
                cache_read, cache_write, calls, estimated)
            SELECT day, agent, channel, chat_id, sender_id, model, purpose, sum(input), sum(output),
                sum(cache_read), sum(cache_write), sum(calls), sum(estimated)
            FROM json_to_recordset(v_rows) AS (day date, agent text, channel text, chat_id text, sender_id text,
                model text, purpose text, input bigint, output bigint, cache_read bigint, cache_write bigint,
                calls bigint, estimated bigint)
            GROUP BY day, agent, channel, chat_id, sender_id, model, purpose
            ORDER BY day, agent COLLATE "C", channel COLLATE "C", chat_id COLLATE "C", sender_id COLLATE "C",
                model COLLATE "C", purpose COLLATE "C"
            ON CONFLICT (day, agent, channel, chat_id, sender_id, model, purpose) DO UPDATE SET
                input = d.input + excluded.input, output = d.output + excluded.output,
                cache_read = d.cache_read + excluded.cache_read, cache_write = d.cache_write + excluded.cache_write,
                calls = d.calls + excluded.calls, estimated = d.estimated + excluded.estimated;
            INSERT INTO usage_totals AS t (scope, period, tokens)
            SELECT k.scope, p.period, sum(s.input + s.output + s.cache_read + s.cache_write)
            FROM json_to_recordset(v_rows) AS s(day date, agent text, channel text, chat_id text, sender_id text,
                input bigint, output bigint, cache_read bigint, cache_write bigint)
            CROSS JOIN LATERAL (VALUES ('user:' || s.channel || ':' || s.sender_id),
                ('chat:' || s.channel || ':' || s.chat_id), ('agent:' || s.agent)) AS k(scope)
            CROSS JOIN LATERAL (VALUES (to_char(s.day, 'YYYY-MM-DD')), (to_char(s.day, 'YYYY-MM'))) AS p(period)
            GROUP BY k.scope, p.period
            ORDER BY k.scope COLLATE "C", p.period COLLATE "C"
            ON CONFLICT (scope, period) DO UPDATE SET tokens = t.tokens + excluded.tokens;
            DELETE FROM usage_reservations WHERE id = ANY(p_release);
            RETURN coalesce(v_redacted, '{}');
        END $$""",
)
