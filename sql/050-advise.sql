-- The advisor's round trip (retrieve + log) and its outcomes (tables: migration 0006).

CREATE OR REPLACE FUNCTION spark._repeat_window(params jsonb)
RETURNS interval
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
    -- read without a cast that could fail (1e400 overflows a double, 1e-330 underflows): the value itself is
    -- checked, and refused by name, by spark._retrieve_params in the same call (the default meanwhile)
    SELECT make_interval(secs => 60 * CASE
        WHEN params IS NULL OR jsonb_typeof(params -> 'repeat_after_minutes') IS DISTINCT FROM 'number'
            THEN (spark.retrieve_defaults() ->> 'repeat_after_minutes')::numeric
        WHEN (params ->> 'repeat_after_minutes')::numeric < 0.000001 THEN 0
        ELSE least((params ->> 'repeat_after_minutes')::numeric, 100000) END::double precision)
$fn$;
COMMENT ON FUNCTION spark._repeat_window(jsonb) IS
    'Internal: the repeat window of spark.advise and spark.advise_with_warnings from params '
    '(repeat_after_minutes, default 30, as spark.retrieve_defaults()), never failing on a bad value.';

CREATE OR REPLACE FUNCTION spark.advise(
    tenant text,
    query_text text,
    query_embedding vector DEFAULT NULL,
    k integer DEFAULT 5,
    params jsonb DEFAULT '{}',
    session_id text DEFAULT NULL,
    tool_name text DEFAULT NULL,
    intent_family text DEFAULT NULL)
RETURNS TABLE (retrieval_id bigint, rank integer, memory_id bigint, key text, text text, category text,
               kind text, source text, priority_label text, system_default boolean, score real, semantic_sim real,
               keyword_score real, recency real, outcome real, trigger_conf real, priority real, pools text[],
               why jsonb)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    rid bigint;
    ttext text;
    prm jsonb;
    started timestamptz := clock_timestamp();
    repeat_window interval;
