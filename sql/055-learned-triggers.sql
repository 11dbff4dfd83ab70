-- Learned trigger rules: proposed from outcomes, run in shadow, promoted on measured precision.

CREATE OR REPLACE FUNCTION spark.propose_triggers(tenant text, min_helpful integer DEFAULT 3)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
    m record;
    stems text[];
    proposed integer := 0;
BEGIN
    PERFORM spark._check_writer(tenant);
    IF min_helpful IS NULL THEN
        RAISE EXCEPTION 'min_helpful must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF min_helpful < 1 THEN
        RAISE EXCEPTION 'min_helpful must be at least 1, got %', min_helpful
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- memories the advisor found without a trigger (semantic or keyword pools) and that were then marked
    -- helpful or followed at least min_helpful times, with the calls that surfaced them
    FOR m IN
        SELECT mm.id, mm.key, count(*) AS helped, array_agg(DISTINCT r.trigger_text) AS texts
        FROM spark.outcomes o
        JOIN spark.retrieval_items i ON i.tenant = o.tenant AND i.retrieval_id = o.retrieval_id
                                    AND i.memory_tenant = o.memory_tenant AND i.memory_id = o.memory_id
        JOIN spark.retrievals r ON r.tenant = i.tenant AND r.id = i.retrieval_id
        JOIN spark.memories mm ON mm.tenant = o.memory_tenant AND mm.id = o.memory_id
        WHERE o.tenant = tenant AND o.memory_tenant = tenant AND o.outcome IN ('helpful', 'followed')
          AND NOT 'trigger' = ANY(i.pools)
        GROUP BY mm.id, mm.key
        HAVING count(*) >= min_helpful
    LOOP
        -- a memory some rule surfaces gets none, except its own learned shadow rule that has never been hit:
        -- that one is proposed again below when the calls now give another pattern (rules learned before
        -- the stem-prefix fix, \mretri, matched nothing and would have stood in the way for good)
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM spark.trigger_rules t
            WHERE t.tenant = tenant AND m.key = ANY(t.surface)
              AND NOT (t.origin = 'learned' AND t.shadow AND t.name = 'learned-' || left(md5(m.key), 12)
                       AND NOT EXISTS (SELECT 1 FROM spark.trigger_shadow_hits h
                                       WHERE h.tenant = t.tenant AND h.rule_name = t.name)));
        -- the English stems most of those calls share (two at most: the pattern and its context pattern),
        -- each written as the prefix its stem shares with every word of the calls that stems to it: a rule
        -- matches raw text, and a stem is not always a prefix of its words ("retry" -> retri, "policy" ->
        -- polici), so \mretri would never match the calls it was learned from; \mretr does
        SELECT array_agg(x.prefix ORDER BY x.n DESC, x.lexeme) INTO stems FROM (
            SELECT g.lexeme, g.n, left(g.lexeme, (
                       SELECT coalesce(max(i), 0) FROM generate_series(1, length(g.lexeme)) i
                       WHERE left(g.lexeme, i) = left(g.lo, i) AND left(g.lexeme, i) = left(g.hi, i))) AS prefix
            FROM (
                -- the least and greatest word of a stem bound the prefix all its words share
                SELECT w.lexeme, count(DISTINCT w.ord) AS n, min(w.word COLLATE "C") AS lo,
                       max(w.word COLLATE "C") AS hi
                FROM (SELECT t.ord, ww.word,
                             (tsvector_to_array(to_tsvector('english', ww.word)))[1] AS lexeme
                      FROM unnest(m.texts) WITH ORDINALITY AS t(tt, ord)
                      CROSS JOIN LATERAL (
                          SELECT r[1] AS word
                          FROM regexp_matches(lower(coalesce(t.tt, '')), '[a-z0-9]+', 'g') AS r) ww) w
                WHERE length(w.lexeme) >= 3 AND w.lexeme ~ '^[a-z0-9]+$'
                GROUP BY w.lexeme
                HAVING count(DISTINCT w.ord) * 2 > cardinality(m.texts)) g
            ORDER BY g.n DESC, g.lexeme
            LIMIT 2) x
        WHERE length(x.prefix) >= 3;
        CONTINUE WHEN stems IS NULL;
        CONTINUE WHEN EXISTS (  -- its unhit learned rule already says this
            SELECT 1 FROM spark.trigger_rules t
            WHERE t.tenant = tenant AND t.name = 'learned-' || left(md5(m.key), 12)
              AND t.pattern = '\m' || stems[1]
              AND t.context_pattern IS NOT DISTINCT FROM CASE WHEN cardinality(stems) > 1 THEN '\m' || stems[2] END);
        PERFORM spark.put_trigger_rule(
            tenant => tenant, name => 'learned-' || left(md5(m.key), 12),
            pattern => '\m' || stems[1], context_pattern => CASE WHEN cardinality(stems) > 1
                                                                 THEN '\m' || stems[2] END,
            surface => ARRAY[m.key], priority => 'normal', origin => 'learned', confidence => 0.5,
            shadow => true, metadata => jsonb_build_object('helpful_when_proposed', m.helped,
                                                           'from_calls', cardinality(m.texts)));
        proposed := proposed + 1;
    END LOOP;
    RETURN proposed;
