-- Embedding models: registration, the active model, and one partial HNSW index per model.

DROP FUNCTION IF EXISTS spark._hnsw_index_ddl(text, integer, text, boolean);
CREATE OR REPLACE FUNCTION spark._hnsw_index_ddl(
    index_name text, dim integer, predicate text, if_not_exists boolean, concurrent boolean DEFAULT false)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
    -- one definition for every HNSW index: queries must repeat its expression exactly to use it
    SELECT format('CREATE INDEX %s%s%I ON spark.embeddings USING hnsw ((embedding::vector(%s)) '
                  'vector_cosine_ops) WHERE %s', CASE WHEN concurrent THEN 'CONCURRENTLY ' ELSE '' END,
                  CASE WHEN if_not_exists THEN 'IF NOT EXISTS ' ELSE '' END, index_name, dim, predicate)
$fn$;
COMMENT ON FUNCTION spark._hnsw_index_ddl(text, integer, text, boolean, boolean) IS
    'Internal: the CREATE INDEX [CONCURRENTLY] [IF NOT EXISTS] statement of a partial HNSW cosine index over '
    'spark.embeddings (vectors cast to vector(dim)) named index_name, restricted by predicate (SQL text): per '
    'model, or per tenant and model. Its callers pass checked arguments.';

-- model_id became an integer: ensure_model_index(1) found no function taking a smallint
DROP FUNCTION IF EXISTS spark.ensure_model_index(smallint);
CREATE OR REPLACE FUNCTION spark.ensure_model_index(model_id integer)
RETURNS text
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
DECLARE
    d integer;
    idx text := format('embeddings_hnsw_m%s', model_id);
BEGIN
    IF model_id IS NULL THEN
        RAISE EXCEPTION 'model_id must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT m.dim INTO d FROM spark.embedding_models m WHERE m.id = model_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'model_id % is not a registered embedding model', model_id
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- there already: CREATE INDEX IF NOT EXISTS would first wait for a SHARE lock on spark.embeddings
    -- (behind any open transaction that wrote a vector) only to find it, and every writer queued behind it
    IF to_regclass(format('spark.%I', idx)) IS NOT NULL THEN
        RETURN idx;
    END IF;
    -- an inactive model that has vectors (a way back to a retired model): built here, the index would hold
    -- that lock over every kept vector for minutes; spark-pg reembed builds it CONCURRENTLY instead
    IF NOT EXISTS (SELECT 1 FROM spark.embedding_models m WHERE m.id = model_id AND m.active)
       AND EXISTS (SELECT 1 FROM spark.embeddings e WHERE e.model_id = ensure_model_index.model_id) THEN
        RETURN NULL;
    END IF;
    -- a column without a fixed dimension is indexed per model through a typed expression
    EXECUTE spark._hnsw_index_ddl(idx, d, format('model_id = %s', model_id), true);
    RETURN idx;
END
$fn$;
COMMENT ON FUNCTION spark.ensure_model_index(integer) IS
    'Create (if missing) the partial HNSW cosine index for one model''s vectors. '
    'model_id: spark.embedding_models.id. Returns the index name, or NULL when it is missing and left for '
    'spark-pg reembed to build CONCURRENTLY: the model is inactive and already has vectors. An index that '
    'exists is found without a lock on spark.embeddings. Errors: 22004 NULL model_id; 22023 an unknown model.';

CREATE OR REPLACE FUNCTION spark.register_model(
    name text, dim integer, pooling text, max_tokens integer,
    query_prefix text DEFAULT '', document_prefix text DEFAULT '')
RETURNS smallint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
    mid smallint;
    old record;
BEGIN
    IF name IS NULL OR dim IS NULL OR pooling IS NULL OR max_tokens IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', CASE WHEN name IS NULL THEN 'name' WHEN dim IS NULL THEN 'dim'
                                                   WHEN pooling IS NULL THEN 'pooling' ELSE 'max_tokens' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF name = '' OR length(name) > 200 THEN
        RAISE EXCEPTION 'name must be a model name of 1 to 200 characters, got % characters', length(name)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- a name is shown and compared (params.query_model): blank, or holding control characters (C0, DEL,
    -- C1), bidirectional formatting or zero-width characters, it could be registered, then activated, and
    -- never told apart (the message does not echo it: a terminal would act on it)
    IF spark._blank(name)
       OR name ~ '[\u0001-\u001f\u007f-\u009f\u061c\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]' THEN
        RAISE EXCEPTION 'name must be a model name, not blank and without control, bidirectional or invisible '
                        'characters' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF length(query_prefix) > 1000 OR length(document_prefix) > 1000 THEN
        RAISE EXCEPTION '% is % characters; the limit is 1000',
            CASE WHEN length(query_prefix) > 1000 THEN 'query_prefix' ELSE 'document_prefix' END,
            greatest(length(query_prefix), length(document_prefix))
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF dim < 1 OR dim > 2000 THEN
        RAISE EXCEPTION 'dim must be between 1 and 2000 (HNSW limit), got %', dim
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF pooling NOT IN ('mean', 'cls') THEN
        RAISE EXCEPTION 'pooling must be mean or cls, got %', pooling USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF max_tokens < 1 OR max_tokens > 1000000 THEN
        RAISE EXCEPTION 'max_tokens must be between 1 and 1000000, got %', max_tokens
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- concurrent first registrations (two workers, two ingests) take turns: the second finds the first's row
    PERFORM pg_advisory_xact_lock(hashtext('spark.register_model'));
    SELECT * INTO old FROM spark.embedding_models m WHERE m.name = register_model.name;
    IF FOUND THEN
        IF old.dim <> dim OR old.pooling <> pooling THEN
            RAISE EXCEPTION 'model % is registered with dim % and % pooling, not dim % and % pooling',
                name, old.dim, old.pooling, dim, pooling USING ERRCODE = 'data_exception';
        END IF;
        -- the same name with other truncation or prefixes would embed differently from its stored vectors
        IF old.max_tokens <> max_tokens OR old.query_prefix <> coalesce(query_prefix, '')
           OR old.document_prefix <> coalesce(document_prefix, '') THEN
            RAISE EXCEPTION 'model % is registered with max_tokens %, query_prefix % and document_prefix %, '
                            'not %, % and %', name, old.max_tokens, quote_literal(old.query_prefix),
                quote_literal(old.document_prefix), max_tokens, quote_literal(coalesce(query_prefix, '')),
                quote_literal(coalesce(document_prefix, '')) USING ERRCODE = 'data_exception';
        END IF;
        mid := old.id;
    ELSE
        INSERT INTO spark.embedding_models AS m (name, dim, pooling, max_tokens, query_prefix, document_prefix,
                                                 active)
        VALUES (name, dim, pooling, max_tokens, coalesce(query_prefix, ''), coalesce(document_prefix, ''),
                NOT EXISTS (SELECT 1 FROM spark.embedding_models WHERE active))
        RETURNING m.id INTO mid;
    END IF;
    PERFORM spark.ensure_model_index(mid);
    RETURN mid;
