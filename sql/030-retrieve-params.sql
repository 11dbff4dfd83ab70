-- Parameters of spark.retrieve: defaults, validation, precision modes.

CREATE OR REPLACE FUNCTION spark.retrieve_defaults()
RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
SELECT jsonb_build_object(
    'as_of', NULL,                 -- evaluate as if now were this time (ISO 8601); NULL = now()
    'fusion', 'weighted',          -- weighted | rrf
    'precision_mode', 'adaptive',  -- high_recall | adaptive | high_precision
    'pool_semantic', 40,           -- HNSW nearest neighbours (iterative scan, tenant-filtered)
    'pool_keyword_recent', 20,     -- OR-keyword matches inside the recent window, best rank first
    'pool_keyword_old', 30,        -- OR-keyword matches older than the window, by rank x importance
    'pool_recent', 10,             -- newest memories inside the recent window
    'pool_random', 10,             -- a random sample of older memories (seeded, reproducible)
    'pool_pinned', 10,             -- tier = pinned
    'pool_trigger', 10,            -- memories named by the trigger rules whose patterns match trigger_text
    'recent_days', 7,              -- the recent window
    'half_life_days', 30,          -- recency halves every N days ...
    'recency_floor', 0.1,          -- ... but never drops below this
    'w_similarity', 0.8,           -- weighted fusion: weights of the signal values
    'w_keyword', 1.0,
    'w_recency', 0.05,
    'w_outcome', 0.1,
    'w_trigger', 0.3,              -- weighted fusion: x the matching rule's confidence
    'fitted_weights', true,        -- weighted fusion: use the tenant's fitted weights (spark.fusion_weights)
                                   -- when in_use; weights given here still win
    'decay_half_life_days', 0,     -- opt-in: the outcome signal halves every N days a memory goes unmarked (0 = off)
    'rrf_k', 60,                   -- rrf: sum over the pools that found an item of rrf_w_<pool> / (rrf_k + rank)
    'rrf_w_semantic', 1.0,
    'rrf_w_keyword', 1.0,          -- both keyword pools
    'rrf_w_recent', 0.2,
    'rrf_w_random', 0.1,
    'rrf_w_pinned', 0.5,
    'rrf_w_trigger', 1.0
) || jsonb_build_object(  -- a function takes at most 100 arguments: 50 keys each
    'min_similarity', 0.25,        -- gate for candidates whose only evidence is semantic
    'min_fusion_score', 0.2,       -- the decision gate on the fused score
    'adaptive_ratio', 0.4,         -- adaptive / high_precision: also drop scores below ratio x best
    'week_cap', 2,                 -- at most N per ISO week before filling (0 = off)
    'category_cap', 0,             -- at most N per category before filling (0 = off)
    'cap_yield', 0.9,              -- a capped item still wins if the best uncapped one scores below this x its score
    'mmr_lambda', 0.8,             -- 1 = pure relevance; lower = more diversity
    'dup_similarity', 0.85,        -- this similar to a chosen item (or to its duplicates): dropped
    'restate_similarity', 0.72,    -- this similar to a chosen item and restate_margin closer to it than to
    'restate_margin', 0.25,        -- the query: a restatement, dropped
    'min_actionability', 0,        -- drop memories scored below this at ingestion (triggers and pinned pass)
    'domains', NULL,               -- allowed action domains (JSON array of strings); NULL = all; general always
    'domain_min', 3,               -- ... unless that leaves fewer than this many candidates: then no filter
    'trigger_text', NULL,          -- the text trigger rules match (the tool call); NULL = query_text
    'include_system', true,        -- include the cold-start pack (tenant _system)
    'keep_interrupts', false,      -- exempt the pack's interrupting trigger items from the adaptive cutoff too
                                   -- (a tenant's own are always exempt); the advisor sets it with interrupts on
    'pack_yield', 100,             -- the pack's scores x 1 / (1 + own memories / pack_yield): it yields as a
                                   -- tenant's own knowledge grows (100 own memories halve it)
    'use_cache', true,             -- with query_embedding NULL, look the text up in spark.query_embeddings
    'query_model', NULL,           -- the model that embedded query_embedding; another than the active one:
                                   -- the embedding is ignored (lexical mode), never compared
    'backlog_watermark', 1000,     -- more of the tenant's memories than this awaiting a vector (spark.embed_queue):
                                   -- retrieval runs lexically, why.mode says so (0 = never degrade)
    'ef_search', 100,              -- hnsw.ef_search for the semantic pool
    'exact_scan_max', 7000,        -- tenants (with the pack) up to this many vectors are scanned exactly
    'keyword_match_budget', 1000,  -- keyword pools match the rarest query lexemes whose counted memories fit
                                   -- this budget together; commoner ones only score (0 = match them all)
    'repeat_after_minutes', 30,    -- spark.advise only: advice the session was shown within this is marked
                                   -- why.repeat (never critical advice; 0 = never marked)
    'seed', 0                      -- random-pool seed (mixed with the query text)
)
$fn$;
COMMENT ON FUNCTION spark.retrieve_defaults() IS
    'Default params of spark.retrieve, one key per tuneable; any key may be overridden in the params argument.';

CREATE OR REPLACE FUNCTION spark._retrieve_params(params jsonb)
RETURNS jsonb
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
DECLARE
    defaults jsonb := spark.retrieve_defaults();
    merged jsonb;
    item record;
    ranges constant jsonb := '{
        "pool_semantic": [0, 1000, 1], "pool_keyword_recent": [0, 1000, 1], "pool_keyword_old": [0, 1000, 1],
        "pool_recent": [0, 1000, 1], "pool_random": [0, 1000, 1], "pool_pinned": [0, 1000, 1],
        "pool_trigger": [0, 1000, 1], "w_trigger": [0, 10, 0], "rrf_w_trigger": [0, 10, 0],
        "min_actionability": [0, 1, 0], "domain_min": [0, 1000, 1], "pack_yield": [1, 10000000, 0], "decay_half_life_days": [0, 36500, 0],
        "recent_days": [0, 36500, 0], "half_life_days": [0.001, 36500, 0], "recency_floor": [0, 1, 0],
        "w_similarity": [0, 10, 0], "w_keyword": [0, 10, 0], "w_recency": [0, 10, 0], "w_outcome": [0, 10, 0],
        "rrf_k": [1, 1000, 0], "rrf_w_semantic": [0, 10, 0], "rrf_w_keyword": [0, 10, 0],
        "rrf_w_recent": [0, 10, 0], "rrf_w_random": [0, 10, 0], "rrf_w_pinned": [0, 10, 0], "min_similarity": [-1, 1, 0], "min_fusion_score": [0, 10, 0],
        "adaptive_ratio": [0, 1, 0], "week_cap": [0, 1000, 1], "cap_yield": [0, 1, 0], "category_cap": [0, 1000, 1],
        "mmr_lambda": [0, 1, 0], "dup_similarity": [0, 1.01, 0], "restate_similarity": [0, 1.01, 0],
        "restate_margin": [0, 2, 0], "ef_search": [1, 1000, 1], "exact_scan_max": [0, 10000000, 1],
        "keyword_match_budget": [0, 10000000, 1], "backlog_watermark": [0, 100000000, 1],
        "repeat_after_minutes": [0, 100000, 0],
        "seed": [-2147483648, 2147483647, 1]}';
