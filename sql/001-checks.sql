-- Input checks shared by the spark.* functions. Each raises with an errcode and names the parameter.
-- 22004 null_value_not_allowed, 22023 invalid_parameter_value, 22000 data_exception.

CREATE OR REPLACE FUNCTION spark._blank(value text)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$
    -- white space as Python's str.strip() takes it, which the Python API checks with: ASCII's, the
    -- separators \x1c to \x1f, NEL, the no-break spaces and Unicode's other spaces and line separators
    -- ([[:space:]] misses some of them: a tenant of no-break spaces passed here and not in Python)
    SELECT value !~ '[^ \t\n\v\f\r\u001c-\u001f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]'
$fn$;
COMMENT ON FUNCTION spark._blank(text) IS
    'Internal: true when value is empty or holds only white space as Python''s str.strip() takes it (ASCII''s, '
    '\x1c-\x1f, NEL, the no-break spaces, Unicode''s other spaces and line and paragraph separators); NULL for '
    'NULL.';

CREATE OR REPLACE FUNCTION spark._check_tenant(tenant text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
BEGIN
    IF tenant IS NULL THEN
        RAISE EXCEPTION 'tenant must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF tenant = '' OR length(tenant) > 128 THEN
        RAISE EXCEPTION 'tenant must be 1 to 128 characters, got % characters', length(tenant)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- as the Python API refuses it: a tenant of spaces could hold rules and an advise log but never a memory
    IF spark._blank(tenant) THEN
        RAISE EXCEPTION 'tenant must not be blank (only white space)' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN tenant;
END
$fn$;
COMMENT ON FUNCTION spark._check_tenant(text) IS
    'Internal: raise 22004 for a NULL tenant, 22023 for an empty, blank (white space only) or over-long one; '
    'else return it.';

CREATE OR REPLACE FUNCTION spark._check_k(k integer, max_k integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
BEGIN
    IF k IS NULL OR max_k IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', CASE WHEN k IS NULL THEN 'k' ELSE 'max_k' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- a bound keeps one call from sorting a whole tenant: callers page instead
    IF k < 1 OR k > max_k THEN
        RAISE EXCEPTION 'k must be between 1 and %, got %', max_k, k USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN k;
END
$fn$;
COMMENT ON FUNCTION spark._check_k(integer, integer) IS
    'Internal: raise 22004 for a NULL k or max_k, 22023 unless 1 <= k <= max_k; else return k. '
    'k: the caller''s k; max_k: its upper bound (1000 by default).';

CREATE OR REPLACE FUNCTION spark._check_session(session_id text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
BEGIN
    -- NULL is allowed: a call or outcome outside any session
    IF session_id IS NOT NULL AND (session_id = '' OR length(session_id) > 256) THEN
        RAISE EXCEPTION 'session_id must be 1 to 256 characters, got % characters', length(session_id)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN session_id;
END
$fn$;
COMMENT ON FUNCTION spark._check_session(text) IS
    'Internal: raise 22023 for an empty session_id or one over 256 characters; else return it (NULL included).';

CREATE OR REPLACE FUNCTION spark._check_query_text(query_text text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
BEGIN
    IF query_text IS NULL THEN
        RAISE EXCEPTION 'query_text must not be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    -- a query is a question, not a document: the keyword plan's cost grows with its distinct words
    IF length(query_text) > 10000 THEN
        RAISE EXCEPTION 'query_text is % characters; the limit is 10000', length(query_text)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN query_text;
END
$fn$;
COMMENT ON FUNCTION spark._check_query_text(text) IS
    'Internal: raise 22004 for a NULL query_text, 22023 for one over 10,000 characters; else return it.';

CREATE OR REPLACE FUNCTION spark._comparable_vector(v vector)
RETURNS vector
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
    -- cosine ignores length, but float arithmetic does not: components near float's limit (3e38) made the
    -- similarity NaN, which sorts above every number; such a vector is compared at unit length instead
    SELECT CASE WHEN vector_norm(v) BETWEEN 1e-6 AND 1e6 THEN v ELSE l2_normalize(v) END
$fn$;
COMMENT ON FUNCTION spark._comparable_vector(vector) IS
    'Internal: a query vector as it is compared: itself, or at unit length when its norm is outside 1e-6..1e6 '
    '(the cosine is the same; the arithmetic stays finite).';

CREATE OR REPLACE FUNCTION spark._check_nonzero_vector(v vector)
RETURNS vector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
BEGIN
    IF vector_norm(v) = 0 THEN
        RAISE EXCEPTION 'query_embedding is the zero vector; cosine similarity is undefined'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN v;
END
$fn$;
COMMENT ON FUNCTION spark._check_nonzero_vector(vector) IS
    'Internal: raise 22023 for the zero vector (a query vector with no direction, whether or not it is used); '
    'else return it.';

CREATE OR REPLACE FUNCTION spark._query_vector(query_embedding vector, dim integer, model text)
RETURNS vector
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
BEGIN
    IF vector_dims(query_embedding) <> dim THEN
        RAISE EXCEPTION 'query_embedding has % dimensions; the active model % makes % dimensions',
            vector_dims(query_embedding), model, dim USING ERRCODE = 'data_exception';
    END IF;
    RETURN spark._comparable_vector(spark._check_nonzero_vector(query_embedding));
END
$fn$;
COMMENT ON FUNCTION spark._query_vector(vector, integer, text) IS
    'Internal: a query vector checked against the active model (dim, model: its dimension and name) and made '
    'comparable: 22000 for another dimension, 22023 for the zero vector.';

-- The tenant that holds the cold-start pack, visible to every tenant.
CREATE OR REPLACE FUNCTION spark.system_tenant()
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$ SELECT '_system'::text $fn$;
COMMENT ON FUNCTION spark.system_tenant() IS
    'The reserved tenant whose memories (the cold-start pack of system defaults) every tenant can see.';

-- Writes into the pack's tenant: only the pack loader's transaction (spark-pg seed) sets spark.pack_writes.
CREATE OR REPLACE FUNCTION spark._check_writer(tenant text)
RETURNS text
LANGUAGE plpgsql STABLE PARALLEL SAFE  -- reads a setting
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
BEGIN
    PERFORM spark._check_tenant(tenant);
    IF tenant = spark.system_tenant() AND current_setting('spark.pack_writes', true) IS DISTINCT FROM 'on' THEN
        RAISE EXCEPTION 'tenant % holds the cold-start pack that every tenant sees: only the pack loader '
                        '(spark-pg seed) writes it', tenant
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'To change the pack by hand, SET LOCAL spark.pack_writes = on in that transaction.';
    END IF;
    RETURN tenant;
END
$fn$;
COMMENT ON FUNCTION spark._check_writer(text) IS
    'Internal: spark._check_tenant, and 22023 for the pack''s tenant (spark.system_tenant()) unless the '
    'setting spark.pack_writes is on (the pack loader sets it for its transaction); else return the tenant.';

CREATE OR REPLACE FUNCTION spark._plausible_time(t timestamptz)
RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $fn$ SELECT t >= '0001-01-01 00:00:00+00'::timestamptz AND t < '10000-01-01 00:00:00+00'::timestamptz $fn$;
COMMENT ON FUNCTION spark._plausible_time(timestamptz) IS
    'Internal: true for a time t from year 1 to 9999 (UTC): an evaluation time (as_of) minus any window '
    'the functions subtract (at most 100 years) stays inside PostgreSQL''s range. NULL for NULL.';

-- name: the argument the object was given as (spark.advise_with_warnings checks its reflect_params here)
DROP FUNCTION IF EXISTS spark._check_param(text, jsonb, jsonb, jsonb);
CREATE OR REPLACE FUNCTION spark._check_param(key text, value jsonb, defaults jsonb, ranges jsonb,
                                              name text DEFAULT 'params')
RETURNS boolean
LANGUAGE plpgsql STABLE PARALLEL SAFE  -- reading an as_of time depends on the session's TimeZone
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
DECLARE
    rng jsonb := ranges -> key;
    num numeric;
BEGIN
    IF NOT defaults ? key THEN
        RAISE EXCEPTION 'unknown % key "%"; allowed keys: %', name, left(key, 80),
            (SELECT string_agg(k, ', ' ORDER BY k) FROM jsonb_object_keys(defaults) k)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF key = 'as_of' THEN  -- the same in every params object: evaluate as if now were this time
        IF jsonb_typeof(value) NOT IN ('string', 'null') THEN
            RAISE EXCEPTION '%.as_of must be an ISO 8601 time string, got %', name, left(value::text, 80)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF jsonb_typeof(value) = 'string' THEN
            BEGIN
                PERFORM (value #>> '{}')::timestamptz;
            EXCEPTION WHEN OTHERS THEN
                RAISE EXCEPTION '%.as_of must be an ISO 8601 time string, got %', name, left(value::text, 80)
                    USING ERRCODE = 'invalid_parameter_value';
            END;
            -- 'infinity' parses, then breaks the time arithmetic (or silently ages every memory away)
            IF NOT isfinite((value #>> '{}')::timestamptz) THEN
                RAISE EXCEPTION '%.as_of must be a finite time, got %', name, left(value::text, 80)
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            -- a time near PostgreSQL's first (4714 BC) parses, then as_of - recent_days falls off the range
            IF NOT spark._plausible_time((value #>> '{}')::timestamptz) THEN
                RAISE EXCEPTION '%.as_of must be a time from year 1 to 9999, got %', name, left(value::text, 80)
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            -- PostgreSQL reads more than ISO 8601 ('tomorrow', '1/2/2020', which DateStyle reads as January or
            -- February): only a date, with a time and an offset if any, means the same in every session;
            -- extended or basic format (20240501T123000Z), any fraction (RFC 3339's nanoseconds), an offset
            -- with seconds (to_jsonb writes +00:17:30 for a historical zone); at most 64 characters, as
            -- spark.advise logs the params
            IF length(value #>> '{}') > 64 OR (value #>> '{}') !~* ('^\s*\d{4}-?\d{2}-?\d{2}'
                   '([T ]\d{2}(:?\d{2}(:?\d{2}(\.\d+)?)?)?(Z|[+-]\d{2}(:?\d{2}(:?\d{2})?)?)?)?\s*$') THEN
                RAISE EXCEPTION '%.as_of must be an ISO 8601 time string (2024-05-01, 2024-05-01T12:00:00Z, '
                                '2024-05-01 12:00:00+02:00), got %', name, left(value::text, 80)
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        END IF;
        RETURN true;
    END IF;
    IF rng IS NULL THEN
        RETURN false;
    END IF;
    IF jsonb_typeof(value) IS DISTINCT FROM 'number' THEN
        RAISE EXCEPTION '%.% must be a number from % to %, got %', name, key, rng ->> 0, rng ->> 1,
            left(value::text, 80)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    num := (value #>> '{}')::numeric;
    -- an integer key takes an integer literal: 1.0 would pass a range check, then fail the ::integer cast
    IF num < (rng ->> 0)::numeric OR num > (rng ->> 1)::numeric
       OR ((rng ->> 2) = '1' AND (value #>> '{}') !~ '^-?[0-9]+$') THEN
        RAISE EXCEPTION '%.% must be % from % to %, got %', name, key,
            CASE WHEN (rng ->> 2) = '1' THEN 'an integer' ELSE 'a number' END, rng ->> 0, rng ->> 1, num
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- numeric holds 1e-400, double precision does not, and a value that passes the cast can still break
    -- the arithmetic (decay_half_life_days 1e-310: an overflow dividing by it; w_recency 1e-300: an
    -- underflow): no parameter means anything below 1e-9 but 0, so the key is named instead of a 22003
    IF num <> 0 AND abs(num) < 1e-9 THEN
        RAISE EXCEPTION '%.% is too close to 0 (below 1e-9: write 0), got %', name, key, value
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN true;
END
$fn$;
COMMENT ON FUNCTION spark._check_param(text, jsonb, jsonb, jsonb, text) IS
    'Internal: one key of a params object given as argument name (params by default; messages name it). '
    '22023 for a key not in defaults, a ranged key (ranges: '
    '{"key": [min, max, integer 0|1]}) whose value is not a number in its range (or one not 0 but below '
    '1e-9 in size), or an as_of that is not an ISO 8601 date or time from year 1 to 9999; '
    'true for a key that passed, false for a known key the caller checks itself.';
