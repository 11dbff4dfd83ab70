-- The read path. spark.explain() does all the work and returns every candidate with what happened to it;
-- spark.retrieve() returns the surfaced ones. One call, one round trip, callable from psql.

CREATE OR REPLACE FUNCTION spark._or_tsquery(query_text text)
RETURNS tsquery
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
    -- an OR over the question's English lexemes (plainto_tsquery ANDs them and finds almost nothing), each
    -- written as a tsquery literal (quote and backslash escaped) and taken as it is: to_tsquery would parse
    -- a lexeme again, and 'follow-up' or 'x.com/a''b' became phrases that no stored tsvector holds
    -- (spark._keyword_plan writes its lexemes the same way)
    SELECT CASE WHEN count(*) = 0 THEN NULL
                ELSE string_agg('''' || replace(replace(lexeme, E'\\', E'\\\\'), '''', '''''') || '''', ' | '
                                ORDER BY lexeme)::tsquery END
    FROM unnest(to_tsvector('english', coalesce(query_text, '')))
$fn$;
COMMENT ON FUNCTION spark._or_tsquery(text) IS
    'Internal: OR tsquery of the English lexemes of query_text (NULL when it has none, e.g. only stop words).';

DROP FUNCTION IF EXISTS spark._priority_bonus(text);

CREATE OR REPLACE FUNCTION spark._trigger_text(params jsonb, query_text text)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
    -- capped as a query text is (10,000): trigger patterns run over it in every retrieval, and the pattern
    -- checks bound what one costs; at 1,000 a long command's destructive tail never reached the rules
    SELECT left(coalesce(params ->> 'trigger_text', query_text), 10000)
$fn$;
COMMENT ON FUNCTION spark._trigger_text(jsonb, text) IS
    'Internal: the text trigger rules match: params.trigger_text, else query_text; at most 10,000 characters.';

-- the interrupt flag became the confidence of the surest interrupting rule
DROP FUNCTION IF EXISTS spark._why_advice(double precision, text, text, boolean, text, real);
CREATE OR REPLACE FUNCTION spark._why_advice(
    trig double precision, rules text, priority text, interrupt double precision, action_domain text,
    actionability real)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
-- plpgsql, not sql: a SQL function called per output row sets up an executor each time (~50-150 us)
BEGIN
    RETURN jsonb_strip_nulls(jsonb_build_object(
        'trigger', CASE WHEN rules IS NOT NULL THEN jsonb_build_object(
            -- a tenant's rule and the pack's may share a name: each name once, in first-seen order
            'rules', (SELECT jsonb_agg(d.n ORDER BY d.o) FROM (
                          SELECT u.n, min(u.o) AS o FROM unnest(string_to_array(rules, ',')) WITH ORDINALITY u(n, o)
                          GROUP BY u.n) d),
            'confidence', round(trig::numeric, 3),
            'priority', priority, 'interrupt', interrupt IS NOT NULL,
            'interrupt_confidence', round(interrupt::numeric, 3)) END,
        'action_domain', action_domain, 'actionability', round(actionability::numeric, 3)));
END
$fn$;
COMMENT ON FUNCTION spark._why_advice(double precision, text, text, double precision, text, real) IS
    'Internal: the advisor''s part of a why object. trig: the surest matching rule''s confidence; rules: the '
    'matching rules'' names, comma-separated (each reported once); priority: the highest of their priorities; '
    'interrupt: the surest interrupting rule''s confidence (NULL: none interrupts); action_domain and '
    'actionability: the row''s.';

CREATE OR REPLACE FUNCTION spark._pool_weight(params jsonb, pool text)
RETURNS double precision
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
    SELECT (params ->> CASE pool WHEN 'keyword_recent' THEN 'rrf_w_keyword' WHEN 'keyword_old' THEN 'rrf_w_keyword'
                                 ELSE 'rrf_w_' || pool END)::double precision
$fn$;
COMMENT ON FUNCTION spark._pool_weight(jsonb, text) IS
    'Internal: the RRF weight of a candidate pool (params.rrf_w_<pool>; both keyword pools share rrf_w_keyword).';

-- replaced by spark._keyword_plan (sql/035)
DROP FUNCTION IF EXISTS spark._lexeme_queries(text);
DROP FUNCTION IF EXISTS spark._tenant_lexeme_keys(text[], text);

CREATE OR REPLACE FUNCTION spark._why(
    rank integer, status text, pool_ranks jsonb, fusion text, score double precision, terms jsonb,
    min_sim double precision, passed_by text, min_fuse double precision, ratio double precision,
    priority text, created_at timestamptz, query_source text, mode text)
RETURNS jsonb
LANGUAGE plpgsql STABLE PARALLEL SAFE  -- the week (to_char of a timestamptz) follows the TimeZone
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
-- plpgsql, not sql: a SQL function called per output row sets up an executor each time (~50-150 us)
BEGIN
    RETURN jsonb_build_object(
        'rank', rank, 'status', status, 'pools', pool_ranks, 'fusion', fusion,
        'score', round(score::numeric, 4), 'terms', terms,
        'gates', jsonb_build_object(
            'min_similarity', jsonb_build_object('threshold', round(min_sim::numeric, 3),
                                                 'passed', passed_by IS NOT NULL, 'by', passed_by),
            'min_fusion_score', jsonb_build_object('threshold', round(min_fuse::numeric, 3),
                                                   'passed', score >= min_fuse),
            'adaptive_ratio', ratio),
        'priority', priority, 'week', to_char(created_at, 'IYYY-"W"IW'), 'query_embedding', query_source,
        'precision_mode', mode);
END
$fn$;
COMMENT ON FUNCTION spark._why(integer, text, jsonb, text, double precision, jsonb, double precision, text,
                                double precision, double precision, text, timestamptz, text, text) IS
    'Internal: the why object of one spark.retrieve / spark.explain row. rank: its rank (NULL for a row not '
    'returned); status: surfaced or why it was dropped; pool_ranks: its rank in each pool; fusion: rrf or '
    'weighted; score: the fused score; terms: the score''s terms (spark._terms); min_sim, min_fuse, ratio: '
    'the similarity gate, fusion-score gate and adaptive ratio in force; passed_by: what let it past the '
    'similarity gate (NULL: nothing); priority: its priority label; created_at: for its ISO week; '
    'query_source: where the query vector came from; mode: the precision mode.';

CREATE OR REPLACE FUNCTION spark._terms(
    p jsonb, sim double precision, kw double precision, rec double precision, outc double precision,
    trig double precision, prio double precision, system_default boolean, pool_ranks jsonb)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
-- plpgsql, not sql: a SQL function called per output row sets up an executor each time (~50-150 us)
DECLARE
    t jsonb;
    norm double precision;
BEGIN
    -- computed for the rows returned only (spark._candidates ranks without it)
    IF p ->> 'fusion' = 'rrf' THEN
        -- each pool's rrf_w / (rrf_k + rank), divided by the score's normaliser (an item first in every kind
        -- of pool scores 1), so that the terms add up to the score as the weighted ones do
        norm := (spark._pool_weight(p, 'semantic') + spark._pool_weight(p, 'keyword_old')
                 + spark._pool_weight(p, 'recent') + spark._pool_weight(p, 'pinned'))
                / ((p ->> 'rrf_k')::double precision + 1);
        t := (SELECT jsonb_object_agg(e.key, round(coalesce(spark._pool_weight(p, e.key)
                                                            / ((p ->> 'rrf_k')::double precision
                                                               + e.value::double precision)
                                                            / nullif(norm, 0), 0)::numeric, 5))
              FROM jsonb_each_text(pool_ranks) e);
    ELSE
        t := jsonb_build_object(
                 'similarity', round(((p ->> 'w_similarity')::double precision * coalesce(sim, 0))::numeric, 4),
                 'keyword', round(((p ->> 'w_keyword')::double precision * kw)::numeric, 4),
                 'recency', round(((p ->> 'w_recency')::double precision * rec)::numeric, 4),
                 'outcome', round(((p ->> 'w_outcome')::double precision * outc)::numeric, 4))
             || CASE WHEN trig > 0
                     THEN jsonb_build_object('trigger', round(((p ->> 'w_trigger')::double precision
                                                               * trig)::numeric, 4))
                     ELSE '{}' END;
    END IF;
    RETURN t || jsonb_build_object('priority_factor', 1 + prio)
             || CASE WHEN system_default
                     THEN jsonb_build_object('pack_factor', round((p ->> '_pack_factor')::numeric, 3))
                     ELSE '{}' END;