BEGIN
    IF params IS NULL THEN
        params := '{}';
    END IF;
    IF jsonb_typeof(params) <> 'object' THEN
        RAISE EXCEPTION 'params must be a JSON object, got %', jsonb_typeof(params)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR item IN SELECT e.key, e.value FROM jsonb_each(params) e LOOP
        IF spark._check_param(item.key, item.value, defaults, ranges) THEN
            CONTINUE;  -- a number in its range
        ELSIF jsonb_typeof(defaults -> item.key) = 'boolean' THEN  -- include_system, keep_interrupts, ...
            IF jsonb_typeof(item.value) <> 'boolean' THEN
                RAISE EXCEPTION 'params.% must be true or false, got %', item.key, item.value
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        ELSIF item.key = 'fusion' THEN
            IF item.value NOT IN ('"weighted"', '"rrf"') THEN
                RAISE EXCEPTION 'params.fusion must be "weighted" or "rrf", got %', item.value
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        ELSIF item.key = 'precision_mode' THEN
            IF item.value NOT IN ('"high_recall"', '"adaptive"', '"high_precision"') THEN
                RAISE EXCEPTION 'params.precision_mode must be "high_recall", "adaptive" or "high_precision", got %',
                    item.value USING ERRCODE = 'invalid_parameter_value';
            END IF;
        ELSIF item.key = 'query_model' THEN
            -- a model name is 1 to 200 characters (spark.register_model)
            IF jsonb_typeof(item.value) NOT IN ('string', 'null') OR length(item.value #>> '{}') > 200 THEN
                RAISE EXCEPTION 'params.query_model must be a model name (up to 200 characters) or null, got %',
                    left(item.value::text, 210) USING ERRCODE = 'invalid_parameter_value';
            END IF;
        ELSIF item.key = 'trigger_text' THEN
            IF jsonb_typeof(item.value) NOT IN ('string', 'null') THEN
                RAISE EXCEPTION 'params.trigger_text must be a string or null, got %', left(item.value::text, 210)
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            -- as a query text: the rules read 10,000 characters of it, and spark.advise logs the params
            IF length(item.value #>> '{}') > 10000 THEN
                RAISE EXCEPTION 'params.trigger_text is % characters; the limit is 10000', length(item.value #>> '{}')
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        ELSIF item.key = 'domains' THEN
            -- action domains are short names (spark_pg.intent: deployment_ops, data_access, ...)
            IF jsonb_typeof(item.value) <> 'null' AND (jsonb_typeof(item.value) <> 'array'
                   OR jsonb_array_length(item.value) > 100 OR EXISTS (
                   SELECT 1 FROM jsonb_array_elements(item.value) d
                   WHERE jsonb_typeof(d) <> 'string' OR length(d #>> '{}') > 100)) THEN
                RAISE EXCEPTION 'params.domains must be null or an array of up to 100 action-domain names of up '
                                'to 100 characters, got %', left(item.value::text, 210)
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        END IF;
    END LOOP;
    merged := defaults || params;
    RETURN merged;
END
$fn$;
COMMENT ON FUNCTION spark._retrieve_params(jsonb) IS
    'Internal: validate spark.retrieve params (22023 naming the key for an unknown key or a bad value) and '
    'merge them over spark.retrieve_defaults().';

CREATE OR REPLACE FUNCTION spark._fitted_weights(weights jsonb)
RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
-- weights: a stored row's spark.fusion_weights.weights (a JSON object); a row written by hand may hold
-- anything, so only the weighted fusion's five weights count, each only when it is a number from 0 to 10
-- that is 0 or at least 1e-9 (as spark._check_param takes a weight given in params; 1e-300 underflowed
-- the arithmetic). Returns those weights as an object, or NULL when none passes.
BEGIN
    IF weights IS NULL THEN
        RAISE EXCEPTION 'weights must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF jsonb_typeof(weights) <> 'object' THEN
        RAISE EXCEPTION 'weights must be a JSON object, got %', jsonb_typeof(weights)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN (SELECT jsonb_object_agg(w.key, w.value) FROM jsonb_each(weights) w
            WHERE w.key IN ('w_similarity', 'w_keyword', 'w_recency', 'w_outcome', 'w_trigger')
              AND jsonb_typeof(w.value) = 'number' AND (w.value #>> '{}')::numeric BETWEEN 0 AND 10
              AND ((w.value #>> '{}')::numeric = 0 OR (w.value #>> '{}')::numeric >= 1e-9));
END
$fn$;
COMMENT ON FUNCTION spark._fitted_weights(jsonb) IS
    'Internal: the weights spark.retrieve applies from a stored spark.fusion_weights row (and fit-weights '
    'judges as the weights in use): w_similarity, w_keyword, w_recency, w_outcome and w_trigger, each only '
    'as a number from 0 to 10 that is 0 or at least 1e-9; NULL when none passes. 22004 for NULL, 22023 for '
    'a value that is not a JSON object.';