BEGIN
    PERFORM spark._check_session(session_id);
    PERFORM spark._check_writer(tenant);
    IF length(tool_name) > 256 OR length(intent_family) > 256 THEN
        RAISE EXCEPTION '% is % characters; the limit is 256',
            CASE WHEN length(tool_name) > 256 THEN 'tool_name' ELSE 'intent_family' END,
            CASE WHEN length(tool_name) > 256 THEN length(tool_name) ELSE length(intent_family) END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- spark.retrieve checks every other argument; an error anywhere undoes the whole call, log included
    ttext := spark._trigger_text(advise.params, advise.query_text);
    INSERT INTO spark.retrievals AS l (tenant, session_id, tool_name, intent_family, query_text, trigger_text,
                                       params)
    VALUES (advise.tenant, advise.session_id, advise.tool_name, advise.intent_family,
            coalesce(advise.query_text, ''), ttext, coalesce(advise.params, '{}'))
    RETURNING l.id INTO rid;
    -- the repeat window, read without a cast that could fail: spark._retrieve_core refuses a bad value below
    -- (it runs first: the repeats are read from its rows)
    repeat_window := spark._repeat_window(advise.params);
    RETURN QUERY
    WITH hits AS MATERIALIZED (
        SELECT r.rank AS rnk, r.*, mm.tenant AS owner, mm.source AS src,
               mm.priority AS prio_label
        FROM spark._retrieve_core(advise.tenant, advise.query_text, advise.query_embedding, advise.k,
                                  advise.params, false) r
        JOIN spark.memories mm ON mm.tenant IN (advise.tenant, spark.system_tenant()) AND mm.id = r.memory_id),
    -- repeats: advice the session was shown within the window (spark.advice_shown: one probe an item).
    -- Critical advice (applied priority) is never a repeat, nor is advice without a session
    seen AS MATERIALIZED (
        SELECT h.memory_id, s.retrieval_id AS shown_in, s.shown_at
        FROM hits h
        JOIN spark.advice_shown s ON s.tenant = advise.tenant AND s.session_id = advise.session_id
                                 AND s.memory_id = h.memory_id
        WHERE advise.session_id IS NOT NULL AND h.priority < 0.25 AND s.shown_at > now() - repeat_window),
    items AS (
        INSERT INTO spark.retrieval_items (tenant, retrieval_id, memory_id, memory_tenant, rank, score, signals,
                                           pools, repeat_of)
        SELECT advise.tenant, rid, h.memory_id, h.owner, h.rnk, h.score,
               jsonb_build_object('semantic_sim', h.semantic_sim, 'keyword_score', h.keyword_score,
                                  'recency', h.recency, 'outcome', h.outcome, 'trigger_conf', h.trigger_conf,
                                  'priority', h.priority),
               h.pools, sn.shown_in
        FROM hits h LEFT JOIN seen sn ON sn.memory_id = h.memory_id),
    -- what this call shows the session, for its next calls (in memory_id order: two calls of a session
    -- upserting the same memories take their row locks in one order, never a deadlock)
    shown AS (
        INSERT INTO spark.advice_shown AS a (tenant, session_id, memory_id, retrieval_id, shown_at)
        SELECT advise.tenant, advise.session_id, h.memory_id, rid, now()
        FROM hits h
        WHERE advise.session_id IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM seen sn WHERE sn.memory_id = h.memory_id)
        ORDER BY h.memory_id
        ON CONFLICT (tenant, session_id, memory_id)
            -- the record replaced kept for Advisor.forget_shown (this very call's own, when it showed the
            -- memory twice, as advice and as a warning, keeps the one before)
            DO UPDATE SET retrieval_id = EXCLUDED.retrieval_id, shown_at = EXCLUDED.shown_at,
                          prev_retrieval_id = CASE WHEN a.retrieval_id = EXCLUDED.retrieval_id
                                                   THEN a.prev_retrieval_id ELSE a.retrieval_id END,
                          prev_shown_at = CASE WHEN a.retrieval_id = EXCLUDED.retrieval_id
                                               THEN a.prev_shown_at ELSE a.shown_at END)
    SELECT rid, h.rnk, h.memory_id, h.key, h.text, h.category, h.kind, h.src, h.prio_label, h.system_default,
           h.score, h.semantic_sim, h.keyword_score, h.recency, h.outcome, h.trigger_conf, h.priority, h.pools,
           CASE WHEN sn.shown_in IS NULL THEN h.why
                ELSE h.why || jsonb_build_object('repeat', jsonb_build_object('shown_in', sn.shown_in,
                                                                              'shown_at', sn.shown_at)) END
    FROM hits h LEFT JOIN seen sn ON sn.memory_id = h.memory_id
    ORDER BY h.rnk;
    -- what shadow (learned, unpromoted) rules would have surfaced: their precision decides promotion. Each
    -- as the trigger pool would take it if it were live: the memories it names that exist at as_of, at most
    -- pool_trigger of them (lowest id first). (Only the tenant's own memories: a hit names one, so
    -- include_system changes nothing here.)
    IF EXISTS (SELECT 1 FROM spark.trigger_rules r WHERE r.tenant = advise.tenant AND r.shadow) THEN
        prm := spark._retrieve_params(advise.params);
        INSERT INTO spark.trigger_shadow_hits (tenant, retrieval_id, rule_name, memory_id)
        SELECT advise.tenant, rid, r.name, h.id
        -- the tenant's shadow rules first, behind a fence (OFFSET 0), so that no plan tests another
        -- tenant's patterns (as spark._candidates' trigger pool)
        FROM (SELECT r.name, r.pattern, r.context_pattern, r.surface
              FROM spark.trigger_rules r WHERE r.tenant = advise.tenant AND r.shadow OFFSET 0) r
        CROSS JOIN LATERAL (
            SELECT mm.id FROM spark.memories mm
            WHERE mm.tenant = advise.tenant AND mm.key = ANY(r.surface)
              AND mm.created_at <= coalesce((prm ->> 'as_of')::timestamptz, now())
            ORDER BY mm.id
            LIMIT (prm ->> 'pool_trigger')::integer) h
        WHERE ttext ~* r.pattern AND (r.context_pattern IS NULL OR ttext ~* r.context_pattern)
        ON CONFLICT DO NOTHING;
    END IF;
    UPDATE spark.retrievals l SET latency_ms = extract(epoch FROM clock_timestamp() - started) * 1000
    WHERE l.tenant = advise.tenant AND l.id = rid;
    RETURN;
