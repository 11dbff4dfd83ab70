-- Importance revaluation: a random sample of low-importance memories for a second look, and the decisions
-- applied with their log (table and sample index: migration 0007; the deciders: spark_pg/revalue/).

CREATE OR REPLACE FUNCTION spark.revalue_sample(
    tenant text,
    n integer,
    max_importance real DEFAULT 0.3,
    min_age interval DEFAULT '7 days',
    cooldown interval DEFAULT '90 days',
    seed bigint DEFAULT NULL)
RETURNS TABLE (id bigint, key text, text text, category text, kind text, tier text, importance real,
               created_at timestamptz, helpful_count integer, followed_count integer, unhelpful_count integer,
               ignored_count integer, reliability real, actionability real, times_surfaced bigint,
               last_surfaced_at timestamptz, last_revalued_at timestamptz)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    start integer;
BEGIN
    PERFORM spark._check_tenant(tenant);
    IF n IS NULL OR max_importance IS NULL OR min_age IS NULL OR cooldown IS NULL THEN
        RAISE EXCEPTION '% must not be NULL',
            CASE WHEN n IS NULL THEN 'n' WHEN max_importance IS NULL THEN 'max_importance'
                 WHEN min_age IS NULL THEN 'min_age' ELSE 'cooldown' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF n < 0 THEN
        RAISE EXCEPTION 'n must be 0 or more, got %', n USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT (max_importance BETWEEN 0 AND 1) THEN  -- NaN too
        RAISE EXCEPTION 'max_importance must be between 0 and 1, got %', max_importance
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF min_age < interval '0' OR cooldown < interval '0' THEN
        RAISE EXCEPTION '% must not be negative, got %', CASE WHEN min_age < interval '0' THEN 'min_age'
                                                              ELSE 'cooldown' END,
            CASE WHEN min_age < interval '0' THEN min_age ELSE cooldown END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- now() minus more would fall before the first timestamp PostgreSQL holds (4713 BC)
    IF min_age > interval '1000 years' OR cooldown > interval '1000 years' THEN
        RAISE EXCEPTION '% must be at most 1000 years, got %',
            CASE WHEN min_age > interval '1000 years' THEN 'min_age' ELSE 'cooldown' END,
            CASE WHEN min_age > interval '1000 years' THEN min_age ELSE cooldown END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n = 0 THEN
        RETURN;
    END IF;
    -- where the walk starts in the fixed pseudo-random order hashint8(id): a seed repeats a sample
    start := CASE WHEN seed IS NULL THEN (floor(random() * 4294967296)::bigint - 2147483648)::integer
                  ELSE hashint8(seed) END;
    -- Read the tenant's eligible memories in hashint8(id) order from start (wrapping around) until n are
    -- found: an index walk over memories_revalue_idx costing about n / (eligible share) rows, however large
    -- the tenant. (TABLESAMPLE samples the table's pages, all tenants together; ORDER BY random() reads and
    -- ranks every eligible row.) The importance < 0.5 term, added when it holds, lets the planner use that
    -- partial index; above it the tenant's rows are read and the first n in hash order kept (top-n, no sort).
    RETURN QUERY EXECUTE format($q$
        WITH walk AS (
            SELECT w.id, w.lap, w.h FROM (
                (SELECT m.id, 0 AS lap, hashint8(m.id) AS h FROM spark.memories m
                 WHERE m.tenant = $1 AND hashint8(m.id) >= $2 %1$s
                 ORDER BY hashint8(m.id) LIMIT $3)
                UNION ALL
                (SELECT m.id, 1 AS lap, hashint8(m.id) AS h FROM spark.memories m
                 WHERE m.tenant = $1 AND hashint8(m.id) < $2 %1$s
                 ORDER BY hashint8(m.id) LIMIT $3)) w
            LIMIT $3)
        SELECT m.id, m.key, m.text, m.category, m.kind, m.tier, m.importance, m.created_at, m.helpful_count,
               m.followed_count, m.unhelpful_count, m.ignored_count, m.reliability, m.actionability,
               (SELECT count(*) FROM spark.retrieval_items i  -- the tenant's own advise log only
                WHERE i.tenant = m.tenant AND i.memory_tenant = m.tenant AND i.memory_id = m.id),
               (SELECT max(r.created_at) FROM spark.retrieval_items i
                JOIN spark.retrievals r ON r.tenant = i.tenant AND r.id = i.retrieval_id
                WHERE i.tenant = m.tenant AND i.memory_tenant = m.tenant AND i.memory_id = m.id),
               (SELECT max(v.decided_at) FROM spark.revaluations v
                WHERE v.tenant = m.tenant AND v.memory_id = m.id)
        FROM walk JOIN spark.memories m ON m.tenant = $1 AND m.id = walk.id
        ORDER BY walk.lap, walk.h, m.id
        $q$,
        format($f$AND m.importance <= $4 %s AND m.created_at <= now() - $5
                  AND NOT EXISTS (SELECT 1 FROM spark.revaluations v WHERE v.tenant = m.tenant
                                  AND v.memory_id = m.id AND v.decided_at > now() - $6)$f$,
               CASE WHEN max_importance < 0.5 THEN 'AND m.importance < 0.5' ELSE '' END))
    USING tenant, start, n, max_importance, min_age, cooldown;
