-- Per-tenant statistics and vector indexes (tables: migration 0005), and the keyword plan built from them.

CREATE OR REPLACE FUNCTION spark._tenant_index_name(tenant text, model_id smallint)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
    -- the name must fit 63 bytes whatever the tenant is called: a hash of it
    SELECT format('embeddings_hnsw_m%s_t%s', model_id, left(md5(tenant), 16))
$fn$;
COMMENT ON FUNCTION spark._tenant_index_name(text, smallint) IS
    'Internal: the name of the tenant''s partial HNSW index over the vectors of model model_id (in schema '
    'spark). Its callers pass checked arguments.';

CREATE OR REPLACE FUNCTION spark._index_valid(index_name text)
RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
    SELECT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(format('spark.%I', index_name))
$fn$;
COMMENT ON FUNCTION spark._index_valid(text) IS
    'Internal: whether index spark.index_name is valid (false: a CONCURRENTLY build was interrupted, or one '
    'is under way); NULL when there is no such index.';

CREATE OR REPLACE FUNCTION spark.tenant_index_plan(
    tenant text, index_min_vectors integer DEFAULT 1500, concurrent boolean DEFAULT true)
RETURNS TABLE (model_id smallint, index_name text, action text, statement text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    md record;
    nv bigint;
    idx text;
    valid boolean;
BEGIN
    PERFORM spark._check_tenant(tenant);
    IF index_min_vectors IS NULL THEN
        RAISE EXCEPTION 'index_min_vectors must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF concurrent IS NULL THEN
        RAISE EXCEPTION 'concurrent must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF index_min_vectors < 1 THEN
        RAISE EXCEPTION 'index_min_vectors must be at least 1, got %', index_min_vectors
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR md IN SELECT e.id, e.dim FROM spark.embedding_models e WHERE e.active ORDER BY e.id LOOP
        idx := spark._tenant_index_name(tenant, md.id);
        SELECT count(*) INTO nv FROM spark.embeddings e WHERE e.tenant = tenant_index_plan.tenant AND e.model_id = md.id;
        valid := spark._index_valid(idx);
        -- an invalid index is what an interrupted CONCURRENTLY build leaves (or one under way: callers hold
        -- the tenant's builder lock); an index is dropped below half the threshold (the gap keeps a tenant
        -- near the line from flapping)
        IF valid IS NOT NULL AND (NOT valid OR nv * 2 < index_min_vectors) THEN
            model_id := md.id;
            index_name := idx;
            action := 'drop';
            statement := format('DROP INDEX %sIF EXISTS spark.%I',
                                CASE WHEN concurrent THEN 'CONCURRENTLY ' ELSE '' END, idx);
            RETURN NEXT;
            valid := NULL;
        END IF;
        IF valid IS NULL AND nv >= index_min_vectors THEN
            model_id := md.id;
            index_name := idx;
            action := 'build';
            statement := spark._hnsw_index_ddl(idx, md.dim, format('tenant = %L AND model_id = %s', tenant, md.id),
                                               true, concurrent);
            RETURN NEXT;
        END IF;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION spark.tenant_index_plan(text, integer, boolean) IS
    'What the tenant''s per-model HNSW indexes need, as statements to run in order. tenant: the tenant; '
    'index_min_vectors (default 1,500): a tenant with that many vectors of an active model gets a partial '
    'index over them, dropped again below half of it; concurrent (default true): the statements are '
    'CREATE/DROP INDEX CONCURRENTLY (run them outside a transaction, holding '
    'pg_advisory_lock(hashtextextended(''spark.tenant_index:'' || tenant, 0)) so that '
    'spark.refresh_tenant_stats leaves the tenant to you; then call it to record the indexes). One row per '
    'step: model_id, index_name, action (drop: an invalid index an interrupted build left, or a tenant that '
    'shrank; build) and statement. Other models'' indexes are left alone. Errors: 22004 NULL tenant, '
    'index_min_vectors or concurrent; 22023 empty or over-long tenant, index_min_vectors below 1.';

-- build_indexes was added: a write inside a caller's transaction (spark-pg trace add) must leave the index
-- work to a builder that runs CONCURRENTLY, or the plain build held every tenant's writes (a plain DROP of
-- an invalid index every tenant's reads) until that transaction ended
DROP FUNCTION IF EXISTS spark.refresh_tenant_stats(text, boolean, integer);
CREATE OR REPLACE FUNCTION spark.refresh_tenant_stats(
    tenant text DEFAULT NULL, force boolean DEFAULT false, index_min_vectors integer DEFAULT 1500,
    build_indexes boolean DEFAULT true)
RETURNS integer
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    min_df constant integer := 20;   -- rarer lexemes are not stored: they never strain the match budget
    t text;
    n bigint;
    last bigint;
    md record;
    step text;
    valid boolean;
    reg_name text;
    idx text;
    changed boolean;
    touched integer := 0;
    -- the owner of the tables (a tenant role under row-level security is not: docs/security.md)
    owner constant boolean := pg_has_role((SELECT c.relowner FROM pg_class c WHERE c.oid = 'spark.embeddings'::regclass),
                                          'USAGE');
BEGIN
    IF tenant IS NOT NULL THEN
        PERFORM spark._check_tenant(tenant);
    END IF;
    IF force IS NULL THEN
        RAISE EXCEPTION 'force must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF index_min_vectors IS NULL THEN
        RAISE EXCEPTION 'index_min_vectors must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF index_min_vectors < 1 THEN
        RAISE EXCEPTION 'index_min_vectors must be at least 1, got %', index_min_vectors
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF build_indexes IS NULL THEN
        RAISE EXCEPTION 'build_indexes must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    FOR t IN
        SELECT x.t FROM (
            SELECT DISTINCT m.tenant AS t FROM spark.memories m WHERE refresh_tenant_stats.tenant IS NULL
            UNION SELECT s.tenant FROM spark.tenant_stats s WHERE refresh_tenant_stats.tenant IS NULL
            UNION SELECT v.tenant FROM spark.tenant_vector_indexes v WHERE refresh_tenant_stats.tenant IS NULL
            UNION SELECT refresh_tenant_stats.tenant WHERE refresh_tenant_stats.tenant IS NOT NULL) x
        -- every tenant: a tenant role sees the pack's memories (policy pack_read) but may not write its
        -- statistics, so it refreshes its own tenant's only (named, the pack's fails with 42501)
        WHERE owner OR refresh_tenant_stats.tenant IS NOT NULL OR x.t <> spark.system_tenant()
        ORDER BY x.t
    LOOP
        changed := false;
        -- one refresher per tenant at a time; a second one waits, then finds the work done
        PERFORM pg_advisory_xact_lock(hashtextextended('spark.refresh_tenant_stats:' || t, 0));

        -- lexeme document frequencies: rebuilt when missing or when the tenant moved by more than a quarter
        SELECT count(*) INTO n FROM spark.memories m WHERE m.tenant = t;
        SELECT s.memories INTO last FROM spark.tenant_stats s WHERE s.tenant = t;
        IF n = 0 THEN
            DELETE FROM spark.tenant_stats s WHERE s.tenant = t;
            changed := FOUND;
        ELSIF force OR last IS NULL OR n * 4 > last * 5 OR n * 5 < last * 4 THEN
            INSERT INTO spark.tenant_stats AS s (tenant, memories, lexeme_min_df, refreshed_at)
            VALUES (t, n, min_df, now())
            ON CONFLICT (tenant) DO UPDATE
                SET memories = EXCLUDED.memories, lexeme_min_df = EXCLUDED.lexeme_min_df,
                    refreshed_at = EXCLUDED.refreshed_at;
            DELETE FROM spark.lexeme_stats l WHERE l.tenant = t;
            INSERT INTO spark.lexeme_stats (tenant, lexeme, df)
            SELECT t, x.lexeme, count(*)
            FROM spark.memories m, unnest(tsvector_to_array(m.tsv)) x(lexeme)
            WHERE m.tenant = t
            GROUP BY x.lexeme
            HAVING count(*) >= min_df;
            changed := true;
        END IF;

        -- the tenant's HNSW indexes (spark.tenant_index_plan), unless a builder holds them (spark-pg builds
        -- them CONCURRENTLY first: a plain build here holds writes to spark.embeddings until the commit),
        -- then the registry follows the valid indexes there are. The valid index of a tenant that shrank
        -- is kept: a plain DROP INDEX would hold every tenant's reads of spark.embeddings until the commit
        -- (the builders drop it CONCURRENTLY); an invalid one (an interrupted build) cannot wait for them
        -- (only the owner of spark.embeddings may build or drop its indexes: a tenant role under row-level
        -- security refreshes the statistics and leaves the indexes to the owner's worker or refresh)
        IF owner AND build_indexes AND pg_try_advisory_xact_lock(hashtextextended('spark.tenant_index:' || t, 0)) THEN
            FOR step IN
                SELECT p.statement FROM spark.tenant_index_plan(t, index_min_vectors, false) p
                WHERE p.action <> 'drop' OR NOT coalesce(spark._index_valid(p.index_name), false)
            LOOP
                EXECUTE step;
                changed := true;
            END LOOP;
        END IF;
        FOR md IN SELECT e.id FROM spark.embedding_models e WHERE e.active ORDER BY e.id LOOP
            idx := spark._tenant_index_name(t, md.id);
            SELECT v.index_name INTO reg_name FROM spark.tenant_vector_indexes v WHERE v.tenant = t AND v.model_id = md.id;
            valid := coalesce(spark._index_valid(idx), false);
            IF reg_name IS NOT NULL AND (reg_name <> idx OR NOT valid) THEN
                DELETE FROM spark.tenant_vector_indexes v WHERE v.tenant = t AND v.model_id = md.id;
                reg_name := NULL;
                changed := true;
            END IF;
            IF reg_name IS NULL AND valid THEN
                INSERT INTO spark.tenant_vector_indexes (tenant, model_id, index_name, vectors)
                SELECT t, md.id, idx, count(*) FROM spark.embeddings e WHERE e.tenant = t AND e.model_id = md.id;
                changed := true;
            END IF;
        END LOOP;
        IF changed THEN
            touched := touched + 1;
        END IF;
    END LOOP;
    RETURN touched;
END
$fn$;
COMMENT ON FUNCTION spark.refresh_tenant_stats(text, boolean, integer, boolean) IS
    'Keep the per-tenant statistics spark.retrieve plans with. tenant: one tenant, or NULL for every tenant. '
    'Rebuilds spark.lexeme_stats (lexemes held by at least 20 of the tenant''s memories) when they are missing '
    'or the tenant''s memory count moved by more than a quarter since (force = true: always); creates a '
    'partial HNSW index over the tenant''s vectors of the active model once it holds index_min_vectors '
    '(default 1,500) of them (spark.tenant_index_plan; other models'' indexes are left alone), and records '
    'the valid ones in spark.tenant_vector_indexes. The index of a tenant that fell below half of that is '
    'kept here (a plain DROP INDEX would hold every tenant''s reads until the commit): ingest and the worker '
    'drop it CONCURRENTLY, or run the plan''s statement yourself. Returns how many '
    'tenants changed. An index built here locks writes to spark.embeddings until the transaction ends: '
    'commit soon, or run spark.tenant_index_plan''s CONCURRENTLY statements first, as ingest and the worker '
    'do (a tenant whose indexes such a builder holds is left to it). Ingest and the worker call it after '
    'their writes; call it after loads that bypass them. A role that does not own the tables (a tenant '
    'role under row-level security) refreshes statistics only: with tenant NULL, its own tenants''. '
    'build_indexes false: statistics and the registry only, no index built or dropped (a write inside a '
    'longer transaction, which would hold the locks until it ends). '
    'Errors: 22004 NULL force, build_indexes or '
    'index_min_vectors, 22023 empty or over-long tenant, index_min_vectors below 1.';

CREATE OR REPLACE FUNCTION spark._keyword_plan(tenants text[], query_text text, budget integer)
RETURNS TABLE (lexq tsquery[], lexdf double precision[], lexkeys text[], skipped text[])
LANGUAGE sql STABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
    -- the question's English lexemes, rarest first by their counted document frequency (no count: rare);
    -- the match reads the lexemes that fit the budget together, the rest are skipped as too common
    WITH lx AS (
        SELECT l.lexeme,
               -- the tenants one by one (tenants[2] is the pack's or NULL): with ANY(tenants), an array of
               -- unknown length, the generic plan read all of a small table for every lexeme (772 rows at
               -- 10,000 memories: 4 million instructions a call) instead of a primary-key look-up
               coalesce((SELECT sum(s.df) FROM spark.lexeme_stats s
                         WHERE s.tenant IN (tenants[1], tenants[2]) AND s.lexeme = l.lexeme), 0)::double precision AS df
        FROM unnest(to_tsvector('english', coalesce(query_text, ''))) l),
    plan AS (
        SELECT lx.lexeme, lx.df,
               budget = 0 OR sum(lx.df) OVER (ORDER BY lx.df, lx.lexeme) <= budget AS matched
        FROM lx)
    -- each lexeme a tsquery literal taken as it is (spark._or_tsquery says why)
    SELECT coalesce(array_agg(('''' || replace(replace(p.lexeme, E'\\', E'\\\\'), '''', '''''') || '''')::tsquery
                              ORDER BY p.lexeme), '{}'),
           coalesce(array_agg(CASE WHEN NOT p.matched THEN p.df END ORDER BY p.lexeme), '{}'),
           -- spark._tenant_lexemes' key format, written inline (a call per lexeme and tenant costs ~20 us;
           -- the keyword tests fail if the two ever differ)
           coalesce((SELECT array_agg(x.key ORDER BY x.key)
                     FROM (SELECT length(t) || ':' || t || ':' || m.lexeme AS key
                           FROM plan m, unnest(tenants) t WHERE m.matched) x), '{}'),
           coalesce(array_agg(p.lexeme ORDER BY p.lexeme) FILTER (WHERE NOT p.matched), '{}')
    FROM plan p
$fn$;
COMMENT ON FUNCTION spark._keyword_plan(text[], text, integer) IS
    'Internal: the keyword plan of query_text for tenants (the caller''s, then the pack''s: one or two; a third '
    'is not counted) under a match budget (0 = no budget). lexq: one '
    'single-lexeme tsquery per English lexeme; lexdf: aligned with lexq, NULL for a matched lexeme (its rarity '
    'is counted on the matches), the counted document frequency for a skipped one; lexkeys: the keys of '
    'memories_tenant_lexemes_idx (spark._tenant_lexemes format) of the matched lexemes x tenants; skipped: the '
    'lexemes left out of the match because their counts together exceed budget. A NULL query_text plans '
    'nothing (four empty lists); its callers pass checked arguments.';