END
$fn$;
COMMENT ON FUNCTION spark.advise(text, text, vector, integer, jsonb, text, text, text) IS
    'spark.retrieve plus the log an advisor needs, in one round trip: the call goes to spark.retrievals, what '
    'it surfaced (with its signals; pack memories too) to spark.retrieval_items, and what shadow trigger rules '
    'would have surfaced to spark.trigger_shadow_hits (as the trigger pool would: memories created by as_of, '
    'at most pool_trigger a rule). Same tenant, query_text, query_embedding, k, params as '
    'spark.retrieve (k defaults to 5; params.repeat_after_minutes applies here only); session_id, tool_name, '
    'intent_family: recorded with the call (NULL for none; tool_name and intent_family up to 256 characters). '
    'Returns the surfaced rows with retrieval_id (for record_outcome), source and priority_label added; '
    'why.repeat (shown_in, shown_at) marks advice the session was shown within params.repeat_after_minutes '
    '(spark.advice_shown; never critical advice), logged as spark.retrieval_items.repeat_of; what it shows '
    'goes to spark.advice_shown. Errors: those '
    'of spark.retrieve, and 22023 for an empty or over-long session_id, an over-long tool_name or '
    'intent_family, or for the pack''s tenant _system '
    '(only spark-pg seed writes it); on error nothing is written.';

CREATE OR REPLACE FUNCTION spark.record_outcome(
    tenant text,
    memory_id bigint,
    outcome text,
    retrieval_id bigint DEFAULT NULL,
    session_id text DEFAULT NULL,
    source text DEFAULT 'api')
RETURNS real
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
    owner text;
    sid text := session_id;
    rel real;
    verdict bigint;
    prev text;  -- the verdict this one replaces (same call, memory and source), if any
