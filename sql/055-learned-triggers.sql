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
        CONTINUE WHEN EXISTS (SELECT 1 FROM spark.trigger_rules t
                              WHERE t.tenant = tenant AND m.key = ANY(t.surface));
        -- the English stems most of those calls share (two at most: the pattern and its context pattern)
        SELECT array_agg(x.lexeme ORDER BY x.n DESC, x.lexeme) INTO stems FROM (
            SELECT l.lexeme, count(*) AS n
            FROM unnest(m.texts) tt, unnest(to_tsvector('english', coalesce(tt, ''))) l
            WHERE length(l.lexeme) >= 3 AND l.lexeme ~ '^[a-z0-9]+$'
            GROUP BY l.lexeme
            HAVING count(*) * 2 > cardinality(m.texts)
            ORDER BY count(*) DESC, l.lexeme
            LIMIT 2) x;
        CONTINUE WHEN stems IS NULL;
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
    'rule on the English stems most of those calls share (\m<stem>, and a second as context_pattern). A '
    'memory some rule already surfaces gets none. Returns how many were proposed. Shadow rules are matched and '
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
    WITH measured AS (
        -- a shadow hit counts as right when the memory it named was marked helpful or followed in the same
        -- session (the rule would have surfaced it; something else did, and it helped)
        SELECT h.rule_name, count(*) AS hits,
               count(*) FILTER (WHERE EXISTS (
                   SELECT 1 FROM spark.outcomes o
                   WHERE o.tenant = h.tenant AND o.memory_tenant = h.tenant AND o.memory_id = h.memory_id
                     AND o.outcome IN ('helpful', 'followed') AND r.session_id IS NOT NULL
                     AND o.session_id = r.session_id)) AS helped
        FROM spark.trigger_shadow_hits h
        JOIN spark.retrievals r ON r.tenant = h.tenant AND r.id = h.retrieval_id
        JOIN spark.trigger_rules t ON t.tenant = h.tenant AND t.name = h.rule_name
        WHERE h.tenant = promote_triggers.tenant AND t.shadow
        GROUP BY h.rule_name),
    promote AS (
        UPDATE spark.trigger_rules t
        SET shadow = false, confidence = (m.helped::double precision / m.hits)::real, updated_at = now(),
            metadata = t.metadata || jsonb_build_object('promoted_at', now(), 'shadow_hits', m.hits,
                                                        'shadow_helped', m.helped)
        FROM measured m
        WHERE t.tenant = promote_triggers.tenant AND t.name = m.rule_name AND t.shadow
          AND m.hits >= min_hits AND m.helped::double precision / m.hits >= min_precision
        RETURNING t.name)
    SELECT m.rule_name, m.hits, m.helped, m.helped::double precision / m.hits,
           m.rule_name IN (SELECT p.name FROM promote p)
    FROM measured m
    ORDER BY m.rule_name;
END
$fn$;
COMMENT ON FUNCTION spark.promote_triggers(text, integer, double precision) IS
    'Measure every shadow trigger rule of tenant on its logged hits (spark.trigger_shadow_hits): precision = '
    'hits whose memory was marked helpful or followed in the same session / hits. Rules with at least '
    'min_hits hits and min_precision precision are promoted (shadow off, confidence = precision). Returns '
    'each shadow rule with its figures and whether it was promoted. Errors: 22004 NULL tenant, min_hits or '
    'min_precision, 22023 an empty or over-long tenant or the pack''s tenant _system, min_hits below 1 or min_precision outside 0..1.';
