-- Plain semantic search over one tenant plus the shared cold-start pack.
DROP FUNCTION IF EXISTS spark.search_semantic(text, vector, integer, real);
-- (The full hybrid read path, spark.retrieve, builds on the same conventions.)

CREATE OR REPLACE FUNCTION spark.search_semantic(
    tenant text,
    query_embedding vector,
    k integer DEFAULT 8,
    min_similarity double precision DEFAULT -1)
RETURNS TABLE (memory_id bigint, system_default boolean, key text, text text, kind text, category text, source text,
               similarity real)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, @vector_schema@, pg_temp
SET hnsw.iterative_scan = 'relaxed_order'
AS $fn$
DECLARE
    m spark.embedding_models;
BEGIN
    PERFORM spark._check_tenant(search_semantic.tenant);
    PERFORM spark._check_k(search_semantic.k);
    IF query_embedding IS NULL THEN
        RAISE EXCEPTION 'query_embedding must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF min_similarity IS NULL THEN
        RAISE EXCEPTION 'min_similarity must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF min_similarity < -1 OR min_similarity > 1 THEN
        RAISE EXCEPTION 'min_similarity must be between -1 and 1, got %', min_similarity
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    m := spark.active_model();
    IF m.id IS NULL THEN
        -- no model registered yet: nothing has a vector, so nothing can match; a zero vector is still wrong
        PERFORM spark._check_nonzero_vector(query_embedding);
        RETURN;
    END IF;
    query_embedding := spark._query_vector(query_embedding, m.dim, m.name);
    -- The ORDER BY ... LIMIT sits in a MATERIALIZED CTE so the HNSW index serves it (iterative scan keeps
    -- the tenant filter from starving it); the similarity cutoff applies outside.
    RETURN QUERY EXECUTE format($q$
        WITH nn AS MATERIALIZED (
            SELECT e.memory_id, e.tenant, e.embedding::vector(%1$s) <=> $1::vector(%1$s) AS dist
            FROM spark.embeddings e
            WHERE e.model_id = %2$s
              AND e.tenant IN ($2, spark.system_tenant())
            ORDER BY e.embedding::vector(%1$s) <=> $1::vector(%1$s)
            LIMIT $3)
        SELECT mem.id, mem.tenant = spark.system_tenant(), mem.key, mem.text, mem.kind, mem.category, mem.source,
               (1 - nn.dist)::real
        FROM nn JOIN spark.memories mem ON mem.tenant = nn.tenant AND mem.id = nn.memory_id
        WHERE 1 - nn.dist >= $4
        ORDER BY nn.dist, mem.id $q$, m.dim, m.id)
    USING query_embedding, search_semantic.tenant, search_semantic.k, search_semantic.min_similarity;
END
$fn$;
COMMENT ON FUNCTION spark.search_semantic(text, vector, integer, double precision) IS
    'Nearest memories by cosine similarity. tenant: whose memories (the cold-start pack is always included, '
    'flagged system_default); '
    'query_embedding: a vector from the active model (see spark.active_model()); k: 1-1000 results; '
    'min_similarity: drop hits below this cosine (-1..1). Errors: 22004 NULL tenant/k/embedding/min_similarity, '
    '22023 empty or over-long tenant, bad k/min_similarity, zero vector; 22000 wrong dimension.';