BEGIN
    PERFORM spark._check_writer(tenant);
    IF memory_id IS NULL OR outcome IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', CASE WHEN memory_id IS NULL THEN 'memory_id' ELSE 'outcome' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    PERFORM spark._check_session(session_id);
    IF outcome NOT IN ('followed', 'helpful', 'unhelpful', 'ignored') THEN
        RAISE EXCEPTION 'outcome must be followed, helpful, unhelpful or ignored, got %', quote_literal(outcome)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF source IS NULL THEN
        RAISE EXCEPTION 'source must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF source = '' OR length(source) > 64 THEN
        RAISE EXCEPTION 'source must be 1 to 64 characters' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT m.tenant INTO owner FROM spark.memories m
    WHERE m.tenant IN (tenant, spark.system_tenant()) AND m.id = memory_id
    ORDER BY m.tenant = tenant DESC LIMIT 1;
    IF owner IS NULL THEN
        RAISE EXCEPTION 'memory_id % is not a memory of tenant % or of the cold-start pack', memory_id, tenant
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF retrieval_id IS NULL THEN
        INSERT INTO spark.outcomes (tenant, retrieval_id, memory_id, memory_tenant, session_id, outcome, source)
        VALUES (tenant, NULL, memory_id, owner, sid, outcome, source);
    ELSE
        -- the outcome belongs to the call's session (NULL when the call had none), whatever session_id says
        SELECT r.session_id INTO sid FROM spark.retrievals r WHERE r.tenant = tenant AND r.id = retrieval_id;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'retrieval_id % is not an advise call of tenant %', retrieval_id, tenant
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- a memory the call surfaced, or one of the tenant's past failures it may have warned with
        -- (spark.advise_with_warnings does not log its warnings as items: they are no fusion signals)
        IF NOT EXISTS (SELECT 1 FROM spark.retrieval_items i
                       WHERE i.tenant = tenant AND i.retrieval_id = retrieval_id AND i.memory_tenant = owner
                         AND i.memory_id = memory_id)
           AND NOT EXISTS (SELECT 1 FROM spark.memories m JOIN spark.retrievals r
                             ON r.tenant = tenant AND r.id = retrieval_id AND m.created_at <= r.created_at
                           WHERE owner = tenant AND m.tenant = tenant AND m.id = memory_id AND m.kind = 'trace'
                             AND m.metadata ->> 'outcome' = 'failure') THEN
            RAISE EXCEPTION 'memory_id % was not surfaced by advise call % of tenant %', memory_id, retrieval_id,
                tenant USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- one verdict per surfaced item and source (unique key outcomes_item_source_key, migration 0015): the
        -- same verdict again changes nothing, another one replaces it. An insert that meets a concurrent
        -- one for the same item and source waits for it to commit or roll back; the row it met is then
        -- locked and read (again from the insert if that row was deleted meanwhile)
        LOOP
            INSERT INTO spark.outcomes (tenant, retrieval_id, memory_id, memory_tenant, session_id, outcome,
                                        source)
            VALUES (tenant, retrieval_id, memory_id, owner, sid, outcome, source)
            ON CONFLICT ON CONSTRAINT outcomes_item_source_key DO NOTHING
            RETURNING id INTO verdict;
            EXIT WHEN verdict IS NOT NULL;
            SELECT o.id, o.outcome INTO verdict, prev FROM spark.outcomes o
            WHERE o.tenant = tenant AND o.retrieval_id = retrieval_id AND o.memory_id = memory_id
              AND o.source = source
            FOR UPDATE;
            EXIT WHEN verdict IS NOT NULL;
        END LOOP;
        IF prev = outcome THEN
            SELECT m.reliability INTO rel FROM spark.memories m WHERE m.tenant = owner AND m.id = memory_id;
            RETURN rel;
        ELSIF prev IS NOT NULL THEN
            UPDATE spark.outcomes o SET outcome = record_outcome.outcome, session_id = sid, created_at = now()
            WHERE o.tenant = tenant AND o.id = verdict;
        END IF;
    END IF;
    IF owner <> tenant THEN
        -- the pack is shared: one tenant's verdict must not move what every other tenant sees
        SELECT m.reliability INTO rel FROM spark.memories m WHERE m.tenant = owner AND m.id = memory_id;
        RETURN rel;
    END IF;
    -- the new verdict counted, the one it replaces (if any) taken back
    UPDATE spark.memories m
    SET helpful_count = greatest(0, m.helpful_count + (outcome = 'helpful')::integer
                                    - coalesce(prev = 'helpful', false)::integer),
        followed_count = greatest(0, m.followed_count + (outcome = 'followed')::integer
                                     - coalesce(prev = 'followed', false)::integer),
        unhelpful_count = greatest(0, m.unhelpful_count + (outcome = 'unhelpful')::integer
                                      - coalesce(prev = 'unhelpful', false)::integer),
        ignored_count = greatest(0, m.ignored_count + (outcome = 'ignored')::integer
                                    - coalesce(prev = 'ignored', false)::integer),
        -- a smoothed success rate (one success and one failure assumed up front, so it starts at 0.5);
        -- being ignored counts as a quarter of a failure. (SET reads the row before the update: the new
        -- counts are written out again here.)
        reliability = (greatest(0, m.helpful_count + (outcome = 'helpful')::integer
                                   - coalesce(prev = 'helpful', false)::integer)
                       + greatest(0, m.followed_count + (outcome = 'followed')::integer
                                     - coalesce(prev = 'followed', false)::integer) + 1)::real
                      / (greatest(0, m.helpful_count + (outcome = 'helpful')::integer
                                     - coalesce(prev = 'helpful', false)::integer)
                         + greatest(0, m.followed_count + (outcome = 'followed')::integer
                                       - coalesce(prev = 'followed', false)::integer)
                         + greatest(0, m.unhelpful_count + (outcome = 'unhelpful')::integer
                                       - coalesce(prev = 'unhelpful', false)::integer)
                         + 0.25 * greatest(0, m.ignored_count + (outcome = 'ignored')::integer
                                              - coalesce(prev = 'ignored', false)::integer)
                         + 2)::real,
        last_seen_at = now()
    WHERE m.tenant = owner AND m.id = memory_id
    RETURNING m.reliability INTO rel;
    RETURN rel;
END
$fn$;
COMMENT ON FUNCTION spark.record_outcome(text, bigint, text, bigint, text, text) IS
    'Record what became of a surfaced memory. tenant: whose call; memory_id: the memory (the tenant''s or '
    'the cold-start pack''s); outcome: followed | helpful | unhelpful | ignored; retrieval_id: the advise call '
    '(spark.advise) that surfaced the memory (or, a past failure trace, may have warned with it), whose '
    'session the outcome takes (session_id is then only checked); session_id: the agent session, for an outcome naming no call; source: who says so (api, '
    'hook, user). Updates the memory''s counters and reliability, (successes + 1) / (successes + failures + '
    '0.25 x ignored + 2), except for pack memories, whose shared reliability no single tenant moves. One '
    'verdict per call, memory and source: the same one again changes nothing, another replaces it (its count '
    'taken back). Returns the reliability. Errors: 22004 NULL tenant, memory_id, outcome or source; 22023 '
    'empty or over-long tenant or the pack''s tenant _system, unknown outcome, a memory or retrieval not of '
    'this tenant, a memory the call did not surface, a source not of 1 to 64 characters, an empty session_id '
    'or one over 256 characters.';

