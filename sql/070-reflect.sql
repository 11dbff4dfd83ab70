-- Reflection: "have I faced this before?" Similar past traces (with their outcome) and learnings among one
-- tenant's memories of kind trace and learning (written by spark_pg.traces), and the advisor's call with
-- past-failure warnings. See docs/traces.md.

CREATE OR REPLACE FUNCTION spark.reflect_defaults()
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
SELECT jsonb_build_object(
    'min_score', 0.25,             -- the gate: score = relevance x recency factor must reach this
    'half_life_days', 90,          -- recency halves every N days (age: as_of - created_at) ...
    'recency_floor', 0.5,          -- ... and the score is relevance x (floor + (1 - floor) x recency)
    'kinds', jsonb_build_array('trace', 'learning'),  -- kinds matched by similarity (linked learnings follow anyway)
    'outcome', NULL,               -- success | failure: only traces with this outcome (learnings unaffected)
    'linked_per_trace', 3,         -- learnings linked to a returned trace (its metadata.learning_keys) that follow it
    'pool', 50,                    -- nearest vectors, and best lexical matches, considered before the gate
    'lexical_min_words', 1,        -- a match on words alone (no similarity) holds at least this many of the
                                   -- query's words (spark.advise_with_warnings: at least 2)
    'exact_scan_max', 7000,        -- tenants with up to this many vectors are scanned exactly; larger ones by
                                   -- a query ordered by distance, which the planner may serve from the HNSW index
    'as_of', NULL,                 -- evaluate as if now were this time (ISO 8601); NULL = now()
    'query_model', NULL            -- the model that embedded query_embedding; another than the active one:
                                   -- the embedding is ignored (lexical fallback), never compared
)
$fn$;
COMMENT ON FUNCTION spark.reflect_defaults() IS
    'Default params of spark.reflect, one key per tuneable; any key may be overridden in its params argument.';

-- name: the argument the object was given as (reflect_params in spark.advise_with_warnings)
DROP FUNCTION IF EXISTS spark._reflect_params(jsonb);
CREATE OR REPLACE FUNCTION spark._reflect_params(params jsonb, name text DEFAULT 'params')
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
DECLARE
    defaults jsonb := spark.reflect_defaults();
    item record;
    ranges constant jsonb := '{
        "min_score": [0, 1, 0], "half_life_days": [0.001, 36500, 0], "recency_floor": [0, 1, 0],
        "linked_per_trace": [0, 20, 1], "pool": [1, 1000, 1], "exact_scan_max": [0, 10000000, 1],
        "lexical_min_words": [1, 100, 1]}';