END
$fn$;
COMMENT ON FUNCTION spark.revalue_sample(text, integer, real, interval, interval, bigint) IS
    'A random sample of tenant''s low-importance memories for revaluation (docs/advisor.md, Importance '
    'revaluation). n: at most this many rows (0: none; fewer when fewer are eligible); max_importance: only '
    'memories at or below it (default 0.3); min_age: only memories created at least this long ago (default 7 '
    'days); cooldown: leave out memories revalued within it (default 90 days); seed: the same seed and data '
    'give the same sample (NULL: random). Returns each memory with the signals a reviewer needs: outcome '
    'counts, reliability, actionability, times surfaced by spark.advise and when last, when last revalued. '
    'The sample walks a fixed pseudo-random order from a random point (partial index memories_revalue_idx '
    'when max_importance < 0.5), so its cost follows n, not the tenant''s size. Errors: 22004 NULL tenant, '
    'n, max_importance, min_age or cooldown; 22023 empty or over-long tenant, negative n, max_importance '
    'outside 0..1, a min_age or cooldown that is negative or over 1000 years.';

-- A decision's last_revalued_at as text: the time, or NULL when it is no ISO 8601 time with its offset
-- (without one the session's TimeZone would decide what it means) or no time PostgreSQL can hold (a date or
-- clock out of range, or an offset of 16 hours or more: +16:00 is ISO 8601, but PostgreSQL holds offsets
-- up to 15:59).
CREATE OR REPLACE FUNCTION spark._revalued_at(value text)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF value IS NULL OR value !~ '^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}(:?\d{2})?)$' THEN
        RETURN NULL;
    END IF;
    RETURN value::timestamptz;
EXCEPTION
    WHEN datetime_field_overflow OR invalid_datetime_format  -- 2026-13-45, 24:61:00
         OR invalid_time_zone_displacement_value THEN  -- +16:00, +99:99
        RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION spark._revalued_at(text) IS
    'spark.revalue_apply''s reading of a decision''s last_revalued_at. value: an ISO 8601 time with its '
    'offset (2026-11-23T10:00:00.123456+00:00, or Z; the offset under 16 hours). Returns it, or NULL for '
    'NULL or anything else (never an error); the caller names the entry.';

-- The result gained a status column, and CREATE OR REPLACE cannot change a result type: drop a version
-- without it (a current one is replaced in place and keeps its grants).
DO $do$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_proc p
               WHERE p.oid = pg_catalog.to_regprocedure('spark.revalue_apply(text, jsonb, text)')
                 AND NOT 'status' = ANY (p.proargnames)) THEN
        DROP FUNCTION spark.revalue_apply(text, jsonb, text);
    END IF;
END
$do$;