CREATE OR REPLACE FUNCTION spark.north_star(tenant text DEFAULT NULL, since timestamptz DEFAULT NULL)
RETURNS TABLE (tenant_name text, sessions bigint, sessions_helped bigint, share double precision,
               advise_calls bigint, items_surfaced bigint, helpful bigint, unhelpful bigint, followed bigint,
               ignored bigint)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
BEGIN
    IF north_star.tenant IS NOT NULL THEN  -- NULL: every tenant
        PERFORM spark._check_tenant(north_star.tenant);
    END IF;
    RETURN QUERY
    -- the north-star metric: the share of sessions in which at least one surfaced item was later marked
    -- helpful (or followed); per tenant, or per tenant for every tenant when tenant is NULL
    WITH calls AS (
        SELECT r.tenant, r.id, r.session_id FROM spark.retrievals r
        WHERE ($1 IS NULL OR r.tenant = $1) AND ($2 IS NULL OR r.created_at >= $2)),
    surfaced AS (
        SELECT c.tenant, c.session_id, i.retrieval_id, i.memory_id, i.memory_tenant
        FROM calls c JOIN spark.retrieval_items i ON i.tenant = c.tenant AND i.retrieval_id = c.id),
    verdicts AS (
        SELECT o.tenant, o.outcome, o.retrieval_id, o.memory_id, o.memory_tenant, o.session_id
        FROM spark.outcomes o
        WHERE ($1 IS NULL OR o.tenant = $1) AND ($2 IS NULL OR o.created_at >= $2)),
    helped AS (
        -- an outcome counts for the session of the call that surfaced the item (by retrieval_id), or for its
        -- own session_id when it names no call
        SELECT DISTINCT s.tenant, s.session_id
        FROM verdicts v JOIN surfaced s
          ON s.tenant = v.tenant AND s.memory_tenant = v.memory_tenant AND s.memory_id = v.memory_id
         AND (s.retrieval_id = v.retrieval_id OR (v.retrieval_id IS NULL AND s.session_id = v.session_id))
        WHERE v.outcome IN ('helpful', 'followed') AND s.session_id IS NOT NULL)
    SELECT t.tenant,
           count(DISTINCT c.session_id),
           (SELECT count(*) FROM helped h WHERE h.tenant = t.tenant),
           (SELECT count(*) FROM helped h WHERE h.tenant = t.tenant)::double precision
               / nullif(count(DISTINCT c.session_id), 0),
           count(DISTINCT c.id),
           (SELECT count(*) FROM surfaced s WHERE s.tenant = t.tenant),
           (SELECT count(*) FROM verdicts v WHERE v.tenant = t.tenant AND v.outcome = 'helpful'),
           (SELECT count(*) FROM verdicts v WHERE v.tenant = t.tenant AND v.outcome = 'unhelpful'),
           (SELECT count(*) FROM verdicts v WHERE v.tenant = t.tenant AND v.outcome = 'followed'),
           (SELECT count(*) FROM verdicts v WHERE v.tenant = t.tenant AND v.outcome = 'ignored')
    FROM (SELECT DISTINCT c0.tenant FROM calls c0) t
    JOIN calls c ON c.tenant = t.tenant
    GROUP BY t.tenant
    ORDER BY t.tenant;
END
$fn$;
COMMENT ON FUNCTION spark.north_star(text, timestamptz) IS
    'The north-star metric per tenant: sessions with advise calls (spark.retrievals.session_id), how many '
    'had at least one surfaced item later marked helpful or followed, the share, and the counts behind it. '
    'tenant: one tenant, or NULL for all; since: only calls and outcomes from then on (NULL: all time). '
    'Calls without a session_id count as calls but not as sessions. Errors: 22023 an empty or over-long '
    'tenant.';