END
$fn$;
COMMENT ON FUNCTION spark._terms(jsonb, double precision, double precision, double precision, double precision,
                                 double precision, double precision, boolean, jsonb) IS
    'Internal: the terms of one row''s fused score for its why (p: the effective params of spark.retrieve; the '
    'signals; system_default: a cold-start pack memory, scaled by _pack_factor; pool_ranks: pool -> rank).';

CREATE OR REPLACE FUNCTION spark._semantic_pool(
    tenants text[], qvec vector, as_of timestamptz, pool integer, exact_scan_max integer, model_id smallint,
    dim integer)
RETURNS TABLE (ids bigint[], dists double precision[], scans jsonb)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    t text;
    tidx text;
    n bigint;
    scan text;
    t_ids bigint[];
    t_dist double precision[];
    all_ids bigint[] := '{}';
    all_dist double precision[] := '{}';
BEGIN
    scans := '{}';
    -- each tenant (the caller's and the cold-start pack) by its cheapest exact-enough path, then merged
    FOREACH t IN ARRAY tenants LOOP
        SELECT v.index_name INTO tidx FROM spark.tenant_vector_indexes v
        WHERE v.tenant = t AND v.model_id = _semantic_pool.model_id;
        IF tidx IS NOT NULL THEN
            scan := 'tenant_hnsw';  -- the tenant's own partial HNSW index
        ELSE
            SELECT count(*) INTO n FROM (
                SELECT 1 FROM spark.embeddings e0 WHERE e0.tenant = t AND e0.model_id = _semantic_pool.model_id
                LIMIT exact_scan_max + 1) x;
            -- a small tenant: an exact scan is cheaper than a walk of the shared graph, and exact; a large
            -- tenant without its own index yet: the model's shared HNSW index, iterative scan
            scan := CASE WHEN n <= exact_scan_max THEN 'exact' ELSE 'hnsw' END;
        END IF;
        IF scan = 'exact' THEN
            SELECT array_agg(s.id), array_agg(s.dist) INTO t_ids, t_dist
            FROM (SELECT e.memory_id AS id, e.embedding <=> qvec AS dist
                  FROM spark.embeddings e
                  WHERE e.tenant = t AND e.model_id = _semantic_pool.model_id AND e.created_at <= as_of
                  ORDER BY e.embedding <=> qvec, e.memory_id  -- ties (equal vectors) by id: the same pool every call
                  LIMIT pool) s;
        ELSE
            -- either HNSW index: dimension, model and tenant as literals, so the planner can match a partial
            -- index's predicate (the tenant's, or the model's shared one)
            EXECUTE format($q$
                SELECT array_agg(s.id), array_agg(s.dist) FROM (
                    SELECT e.memory_id AS id, e.embedding::vector(%1$s) <=> $1::vector(%1$s) AS dist
                    FROM spark.embeddings e
                    WHERE e.tenant = %2$L AND e.model_id = %3$s AND e.created_at <= $2
                    ORDER BY e.embedding::vector(%1$s) <=> $1::vector(%1$s)
                    LIMIT $3) s $q$, dim, t, model_id)
            INTO t_ids, t_dist
            USING qvec, as_of, pool;
        END IF;
        all_ids := all_ids || coalesce(t_ids, '{}');
        all_dist := all_dist || coalesce(t_dist, '{}');
        scans := scans || jsonb_build_object(t, scan);
    END LOOP;
    SELECT array_agg(u.id ORDER BY u.dist, u.id), array_agg(u.dist ORDER BY u.dist, u.id) INTO ids, dists
    FROM (SELECT x.id, x.dist FROM unnest(all_ids, all_dist) x(id, dist) ORDER BY x.dist, x.id LIMIT pool) u;
    ids := coalesce(ids, '{}');
    dists := coalesce(dists, '{}');
    RETURN NEXT;
END
$fn$;
COMMENT ON FUNCTION spark._semantic_pool(text[], vector, timestamptz, integer, integer, smallint, integer) IS
    'Internal: the semantic pool of spark.retrieve, the pool nearest vectors of model_id (dimension dim) to qvec '
    'among tenants'' memories created by as_of: per tenant through its own HNSW index '
    '(spark.tenant_vector_indexes), else exactly up to exact_scan_max vectors, else the model''s shared HNSW '
    'index. scans names the path taken per tenant. The caller sets hnsw.ef_search and hnsw.iterative_scan.';

DROP FUNCTION IF EXISTS spark._candidates(text[], vector, timestamptz, tsquery, jsonb, text, timestamptz, text,
    double precision, double precision, double precision, tsquery[], bigint[], double precision[], smallint);
DROP FUNCTION IF EXISTS spark._candidates(text[], vector, timestamptz, tsquery, jsonb, text, timestamptz, text,
    double precision, double precision, double precision, tsquery[], bigint[], double precision[], smallint, text[]);
DROP FUNCTION IF EXISTS spark._candidates(text[], vector, timestamptz, tsquery, jsonb, text, timestamptz, text,
    double precision, double precision, double precision, tsquery[], bigint[], double precision[], smallint, text[],
    double precision[]);
-- CREATE OR REPLACE cannot change a function's result columns or parameter names: drop a version whose differ
-- from these (the current version is replaced in place and keeps its grants). Change this check with the result.
SELECT spark._drop_if_reshaped(
    'spark._candidates(text[], vector, timestamptz, tsquery, jsonb, '
    'text, timestamptz, text, double precision, double precision, double precision, tsquery[], bigint[], '
    'double precision[], smallint, text[], double precision[], text)',
    'tenants text[], qvec vector, as_of timestamp with time zone, '
    'tsq tsquery, p jsonb, own text, cutoff timestamp with time zone, query_text text, '
    'min_sim double precision, min_fuse double precision, ratio double precision, lexq tsquery[], '
    'sem_ids bigint[], sem_dist double precision[], model_id smallint, lexkeys text[], '
    'lexdf double precision[], trigger_text text',
    'TABLE(id bigint, score double precision, key text, text text, '
    'category text, kind text, system_default boolean, created_at timestamp with time zone, '
    'content_hash bytea, prio_label text, sim double precision, kw double precision, rec double precision, '
    'outc double precision, prio double precision, pools text[], pool_ranks jsonb, trig double precision, '
    'trig_rules text[], trig_prio text, trig_interrupt double precision, adomain text, act real, '
    'domain_ok boolean, act_ok boolean, tier text, passed_by text, gate_status text, pre_status text)');
CREATE OR REPLACE FUNCTION spark._candidates(
    tenants text[], qvec vector, as_of timestamptz, tsq tsquery, p jsonb, own text, cutoff timestamptz,
    query_text text, min_sim double precision, min_fuse double precision, ratio double precision,
    lexq tsquery[], sem_ids bigint[], sem_dist double precision[], model_id smallint, lexkeys text[],
    lexdf double precision[], trigger_text text)
RETURNS TABLE (id bigint, score double precision, key text, text text, category text, kind text,
               system_default boolean, created_at timestamptz, content_hash bytea, prio_label text,
               sim double precision, kw double precision, rec double precision, outc double precision,
               prio double precision, pools text[], pool_ranks jsonb, trig double precision, trig_rules text[],
               trig_prio text, trig_interrupt double precision, adomain text, act real, domain_ok boolean,
               act_ok boolean,
               tier text, passed_by text, gate_status text, pre_status text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, @vector_schema@, pg_temp
SET plan_cache_mode = 'force_generic_plan'
AS $fn$
#variable_conflict use_column
BEGIN
    -- static SQL in PL/pgSQL with a generic plan cached for the session: planning this statement costs
    -- more (4-6 ms) than running it on a small tenant
    RETURN QUERY
        WITH
        sem AS MATERIALIZED (SELECT u.id, u.dist FROM unnest($13, $14) AS u(id, dist)),
        kw AS MATERIALIZED (
            SELECT x.id, x.created_at, x.importance, x.tsv, ts_rank(x.tsv, $4, 32) AS kr
            FROM (
                -- the tenant-aware lexeme index (migration 0003): its keys carry the tenant, so they are the
                -- tenant filter too. OFFSET 0 keeps as_of out of the index scan: otherwise the planner ANDs in
                -- a bitmap of every row created before as_of, which costs more than the whole keyword pool.
                SELECT mm.id, mm.created_at, mm.importance, mm.tsv FROM spark.memories mm
                WHERE $4 IS NOT NULL AND spark._tenant_lexemes(mm.tenant, mm.tsv) && $16
                OFFSET 0) x
            WHERE x.created_at <= $3),
        -- each query lexeme weighted by how rare it is among the keyword matches (a name on every turn
        -- counts little, a distinctive word a lot); a lexeme skipped as too common brings its counted
        -- document frequency ($17), and its memories join the count of matches
        kw_n AS (SELECT (SELECT count(*) FROM kw) + coalesce((SELECT sum(d) FROM unnest($17) d), 0) AS n),
        lex AS MATERIALIZED (
            SELECT l.q, ln(1 + (SELECT kw_n.n FROM kw_n)::double precision
                              / greatest(1, coalesce(l.df, (SELECT count(*) FROM kw WHERE kw.tsv @@ l.q)))) AS idf
            FROM unnest($12::tsquery[], $17::double precision[]) l(q, df)),
        lex_total AS (SELECT nullif(sum(lex.idf), 0) AS total FROM lex),
        -- the random pool: tries at hashed points of the tenant's id range, each landing on the tenant's first
        -- memory at or after its point and kept when that memory is old (created by the cutoff). A try that
        -- lands on a recent memory is dropped, not moved on to the next old one: a run of recent ids would
        -- hand its whole share of the tries to the old memory after it. Nothing when the tenant's oldest
        -- memory is recent (then none is old) or pool_random is 0
        span AS MATERIALIZED (
            SELECT (SELECT min(mm.id) FROM spark.memories mm WHERE mm.tenant = $6) AS lo,
                   (SELECT max(mm.id) FROM spark.memories mm WHERE mm.tenant = $6) AS hi
            WHERE ($5 ->> 'pool_random')::integer > 0
              AND (SELECT mm.created_at FROM spark.memories mm WHERE mm.tenant = $6
                   ORDER BY mm.created_at LIMIT 1) <= $7),
        -- 3 x pool_random tries over the whole range (every one lands on a memory: the range ends on one)
        tries AS MATERIALIZED (
            SELECT t.g, pr.id, pr.created_at <= $7 AS old
            FROM span b, generate_series(1, 3 * ($5 ->> 'pool_random')::integer) t(g),
                 LATERAL (SELECT mm.id, mm.created_at FROM spark.memories mm
                          WHERE mm.tenant = $6
                            AND mm.id >= b.lo + abs(hashtext($8 || ':' || ($5 ->> 'seed') || ':' || t.g)
                                                    % (b.hi - b.lo + 1))
                          ORDER BY mm.id LIMIT 1) pr),
        -- when those found fewer than pool_random distinct old memories (recent ones hold most of the range:
        -- a young tenant, or history imported after recent memories), the range narrowed to the old ones: from
        -- the first old memory a scan of the primary key meets from each end, or the end itself when the
        -- first 2,000 from there are recent (each row the scan reads costs ~0.2 us; the tries drop recent
        -- ones inside the range anyway)
        old_span AS MATERIALIZED (
            SELECT coalesce((SELECT x.id FROM (SELECT mm.id, mm.created_at FROM spark.memories mm
                                               WHERE mm.tenant = $6 ORDER BY mm.id LIMIT 2000) x
                             WHERE x.created_at <= $7 ORDER BY x.id LIMIT 1), s.lo) AS lo,
                   coalesce((SELECT x.id FROM (SELECT mm.id, mm.created_at FROM spark.memories mm
                                               WHERE mm.tenant = $6 ORDER BY mm.id DESC LIMIT 2000) x
                             WHERE x.created_at <= $7 ORDER BY x.id DESC LIMIT 1), s.hi) AS hi
            FROM span s
            WHERE (SELECT count(DISTINCT tr.id) FROM tries tr WHERE tr.old) < ($5 ->> 'pool_random')::integer),
        -- and up to 27 x pool_random more tries there: the pool nearly fills while old memories hold 5% or
        -- more of that range (an average of 9.85 of 10 at 5%, 6.3 at 2%)
        retries AS (
            SELECT t.g, pr.id
            FROM old_span o, generate_series(3 * ($5 ->> 'pool_random')::integer + 1,
                                             30 * ($5 ->> 'pool_random')::integer) t(g),
                 LATERAL (SELECT mm.id, mm.created_at FROM spark.memories mm
                          WHERE mm.tenant = $6
                            AND mm.id >= o.lo + abs(hashtext($8 || ':' || ($5 ->> 'seed') || ':' || t.g)
                                                    % (o.hi - o.lo + 1))
                          ORDER BY mm.id LIMIT 1) pr
            WHERE pr.created_at <= $7),
        -- the first pool_random distinct old memories in try order (not the lowest ids among them, which
        -- would leave the newer half of the old memories out of the sample)
        probes AS (
            SELECT x.id FROM (
                SELECT DISTINCT ON (a.id) a.id, a.g
                FROM (SELECT tr.g, tr.id FROM tries tr WHERE tr.old
                      UNION ALL
                      SELECT rt.g, rt.id FROM retries rt) a
                ORDER BY a.id, a.g) x
            ORDER BY x.g
            LIMIT ($5 ->> 'pool_random')::integer),
        -- the trigger pool: rules of the tenant (and the pack) whose patterns match the trigger text surface
        -- the memories they name; shadow rules never surface (the advisor logs their hits itself)
        -- Per memory, every matching rule counts: the surest one's confidence, the highest priority of any,
        -- and the surest interrupting rule's confidence (a normal rule at 1.0 matching too no longer hides a
        -- critical interrupt at 0.95)
        trig AS MATERIALIZED (
            SELECT mm.id, max(r.confidence)::double precision AS conf,
                   (array_agg(r.priority ORDER BY CASE r.priority WHEN 'critical' THEN 4 WHEN 'high' THEN 3
                                                                 WHEN 'normal' THEN 2 ELSE 1 END DESC))[1] AS priority,
                   (max(r.confidence) FILTER (WHERE r.interrupt))::double precision AS interrupt,
                   array_agg(r.name ORDER BY r.confidence DESC, r.interrupt DESC, r.name) AS rules
            -- the tenants' live rules first, behind a fence (OFFSET 0): the planner would otherwise test the
            -- pattern before the tenant (it costs the array's = ANY above a regex), so every call compiled
            -- every tenant's patterns and one tenant's rules slowed all the others
            FROM (SELECT r.name, r.pattern, r.context_pattern, r.surface, r.confidence, r.priority, r.interrupt
                  FROM spark.trigger_rules r
                  WHERE $18 IS NOT NULL AND r.tenant = ANY($1) AND NOT r.shadow
                  OFFSET 0) r
            JOIN spark.memories mm ON mm.tenant = ANY($1) AND mm.key = ANY(r.surface) AND mm.created_at <= $3
            WHERE $18 ~* r.pattern AND (r.context_pattern IS NULL OR $18 ~* r.context_pattern)
            GROUP BY mm.id),
        pools AS (
            SELECT s.id, 'semantic'::text AS pool, row_number() OVER (ORDER BY s.dist, s.id) AS rnk, s.dist FROM sem s
            UNION ALL
            -- ORDER BY ... LIMIT first (a top-N heap sort), then number the few rows kept
            SELECT x.id, 'keyword_recent', row_number() OVER (ORDER BY x.kr DESC, x.id), NULL::double precision FROM (
                SELECT kw.id, kw.kr FROM kw WHERE kw.created_at > $7
                ORDER BY kw.kr DESC, kw.id LIMIT ($5 ->> 'pool_keyword_recent')::integer) x
            UNION ALL
            SELECT x.id, 'keyword_old', row_number() OVER (ORDER BY x.s DESC, x.id), NULL::double precision FROM (
                SELECT kw.id, kw.kr * (0.5 + kw.importance) AS s FROM kw WHERE kw.created_at <= $7
                ORDER BY s DESC, kw.id LIMIT ($5 ->> 'pool_keyword_old')::integer) x
            UNION ALL
            SELECT r.id, 'recent', row_number() OVER (ORDER BY r.created_at DESC, r.id), NULL::double precision FROM (
                SELECT mm.id, mm.created_at FROM spark.memories mm
                WHERE mm.tenant = ANY($1) AND mm.created_at <= $3 AND mm.created_at > $7
                ORDER BY mm.created_at DESC, mm.id LIMIT ($5 ->> 'pool_recent')::integer) r
            UNION ALL
            SELECT pb.id, 'random', row_number() OVER (ORDER BY pb.id), NULL::double precision FROM probes pb
            UNION ALL
            SELECT x.id, 'trigger', row_number() OVER (ORDER BY x.conf DESC, x.id), NULL::double precision FROM (
                SELECT t.id, t.conf FROM trig t ORDER BY t.conf DESC, t.id
                LIMIT ($5 ->> 'pool_trigger')::integer) x
            UNION ALL
            SELECT pn.id, 'pinned', row_number() OVER (ORDER BY pn.importance DESC, pn.id), NULL::double precision FROM (
                SELECT mm.id, mm.importance FROM spark.memories mm
                WHERE mm.tenant = ANY($1) AND mm.tier = 'pinned' AND mm.created_at <= $3
                ORDER BY mm.importance DESC, mm.id LIMIT ($5 ->> 'pool_pinned')::integer) pn),
        cand AS (
            SELECT pl.id, array_agg(pl.pool ORDER BY pl.pool) AS pools,
                   jsonb_object_agg(pl.pool, pl.rnk) AS pool_ranks, min(pl.dist) AS dist
            FROM pools pl GROUP BY pl.id),
        -- the params each candidate needs, read from the jsonb once (not once per row: ~1 us per lookup)
        w AS MATERIALIZED (
            SELECT ($5 ->> 'w_similarity')::double precision AS ws, ($5 ->> 'w_keyword')::double precision AS wk,
                   ($5 ->> 'w_recency')::double precision AS wr, ($5 ->> 'w_outcome')::double precision AS wo,
                   ($5 ->> 'w_trigger')::double precision AS wt,
                   ($5 ->> 'rrf_k')::double precision AS rk, $5 ->> 'fusion' AS fusion,
                   ($5 ->> 'recency_floor')::double precision AS rfloor,
                   ($5 ->> 'half_life_days')::double precision AS hl,
                   ($5 ->> 'decay_half_life_days')::double precision AS dhl,
                   $5 -> 'domains' AS domains, $5 -> 'domains' = 'null' AS any_domain,
                   ($5 ->> 'min_actionability')::double precision AS min_act,
                   ($5 ->> '_pack_factor')::double precision AS pack,
                   ($5 ->> 'domain_min')::integer AS domain_min,
                   (SELECT lex_total.total FROM lex_total) AS lex_total),
        -- every signal once per candidate (materialized: the fusion and the gates read them several times);
        -- the keyword score comes from kwsc below
        sig0 AS MATERIALIZED (
            SELECT mm.id, mm.key, mm.text, mm.category, mm.kind, mm.tenant <> $6 AS system_default,
                   mm.created_at, mm.content_hash, mm.priority AS prio_label,
                   -- a semantic candidate's distance is known; the others' vectors are read for it (and only
                   -- the survivors' vectors are read later, for diversity: none travel through the statement)
                   (1 - coalesce(cand.dist, (SELECT ev.embedding <=> $2 FROM spark.embeddings ev
                                              WHERE ev.tenant = mm.tenant AND ev.memory_id = mm.id
                                                AND ev.model_id = $15)))::double precision AS sim, mm.tsv,
                   -- half-lives capped at 100 (0.5 ^ 100 is 8e-31, still a real): older is as old, never an underflow
                   greatest(w.rfloor,
                            power(0.5, least(100, greatest(0, extract(epoch FROM ($3 - mm.created_at)) / 86400.0)
                                                   / w.hl)))::double precision
                       AS rec,
                   -- opt-in decay of unused insights: reliability halves every decay_half_life_days since the
                   -- memory was last marked (or created)
                   (mm.reliability * CASE WHEN w.dhl > 0 THEN
                        power(0.5, least(100, greatest(0, extract(epoch FROM ($3 - coalesce(mm.last_seen_at,
                                                                                          mm.created_at)))
                                                            / 86400.0)::double precision
                                               / w.dhl))
                        ELSE 1 END)::double precision AS outc,
                   -- a trigger can raise the priority of what it surfaces, never lower it
                   -- (inline: a function with a pinned search_path is a real call per row, ~15 us)
                   CASE greatest(CASE mm.priority WHEN 'critical' THEN 4 WHEN 'high' THEN 3 WHEN 'normal' THEN 2 ELSE 1 END,
                                 CASE tg.priority WHEN 'critical' THEN 4 WHEN 'high' THEN 3 WHEN 'normal' THEN 2 ELSE 1 END)
                        WHEN 4 THEN 0.3 WHEN 3 THEN 0.2 WHEN 2 THEN 0 ELSE -0.1 END::double precision AS prio,
                   cand.pools, cand.pool_ranks,
                   coalesce(tg.conf, 0) AS trig, tg.rules AS trig_rules, tg.priority AS trig_prio,
                   tg.interrupt AS trig_interrupt, mm.action_domain AS adomain, mm.actionability AS act,
                   w.any_domain OR coalesce(mm.action_domain, 'general') = 'general'
                       OR w.domains ? mm.action_domain OR tg.id IS NOT NULL OR mm.tier = 'pinned'
                       AS domain_ok,
                   mm.actionability IS NULL OR mm.actionability >= w.min_act
                       OR tg.id IS NOT NULL OR mm.tier = 'pinned' AS act_ok,
                   mm.tier
            FROM cand
            CROSS JOIN w
            LEFT JOIN trig tg ON tg.id = cand.id
            -- one primary-key probe per candidate (a join could scan the whole tenant)
            CROSS JOIN LATERAL (SELECT * FROM spark.memories m1
                                WHERE m1.tenant = ANY($1) AND m1.id = cand.id LIMIT 1) mm),
        -- keyword score: the idf of the query lexemes a candidate holds over the idf of all of them, in one join
        -- of the candidates and the lexemes (a subquery per candidate cost ~13 us each)
        kwsc AS (
            SELECT s.id, sum(lex.idf) AS idf FROM sig0 s JOIN lex ON s.tsv @@ lex.q GROUP BY s.id),
        sig AS (
            SELECT s.id, s.key, s.text, s.category, s.kind, s.system_default, s.created_at, s.content_hash,
                   s.prio_label, s.sim, coalesce(k.idf / w.lex_total, 0)::double precision AS kw, s.rec, s.outc,
                   s.prio, s.pools, s.pool_ranks, s.trig, s.trig_rules, s.trig_prio, s.trig_interrupt, s.adomain,
                   s.act, s.domain_ok, s.act_ok, s.tier
            FROM sig0 s CROSS JOIN w LEFT JOIN kwsc k ON k.id = s.id),
        fused AS (
            SELECT ranked.*,
                   CASE WHEN w.fusion = 'rrf' THEN
                       -- Reciprocal Rank Fusion across the pools that found the item, per-pool weights,
                       -- normalised so an item ranked first by every kind of pool scores 1
                       coalesce((SELECT sum(spark._pool_weight($5, e.key) / (w.rk + e.value::double precision))
                                 FROM jsonb_each_text(ranked.pool_ranks) e)
                                / nullif((spark._pool_weight($5, 'semantic') + spark._pool_weight($5, 'keyword_old')
                                          + spark._pool_weight($5, 'recent') + spark._pool_weight($5, 'pinned'))
                                         / (w.rk + 1), 0), 0)
                   ELSE w.ws * coalesce(ranked.sim, 0) + w.wk * ranked.kw + w.wr * ranked.rec + w.wo * ranked.outc
                        + w.wt * ranked.trig
                   END * (1 + ranked.prio)
                   -- the cold-start pack yields as the tenant's own memories grow
                   * CASE WHEN ranked.system_default THEN w.pack ELSE 1 END
                   AS score,
                   -- any matching rule, a rule of confidence 0 too (it still raises the priority)
                   CASE WHEN ranked.trig_rules IS NOT NULL THEN 'trigger'
                        -- a pin is evidence on the weighted scale only, where min_fusion_score still judges
                        -- it; RRF scores ranks, so a pin and any semantic rank passed every query, nonsense too
                        WHEN 'pinned' = ANY(ranked.pools) AND w.fusion <> 'rrf' THEN 'pinned'
                        WHEN ranked.kw > 0 THEN 'keyword match'
                        WHEN ranked.sim >= $9 THEN 'similarity' END AS passed_by
            FROM sig AS ranked, w),
        gated AS (
            SELECT fused.*,
                   CASE WHEN fused.passed_by IS NULL THEN
                            format('dropped: gate min_similarity (similarity %s < %s, no keyword match)',
                                   coalesce(round(fused.sim::numeric, 3)::text, 'none'), round($9::numeric, 3))
                        WHEN NOT fused.act_ok THEN
                            format('dropped: not actionable (actionability %s < %s)',
                                   round(fused.act::numeric, 3),
                                   $5 ->> 'min_actionability')
                        WHEN fused.score < $10 THEN
                            format('dropped: gate min_fusion_score (%s < %s)', round(fused.score::numeric, 4),
                                   round($10::numeric, 3)) END AS gate_status
            FROM fused),
        -- the action-domain filter, relaxed when it would leave fewer than domain_min
        -- (carries what live needs: a join of gated and dom there ran as a nested loop, ~2 ms at 70 candidates)
        dom AS (
            SELECT gated.id, gated.score, gated.tier, gated.trig_rules IS NOT NULL AS matched, gated.gate_status,
                   CASE WHEN gated.gate_status IS NULL AND NOT gated.domain_ok
                             AND count(*) FILTER (WHERE gated.gate_status IS NULL AND gated.domain_ok)
                                     OVER () >= (SELECT w.domain_min FROM w) THEN
                            format('dropped: action domain %s is not one of %s', gated.adomain, $5 -> 'domains')
                   END AS dom_status
            FROM gated),
        live AS (
            SELECT dom.id, dom.score, dom.tier, dom.matched
            FROM dom
            WHERE dom.gate_status IS NULL AND dom.dom_status IS NULL),
        -- the archive tier is searched only when the other tiers yield fewer than k items that pass the
        -- gates, the domain filter and the adaptive cutoff (weak active results are "too little")
        arch AS (
            SELECT live.id
            FROM live
            WHERE live.tier = 'archive' AND NOT live.matched
              AND (SELECT count(*) FROM live a
                   WHERE a.tier <> 'archive'
                     AND a.score >= $11 * (SELECT max(b.score) FROM live b WHERE b.tier <> 'archive'))
                  >= ($5 ->> '_k')::integer),
        -- the adaptive cutoff is relative to the best item still in the running
        best AS (
            SELECT max(live.score) AS score FROM live WHERE live.id NOT IN (SELECT arch.id FROM arch))
        -- id and score first: the sort's tie-breaks (score, id) then read them at fixed offsets, not by walking
        -- the wide text columns (-2% of a call's instructions at the default pools, callgrind)
        SELECT gated.id, gated.score, gated.key, gated.text, gated.category, gated.kind, gated.system_default,
               gated.created_at, gated.content_hash, gated.prio_label, gated.sim, gated.kw, gated.rec,
               gated.outc, gated.prio, gated.pools, gated.pool_ranks, gated.trig, gated.trig_rules, gated.trig_prio,
               gated.trig_interrupt, gated.adomain, gated.act, gated.domain_ok, gated.act_ok, gated.tier,
               gated.passed_by, gated.gate_status,
               CASE WHEN gated.gate_status IS NOT NULL THEN gated.gate_status
                    WHEN dom.dom_status IS NOT NULL THEN dom.dom_status
                    WHEN gated.id IN (SELECT arch.id FROM arch) THEN
                        'dropped: archive tier (the active tiers yielded enough)'
                    -- a tenant's own memory a trigger surfaces as critical, or to interrupt, is never cut
                    -- for being weaker than the best: the rule exists to say it whatever the similarity
                    -- (the pack's memories still yield, by design, to a tenant's own)
                    WHEN gated.score < $11 * best.score
                         AND NOT (gated.trig_rules IS NOT NULL
                                  AND ((NOT gated.system_default AND gated.prio >= 0.3)
                                       OR (gated.trig_interrupt IS NOT NULL
                                           AND (NOT gated.system_default OR ($5 ->> 'keep_interrupts')::boolean)))) THEN
                        format('dropped: adaptive cutoff (%s < %s x best %s)', round(gated.score::numeric, 4), $11,
                               round(best.score::numeric, 4))
                    END AS pre_status
        FROM gated JOIN dom ON dom.id = gated.id, best
        ORDER BY (gated.gate_status IS NULL) DESC, gated.score DESC, gated.id;
END
$fn$;
COMMENT ON FUNCTION spark._candidates(text[], vector, timestamptz, tsquery, jsonb, text, timestamptz, text,
    double precision, double precision, double precision, tsquery[], bigint[], double precision[], smallint, text[],
    double precision[], text) IS
    'Internal: every candidate of spark.retrieve (pools merged with UNION ALL, signals, fusion, gates), '
    'survivors of the gates first, best first. A static statement, so its plan can be cached; the semantic '
    'pool (which needs the model''s partial HNSW index) is computed by the caller and passed as sem_ids. '
    'tenants: the caller''s tenant, then the pack''s when it joins; qvec: the query vector (NULL: lexical); '
    'as_of: the time the call is answered at; tsq: the question as an OR tsquery; p: the merged params '
    '(spark._retrieve_params plus _k and _pack_factor); own: the caller''s tenant; cutoff: where recent '
    'memories start (as_of - recent_days); query_text: the question; min_sim, min_fuse, ratio: the gates '
    'after the precision mode; lexq, lexkeys, lexdf: spark._keyword_plan''s lexemes, index keys and skipped '
    'frequencies; sem_ids, sem_dist: the semantic pool (ids and cosine distances, aligned); model_id: the '
    'active model; trigger_text: what trigger rules match (spark._trigger_text).';

CREATE OR REPLACE FUNCTION spark._retrieve_core(
    tenant text, query_text text, query_embedding vector, k integer, params jsonb, full_report boolean)
RETURNS TABLE (rank integer, status text, memory_id bigint, key text, text text, category text, kind text,
               system_default boolean, created_at timestamptz, score real, semantic_sim real, keyword_score real,
               recency real, outcome real, trigger_conf real, priority real, pools text[], why jsonb)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
SET hnsw.iterative_scan = 'relaxed_order'
SET plan_cache_mode = 'force_generic_plan'
AS $fn$
#variable_conflict use_variable
-- generic plans for every statement here and in the functions it calls: under the default plan_cache_mode some
-- (spark._keyword_plan's, ~0.2 ms) were planned anew on every call, their generic cost estimate never winning
DECLARE
    p jsonb;
    at timestamptz;
    cutoff timestamptz;
    mdl spark.embedding_models;
    qvec vector;
    qsource text := 'none';
    tsq tsquery;
    tenants text[];
    old_ef text;
    mode text;
    min_sim double precision;
    min_fuse double precision;
    ratio double precision;
    lam double precision;
    dup double precision;
    week_cap integer;
    cat_cap integer;
    m_max integer;
    n integer := 0;
    -- every candidate (index i)
    ids bigint[] := '{}'; keys text[] := '{}'; texts text[] := '{}'; cats_all text[] := '{}';
    kinds text[] := '{}'; sysd boolean[] := '{}'; created timestamptz[] := '{}'; scores_all double precision[] := '{}';
    sims double precision[] := '{}'; kws double precision[] := '{}'; recs double precision[] := '{}';
    outs double precision[] := '{}'; prios double precision[] := '{}'; prio_labels text[] := '{}';
    poolz text[] := '{}'; pool_ranks jsonb[] := '{}'; passed text[] := '{}';
    pre text[] := '{}'; trigs double precision[] := '{}'; t_rules text[] := '{}'; t_prio text[] := '{}';
    t_int double precision[] := '{}'; adomains text[] := '{}'; acts real[] := '{}';
    -- survivors of the gates, best first (index s into these arrays; rows_all index in surv)
    surv integer[] := '{}';
    ns integer := 0;
    embs vector[] := '{}';
    hashes bytea[] := '{}';
    scores double precision[] := '{}';
    weeks text[] := '{}';
    cats text[] := '{}';
    sstatus text[] := '{}';
    srank integer[] := '{}';
    maxsim double precision[] := '{}';
    penalty double precision[] := '{}';
    supp jsonb[] := '{}';
    prio_order constant text[] := ARRAY['background', 'normal', 'high', 'critical'];
    simm double precision[];
    i integer; j integer; pass integer;
    chosen integer := 0; pick integer; val double precision; pick_val double precision; s double precision;
    week_counts jsonb := '{}'; cat_counts jsonb := '{}';
    anchors integer[]; a integer;
    st text;
    r integer;
    held integer;
    held_val double precision;
    cap_yield double precision;
    kplan record;
    skipped_note jsonb := '{}';
    fitted jsonb;
    fitted_note jsonb := '{}';
    backlog bigint;
    mode_note jsonb;
    sem_ids bigint[];
    sem_dist double precision[];
    spool record;
    sem_scan jsonb := '"none"';
    restate_sim double precision;
    restate_margin double precision;
    why_extra jsonb;
BEGIN
    PERFORM spark._check_tenant(tenant);
    PERFORM spark._check_query_text(query_text);
    IF spark._blank(query_text) AND query_embedding IS NULL THEN  -- blank: white space or nothing
        RAISE EXCEPTION 'query_text must not be empty when query_embedding is NULL'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM spark._check_k(k);
    p := spark._retrieve_params(params);
    IF (p ->> 'fitted_weights')::boolean AND p ->> 'fusion' = 'weighted' THEN
        -- the tenant's fitted fusion weights, when they beat the defaults on held-out outcomes (in_use);
        -- weights given in params still win
        -- only the weighted fusion's weights, only numbers in their range (spark._fitted_weights): a row
        -- written by hand cannot change anything else or break the call
        SELECT spark._fitted_weights(fw.weights) || jsonb_build_object('_samples', fw.samples) INTO fitted
        FROM spark.fusion_weights fw WHERE fw.tenant = _retrieve_core.tenant AND fw.in_use;
        IF fitted IS NOT NULL THEN
            fitted := fitted - ARRAY(SELECT jsonb_object_keys(coalesce(params, '{}')));
            p := p || (fitted - '_samples');
            fitted_note := jsonb_build_object('fitted_weights', fitted);
        END IF;
    END IF;
    at := coalesce((p ->> 'as_of')::timestamptz, now());
    cutoff := at - make_interval(secs => (p ->> 'recent_days')::double precision * 86400);
    mdl := spark.active_model();
    IF query_embedding IS NOT NULL THEN
        IF mdl.id IS NULL THEN
            PERFORM spark._check_nonzero_vector(query_embedding);  -- ignored, but never a valid query
            qsource := 'ignored: no embedding model registered yet';
        ELSIF p ->> 'query_model' IS NOT NULL AND p ->> 'query_model' <> mdl.name THEN
            PERFORM spark._check_nonzero_vector(query_embedding);
            -- never compare vectors of two models (a client still on the old model during a switch)
            qsource := format('ignored: the query was embedded by %s, the active model is %s: lexical mode',
                              p ->> 'query_model', mdl.name);
        ELSE
            qvec := spark._query_vector(query_embedding, mdl.dim, mdl.name);
            qsource := 'argument';
        END IF;
    ELSIF (p ->> 'use_cache')::boolean AND mdl.id IS NOT NULL THEN
        SELECT e.embedding INTO qvec FROM spark.query_embeddings e
        WHERE e.tenant = _retrieve_core.tenant AND e.model_id = mdl.id
          AND e.query_hash = sha256(convert_to(query_text, 'UTF8'));
        qsource := CASE WHEN qvec IS NULL THEN 'none (not in the query cache): lexical mode' ELSE 'cache' END;
    ELSE
        qsource := 'none: lexical mode';
    END IF;
    -- degrade mode: with more of the tenant's memories awaiting a vector than backlog_watermark, a
    -- semantic pool would see only part of the tenant: retrieval runs lexically and says so
    IF qvec IS NOT NULL AND (p ->> 'backlog_watermark')::integer > 0 THEN
        SELECT count(*) INTO backlog FROM (
            SELECT 1 FROM spark.embed_queue q WHERE q.tenant = _retrieve_core.tenant
            LIMIT (p ->> 'backlog_watermark')::integer + 1) x;
        IF backlog > (p ->> 'backlog_watermark')::integer THEN
            qvec := NULL;
            qsource := format('ignored: more than %s memories await embedding (backlog_watermark): lexical mode',
                              p ->> 'backlog_watermark');
        END IF;
    END IF;
    mode_note := jsonb_build_object('mode', CASE WHEN qvec IS NULL THEN 'lexical' ELSE 'hybrid' END);

    mode := p ->> 'precision_mode';
    min_sim := (p ->> 'min_similarity')::double precision;
    min_fuse := (p ->> 'min_fusion_score')::double precision;
    ratio := (p ->> 'adaptive_ratio')::double precision;
    IF mode = 'high_recall' THEN
        min_sim := min_sim - 0.05; min_fuse := greatest(0, min_fuse - 0.05); ratio := 0;
    ELSIF mode = 'high_precision' THEN
        min_sim := min_sim + 0.1; min_fuse := min_fuse + 0.1; ratio := greatest(ratio, 0.6);
    END IF;
    lam := (p ->> 'mmr_lambda')::double precision;
    dup := (p ->> 'dup_similarity')::double precision;
    week_cap := (p ->> 'week_cap')::integer;
    cat_cap := (p ->> 'category_cap')::integer;
    cap_yield := (p ->> 'cap_yield')::double precision;
    restate_sim := (p ->> 'restate_similarity')::double precision;
    restate_margin := (p ->> 'restate_margin')::double precision;
    m_max := greatest(3 * k, 20);

    tsq := spark._or_tsquery(query_text);
    -- the cold-start pack joins the pools when asked for and not empty: it holds memories, or trigger rules
    -- (which may surface the tenant's own memories); an empty pack costs ~0.4 ms a call
    tenants := CASE WHEN (p ->> 'include_system')::boolean AND tenant <> spark.system_tenant()
                         AND (EXISTS (SELECT 1 FROM spark.memories m WHERE m.tenant = spark.system_tenant())
                              OR EXISTS (SELECT 1 FROM spark.trigger_rules r
                                         WHERE r.tenant = spark.system_tenant() AND NOT r.shadow))
                    THEN ARRAY[tenant, spark.system_tenant()] ELSE ARRAY[tenant] END;
    IF cardinality(tenants) > 1 THEN
        -- pack_yield own memories halve the pack's scores (counted at the last statistics refresh, or now;
        -- a count stops at 20 x pack_yield, where the pack is down to 1/21 of its score anyway)
        p := p || jsonb_build_object('_pack_factor', 1.0 / (1.0 + coalesce(
            (SELECT s.memories FROM spark.tenant_stats s WHERE s.tenant = _retrieve_core.tenant),
            (SELECT count(*) FROM (SELECT 1 FROM spark.memories m WHERE m.tenant = _retrieve_core.tenant
                                   LIMIT ceil(20 * (p ->> 'pack_yield')::double precision)::bigint) x)
            )::double precision / (p ->> 'pack_yield')::double precision));
    ELSE
        p := p || '{"_pack_factor": 1}';
    END IF;
    p := p || jsonb_build_object('_k', k);
    old_ef := current_setting('hnsw.ef_search', true);
    PERFORM set_config('hnsw.ef_search', p ->> 'ef_search', true);
    IF qvec IS NOT NULL THEN
        SELECT * INTO spool FROM spark._semantic_pool(tenants, qvec, at, (p ->> 'pool_semantic')::integer,
                                                     (p ->> 'exact_scan_max')::integer, mdl.id, mdl.dim);
        sem_ids := spool.ids; sem_dist := spool.dists; sem_scan := spool.scans;
    END IF;
    PERFORM set_config('hnsw.ef_search', coalesce(old_ef, '40'), true);

    SELECT * INTO kplan FROM spark._keyword_plan(tenants, query_text, (p ->> 'keyword_match_budget')::integer);
    IF cardinality(kplan.skipped) > 0 THEN
        -- a lexeme too common to match on: it still counts in every candidate's keyword score
        skipped_note := jsonb_build_object('keyword_skipped', to_jsonb(kplan.skipped));
    END IF;
    -- every candidate into arrays in one statement (a row-by-row loop costs ~1 ms more); the survivors of the
    -- gates, best first, capped at m_max, also get their hashes and weeks. The arrays line up row for row, and
    -- position i is ordinality i, because one aggregate step reads the function's rows in order: keep this
    -- statement a plain scan of the function (a join or GROUP BY here could reorder the rows)
    SELECT count(*)::integer,
           coalesce(array_agg(c.id), '{}'), coalesce(array_agg(c.key), '{}'),
           coalesce(array_agg(c.text), '{}'), coalesce(array_agg(c.category), '{}'),
           coalesce(array_agg(c.kind), '{}'),
           coalesce(array_agg(c.system_default), '{}'),
           coalesce(array_agg(c.created_at), '{}'), coalesce(array_agg(c.score), '{}'),
           coalesce(array_agg(c.sim), '{}'), coalesce(array_agg(c.kw), '{}'),
           coalesce(array_agg(c.rec), '{}'), coalesce(array_agg(c.outc), '{}'),
           coalesce(array_agg(c.prio), '{}'), coalesce(array_agg(c.prio_label), '{}'),
           coalesce(array_agg(array_to_string(c.pools, ',')), '{}'),
           coalesce(array_agg(c.pool_ranks), '{}'),
           coalesce(array_agg(c.passed_by), '{}'), coalesce(array_agg(c.pre_status), '{}'),
           coalesce(array_agg(c.trig), '{}'),
           coalesce(array_agg(array_to_string(c.trig_rules, ',')), '{}'),
           coalesce(array_agg(c.trig_prio), '{}'), coalesce(array_agg(c.trig_interrupt), '{}'),
           coalesce(array_agg(c.adomain), '{}'), coalesce(array_agg(c.act), '{}'),
           coalesce(array_agg(c.ordinality::integer) FILTER (WHERE c.pre_status IS NULL), '{}'),
           coalesce(array_agg(c.content_hash) FILTER (WHERE c.pre_status IS NULL), '{}'),
           coalesce(array_agg(to_char(c.created_at, 'IYYY-"W"IW')) FILTER (WHERE c.pre_status IS NULL), '{}')
    INTO n, ids, keys, texts, cats_all, kinds, sysd, created, scores_all, sims, kws, recs, outs, prios, prio_labels,
         poolz, pool_ranks, passed, pre, trigs, t_rules, t_prio, t_int, adomains, acts, surv, hashes, weeks
    FROM spark._candidates(tenants, qvec, at, tsq, p, tenant, cutoff, query_text, min_sim, min_fuse,
                           ratio, kplan.lexq, coalesce(sem_ids, '{}'), coalesce(sem_dist, '{}'),
                           mdl.id, kplan.lexkeys, kplan.lexdf,
                           spark._trigger_text(p, query_text)) WITH ORDINALITY c;
    ns := least(cardinality(surv), m_max);
    surv := surv[1:ns]; hashes := hashes[1:ns]; weeks := weeks[1:ns];
    -- the vectors of the survivors kept (NULL where a memory has none)
    -- with their scores and categories, in one statement
    SELECT coalesce(array_agg((SELECT ev.embedding FROM spark.embeddings ev
                               WHERE ev.tenant = CASE WHEN sysd[surv[x]] THEN spark.system_tenant() ELSE tenant END
                                 AND ev.memory_id = ids[surv[x]] AND ev.model_id = mdl.id) ORDER BY x), '{}'),
           coalesce(array_agg(scores_all[surv[x]] ORDER BY x), '{}'),
           coalesce(array_agg(cats_all[surv[x]] ORDER BY x), '{}')
    INTO embs, scores, cats
    FROM generate_series(1, ns) x;
    sstatus := array_fill(NULL::text, ARRAY[ns]);
    maxsim := array_fill(0::double precision, ARRAY[ns]);
    penalty := array_fill(0::double precision, ARRAY[ns]);
    supp := array_fill('[]'::jsonb, ARRAY[ns]);

    IF ns > 0 THEN
        -- pairwise similarity of the survivors in one statement (NULL where a vector is missing): the upper
        -- triangle (x < y) only, row by row, as it is symmetric
        -- (by position: a join of the unnested vectors sorted the pairs with both vectors in every row)
        SELECT array_agg(CASE WHEN embs[x] IS NOT NULL AND embs[y] IS NOT NULL THEN 1 - (embs[x] <=> embs[y]) END
                         ORDER BY x, y)
        INTO simm
        FROM generate_series(1, ns) x, generate_series(x + 1, ns) y;
    END IF;

    -- selection: MMR, week and category caps first, then fill; near-duplicate clusters dropped
    WHILE chosen < k LOOP
        pick := NULL;
        -- the best by MMR among items whose week and category are under their caps (pick), and among
        -- the capped ones (held); a cap yields only to a clearly better item (cap_yield) or when nothing is left
        pick_val := NULL; held := NULL; held_val := NULL;
        FOR i IN 1..ns LOOP
            CONTINUE WHEN sstatus[i] IS NOT NULL;
            val := lam * scores[i] - (1 - lam) * maxsim[i];
            IF (week_cap > 0 AND coalesce((week_counts ->> weeks[i])::integer, 0) >= week_cap)
               OR (cat_cap > 0 AND coalesce((cat_counts ->> cats[i])::integer, 0) >= cat_cap) THEN
                IF held_val IS NULL OR val > held_val THEN
                    held := i; held_val := val;
                END IF;
            ELSIF pick_val IS NULL OR val > pick_val THEN
                pick := i; pick_val := val;
            END IF;
        END LOOP;
        IF held IS NOT NULL AND (pick IS NULL OR scores[pick] < cap_yield * scores[held]) THEN
            pick := held;
        END IF;
        EXIT WHEN pick IS NULL;
        chosen := chosen + 1;
        srank[pick] := chosen;
        sstatus[pick] := 'surfaced';
        penalty[pick] := (1 - lam) * maxsim[pick];
        week_counts := week_counts || jsonb_build_object(weeks[pick], coalesce((week_counts ->> weeks[pick])::integer, 0) + 1);
        cat_counts := cat_counts || jsonb_build_object(cats[pick], coalesce((cat_counts ->> cats[pick])::integer, 0) + 1);
        anchors := ARRAY[pick];
        WHILE cardinality(anchors) > 0 LOOP
            a := anchors[1];
            anchors := anchors[2:];
            FOR j IN 1..ns LOOP
                CONTINUE WHEN sstatus[j] IS NOT NULL;
                -- the pair (least, greatest) in the upper triangle (j is never a: a has a status)
                s := coalesce(simm[CASE WHEN a < j THEN (a - 1) * ns - (a - 1) * a / 2 + j - a
                                        ELSE (j - 1) * ns - (j - 1) * j / 2 + a - j END],
                              CASE WHEN hashes[j] = hashes[a] THEN 1 ELSE 0 END);
                IF a = pick THEN
                    maxsim[j] := greatest(maxsim[j], s);
                END IF;
                IF s >= dup THEN
                    sstatus[j] := format('dropped: near-duplicate of %s (similarity %s to %s)',
                                         keys[surv[pick]], round(s::numeric, 3), keys[surv[a]]);
                    supp[pick] := supp[pick] || to_jsonb(keys[surv[j]]);
                    anchors := anchors || j;
                ELSIF s >= restate_sim AND s >= coalesce(sims[surv[j]], 1) + restate_margin THEN
                    -- far closer to something already surfaced than to the query: it restates, not answers
                    sstatus[j] := format('dropped: restates %s (similarity %s to %s, %s to the query)',
                                         keys[surv[pick]], round(s::numeric, 3), keys[surv[a]],
                                         round(sims[surv[j]]::numeric, 3));
                    supp[pick] := supp[pick] || to_jsonb(keys[surv[j]]);
                    anchors := anchors || j;
                END IF;
            END LOOP;
        END LOOP;
    END LOOP;

    -- output: the surfaced rows in rank order, then (for spark.explain) every other candidate; the why keys
    -- that are the same for every row built once
    why_extra := jsonb_build_object('semantic_scan', sem_scan) || skipped_note || fitted_note || mode_note;
    FOR r IN 1..chosen LOOP
        j := array_position(srank, r);
        i := surv[j];
        rank := r;
        status := 'surfaced';
        memory_id := ids[i]; key := keys[i]; text := texts[i]; category := cats_all[i]; kind := kinds[i];
        system_default := sysd[i]; created_at := created[i]; score := scores_all[i]; semantic_sim := sims[i];
        keyword_score := kws[i]; recency := recs[i]; outcome := outs[i]; trigger_conf := trigs[i];
        priority := prios[i]; pools := string_to_array(poolz[i], ',');
        why := spark._why(rank, status, pool_ranks[i], p ->> 'fusion', scores_all[i],
                          spark._terms(p, sims[i], kws[i], recs[i], outs[i], trigs[i], prios[i], sysd[i],
                                       pool_ranks[i])
                          || jsonb_build_object('mmr_penalty', round(penalty[j]::numeric, 4)),
                          min_sim, passed[i], min_fuse, ratio,
                          -- the priority applied: a matching rule can raise the memory's own label
                          CASE WHEN array_position(prio_order, t_prio[i]) > array_position(prio_order, prio_labels[i])
                               THEN t_prio[i] ELSE prio_labels[i] END, created[i], qsource, mode)
               || why_extra || spark._why_advice(trigs[i], t_rules[i], t_prio[i], t_int[i], adomains[i], acts[i])
               -- the near-duplicates and restatements dropped for it (spark.explain says why each one)
               || jsonb_build_object('suppressed', supp[j]);
        RETURN NEXT;
    END LOOP;
    IF NOT full_report THEN
        RETURN;
    END IF;
    j := 1;
    FOR i IN 1..n LOOP
        st := pre[i];
        IF j <= ns AND surv[j] = i THEN
            st := sstatus[j];
            j := j + 1;
            CONTINUE WHEN st = 'surfaced';
        END IF;
        rank := NULL;
        status := coalesce(st, 'not chosen: below the top k');
        memory_id := ids[i]; key := keys[i]; text := texts[i]; category := cats_all[i]; kind := kinds[i];
        system_default := sysd[i]; created_at := created[i]; score := scores_all[i]; semantic_sim := sims[i];
        keyword_score := kws[i]; recency := recs[i]; outcome := outs[i]; trigger_conf := trigs[i];
        priority := prios[i]; pools := string_to_array(poolz[i], ',');
        why := spark._why(NULL, status, pool_ranks[i], p ->> 'fusion', scores_all[i],
                          spark._terms(p, sims[i], kws[i], recs[i], outs[i], trigs[i], prios[i], sysd[i],
                                       pool_ranks[i]),
                          min_sim, passed[i], min_fuse, ratio,
                          -- the priority applied: a matching rule can raise the memory's own label
                          CASE WHEN array_position(prio_order, t_prio[i]) > array_position(prio_order, prio_labels[i])
                               THEN t_prio[i] ELSE prio_labels[i] END, created[i], qsource, mode)
               || why_extra || spark._why_advice(trigs[i], t_rules[i], t_prio[i], t_int[i], adomains[i], acts[i]);
        RETURN NEXT;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION spark._retrieve_core(text, text, vector, integer, jsonb, boolean) IS
    'Internal: the body of spark.retrieve (full_report false: surfaced rows only) and spark.explain (true: '
    'every candidate, with the status that dropped it). tenant, query_text, query_embedding, k, params: as '
    'spark.retrieve, and checked the same way (errors: those of spark.retrieve).';

-- a version whose result columns or parameter names differ is dropped (as spark._candidates above)
SELECT spark._drop_if_reshaped(
    'spark.explain(text, text, vector, integer, jsonb)',
    'tenant text, query_text text, query_embedding vector, k integer, '
    'params jsonb',
    'TABLE(rank integer, status text, memory_id bigint, key text, text text, '
    'category text, kind text, system_default boolean, created_at timestamp with time zone, score real, '
    'semantic_sim real, keyword_score real, recency real, outcome real, trigger_conf real, priority real, '
    'pools text[], why jsonb)');
CREATE OR REPLACE FUNCTION spark.explain(
    tenant text,
    query_text text,
    query_embedding vector DEFAULT NULL,
    k integer DEFAULT 8,
    params jsonb DEFAULT '{}')
RETURNS TABLE (rank integer, status text, memory_id bigint, key text, text text, category text, kind text,
               system_default boolean, created_at timestamptz, score real, semantic_sim real, keyword_score real,
               recency real, outcome real, trigger_conf real, priority real, pools text[], why jsonb)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
    SELECT * FROM spark._retrieve_core($1, $2, $3, $4, $5, true)
$fn$;
COMMENT ON FUNCTION spark.explain(text, text, vector, integer, jsonb) IS
    'Every candidate spark.retrieve considered, with its signals, fused score, gates and status (surfaced, or '
    'why it was dropped). Same parameters as spark.retrieve (tenant, query_text, query_embedding: the query''s '
    'vector of the active model or NULL for lexical retrieval, k, params); surfaced rows come first, in rank order, with '
    'rank set (NULL for the rest). Errors: those of spark.retrieve (22004 NULL tenant/query_text/k; 22023 '
    'empty or over-long tenant, bad k/params, empty query, query_text over 10,000 characters, zero vector; '
    '22000 wrong embedding dimension).';

-- a version whose result columns or parameter names differ is dropped (as spark._candidates above)
SELECT spark._drop_if_reshaped(
    'spark.retrieve(text, text, vector, integer, jsonb)',
    'tenant text, query_text text, query_embedding vector, k integer, '
    'params jsonb',
    'TABLE(memory_id bigint, key text, text text, category text, kind text, '
    'system_default boolean, created_at timestamp with time zone, score real, semantic_sim real, '
    'keyword_score real, recency real, outcome real, trigger_conf real, priority real, pools text[], '
    'why jsonb)');
CREATE OR REPLACE FUNCTION spark.retrieve(
    tenant text,
    query_text text,
    query_embedding vector DEFAULT NULL,
    k integer DEFAULT 8,
    params jsonb DEFAULT '{}')
RETURNS TABLE (memory_id bigint, key text, text text, category text, kind text, system_default boolean,
               created_at timestamptz, score real, semantic_sim real, keyword_score real, recency real,
               outcome real, trigger_conf real, priority real, pools text[], why jsonb)
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
    SELECT e.memory_id, e.key, e.text, e.category, e.kind, e.system_default, e.created_at, e.score,
           e.semantic_sim, e.keyword_score, e.recency, e.outcome, e.trigger_conf, e.priority, e.pools, e.why
    FROM spark._retrieve_core($1, $2, $3, $4, $5, false) e
$fn$;
COMMENT ON FUNCTION spark.retrieve(text, text, vector, integer, jsonb) IS
    'Hybrid retrieval in one call. tenant: whose memories (plus the cold-start pack unless '
    'params.include_system = false); query_text: the question (its OR-keyword query, and the key of the '
    'query-embedding cache); query_embedding: its vector from the active model, or NULL for lexical mode '
    '(or a cached vector); k: 1-1000 results; params: overrides of spark.retrieve_defaults() (as_of, fusion, '
    'pool sizes, weights, gates, precision_mode, diversity). Returns surfaced memories in order with score, '
    'separate signals, pools and why. Errors: 22004 NULL tenant/query_text/k; 22023 empty or over-long '
    'tenant, bad k/params, empty query, query_text over 10,000 characters, zero vector; 22000 wrong embedding '
    'dimension.';