BEGIN
    IF params IS NULL THEN
        RETURN defaults;
    END IF;
    IF jsonb_typeof(params) <> 'object' THEN
        RAISE EXCEPTION '% must be a JSON object, got %', name, jsonb_typeof(params)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR item IN SELECT e.key, e.value FROM jsonb_each(params) e LOOP
        IF spark._check_param(item.key, item.value, defaults, ranges, name) THEN
            CONTINUE;  -- a number in its range
        ELSIF item.key = 'kinds' THEN
            IF jsonb_typeof(item.value) <> 'array' OR jsonb_array_length(item.value) = 0
               OR EXISTS (SELECT 1 FROM jsonb_array_elements(item.value) d
                          WHERE d NOT IN ('"trace"', '"learning"'))
               OR (SELECT count(DISTINCT d) FROM jsonb_array_elements(item.value) d)
                  <> jsonb_array_length(item.value) THEN
                RAISE EXCEPTION '%.kinds must be a non-empty array of distinct "trace" and "learning", got %',
                    name, item.value USING ERRCODE = 'invalid_parameter_value';
            END IF;
        ELSIF item.key = 'outcome' THEN
            IF item.value NOT IN ('null', '"success"', '"failure"') THEN
                RAISE EXCEPTION '%.outcome must be null, "success" or "failure", got %', name, item.value
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        ELSIF item.key = 'query_model' THEN
            -- a model name is 1 to 200 characters (spark.register_model)
            IF jsonb_typeof(item.value) NOT IN ('string', 'null') OR length(item.value #>> '{}') > 200 THEN
                RAISE EXCEPTION '%.query_model must be a model name (up to 200 characters) or null, got %', name,
                    left(item.value::text, 210) USING ERRCODE = 'invalid_parameter_value';
            END IF;
        END IF;
    END LOOP;
    RETURN defaults || params;
END
$fn$;
COMMENT ON FUNCTION spark._reflect_params(jsonb, text) IS
    'Internal: validate spark.reflect params, given as argument name (params by default; 22023 naming the '
    'argument and key for an unknown key or a bad value) and merge them over spark.reflect_defaults(). NULL '
    'means the defaults.';

CREATE OR REPLACE FUNCTION spark._reflect_stop_lexemes()
RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
    -- the descriptor's own labels and outcome words: every trace has them, so they say nothing in a query
    SELECT array_agg(l ORDER BY l)
    FROM unnest(tsvector_to_array(to_tsvector('english', 'Intent Files Outcome Key issue Tags success failure'))) l
$fn$;
COMMENT ON FUNCTION spark._reflect_stop_lexemes() IS
    'Internal: lexemes of the trace descriptor''s labels and outcomes (intent, file, outcom, key, issu, tag, '
    'success, failur), left out of reflection''s lexical match.';

-- CREATE OR REPLACE cannot change a function's result columns or parameter names: drop a version whose differ
-- from these (the current version is replaced in place and keeps its grants and the views that use it)
SELECT spark._drop_if_reshaped(
    'spark.reflect(text, text, vector, integer, jsonb)',
    'tenant text, query_text text, query_embedding vector, k integer, '
    'params jsonb',
    'TABLE(rank integer, memory_id bigint, key text, kind text, text text, '
    'category text, outcome text, score real, similarity real, keyword_score real, recency real, '
    'age_days real, created_at timestamp with time zone, linked_to text, metadata jsonb, why jsonb)');
CREATE OR REPLACE FUNCTION spark.reflect(
    tenant text,
    query_text text,
    query_embedding vector DEFAULT NULL,
    k integer DEFAULT 5,
    params jsonb DEFAULT '{}')
RETURNS TABLE (rank integer, memory_id bigint, key text, kind text, text text, category text, outcome text,
               score real, similarity real, keyword_score real, recency real, age_days real,
               created_at timestamptz, linked_to text, metadata jsonb, why jsonb)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, @vector_schema@, pg_temp
SET hnsw.iterative_scan = 'relaxed_order'
AS $fn$
#variable_conflict use_variable
DECLARE
    max_k constant integer := 100;
    -- a match on words alone is scored matched / (query words + word_pad): the share of the query's words,
    -- counting word_pad more that did not match, which puts it on the cosine scale (docs/traces.md: on
    -- measured pairs it is nearer the cosine than the share is, and one word is at most 1/3)
    word_pad constant double precision := 2;
    p jsonb;
    at timestamptz;
    mdl spark.embedding_models;
    qvec vector;
    qsource text;
    kinds text[];
    want text;
    min_score double precision;
    hl double precision;
    rf double precision;
    pool integer;
    linked_n integer;
    lex_min integer;
    nq integer;
    scan_max integer;
    nvec bigint;
    scan text := 'none';
    sem_ids bigint[] := '{}';
    sem_dist double precision[] := '{}';
    qlex text[];
    lexkeys text[];
BEGIN
    PERFORM spark._check_tenant(tenant);
    PERFORM spark._check_query_text(query_text);
    IF k IS NULL THEN
        RAISE EXCEPTION 'k must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF k < 0 THEN
        RAISE EXCEPTION 'k must be 0 or more, got %', k USING ERRCODE = 'invalid_parameter_value';
    END IF;
    p := spark._reflect_params(params);
    mdl := spark.active_model();
    IF query_embedding IS NOT NULL THEN
        IF mdl.id IS NULL THEN
            PERFORM spark._check_nonzero_vector(query_embedding);  -- ignored, but never a valid query
            qsource := 'ignored: no embedding model registered yet (lexical fallback over the descriptors)';
        ELSIF p ->> 'query_model' IS NOT NULL AND p ->> 'query_model' <> mdl.name THEN
            PERFORM spark._check_nonzero_vector(query_embedding);
            -- never compare vectors of two models (a client still on the old model during a switch), as
            -- spark.retrieve: the vector is ignored, whatever its dimension
            qsource := format('ignored: the query was embedded by %s, the active model is %s '
                              '(lexical fallback over the descriptors)', p ->> 'query_model', mdl.name);
        ELSE
            qvec := spark._query_vector(query_embedding, mdl.dim, mdl.name);
            qsource := 'argument';
        END IF;
    ELSE
        qsource := 'none: lexical fallback over the descriptors';
    END IF;
    IF qvec IS NULL AND spark._blank(query_text) THEN  -- blank: white space or nothing
        IF query_embedding IS NULL THEN
            RAISE EXCEPTION 'query_text must not be empty when query_embedding is NULL'
                USING ERRCODE = 'invalid_parameter_value';
        ELSIF mdl.id IS NULL THEN
            RAISE EXCEPTION 'query_text must not be empty: query_embedding is ignored while no embedding model '
                            'is registered' USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RAISE EXCEPTION 'query_text must not be empty: query_embedding is ignored, it was embedded by % and the '
                        'active model is %', p ->> 'query_model', mdl.name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF k = 0 THEN
        RETURN;
    END IF;
    k := least(k, max_k);

    at := coalesce((p ->> 'as_of')::timestamptz, now());
    kinds := ARRAY(SELECT jsonb_array_elements_text(p -> 'kinds'));
    want := p ->> 'outcome';
    min_score := (p ->> 'min_score')::double precision;
    hl := (p ->> 'half_life_days')::double precision;
    rf := (p ->> 'recency_floor')::double precision;
    pool := greatest((p ->> 'pool')::integer, k);  -- k = 80 with the default pool of 50 still gets 80
    linked_n := (p ->> 'linked_per_trace')::integer;
    lex_min := (p ->> 'lexical_min_words')::integer;
    scan_max := (p ->> 'exact_scan_max')::integer;

    IF qvec IS NOT NULL THEN
        -- the active model's vectors only: a small tenant exactly, a large one through the HNSW index
        SELECT count(*) INTO nvec FROM (
            SELECT 1 FROM spark.embeddings e WHERE e.tenant = reflect.tenant AND e.model_id = mdl.id
            LIMIT scan_max + 1) x;
        IF nvec <= scan_max THEN
            scan := 'exact';
            SELECT coalesce(array_agg(s.id ORDER BY s.dist, s.id), '{}'),
                   coalesce(array_agg(s.dist ORDER BY s.dist, s.id), '{}')
            INTO sem_ids, sem_dist
            FROM (SELECT m.id, (e.embedding <=> qvec)::double precision AS dist
                  FROM spark.memories m
                  JOIN spark.embeddings e ON e.tenant = m.tenant AND e.memory_id = m.id AND e.model_id = mdl.id
                  -- the literal kind list lets a partial index on the kinds serve this scan
                  WHERE m.tenant = reflect.tenant AND m.kind IN ('trace', 'learning') AND m.kind = ANY(kinds)
                    AND m.created_at <= at
                    AND (want IS NULL OR m.kind <> 'trace' OR m.metadata ->> 'outcome' = want)
                  ORDER BY 2, 1
                  LIMIT pool) s;
        ELSE
            -- 'hnsw' names this path, not the plan: a query ordered by distance, with dimension, model and
            -- tenant as literals so the planner can use a partial HNSW index (the iterative scan, relaxed
            -- order, re-sorted here, walks on until pool traces/learnings are found); when the tenant's
            -- traces and learnings are few the planner may instead take them by memories_reflect_idx and sort
            scan := 'hnsw';
            EXECUTE format($q$
                SELECT coalesce(array_agg(s.id ORDER BY s.dist, s.id), '{}'),
                       coalesce(array_agg(s.dist ORDER BY s.dist, s.id), '{}')
                FROM (SELECT e.memory_id AS id, (e.embedding::vector(%1$s) <=> $1::vector(%1$s))::double precision AS dist
                      FROM spark.embeddings e
                      JOIN spark.memories m ON m.tenant = e.tenant AND m.id = e.memory_id
                      WHERE e.tenant = %2$L AND e.model_id = %3$s AND e.created_at <= $2
                        AND m.kind IN ('trace', 'learning') AND m.kind = ANY($3)
                        AND ($5 IS NULL OR m.kind <> 'trace' OR m.metadata ->> 'outcome' = $5)
                      ORDER BY e.embedding::vector(%1$s) <=> $1::vector(%1$s)
                      LIMIT $4) s $q$, mdl.dim, tenant, mdl.id)
            INTO sem_ids, sem_dist
            USING qvec, at, kinds, pool, want;
        END IF;
    END IF;

    -- the lexical side: the query's words (not the descriptor's labels) through the tenant-aware lexeme index
    qlex := ARRAY(SELECT DISTINCT l FROM unnest(tsvector_to_array(to_tsvector('english', query_text))) l
                  WHERE l <> ALL(spark._reflect_stop_lexemes()) ORDER BY 1);
    lexkeys := ARRAY(SELECT length(tenant) || ':' || tenant || ':' || l FROM unnest(qlex) l);
    nq := cardinality(qlex);

    RETURN QUERY
    WITH
    sem AS (SELECT u.id, u.dist FROM unnest(sem_ids, sem_dist) AS u(id, dist)),
    -- lexical candidates: every match without a query vector; with one, only rows the active model has not
    -- embedded yet (just written, the worker behind): they are still reachable. Each holds at least lex_min
    -- of the query's words (before the pool is cut, as the outcome filter)
    lex AS (
        SELECT x.id FROM (
            SELECT mm.id,
                   cardinality(ARRAY(SELECT unnest(tsvector_to_array(mm.tsv)) INTERSECT SELECT unnest(qlex)))
                       AS hits
            FROM spark.memories mm
            WHERE cardinality(lexkeys) > 0 AND spark._tenant_lexemes(mm.tenant, mm.tsv) && lexkeys
              AND mm.tenant = reflect.tenant AND mm.kind = ANY(kinds) AND mm.created_at <= at
              AND (want IS NULL OR mm.kind <> 'trace' OR mm.metadata ->> 'outcome' = want)
              AND (qvec IS NULL OR NOT EXISTS (
                       SELECT 1 FROM spark.embeddings e
                       WHERE e.tenant = mm.tenant AND e.memory_id = mm.id AND e.model_id = mdl.id))) x
        WHERE x.hits >= lex_min
        ORDER BY x.hits DESC, x.id
        LIMIT pool),
    cand AS (
        SELECT s.id, s.dist, 'semantic'::text AS via FROM sem s
        UNION ALL
        SELECT l.id, NULL::double precision, 'lexical' FROM lex l WHERE l.id <> ALL(sem_ids)),
    scored AS (
        SELECT c.id, c.via, mm.key AS mkey, mm.kind AS mkind, mm.text AS mtext, mm.category AS mcat,
               mm.created_at AS mcreated, mm.metadata AS mmeta,
               CASE WHEN mm.kind = 'trace' AND mm.metadata ->> 'outcome' IN ('success', 'failure')
                    THEN mm.metadata ->> 'outcome' END AS mout,
               1 - c.dist AS sim,
               cardinality(ARRAY(SELECT unnest(tsvector_to_array(mm.tsv)) INTERSECT SELECT unnest(qlex))) AS hits,
               greatest(0, extract(epoch FROM (at - mm.created_at)) / 86400.0)::double precision AS age
        FROM cand c
        CROSS JOIN LATERAL (SELECT * FROM spark.memories m1 WHERE m1.tenant = reflect.tenant AND m1.id = c.id) mm),
    -- kw: the share of the query's words the text holds; a match on words alone is scored hits / (nq + word_pad)
    rel AS (
        SELECT sc.*, sc.hits::double precision / greatest(nq, 1) AS kw,
               coalesce(sc.sim, sc.hits / (nq + word_pad)) AS relevance,
               power(0.5, least(100, sc.age / hl)) AS rec
        FROM scored sc),
    -- (params.outcome is applied in the pools above, before their LIMIT: every candidate already passes it)
    final AS (
        SELECT r.*, r.relevance * (rf + (1 - rf) * r.rec) AS sc FROM rel r),
    top AS (
        SELECT f.*, row_number() OVER (ORDER BY f.sc DESC, f.id) AS rn
        FROM final f WHERE f.sc >= min_score
        ORDER BY f.sc DESC, f.id
        LIMIT k),
    -- learnings linked to each returned trace (the trace's metadata.learning_keys: one index probe per key),
    -- newest first, each once (under the best trace that names it)
    links AS (
        SELECT DISTINCT ON (lk.id) lk.id, t.rn AS parent_rn, t.mkey AS parent_key, lk.pos
        FROM top t
        CROSS JOIN LATERAL (
            SELECT lm.id, row_number() OVER (ORDER BY lm.created_at DESC, lm.id) AS pos
            FROM spark.memories lm
            WHERE lm.tenant = reflect.tenant AND lm.kind = 'learning' AND lm.created_at <= at
              AND lm.key = ANY(CASE WHEN t.mkind = 'trace' AND jsonb_typeof(t.mmeta -> 'learning_keys') = 'array'
                                    THEN ARRAY(SELECT jsonb_array_elements_text(t.mmeta -> 'learning_keys'))
                                    ELSE '{}'::text[] END)
              -- a learning returned on its own merits is not one of the trace's linked_n (before the LIMIT)
              AND lm.id NOT IN (SELECT t2.id FROM top t2)
            ORDER BY lm.created_at DESC, lm.id
            LIMIT linked_n) lk
        ORDER BY lk.id, t.rn, lk.pos),
    linked AS (
        SELECT ln.id, ln.parent_rn, ln.parent_key, ln.pos, mm.key AS mkey, mm.kind AS mkind, mm.text AS mtext,
               mm.category AS mcat, mm.created_at AS mcreated, mm.metadata AS mmeta,
               (1 - (ev.embedding <=> qvec))::double precision AS sim,
               cardinality(ARRAY(SELECT unnest(tsvector_to_array(mm.tsv)) INTERSECT SELECT unnest(qlex))) AS hits,
               greatest(0, extract(epoch FROM (at - mm.created_at)) / 86400.0)::double precision AS age
        FROM links ln
        JOIN spark.memories mm ON mm.tenant = reflect.tenant AND mm.id = ln.id
        LEFT JOIN spark.embeddings ev
          ON qvec IS NOT NULL AND ev.tenant = mm.tenant AND ev.memory_id = mm.id AND ev.model_id = mdl.id),
    rows_out AS (
        SELECT t.rn AS ord1, 0::bigint AS ord2, t.id, t.mkey, t.mkind, t.mtext, t.mcat, t.mout, t.sc, t.sim, t.kw,
               t.hits, t.rec, t.age, t.mcreated, t.mmeta, t.via, t.relevance,
               CASE WHEN t.mkind = 'learning' THEN (
                   SELECT t2.mkey FROM top t2
                   WHERE t2.mkind = 'trace' AND jsonb_typeof(t2.mmeta -> 'learning_keys') = 'array'
                     AND t2.mmeta -> 'learning_keys' ? t.mkey
                   ORDER BY t2.rn LIMIT 1) END AS linked
        FROM top t
        UNION ALL
        SELECT l.parent_rn, l.pos, l.id, l.mkey, l.mkind, l.mtext, l.mcat, NULL::text,
               coalesce(l.sim, l.hits / (nq + word_pad)) * (rf + (1 - rf) * power(0.5, least(100, l.age / hl))),
               l.sim, l.hits::double precision / greatest(nq, 1), l.hits,
               power(0.5, least(100, l.age / hl)), l.age, l.mcreated, l.mmeta, 'linked',
               coalesce(l.sim, l.hits / (nq + word_pad)), l.parent_key
        FROM linked l)
    SELECT (row_number() OVER (ORDER BY o.ord1, o.ord2))::integer,
           o.id, o.mkey, o.mkind, o.mtext, o.mcat, o.mout, o.sc::real, o.sim::real, o.kw::real, o.rec::real,
           o.age::real, o.mcreated, o.linked, o.mmeta,
           jsonb_strip_nulls(jsonb_build_object(
               'match', o.via,
               'similarity', round(o.sim::numeric, 4),
               'keyword', round(o.kw::numeric, 4),
               'keyword_hits', o.hits,
               'query_words', nq,
               'relevance', round(o.relevance::numeric, 4),
               'recency', round(o.rec::numeric, 4),
               'age_days', round(o.age::numeric, 1),
               'score', round(o.sc::numeric, 4),
               'gate', CASE WHEN o.via = 'linked'
                            THEN format('none: linked to trace %s', o.linked)
                            ELSE format('score %s >= min_score %s', round(o.sc::numeric, 4), min_score) END,
               'relevance_from', CASE WHEN o.sim IS NOT NULL THEN 'cosine similarity (active model)'
                                      ELSE format('matched words / (query words + %s): %s / (%s + %s)',
                                                  word_pad, o.hits, nq, word_pad) END,
               'note', CASE WHEN o.via = 'lexical' AND qvec IS NOT NULL
                            THEN 'not embedded by the active model yet: matched on its words' END,
               'outcome', o.mout,
               'linked_to', o.linked,
               'occurrences', o.mmeta -> 'occurrences',
               'half_life_days', hl,
               'recency_floor', rf,
               'query_embedding', qsource,
               'semantic_scan', scan,
               'model', CASE WHEN qvec IS NOT NULL THEN mdl.name END))
    FROM rows_out o
    ORDER BY o.ord1, o.ord2;
END
$fn$;
COMMENT ON FUNCTION spark.reflect(text, text, vector, integer, jsonb) IS
    'Have I faced this before? The tenant''s past traces (kind trace, with their outcome from metadata) and '
    'learnings most similar to the query, each trace followed by its linked learnings that did not match on '
    'their own (those keep their own place). tenant: whose memories '
    '(only the tenant''s own; a tenant with none gets no rows); query_text: the task or intent (its words are '
    'the lexical fallback); query_embedding: its vector from the active model (only that model''s vectors are '
    'compared; params.query_model naming another model than the active one has it ignored, as spark.retrieve '
    'does), or NULL for the lexical fallback over the descriptors (why.query_embedding says which); k: '
    'how many matches (0 gives none, more than 100 gives at most 100; linked learnings come on top); params: '
    'overrides of spark.reflect_defaults() (min_score, half_life_days, recency_floor, kinds, outcome, '
    'linked_per_trace, pool, lexical_min_words, exact_scan_max, as_of, query_model). score = relevance x '
    '(recency_floor + (1 - recency_floor) x 0.5^(age_days / half_life_days)), relevance = cosine similarity, '
    'or, for a match on words alone (either side has no vector), the query''s words the descriptor holds / '
    '(the query''s words + 2), which puts it on the cosine scale (keyword_score is their plain share); '
    'matches need score >= min_score, and a match on words alone at least lexical_min_words of the query''s '
    'words. Returns rank, the '
    'memory, outcome, score, similarity, keyword_score, recency, age_days, linked_to and why. Reads only. '
    'Errors: 22004 NULL tenant, query_text or k; 22023 empty or over-long tenant, negative k, bad params '
    '(naming the key), empty query_text without a usable embedding (none, or one ignored), query_text over '
    '10,000 characters, zero vector; 22000 wrong embedding dimension.';

-- a version whose result columns or parameter names differ is dropped (as spark.reflect above)
SELECT spark._drop_if_reshaped(
    'spark.advise_with_warnings(text, text, vector, integer, jsonb, '
    'text, text, text, double precision, integer, jsonb)',
    'tenant text, query_text text, query_embedding vector, k integer, '
    'params jsonb, session_id text, tool_name text, intent_family text, warning_min_score double precision, '
    'warning_k integer, reflect_params jsonb',
    'TABLE(retrieval_id bigint, rank integer, memory_id bigint, key text, '
    'text text, category text, kind text, source text, priority_label text, system_default boolean, '
    'score real, semantic_sim real, keyword_score real, recency real, outcome real, trigger_conf real, '
    'priority real, pools text[], why jsonb, warning boolean)');
CREATE OR REPLACE FUNCTION spark.advise_with_warnings(
    tenant text,
    query_text text,
    query_embedding vector DEFAULT NULL,
    k integer DEFAULT 5,
    params jsonb DEFAULT '{}',
    session_id text DEFAULT NULL,
    tool_name text DEFAULT NULL,
    intent_family text DEFAULT NULL,
    warning_min_score double precision DEFAULT 0.45,
    warning_k integer DEFAULT 2,
    reflect_params jsonb DEFAULT '{}')
RETURNS TABLE (retrieval_id bigint, rank integer, memory_id bigint, key text, text text, category text,
               kind text, source text, priority_label text, system_default boolean, score real, semantic_sim real,
               keyword_score real, recency real, outcome real, trigger_conf real, priority real, pools text[],
               why jsonb, warning boolean)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    rid bigint;
    rp jsonb;
    active text;
    repeat_window interval;
BEGIN
    IF warning_min_score IS NULL OR warning_k IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', CASE WHEN warning_k IS NULL THEN 'warning_k' ELSE 'warning_min_score' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF warning_min_score < 0 OR warning_min_score > 1 THEN
        RAISE EXCEPTION 'warning_min_score must be between 0 and 1, got %', warning_min_score
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF warning_k < 0 OR warning_k > 20 THEN
        RAISE EXCEPTION 'warning_k must be between 0 and 20, got %', warning_k
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- checked before anything is written (an error anywhere undoes the whole call anyway, log included).
    -- A failure matched on words alone warns only when it holds two of the query's words or more: one word
    -- is too weak a sign (docs/traces.md), and a one-word query would warn on every trace that has it
    rp := spark._reflect_params(advise_with_warnings.reflect_params, 'reflect_params');
    rp := rp || jsonb_build_object('kinds', jsonb_build_array('trace'), 'outcome', 'failure',
                                   'min_score', warning_min_score,
                                   'lexical_min_words', greatest(2, (rp ->> 'lexical_min_words')::integer));
    RETURN QUERY
    SELECT a.*, false FROM spark.advise(advise_with_warnings.tenant, advise_with_warnings.query_text,
                                        advise_with_warnings.query_embedding, advise_with_warnings.k,
                                        advise_with_warnings.params, advise_with_warnings.session_id,
                                        advise_with_warnings.tool_name, advise_with_warnings.intent_family) a;
    IF warning_k = 0 THEN
        RETURN;
    END IF;
    -- a vector spark.advise above ignored: no model is registered yet, or it is another model's than the
    -- active one (a client still on the old model during a switch, params.query_model); the reflection is
    -- given the same query_model, ignores the vector too and says so in why, and with a blank text has
    -- nothing to reflect on: the advice alone, as spark.advise answers
    active := (SELECT m.name FROM spark.active_model() m);
    IF spark._blank(advise_with_warnings.query_text)
       AND (active IS NULL OR advise_with_warnings.params ->> 'query_model' <> active) THEN
        RETURN;
    END IF;
    IF advise_with_warnings.params ? 'query_model' THEN  -- spark.advise's, which describes the vector
        rp := rp || jsonb_build_object('query_model', advise_with_warnings.params -> 'query_model');
    END IF;
    -- the id spark.advise just logged this call under (this session's last value of the identity)
    rid := currval(pg_get_serial_sequence('spark.retrievals', 'id'));
    -- a warning the session was shown within the window is a repeat, as spark.advise marks its advice
    -- (params checked by spark.advise above; a critical trace is never a repeat)
    repeat_window := spark._repeat_window(advise_with_warnings.params);
    RETURN QUERY
    WITH r AS MATERIALIZED (
        SELECT * FROM spark.reflect(advise_with_warnings.tenant, advise_with_warnings.query_text,
                                    advise_with_warnings.query_embedding, warning_k, rp)),
    w AS MATERIALIZED (
        SELECT r.memory_id, r.rank AS rnk, r.key, r.text, r.category, r.kind, mm.source,
               CASE WHEN mm.priority = 'critical' THEN 'critical' ELSE 'high' END AS prio, r.score,
               r.similarity, r.keyword_score, r.recency, mm.reliability,
               r.why || jsonb_build_object('warning', jsonb_build_object(
                   'rule', format('a past failure: trace outcome failure, score %s >= warning_min_score %s',
                                  round(r.score::numeric, 4), warning_min_score),
                   'learnings', coalesce((SELECT jsonb_agg(jsonb_build_object('key', l.key, 'text', l.text)
                                                           ORDER BY l.rank)
                                          FROM r l WHERE l.kind = 'learning' AND l.linked_to = r.key), '[]')))
                   AS why,
               s.retrieval_id AS shown_in, s.shown_at
        FROM r
        JOIN spark.memories mm ON mm.tenant = advise_with_warnings.tenant AND mm.id = r.memory_id
        LEFT JOIN spark.advice_shown s
            ON advise_with_warnings.session_id IS NOT NULL AND mm.priority <> 'critical'
               AND s.tenant = advise_with_warnings.tenant AND s.session_id = advise_with_warnings.session_id
               AND s.memory_id = r.memory_id AND s.shown_at > now() - repeat_window
               AND s.retrieval_id <> rid  -- shown by this very call, as advice above: not a repeat
        WHERE r.kind = 'trace' AND r.outcome = 'failure'),
    -- the warnings shown (repeats left out), for the session's next calls (memory_id order, as spark.advise)
    shown AS (
        INSERT INTO spark.advice_shown AS a (tenant, session_id, memory_id, retrieval_id, shown_at)
        SELECT advise_with_warnings.tenant, advise_with_warnings.session_id, w.memory_id, rid, now()
        FROM w
        WHERE advise_with_warnings.session_id IS NOT NULL AND w.shown_in IS NULL
        ORDER BY w.memory_id
        ON CONFLICT (tenant, session_id, memory_id)
            -- the record replaced kept for Advisor.forget_shown (this very call's own, when it showed the
            -- memory twice, as advice and as a warning, keeps the one before)
            DO UPDATE SET retrieval_id = EXCLUDED.retrieval_id, shown_at = EXCLUDED.shown_at,
                          prev_retrieval_id = CASE WHEN a.retrieval_id = EXCLUDED.retrieval_id
                                                   THEN a.prev_retrieval_id ELSE a.retrieval_id END,
                          prev_shown_at = CASE WHEN a.retrieval_id = EXCLUDED.retrieval_id
                                               THEN a.prev_shown_at ELSE a.shown_at END)
    SELECT rid, NULL::integer, w.memory_id, w.key, w.text, w.category, w.kind, w.source, w.prio, false,
           w.score, w.similarity, w.keyword_score, w.recency, w.reliability,
           0::real, CASE WHEN w.prio = 'critical' THEN 0.3 ELSE 0.2 END::real, ARRAY['reflection'],
           CASE WHEN w.shown_in IS NULL THEN w.why
                ELSE w.why || jsonb_build_object('repeat', jsonb_build_object('shown_in', w.shown_in,
                                                                              'shown_at', w.shown_at)) END,
           true
    FROM w
    ORDER BY w.rnk;
END
$fn$;
COMMENT ON FUNCTION spark.advise_with_warnings(text, text, vector, integer, jsonb, text, text, text,
                                               double precision, integer, jsonb) IS
    'spark.advise plus past-failure warnings, in one round trip. tenant, query_text, query_embedding, k '
    '(the advice rows; default 5), params, session_id, tool_name, intent_family: as spark.advise. The advice '
    'rows (warning false) exactly as spark.advise returns and logs them, then up to warning_k of the tenant''s traces whose outcome was '
    'failure and whose spark.reflect score (same query_text, query_embedding and params.query_model: no '
    'vector when it names another model than the active one) reaches warning_min_score '
    '(warning true, priority_label high, or critical if the trace is; retrieval_id: this call; pools '
    '{reflection}; why: spark.reflect''s, plus warning.rule and warning.learnings, the learnings linked to '
    'the trace; why.repeat (shown_in, shown_at) when the session was shown that warning within '
    'params.repeat_after_minutes, as spark.advise marks advice, unless the trace is critical; those shown go '
    'to spark.advice_shown). Warnings are not logged in spark.retrieval_items (their signals are not fusion '
    'signals). '
    'warning_min_score: the lowest reflect score that warns (0..1, default 0.45); warning_k: at most this '
    'many warnings (0..20, default 2; 0 for none). reflect_params: spark.reflect params (kinds, outcome and min_score are set here, lexical_min_words to '
    '2 at least, so that a failure matched on words alone warns only when it holds two of the query''s '
    'words or more, and query_model when params has one). Errors: those of '
    'spark.advise and spark.reflect; 22004 NULL warning_min_score or warning_k; 22023 warning_min_score '
    'outside 0..1, warning_k outside 0..20, bad reflect_params. On error nothing is written.';