CREATE OR REPLACE FUNCTION spark.revalue_apply(tenant text, decisions jsonb, decided_by text DEFAULT 'api')
RETURNS TABLE (id bigint, key text, old_importance real, new_importance real, changed boolean, tier text,
               status text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    entries jsonb[];
    ids bigint[];
    imps real[];
    exps real[];
    whys text[];
    ekeys text[];
    md5s text[];
    checks boolean[];
    revs timestamptz[];
    states text[];
    bad text;
BEGIN
    PERFORM spark._check_writer(tenant);
    IF decisions IS NULL OR decided_by IS NULL THEN
        RAISE EXCEPTION '% must not be NULL',
            CASE WHEN decisions IS NULL THEN 'decisions' ELSE 'decided_by' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF jsonb_typeof(decisions) <> 'array' THEN
        RAISE EXCEPTION 'decisions must be a JSON array of {"id", "importance", "reason"} objects, got %',
            jsonb_typeof(decisions) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF decided_by = '' OR length(decided_by) > 64 THEN
        RAISE EXCEPTION 'decided_by must be 1 to 64 characters' USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- each entry's id, importance, expected importance and reason, NULL where absent or of the wrong type
    -- (reported below). A number in 0..1 becomes the nearest real, so the exact value a sample returned
    -- compares equal to the stored one (rounded to 40 places first: a tinier number is 0, not an underflow).
    SELECT coalesce(array_agg(e.v ORDER BY e.ord), '{}'),
           coalesce(array_agg(CASE WHEN jsonb_typeof(e.v -> 'id') = 'number'
                                        AND e.v ->> 'id' ~ '^-?[0-9]{1,19}$'
                                        AND (e.v ->> 'id')::numeric BETWEEN -9223372036854775808
                                                                        AND 9223372036854775807
                                   THEN (e.v ->> 'id')::bigint END ORDER BY e.ord), '{}'),
           coalesce(array_agg(CASE WHEN jsonb_typeof(e.v -> 'importance') = 'number' THEN
                                   CASE WHEN (e.v ->> 'importance')::numeric BETWEEN 0 AND 1
                                        THEN round((e.v ->> 'importance')::numeric, 40)::real END END
                              ORDER BY e.ord), '{}'),
           coalesce(array_agg(CASE WHEN jsonb_typeof(e.v -> 'expected') = 'number' THEN
                                   CASE WHEN (e.v ->> 'expected')::numeric BETWEEN 0 AND 1
                                        THEN round((e.v ->> 'expected')::numeric, 40)::real END END
                              ORDER BY e.ord), '{}'),
           coalesce(array_agg(CASE WHEN jsonb_typeof(e.v -> 'reason') = 'string' THEN e.v ->> 'reason' END
                              ORDER BY e.ord), '{}'),
           coalesce(array_agg(CASE WHEN jsonb_typeof(e.v -> 'key') = 'string' THEN e.v ->> 'key' END
                              ORDER BY e.ord), '{}'),
           coalesce(array_agg(CASE WHEN jsonb_typeof(e.v -> 'text_md5') = 'string'
                                        AND e.v ->> 'text_md5' ~ '^[0-9a-f]{32}$'
                                   THEN e.v ->> 'text_md5' END ORDER BY e.ord), '{}'),
           -- last_revalued_at given (null too: never revalued when sampled) is checked; absent is not
           coalesce(array_agg(jsonb_typeof(e.v) = 'object' AND e.v ? 'last_revalued_at' ORDER BY e.ord), '{}'),
           coalesce(array_agg(CASE WHEN jsonb_typeof(e.v -> 'last_revalued_at') = 'string'
                                   THEN spark._revalued_at(e.v ->> 'last_revalued_at') END ORDER BY e.ord),
                    '{}')
    INTO entries, ids, imps, exps, whys, ekeys, md5s, checks, revs
    FROM jsonb_array_elements(decisions) WITH ORDINALITY e(v, ord);
    -- the memories decided on stay as read until commit (locked in id order: concurrent batches cannot
    -- deadlock); at READ COMMITTED, every statement below reads them and their log as last committed,
    -- after any writer that held them (under REPEATABLE READ it would read the transaction's snapshot, and
    -- two concurrent batches keeping one memory would both log it: spark_pg.revalue.apply runs its own
    -- transaction at READ COMMITTED and refuses a caller's at another level)
    PERFORM 1 FROM spark.memories m
    WHERE m.tenant = revalue_apply.tenant AND m.id = ANY(ids)
    ORDER BY m.id FOR UPDATE;
    -- every entry is checked before anything is written; the first bad one is named
    SELECT format('decisions[%s]: %s', p.ord - 1, p.problem) INTO bad
    FROM (
        SELECT d.ord,
               CASE
                   WHEN jsonb_typeof(d.entry) <> 'object'
                       THEN format('must be an object, got %s', jsonb_typeof(d.entry))
                   WHEN NOT d.entry ? 'id' THEN 'id is missing'
                   WHEN d.mid IS NULL
                       THEN format('id must be an integer, got %s', left((d.entry -> 'id')::text, 40))
                   WHEN NOT d.entry ? 'importance' THEN 'importance is missing'
                   WHEN d.imp IS NULL
                       THEN format('importance must be a number from 0 to 1, got %s',
                                   left((d.entry -> 'importance')::text, 40))
                   WHEN d.exp IS NULL AND jsonb_typeof(d.entry -> 'expected') <> 'null'
                       THEN format('expected must be a number from 0 to 1 or null, got %s',
                                   left((d.entry -> 'expected')::text, 40))
                   WHEN d.md5 IS NULL AND jsonb_typeof(d.entry -> 'text_md5') <> 'null'
                       THEN format('text_md5 must be 32 lower-case hex digits or null, got %s',
                                   left((d.entry -> 'text_md5')::text, 40))
                   WHEN d.rev IS NULL AND jsonb_typeof(d.entry -> 'last_revalued_at') <> 'null'
                       THEN format('last_revalued_at must be an ISO 8601 time with its offset or null, got %s',
                                   left((d.entry -> 'last_revalued_at')::text, 40))
                   WHEN jsonb_typeof(d.entry -> 'reason') NOT IN ('string', 'null')
                       THEN format('reason must be a string, got %s', jsonb_typeof(d.entry -> 'reason'))
                   -- checked against the memory's key (a number was ignored when expected was given)
                   WHEN jsonb_typeof(d.entry -> 'key') NOT IN ('string', 'null')
                       THEN format('key must be a string, got %s', left((d.entry -> 'key')::text, 40))
                   WHEN length(d.why) > 1000
                       THEN format('reason is %s characters; the limit is 1000', length(d.why))
                   WHEN x.extra IS NOT NULL
                       THEN format('unknown field %s (allowed: id, importance, expected, text_md5, '
                                   'last_revalued_at, reason, key)',
                                   quote_literal(x.extra))
                   -- made on a sample (expected given): a memory deleted or re-keyed since is skipped below
                   WHEN m.id IS NULL AND d.exp IS NULL
                       THEN format('id %s is not a memory of tenant %s', d.mid,
                                   quote_literal(revalue_apply.tenant))
                   WHEN m.id IS NOT NULL AND d.exp IS NULL
                        AND d.entry ? 'key' AND d.entry ->> 'key' IS DISTINCT FROM m.key
                       THEN format('key %s does not match memory %s, whose key is %s',
                                   left((d.entry -> 'key')::text, 80), d.mid, quote_literal(m.key))
                   WHEN d.first_ord < d.ord
                       THEN format('id %s was already decided at decisions[%s]', d.mid, d.first_ord - 1)
               END AS problem
        FROM (SELECT u.*, min(u.ord) OVER (PARTITION BY u.mid) AS first_ord
              FROM unnest(entries, ids, imps, exps, whys, md5s, revs)
                   WITH ORDINALITY u(entry, mid, imp, exp, why, md5, rev, ord)) d
        LEFT JOIN spark.memories m ON m.tenant = revalue_apply.tenant AND m.id = d.mid
        LEFT JOIN LATERAL (SELECT min(k.k) AS extra FROM jsonb_object_keys(
                               CASE jsonb_typeof(d.entry) WHEN 'object' THEN d.entry ELSE '{}' END) k(k)
                           WHERE k.k NOT IN ('id', 'importance', 'expected', 'text_md5', 'last_revalued_at',
                                             'reason', 'key')) x
                  ON true) p
    WHERE p.problem IS NOT NULL
    ORDER BY p.ord LIMIT 1;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION '%', bad USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- what each decision does, against the memory as it is now (the rows are locked): a decision made on a
    -- sample (expected given) whose memory has since been deleted is skipped; so is one whose memory has
    -- been revalued since (last_revalued_at given and not its last revaluation: the same file applied
    -- again, a second sweep over the same sample), even to keep it, and that is said before any change the
    -- revaluation made (a raised memory is decided, in its cooldown, not changed and left for the next
    -- sweep); then one whose importance, key or text (text_md5) has changed is skipped, not applied over
    -- the change; a decision equal to the importance is kept (logged, nothing written)
    SELECT coalesce(array_agg(CASE WHEN m.id IS NULL THEN 'skipped: deleted since sampled'
                                   WHEN d.checked AND d.rev IS DISTINCT FROM
                                        (SELECT max(v.decided_at) FROM spark.revaluations v
                                         WHERE v.tenant = revalue_apply.tenant AND v.memory_id = d.mid)
                                       THEN 'skipped: decided since sampled'
                                   WHEN d.exp <> m.importance OR d.ekey <> m.key OR d.md5 <> md5(m.text)
                                       THEN 'skipped: changed since sampled'
                                   WHEN d.imp = m.importance THEN 'kept'
                                   WHEN d.imp > m.importance THEN 'raised'
                                   ELSE 'lowered' END ORDER BY d.ord), '{}')
    INTO states
    FROM unnest(ids, imps, exps, ekeys, md5s, checks, revs)
         WITH ORDINALITY d(mid, imp, exp, ekey, md5, checked, rev, ord)
    LEFT JOIN spark.memories m ON m.tenant = revalue_apply.tenant AND m.id = d.mid;
    INSERT INTO spark.revaluations (tenant, memory_id, old_importance, new_importance, reason, decided_by)
    SELECT revalue_apply.tenant, m.id, m.importance, d.imp, d.why, revalue_apply.decided_by
    FROM unnest(ids, imps, whys, states) WITH ORDINALITY d(mid, imp, why, state, ord)
    JOIN spark.memories m ON m.tenant = revalue_apply.tenant AND m.id = d.mid
    WHERE d.state IN ('kept', 'raised', 'lowered')
    ORDER BY d.ord;
    RETURN QUERY
    WITH cur AS MATERIALIZED (
        SELECT d.ord, d.mid AS id, coalesce(m.key, d.ekey) AS key, m.importance AS old, d.imp AS new, m.tier,
               d.state,
               d.state IN ('raised', 'lowered') AS written,
               -- an archive spark.assign_tiers gave for low importance alone (sql/060) ends when importance
               -- reaches 0.3 (the real 0.3, as sql/060 compares it); a lowered importance archives at its
               -- next run, like any other rule's. Only a JSON true is true: metadata is free-form at ingest.
               (d.state IN ('raised', 'lowered') AND m.tier = 'archive'
                AND m.metadata -> 'tier_by_rule' = 'true'::jsonb
                AND m.metadata ->> 'tier_reason' = 'a year unused, importance under 0.3'
                AND d.imp >= 0.3::real) AS lift
        FROM unnest(ids, imps, states, ekeys) WITH ORDINALITY d(mid, imp, state, ekey, ord)
        LEFT JOIN spark.memories m ON m.tenant = revalue_apply.tenant AND m.id = d.mid),
    moved AS (
        UPDATE spark.memories m
        SET importance = c.new, updated_at = now(),
            tier = CASE WHEN c.lift THEN 'active' ELSE m.tier END,
            metadata = CASE WHEN c.lift
                            THEN m.metadata || jsonb_build_object('tier_by_rule', false, 'tier_reason', NULL)
                            ELSE m.metadata END
        FROM cur c
        WHERE m.tenant = revalue_apply.tenant AND m.id = c.id AND c.written
        RETURNING m.id, m.tier)
    SELECT c.id, c.key, c.old, c.new, c.written, coalesce(mv.tier, c.tier), c.state
    FROM cur c LEFT JOIN moved mv ON mv.id = c.id
    ORDER BY c.ord;
END
$fn$;
COMMENT ON FUNCTION spark.revalue_apply(text, jsonb, text) IS
    'Apply a batch of importance decisions for tenant''s memories. decisions: a JSON array of {"id": memory '
    'id, "importance": 0..1, "expected": optional, the importance the decision was made on (as sampled), '
    '"text_md5": optional, md5 of the text as sampled, "last_revalued_at": optional, the memory''s last '
    'revaluation as sampled (an ISO 8601 time with offset, or null for none), '
    '"reason": optional text up to 1,000 characters, "key": optional, checked against the id}. decided_by: '
    'who decided (auto, interactive, file; default api). Every entry is checked before anything is written '
    '(a bad one fails the whole batch); then, with the memories locked, an entry made on a sample '
    '(expected given) is skipped, neither written nor logged, when its memory has been deleted since '
    '(status skipped: deleted since sampled; its old importance and tier are NULL), or it has been '
    'revalued since last_revalued_at (skipped: decided since sampled, whatever that revaluation changed: a '
    'decisions file applied twice logs nothing the second time), or its importance, key or text (text_md5) '
    'differ (skipped: changed since sampled; the memory stays eligible for the next sample); one equal to the current importance is kept (logged, '
    'the memory untouched), the others raise or lower it. Every decision not skipped is logged to '
    'spark.revaluations (so the memory leaves spark.revalue_sample for its cooldown). Call it at READ '
    'COMMITTED: under REPEATABLE READ it reads the log as of the transaction''s snapshot, and two '
    'concurrent batches keeping one memory both log it. Returns each decision '
    'in order: the current (old) importance, the decided (new) one, whether it was written, the tier and '
    'the status (raised, lowered, kept, or skipped: ...). A memory archived by '
    'spark.assign_tiers for low importance alone returns to active when raised to 0.3 or more. Errors: '
    '22004 NULL tenant, decisions or decided_by; 22023 an empty or over-long tenant or the pack''s tenant '
    '_system, decisions not an '
    'array, an entry that is not an object, lacks id or importance, has an unknown field, an importance or '
    'expected outside 0..1, a key that is not a string, a text_md5 that is not 32 hex digits, a last_revalued_at that is not an ISO '
    '8601 time with offset PostgreSQL can hold (the offset under 16 hours), a reason over 1,000 '
    'characters, an id that repeats, and without expected an id that is not the tenant''s memory or a key that does not match '
    '(the message names decisions[i], 0-based), a bad decided_by.';