END
$fn$;
COMMENT ON FUNCTION spark.propose_triggers(text, integer) IS
    'Propose learned trigger rules (origin learned, shadow): for each of tenant''s memories that the advisor '
    'surfaced without a trigger and that was then marked helpful or followed at least min_helpful times, a '
    'rule on the English stems most of those calls share (\m<prefix>, and a second as context_pattern; the '
    'prefix is what the stem shares with the words of those calls, so "retry" gives \mretr, never \mretri). A '
    'memory some rule already surfaces gets none, except that its own learned shadow rule, while it has no '
    'shadow hit, is rewritten when the calls now give another pattern. Returns how many were proposed. '
    'Shadow rules are matched and '
    'logged by spark.advise, never surfaced, until spark.promote_triggers. Errors: 22004 NULL tenant or '
    'min_helpful, 22023 an empty or over-long tenant or the pack''s tenant _system, min_helpful below 1.';

CREATE OR REPLACE FUNCTION spark.promote_triggers(
    tenant text, min_hits integer DEFAULT 5, min_precision double precision DEFAULT 0.6)
RETURNS TABLE (rule_name text, hits bigint, helped bigint, rule_precision double precision, promoted boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
#variable_conflict use_column
BEGIN
    PERFORM spark._check_writer(tenant);
    IF min_hits IS NULL OR min_precision IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', CASE WHEN min_hits IS NULL THEN 'min_hits' ELSE 'min_precision' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF min_hits < 1 THEN
        RAISE EXCEPTION 'min_hits must be at least 1, got %', min_hits USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF min_precision NOT BETWEEN 0 AND 1 THEN
        RAISE EXCEPTION 'min_precision must be from 0 to 1, got %', min_precision
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN QUERY
    WITH hit AS (
        -- each shadow hit, and when the same rule next hit the same memory in the same session. Calls are
        -- ordered by time, then id; calls in one transaction share a time, so an outcome recorded at that
        -- time judges the last of them.
        SELECT h.rule_name, h.memory_id, h.retrieval_id, r.session_id, r.created_at AS hit_at,
               lead(r.created_at) OVER w AS next_at
        FROM spark.trigger_shadow_hits h
        JOIN spark.retrievals r ON r.tenant = h.tenant AND r.id = h.retrieval_id
        JOIN spark.trigger_rules t ON t.tenant = h.tenant AND t.name = h.rule_name
        WHERE h.tenant = promote_triggers.tenant AND t.shadow
        WINDOW w AS (PARTITION BY h.rule_name, h.memory_id, r.session_id ORDER BY r.created_at, r.id)),
    measured AS (
        -- a shadow hit counts as right when its memory was marked helpful or followed (the rule would have
        -- surfaced it; something else did, and it helped) by a judgement of that hit: an outcome naming the
        -- hit's call (retrieval_id), or one naming no call, in the hit's session, recorded from the hit on
        -- and before the same rule's next hit on the same memory there. So one mark is evidence for one hit
        -- of a rule at most: a session whose rule fired five times and whose memory was marked once is 1 of
        -- 5, not 5 of 5. An outcome naming another call judged that call, where the rule did not fire, and
        -- counts for no hit.
        -- Every shadow rule of the tenant, one without hits too (0 hits, 0 helped, precision NULL).
        SELECT t.name AS rule_name, count(hh.rule_name) AS hits,
               count(*) FILTER (WHERE EXISTS (
                   SELECT 1 FROM spark.outcomes o
                   WHERE o.tenant = promote_triggers.tenant AND o.memory_tenant = promote_triggers.tenant
                     AND o.memory_id = hh.memory_id AND o.outcome IN ('helpful', 'followed')
                     AND (o.retrieval_id = hh.retrieval_id
                          OR (o.retrieval_id IS NULL AND hh.session_id IS NOT NULL
                              AND o.session_id = hh.session_id AND o.created_at >= hh.hit_at
                              AND (hh.next_at IS NULL OR o.created_at < hh.next_at))))) AS helped
        FROM spark.trigger_rules t
        LEFT JOIN hit hh ON hh.rule_name = t.name
        WHERE t.tenant = promote_triggers.tenant AND t.shadow
        GROUP BY t.name),
    promote AS (
        UPDATE spark.trigger_rules t
        SET shadow = false, confidence = (m.helped::double precision / m.hits)::real, updated_at = now(),
            metadata = t.metadata || jsonb_build_object('promoted_at', now(), 'shadow_hits', m.hits,
                                                        'shadow_helped', m.helped)
        FROM measured m
        WHERE t.tenant = promote_triggers.tenant AND t.name = m.rule_name AND t.shadow
          AND m.hits >= min_hits AND m.helped::double precision / nullif(m.hits, 0) >= min_precision
        RETURNING t.name)
    SELECT m.rule_name, m.hits, m.helped, m.helped::double precision / nullif(m.hits, 0),
           m.rule_name IN (SELECT p.name FROM promote p)
    FROM measured m
    ORDER BY m.rule_name;
END
$fn$;
COMMENT ON FUNCTION spark.promote_triggers(text, integer, double precision) IS
    'Measure every shadow trigger rule of tenant on its logged hits (spark.trigger_shadow_hits): precision = '
    'hits whose memory was marked helpful or followed by a judgement of that hit / hits. A judgement of a '
    'hit is an outcome naming its call (retrieval_id), or one naming no call, in its session, recorded '
    'from the hit on and before the rule''s next hit on that memory in that session: one mark counts for one '
    'hit at most. Rules with at least '
    'min_hits hits and min_precision precision are promoted (shadow off, confidence = precision). Returns '
    'each shadow rule with its figures (one without hits too: 0 hits, 0 helped, precision NULL) and whether '
    'it was promoted. Errors: 22004 NULL tenant, min_hits or '
    'min_precision, 22023 an empty or over-long tenant or the pack''s tenant _system, min_hits below 1 or min_precision outside 0..1.';