END
$fn$;
COMMENT ON FUNCTION spark.register_model(text, integer, text, integer, text, text) IS
    'Register an embedding model (idempotent by name) and make sure its HNSW index exists. '
    'name: model name (1-200 characters, not blank, no control, bidirectional or invisible characters); dim: vector dimension (1-2000); '
    'pooling: mean|cls; max_tokens: truncation length (1-1000000); query_prefix/document_prefix: text prepended before embedding (up to 1000 characters; '
    'NULL as empty). The first model registered becomes active. Returns the model id. Errors: 22004 NULL name, dim, pooling or max_tokens; 22023 bad values; '
    '22000 if the name is registered with another dim, pooling, max_tokens or prefix.';

CREATE OR REPLACE FUNCTION spark.activate_model(name text)
RETURNS TABLE (previous text, active text, queued bigint)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
    target spark.embedding_models;
    old spark.embedding_models;
BEGIN
    IF name IS NULL THEN
        RAISE EXCEPTION 'name must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF name = '' THEN
        RAISE EXCEPTION 'name must be a registered model name' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('spark.register_model'));
    -- then wait for the writers of vectors in flight: ingest and the worker hold this lock shared from before
    -- their writes until they commit, and check the active model once they have it (spark_pg/queries.py,
    -- HOLD_MODEL_SWITCH). The queue rebuilt below sees what they wrote, and a writer that comes after sees
    -- the new model. Without it, an ingest's vector of the old model took its new memory off the queue,
    -- and this rebuild, which could not see the memory yet, did not queue it again: never embedded.
    PERFORM pg_advisory_xact_lock(hashtextextended('spark.activate_model', 0));
    SELECT * INTO target FROM spark.embedding_models m WHERE m.name = activate_model.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'model % is not registered', quote_literal(name) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    old := spark.active_model();
    -- two statements: the one-active index is checked row by row
    -- retired_at: which models were replaced, in order even within one transaction (reembed drops their
    -- indexes, and finishes that when run again)
    UPDATE spark.embedding_models m SET active = false, retired_at = clock_timestamp()
        WHERE m.active AND m.id <> target.id;
    UPDATE spark.embedding_models m SET active = true, retired_at = NULL WHERE m.id = target.id AND NOT m.active;
    -- whatever lacks the new model's vector is queued for it (workers must now run that model)
    DELETE FROM spark.embed_queue;
    INSERT INTO spark.embed_queue (tenant, memory_id)
    SELECT mm.tenant, mm.id FROM spark.memories mm
    WHERE NOT EXISTS (SELECT 1 FROM spark.embeddings e
                      WHERE e.tenant = mm.tenant AND e.memory_id = mm.id AND e.model_id = target.id)
    -- a writer that stores no vector takes no lock (a deferred ingest, an edit in SQL): the memory it queued
    -- and had not committed when the DELETE ran stays queued (a plain INSERT failed on it with 23505)
    ON CONFLICT (tenant, memory_id) DO NOTHING;
    GET DIAGNOSTICS queued = ROW_COUNT;
    previous := old.name;
    active := target.name;
    RETURN NEXT;
END
$fn$;
COMMENT ON FUNCTION spark.activate_model(text) IS
    'Make a registered model the active one (the one retrieval compares against), in one transaction: the '
    'previous model''s vectors stay (its index may be dropped after; its retired_at is set, the new one''s '
    'cleared), and spark.embed_queue is rebuilt with '
    'the memories that lack a vector of the new model. It first waits for the writers that store vectors '
    '(they hold pg_advisory_xact_lock_shared(hashtextextended(''spark.activate_model'', 0)) until they '
    'commit, and check the active model once they hold it), so the rebuilt queue sees what they wrote. '
    'name: spark.embedding_models.name. '
    'Returns the previous and new active model and how many memories were queued. Errors: 22004 NULL name; '
    '22023 an empty or unknown name.';

CREATE OR REPLACE FUNCTION spark.active_model()
RETURNS spark.embedding_models
LANGUAGE sql STABLE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$ SELECT * FROM spark.embedding_models WHERE active $fn$;
COMMENT ON FUNCTION spark.active_model() IS
    'The model whose vectors retrieval compares against (NULL fields when none is registered yet).';
