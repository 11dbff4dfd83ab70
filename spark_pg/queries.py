"""Every SQL statement the Python side sends, in one place. Functions are called by named argument."""

from __future__ import annotations

REGISTER_MODEL = """
SELECT spark.register_model(name => %(name)s, dim => %(dim)s, pooling => %(pooling)s,
                            max_tokens => %(max_tokens)s, query_prefix => %(query_prefix)s,
                            document_prefix => %(document_prefix)s)
"""

ACTIVE_MODEL = "SELECT id, name, dim FROM spark.active_model() WHERE id IS NOT NULL"

# A writer that stores vectors (ingest, the worker) takes this lock in its write transaction before it
# writes anything, holds it to the commit, and only then checks the active model (ACTIVE_MODEL_HELD, its own
# statement: a statement's snapshot is taken before it waits for a lock). spark.activate_model takes it
# exclusively (sql/010-models.sql): a switch waits for the writers in flight and rebuilds the queue with
# what they wrote, and a writer that comes after it sees the new model.
HOLD_MODEL_SWITCH = """
SELECT pg_advisory_xact_lock_shared(hashtextextended('spark.activate_model', 0)),
       current_setting('transaction_isolation') = 'read committed' AS fresh_snapshots
"""

# In READ COMMITTED (fresh_snapshots) the next statement's snapshot is taken after the lock, so it sees a
# switch that committed before. In a caller's REPEATABLE READ or SERIALIZABLE transaction FOR SHARE makes a
# switch committed since its snapshot a serialization failure (40001) instead of the old model read as still
# active; FOR SHARE needs UPDATE on the table, which a tenant role (docs/security.md) does not hold.
ACTIVE_MODEL_SEEN = "SELECT id, name FROM spark.embedding_models WHERE active"
ACTIVE_MODEL_HELD = ACTIVE_MODEL_SEEN + " FOR SHARE"

INGEST_COLUMNS = (
    "tenant",
    "key",
    "kind",
    "category",
    "source",
    "text",
    "context",
    "descriptor",
    "content_hash",
    "importance",
    "tier",
    "priority",
    "created_at",
    "metadata",
    "action_domain",
    "actionability",
    "embedding",
    "embedding_model_id",
    "keep",
)

DROP_INGEST_TABLE = "DROP TABLE IF EXISTS pg_temp._spark_ingest"

CREATE_INGEST_TABLE = """
CREATE TEMP TABLE _spark_ingest (
    tenant text, key text, kind text, category text, source text, text text, context text, descriptor text,
    content_hash bytea, importance real, tier text, priority text, created_at timestamptz, metadata jsonb,
    action_domain text, actionability real, embedding vector, embedding_model_id smallint, keep text[]
) ON COMMIT DROP
"""

COPY_INGEST = f"COPY _spark_ingest ({', '.join(INGEST_COLUMNS)}) FROM STDIN"

# A stored memory whose content changes loses its vectors (every model's) and is queued again: the
# memories_queue_update trigger does both (migrations 0008, 0009), for every writer.

# One statement, rows in (tenant, key) order: two ingests inserting the same new keys take them in one
# order, so they wait for each other instead of deadlocking. A row that gives created_at overwrites the
# stored one on update, a row that does not keeps it (looked up in the staged rows: EXCLUDED holds the
# now() a missing one was given; the staging table's index makes that one probe per updated row). A row
# that would change nothing is not written (no new row version, updated_at kept) and not returned: the
# caller counts it unchanged.
UPSERT = """
INSERT INTO spark.memories AS m (tenant, key, kind, category, source, text, context, descriptor, content_hash,
                                 importance, tier, priority, created_at, metadata, action_domain,
                                 actionability)
SELECT tenant, key, kind, category, source, text, context, descriptor, content_hash, importance, tier,
       priority, coalesce(created_at, now()), metadata, action_domain, actionability
FROM _spark_ingest
ORDER BY tenant, key
ON CONFLICT (tenant, key) DO UPDATE SET
    kind = EXCLUDED.kind, category = EXCLUDED.category, source = EXCLUDED.source, text = EXCLUDED.text,
    context = EXCLUDED.context, descriptor = EXCLUDED.descriptor, content_hash = EXCLUDED.content_hash,
    importance = EXCLUDED.importance, tier = EXCLUDED.tier, priority = EXCLUDED.priority,
    metadata = EXCLUDED.metadata, action_domain = EXCLUDED.action_domain,
    actionability = EXCLUDED.actionability, updated_at = now(),
    created_at = coalesce((SELECT s.created_at FROM _spark_ingest s
                           WHERE s.tenant = EXCLUDED.tenant AND s.key = EXCLUDED.key), m.created_at)
WHERE (m.kind, m.category, m.source, m.text, m.context, m.descriptor, m.content_hash, m.importance, m.tier,
       m.priority, m.metadata, m.action_domain, m.actionability)
      IS DISTINCT FROM
      (EXCLUDED.kind, EXCLUDED.category, EXCLUDED.source, EXCLUDED.text, EXCLUDED.context,
       EXCLUDED.descriptor, EXCLUDED.content_hash, EXCLUDED.importance, EXCLUDED.tier, EXCLUDED.priority,
       EXCLUDED.metadata, EXCLUDED.action_domain, EXCLUDED.actionability)
   OR EXISTS (SELECT 1 FROM _spark_ingest s WHERE s.tenant = EXCLUDED.tenant AND s.key = EXCLUDED.key
              AND s.created_at <> m.created_at)
RETURNING (xmax = 0) AS inserted
"""

# The tier marks (metadata.tier_by_rule and tier_reason) are spark.assign_tiers' record that it set the
# stored tier (sql/060-tiers.sql). A row never brings its own: a tier a row sets is the user's. Taken off
# every staged row first; KEEP_STORED_FIELDS then gives the stored marks back to a row that keeps the tier.
DROP_ROW_TIER_MARKS = """
UPDATE _spark_ingest SET metadata = metadata - 'tier_by_rule' - 'tier_reason'
WHERE metadata ?| ARRAY['tier_by_rule', 'tier_reason']
"""

# the fields a row left out take the stored row's values (it is locked: they cannot change before the
# upsert), so the upsert keeps them and a row that changes nothing else is counted unchanged. The tier
# marks follow the tier, not the metadata: kept with a kept tier (new metadata or not: a rule's archive
# stays the rule's, taken back when its rule stops holding), dropped with a tier the row sets (the user's)
KEEP_STORED_FIELDS = """
UPDATE _spark_ingest s
SET importance = CASE WHEN 'importance' = ANY(s.keep) THEN m.importance ELSE s.importance END,
    tier = CASE WHEN 'tier' = ANY(s.keep) THEN m.tier ELSE s.tier END,
    priority = CASE WHEN 'priority' = ANY(s.keep) THEN m.priority ELSE s.priority END,
    metadata = CASE WHEN 'metadata' = ANY(s.keep) THEN m.metadata - 'tier_by_rule' - 'tier_reason'
                    ELSE s.metadata END
               || CASE WHEN 'tier' = ANY(s.keep)
                       THEN (SELECT coalesce(jsonb_object_agg(e.key, e.value), '{}'::jsonb)
                             FROM jsonb_each(m.metadata) e WHERE e.key IN ('tier_by_rule', 'tier_reason'))
                       ELSE '{}'::jsonb END
FROM spark.memories m
WHERE m.tenant = s.tenant AND m.key = s.key AND s.keep <> '{}'
"""

INDEX_INGEST_TABLE = "CREATE INDEX ON _spark_ingest (tenant, key)"

# around UPSERT, in its transaction: the rows it writes carry their own descriptor and hash, so the
# text-follows trigger (schema 0014) leaves them alone; off again at once, for the caller's own statements
INGEST_WRITES = "SELECT set_config('spark.ingest_writes', %s, true)"

# the stored rows an ingest will update, locked first and in (tenant, id) order, as spark.revalue_apply
# locks them: two writers sharing stored rows wait for each other instead of deadlocking. The
# lock an UPDATE takes, no stronger: FOR UPDATE would also block the workers' foreign-key checks (KEY
# SHARE) on these rows while they hold queue rows this ingest's trigger re-queues (a deadlock the soak found)
LOCK_INGEST_ROWS = """
SELECT 1 FROM spark.memories m JOIN _spark_ingest s ON m.tenant = s.tenant AND m.key = s.key
ORDER BY m.tenant, m.id
FOR NO KEY UPDATE OF m
"""

# rows staged without a vector (their stored row had the same content, embedded) whose stored row, now that
# it is locked, no longer has that content and vector: a writer changed it in between, and the upsert will
# put this content back without a vector; they are embedded before it
STALE_SKIPS = """
SELECT s.tenant, s.key, s.descriptor FROM _spark_ingest s
WHERE s.embedding IS NULL
  AND NOT EXISTS (SELECT 1 FROM spark.memories m
                  WHERE m.tenant = s.tenant AND m.key = s.key AND m.content_hash = s.content_hash
                    AND EXISTS (SELECT 1 FROM spark.embeddings e
                                WHERE e.tenant = m.tenant AND e.memory_id = m.id
                                  AND e.model_id = %(model_id)s))
ORDER BY s.tenant, s.key
"""

STAGE_VECTORS = """
UPDATE _spark_ingest s SET embedding = v.embedding, embedding_model_id = %(model_id)s
FROM unnest(%(tenants)s::text[], %(keys)s::text[], %(vectors)s::vector[]) AS v(tenant, key, embedding)
WHERE s.tenant = v.tenant AND s.key = v.key
"""

# Before a writer that claimed nothing stores vectors, the queue rows of their memories, locked in key order:
# a worker's claimed batch is waited for. Stored first, the vector's dequeue trigger waited for the queue row
# the worker held, while the worker's store of the same vector waited for this one: a deadlock (40P01) that
# ended a serving worker and rolled back its batch. (The worker claims with SKIP LOCKED: it never waits here.)
LOCK_QUEUED_STAGED = """
SELECT 1 FROM spark.embed_queue q
WHERE (q.tenant, q.memory_id) IN (SELECT m.tenant, m.id FROM _spark_ingest s
                                  JOIN spark.memories m ON m.tenant = s.tenant AND m.key = s.key
                                  WHERE s.embedding IS NOT NULL)
ORDER BY q.tenant, q.memory_id
FOR UPDATE OF q
"""
LOCK_QUEUED_IDS = """
SELECT 1 FROM spark.embed_queue q
WHERE (q.tenant, q.memory_id) IN (SELECT * FROM unnest(%(tenants)s::text[], %(ids)s::bigint[]))
ORDER BY q.tenant, q.memory_id
FOR UPDATE OF q
"""

# the staged vectors (a row staged without one kept its content, and so its stored vector); ingest runs it
# only while their model is the active one, under HOLD_MODEL_SWITCH, after LOCK_QUEUED_STAGED
STORE_VECTORS = """
INSERT INTO spark.embeddings AS e (tenant, memory_id, model_id, created_at, embedding, embedded_at)
SELECT m.tenant, m.id, s.embedding_model_id, m.created_at, s.embedding, clock_timestamp()
FROM _spark_ingest s JOIN spark.memories m ON m.tenant = s.tenant AND m.key = s.key
WHERE s.embedding IS NOT NULL
ORDER BY m.tenant, m.id
ON CONFLICT (tenant, memory_id, model_id) DO UPDATE SET
    embedding = EXCLUDED.embedding, created_at = EXCLUDED.created_at, embedded_at = EXCLUDED.embedded_at
"""

# a setting in force, and another from now on: for the transaction (local) or the session (connection_modes)
SET_SETTING_RETURNING_OLD = "SELECT current_setting(%(name)s), set_config(%(name)s, %(value)s, %(local)s)"
SET_SETTING = "SELECT set_config(%(name)s, %(value)s, %(local)s)"

# a tenant's HNSW index steps, CONCURRENTLY (sql/035), under the tenant's builder lock (session-level)
TENANT_INDEX_PLAN = "SELECT model_id, index_name, action, statement FROM spark.tenant_index_plan(%(tenant)s)"
TRY_TENANT_INDEX_LOCK = (
    "SELECT pg_try_advisory_lock(hashtextextended('spark.tenant_index:' || %(tenant)s, 0))"
)
TENANT_INDEX_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended('spark.tenant_index:' || %(tenant)s, 0))"
# held (session-level) by the builder running CONCURRENTLY statements on spark.embeddings: one at a time
TRY_TENANT_INDEX_DDL_LOCK = "SELECT pg_try_advisory_lock(hashtextextended('spark.tenant_index_ddl', 0))"
TENANT_INDEX_DDL_UNLOCK = "SELECT pg_advisory_unlock(hashtextextended('spark.tenant_index_ddl', 0))"

# whether a tenant holds a memory (spark-pg search notes a tenant that holds none)
TENANT_HAS_MEMORIES = "SELECT EXISTS (SELECT 1 FROM spark.memories m WHERE m.tenant = %(tenant)s)"

# a worker's batch: the server ends the session if the transaction sits idle this long (spark_pg.worker)
SET_IDLE_TIMEOUT = "SELECT set_config('idle_in_transaction_session_timeout', %(ms)s, true)"

# after an ingest commits: the touched tenants' statistics and vector indexes, where stale (sql/035); inside
# a caller's transaction (build_indexes false) the statistics only
REFRESH_TENANT_STATS = (
    "SELECT coalesce(sum(spark.refresh_tenant_stats(t, build_indexes => %(build_indexes)s)), 0) "
    "FROM unnest(%(tenants)s::text[]) t"
)

# (tenant, key, content_hash) of rows already embedded by a model, for one batch of keys
EMBEDDED_HASHES = """
SELECT m.tenant, m.key, m.content_hash
FROM spark.memories m
JOIN unnest(%(tenants)s::text[], %(keys)s::text[]) AS k(tenant, key) ON m.tenant = k.tenant AND m.key = k.key
WHERE EXISTS (SELECT 1 FROM spark.embeddings e
              WHERE e.tenant = m.tenant AND e.memory_id = m.id AND e.model_id = %(model_id)s)
"""

_RETRIEVE_ARGS = """tenant => %(tenant)s, query_text => %(query)s, query_embedding => %(embedding)s,
                      k => %(k)s, params => %(params)s"""

# The query's vector is cached (for replay from psql) in the same statement as the retrieval: one round trip.
# Only a vector the retrieval searches with is cached, under the active model: one of its dimension, sent
# without params.query_model or with the active model's name there. A vector of another model (a client still
# on the old one during a switch), which spark.retrieve ignores, is never filed under the active model.
# A call repeating a cached text writes its vector over the cached one: one model embeds one query text to the
# same vector (the model's query prefix included) up to float noise, so the row holds what the last call
# searched with, and a row holding anything else (another model's vector, cached before this check) is
# repaired by the next call.
# Never waits: the writer of a (tenant, model, text) row first takes a transaction-level advisory lock on
# the row's bucket (its hash modulo 1024) with pg_try_advisory_xact_lock, and skips the write (not the
# retrieval) when another transaction holds it, e.g. has written that row and not yet committed. Two
# retrievals of one text therefore never wait for each other, nor deadlock inside callers' transactions; the
# skipped call's bump of uses and last_used_at is lost (nothing reads them: they describe the cache to a
# person). Buckets, not a lock per text: a transaction caching many texts holds at most 1024 locks (a lock
# per text runs the lock table out of memory, 53200, past some thousands of texts in one transaction), and
# two transactions share a bucket by chance once in 1024 pairs, which costs one a cache write.
# Only in a READ COMMITTED transaction: under REPEATABLE READ or SERIALIZABLE, a row another transaction
# committed since the snapshot would make the insert a serialization failure (40001), failing the retrieval.
_CACHE_QUERY_VECTOR = """
WITH cache AS (
    INSERT INTO spark.query_embeddings AS e (tenant, model_id, query_hash, query_text, embedding)
    SELECT %(tenant)s, m.id, sha256(convert_to(%(query)s, 'UTF8')), %(query)s, %(embedding)s
    FROM spark.active_model() m
    -- CASE: the lock is taken last, only for a row that will be written
    WHERE CASE WHEN %(cache)s AND m.id IS NOT NULL AND %(embedding)s::vector IS NOT NULL
                    AND vector_dims(%(embedding)s::vector) = m.dim
                    AND coalesce(%(params)s::jsonb ->> 'query_model', m.name) = m.name
                    AND current_setting('transaction_isolation') = 'read committed'
                    AND spark._check_tenant(%(tenant)s) IS NOT NULL
               THEN pg_try_advisory_xact_lock(hashtext('spark.query_embeddings'),
                                              hashtext(m.id || ':' || %(tenant)s || ':' || %(query)s) & 1023)
                    {async_commit}
               ELSE false END
    ON CONFLICT (tenant, model_id, query_hash) DO UPDATE
        SET embedding = EXCLUDED.embedding, last_used_at = now(), uses = e.uses + 1
)"""

# retrieve writes nothing but the cache, which is best effort: its transaction does not wait for the WAL
# flush at commit (synchronous_commit off for that transaction only; a crash can lose the last few cache
# entries, nothing else). advise also logs the retrieval, so it commits as usual.
# Only when the call is its own transaction (RETRIEVE_OWN_TRANSACTION): inside a caller's transaction the
# setting would cover the caller's writes too.
_RETRIEVE_SELECT = f"""
SELECT memory_id, key, text, category, kind, system_default, created_at, score, semantic_sim, keyword_score,
       recency, outcome, trigger_conf, priority, pools, why
FROM spark.retrieve({_RETRIEVE_ARGS})
"""
# without the cache (cache off, or no vector to cache): no INSERT in the statement, so it also runs in a
# read-only transaction and on a standby
RETRIEVE_UNCACHED = _RETRIEVE_SELECT
RETRIEVE = _CACHE_QUERY_VECTOR.format(async_commit="") + _RETRIEVE_SELECT
RETRIEVE_OWN_TRANSACTION = (
    _CACHE_QUERY_VECTOR.format(async_commit="AND set_config('synchronous_commit', 'off', true) IS NOT NULL")
    + _RETRIEVE_SELECT
)

EXPLAIN = f"""
SELECT rank, status, memory_id, key, text, category, kind, system_default, created_at, score, semantic_sim,
       keyword_score, recency, outcome, trigger_conf, priority, pools, why
FROM spark.explain({_RETRIEVE_ARGS})
ORDER BY rank NULLS LAST, score DESC
"""

# the advisor's call: spark.advise (retrieve + log), with the query vector cached like RETRIEVE's
ADVISE = f"""{_CACHE_QUERY_VECTOR.format(async_commit="")}
SELECT * FROM spark.advise({_RETRIEVE_ARGS}, session_id => %(session)s, tool_name => %(tool)s,
                           intent_family => %(family)s)
"""

RECORD_OUTCOME = """
SELECT spark.record_outcome(tenant => %(tenant)s, memory_id => %(memory_id)s, outcome => %(outcome)s,
                            retrieval_id => %(retrieval_id)s, session_id => %(session)s, source => %(source)s)
"""

NORTH_STAR = "SELECT * FROM spark.north_star(tenant => %(tenant)s, since => %(since)s::timestamptz)"

PUT_TRIGGER_RULE = """
SELECT spark.put_trigger_rule(
    tenant => %(tenant)s, name => %(name)s, pattern => %(pattern)s, surface => %(surface)s,
    context_pattern => %(context_pattern)s, priority => %(priority)s, interrupt => %(interrupt)s,
    origin => %(origin)s, confidence => %(confidence)s::real, shadow => %(shadow)s, metadata => %(metadata)s)
"""

# a write's tenant: 22023 for a bad one, or for the pack's unless the pack loader's spark.pack_writes is on
CHECK_WRITER = "SELECT spark._check_writer(%(tenant)s)"

# a sync leaves exactly the file's static rules (learned ones are the system's)
DROP_OTHER_STATIC_RULES = """
DELETE FROM spark.trigger_rules
WHERE tenant = %(tenant)s AND origin = 'static' AND NOT (name = ANY(%(names)s))
"""

# importance revaluation (sql/065): a random sample of low-importance memories, and a batch of decisions
REVALUE_SAMPLE = """
SELECT id, key, text, category, kind, tier, importance, created_at, helpful_count, followed_count,
       unhelpful_count, ignored_count, reliability, actionability, times_surfaced, last_surfaced_at,
       last_revalued_at
FROM spark.revalue_sample(tenant => %(tenant)s, n => %(n)s::integer,
                          max_importance => %(max_importance)s::real, min_age => %(min_age)s::interval,
                          cooldown => %(cooldown)s::interval, seed => %(seed)s::bigint)
"""

REVALUE_APPLY = """
SELECT id, key, old_importance, new_importance, changed, tier, status
FROM spark.revalue_apply(tenant => %(tenant)s, decisions => %(decisions)s::jsonb,
                         decided_by => %(decided_by)s)
"""

# fitted fusion weights (spark_pg/fusion_fit.py): the labelled log, oldest call first; the stored fit, whose
# weights spark._retrieve_params checks like any params (22023 naming a bad key or value)
RETRIEVE_DEFAULTS = "SELECT spark.retrieve_defaults()"

FUSION_SAMPLES = """
SELECT DISTINCT ON (o.retrieval_id, o.memory_id) o.retrieval_id, i.signals, o.outcome
FROM spark.outcomes o
JOIN spark.retrieval_items i
  ON i.tenant = o.tenant AND i.retrieval_id = o.retrieval_id AND i.memory_id = o.memory_id
WHERE o.tenant = %(tenant)s AND o.retrieval_id IS NOT NULL
-- a person's or an API's verdict beats a hook's inference; then the latest
ORDER BY o.retrieval_id, o.memory_id, (o.source = 'hook'), o.created_at DESC, o.id DESC
"""

PUT_FUSION_WEIGHTS = """
INSERT INTO spark.fusion_weights AS f (tenant, weights, samples, evaluation, in_use, fitted_at)
SELECT %(tenant)s, %(weights)s::jsonb, %(samples)s, %(evaluation)s::jsonb, %(in_use)s, now()
WHERE spark._retrieve_params(%(weights)s::jsonb) IS NOT NULL
  -- no labelled item: a first row would say nothing; an existing one is replaced (its weights leave use)
  AND (%(samples)s > 0 OR EXISTS (SELECT 1 FROM spark.fusion_weights w WHERE w.tenant = %(tenant)s))
ON CONFLICT (tenant) DO UPDATE
SET weights = EXCLUDED.weights, samples = EXCLUDED.samples, evaluation = EXCLUDED.evaluation,
    in_use = EXCLUDED.in_use, fitted_at = EXCLUDED.fitted_at
"""

# fit-weights of one tenant, one at a time: each judges the weights the one before put in use
FUSION_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended('spark.fusion_weights:' || %(tenant)s, 0))"

# the weights in use as spark.retrieve applies them (spark._fitted_weights: the five, each only in its range)
FUSION_IN_USE = (
    "SELECT spark._fitted_weights(weights) FROM spark.fusion_weights WHERE tenant = %(tenant)s AND in_use"
)

# the weights in use stay: their row keeps its weights, samples and evaluation, and notes the latest fit
FUSION_LATEST_FIT = """
UPDATE spark.fusion_weights
SET evaluation = CASE WHEN jsonb_typeof(evaluation) = 'object' THEN evaluation ELSE '{}' END
                 || jsonb_build_object('latest_fit', %(evaluation)s::jsonb || jsonb_build_object('at', now()))
WHERE tenant = %(tenant)s AND in_use
"""

FUSION_RESET = """
UPDATE spark.fusion_weights
SET in_use = false,
    evaluation = CASE WHEN jsonb_typeof(evaluation) = 'object' THEN evaluation ELSE '{}' END
                 || jsonb_build_object('decision', 'back to the defaults: fit-weights --reset',
                                       'reset_at', now(), 'decision_before_reset', evaluation -> 'decision')
WHERE tenant = %(tenant)s AND in_use
RETURNING tenant
"""

# write-behind embedding (spark_pg/worker.py; the queue and its triggers: migration 0008)
# what a run can claim now, what waits out the backoff of a failure, what was given up (max_attempts)
QUEUE_STATE = """
SELECT count(*) FILTER (WHERE attempts < %(max_attempts)s AND not_before <= now()),
       count(*) FILTER (WHERE attempts < %(max_attempts)s AND not_before > now()),
       count(*) FILTER (WHERE attempts >= %(max_attempts)s)
FROM spark.embed_queue
"""

CLAIM_QUEUE = """
SELECT q.tenant, q.memory_id, m.descriptor, m.content_hash
FROM spark.embed_queue q
JOIN spark.memories m ON m.tenant = q.tenant AND m.id = q.memory_id
WHERE q.attempts < %(max_attempts)s AND q.not_before <= now()
ORDER BY q.enqueued_at, q.tenant, q.memory_id
LIMIT %(n)s
FOR UPDATE OF q SKIP LOCKED FOR KEY SHARE OF m SKIP LOCKED
"""

# The claim locks the memory too (KEY SHARE: an edit, NO KEY UPDATE, is not held up): a DELETE of a claimed
# memory then waits for the worker. Without it the two deadlocked (40P01): the DELETE locked the memory and
# its cascade waited for the claimed queue row, while storing the vector (its foreign key) waited for the
# memory. A memory a DELETE holds already is skipped; its queue row goes with it.

# only where the memory still has the content that was embedded (the trigger dequeues what lands);
# embedded_at is when the vector is stored (clock_timestamp): now() is the batch transaction's start, before
# the claim and the embedding, and the lag in `spark-pg stats` left the embedding time out
STORE_CLAIMED = """
INSERT INTO spark.embeddings AS e (tenant, memory_id, model_id, created_at, embedding, queued_at, embedded_at)
SELECT m.tenant, m.id, %(model_id)s, m.created_at, v.embedding, q.enqueued_at, clock_timestamp()
FROM unnest(%(tenants)s::text[], %(ids)s::bigint[], %(hashes)s::bytea[], %(vectors)s::vector[])
     AS v(tenant, id, content_hash, embedding)
JOIN spark.memories m ON m.tenant = v.tenant AND m.id = v.id AND m.content_hash = v.content_hash
LEFT JOIN spark.embed_queue q ON q.tenant = v.tenant AND q.memory_id = v.id
ON CONFLICT (tenant, memory_id, model_id) DO UPDATE SET
    embedding = EXCLUDED.embedding, created_at = EXCLUDED.created_at, embedded_at = EXCLUDED.embedded_at,
    queued_at = EXCLUDED.queued_at
"""

# reembed's store: nothing is claimed, so the memories are locked here (SHARE, in key order). An edit or a
# DELETE not committed yet is waited for, and then its row is read again: a changed content or a deleted
# memory stores nothing. Read as committed before, the vector of the old text landed after the edit's
# trigger had removed the memory's vectors, and was kept through the switch (which queues only what lacks
# a vector of the new model); a deleted memory failed the batch on the foreign key (23503).
STORE_UNCLAIMED = """
WITH current AS (
    SELECT m.tenant, m.id, m.created_at, v.embedding
    FROM unnest(%(tenants)s::text[], %(ids)s::bigint[], %(hashes)s::bytea[], %(vectors)s::vector[])
         AS v(tenant, id, content_hash, embedding)
    JOIN spark.memories m ON m.tenant = v.tenant AND m.id = v.id AND m.content_hash = v.content_hash
    ORDER BY m.tenant, m.id
    FOR SHARE OF m)
INSERT INTO spark.embeddings AS e (tenant, memory_id, model_id, created_at, embedding, queued_at, embedded_at)
SELECT c.tenant, c.id, %(model_id)s, c.created_at, c.embedding, q.enqueued_at, clock_timestamp()
FROM current c
LEFT JOIN spark.embed_queue q ON q.tenant = c.tenant AND q.memory_id = c.id
ON CONFLICT (tenant, memory_id, model_id) DO UPDATE SET
    embedding = EXCLUDED.embedding, created_at = EXCLUDED.created_at, embedded_at = EXCLUDED.embedded_at,
    queued_at = EXCLUDED.queued_at
"""

# a failed row waits a minute per attempt before it is claimed again
QUEUE_ATTEMPT_FAILED = """
UPDATE spark.embed_queue q
SET attempts = q.attempts + 1, last_error = left(%(error)s, 2000),
    not_before = now() + make_interval(mins => q.attempts + 1)
WHERE q.tenant = %(tenant)s AND q.memory_id = %(id)s
"""

# re-embedding into another model (spark_pg/reembed.py)
MODEL_ID = "SELECT id FROM spark.embedding_models WHERE name = %(name)s"

COUNT_MISSING_FOR_MODEL = """
SELECT count(*) FROM spark.memories m
WHERE NOT EXISTS (SELECT 1 FROM spark.embeddings e
                  WHERE e.tenant = m.tenant AND e.memory_id = m.id AND e.model_id = %(model_id)s)
"""

# of (tenant, id) pairs, those memories that exist and still lack a vector of the model
STILL_MISSING_FOR_MODEL = """
SELECT m.tenant, m.id FROM unnest(%(tenants)s::text[], %(ids)s::bigint[]) AS f(tenant, id)
JOIN spark.memories m ON m.tenant = f.tenant AND m.id = f.id
WHERE NOT EXISTS (SELECT 1 FROM spark.embeddings e
                  WHERE e.tenant = m.tenant AND e.memory_id = m.id AND e.model_id = %(model_id)s)
ORDER BY m.tenant, m.id
"""

# vectors of a model stored before this run (a resumed reembed)
COUNT_HAVING_MODEL = "SELECT count(*) FROM spark.embeddings WHERE model_id = %(model_id)s"

# keyset order, so a stopped run resumes where it was
MISSING_FOR_MODEL = """
SELECT m.tenant, m.id, m.descriptor, m.content_hash FROM spark.memories m
WHERE (m.tenant, m.id) > (%(tenant)s, %(id)s)
  AND NOT EXISTS (SELECT 1 FROM spark.embeddings e
                  WHERE e.tenant = m.tenant AND e.memory_id = m.id AND e.model_id = %(model_id)s)
ORDER BY m.tenant, m.id
LIMIT %(n)s
"""

ACTIVATE_MODEL = "SELECT previous, active, queued FROM spark.activate_model(%(name)s)"

MODEL_TENANT_INDEXES = "SELECT index_name FROM spark.tenant_vector_indexes WHERE model_id = %(model_id)s"

FORGET_MODEL_TENANT_INDEXES = "DELETE FROM spark.tenant_vector_indexes WHERE model_id = %(model_id)s"

INDEX_EXISTS = "SELECT to_regclass(format('spark.%%I', %(name)s::text)) IS NOT NULL"

# whether the model's shared HNSW index is there and valid (false: a CONCURRENTLY build was interrupted)
MODEL_INDEX_STATE = "SELECT spark._index_valid(format('embeddings_hnsw_m%%s', %(model_id)s::smallint))"

# the model's shared HNSW index as spark.ensure_model_index defines it, built without blocking writers
MODEL_INDEX_DDL = """
SELECT spark._hnsw_index_ddl(format('embeddings_hnsw_m%%s', m.id), m.dim, format('model_id = %%s', m.id),
                             false, concurrent => true)
FROM spark.embedding_models m WHERE m.id = %(model_id)s
"""

UNRETIRE_MODEL = "UPDATE spark.embedding_models SET retired_at = NULL WHERE id = %(model_id)s AND NOT active"

# models another one replaced (spark.activate_model sets retired_at), the latest first
RETIRED_MODELS = """
SELECT m.id, m.name FROM spark.embedding_models m
WHERE m.retired_at IS NOT NULL AND NOT m.active
ORDER BY m.retired_at DESC, m.id DESC
"""

DELETE_MODEL_VECTORS = """
DELETE FROM spark.embeddings e
USING (SELECT tenant, memory_id FROM spark.embeddings WHERE model_id = %(model_id)s LIMIT %(n)s) d
WHERE e.tenant = d.tenant AND e.memory_id = d.memory_id AND e.model_id = %(model_id)s
"""

# every tenant spark.refresh_tenant_stats(NULL) visits as the owner (emptied ones too: their statistics go)
TENANTS = """
SELECT tenant FROM spark.memories UNION SELECT tenant FROM spark.tenant_stats
UNION SELECT tenant FROM spark.tenant_vector_indexes
ORDER BY 1
"""

# whether this role may build and drop indexes of spark.embeddings (its owner, a member of the owner's role,
# a superuser), as spark.refresh_tenant_stats decides; a tenant role under row-level security may not
MAY_BUILD_TENANT_INDEXES = """
SELECT pg_catalog.pg_has_role(
    (SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid = 'spark.embeddings'::regclass), 'USAGE')
"""

# spark-pg maintain: one tenant's refresh (sql/035) in its own transaction, after waiting for the tenant's
# refresher lock (the refresh takes the same one, which this session then holds already), so that a wait
# for another refresher that times out is told apart from a lock the refresh itself waited for
TENANT_REFRESH_LOCK = (
    "SELECT pg_advisory_xact_lock(hashtextextended('spark.refresh_tenant_stats:' || %(tenant)s, 0))"
)
REFRESH_ONE_TENANT_STATS = "SELECT spark.refresh_tenant_stats(%(tenant)s, %(force)s)"

# a lock on a name (a string naming what it guards), held to the end of the transaction; a hash collision
# only makes two unrelated holders wait for each other. Traces and learnings lock their key with it (the
# row may not exist yet, so FOR UPDATE would lock nothing, and two agents adding the same one at once must
# count two occurrences); the hooks lock a session's outcome inference
ADVISORY_XACT_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"

# traces and learnings (spark_pg/traces): the stored row of a key, locked; its metadata replaced (a repeat
# bumps its counters this way: nothing is embedded again, the content hash is unchanged)
MEMORY_FOR_UPDATE = """
SELECT kind, content_hash, metadata FROM spark.memories WHERE tenant = %(tenant)s AND key = %(key)s FOR UPDATE
"""
# a stored learning's category: a learning added again without one keeps it
MEMORY_CATEGORY = "SELECT category FROM spark.memories WHERE tenant = %(tenant)s AND key = %(key)s"

SET_MEMORY_METADATA = """
UPDATE spark.memories SET metadata = %(metadata)s WHERE tenant = %(tenant)s AND key = %(key)s
"""

# reflection (sql/070): similar past traces (with their outcome) and learnings; read only, nothing cached
REFLECT = """
SELECT rank, memory_id, key, kind, text, category, outcome, score, similarity, keyword_score, recency,
       age_days, created_at, linked_to, metadata, why
FROM spark.reflect(tenant => %(tenant)s, query_text => %(query)s, query_embedding => %(embedding)s,
                   k => %(k)s, params => %(params)s)
ORDER BY rank
"""

# the advisor's call with past-failure warnings: spark.advise and spark.reflect in one round trip (sql/070)
ADVISE_WITH_WARNINGS = f"""{_CACHE_QUERY_VECTOR.format(async_commit="")}
SELECT * FROM spark.advise_with_warnings({_RETRIEVE_ARGS}, session_id => %(session)s, tool_name => %(tool)s,
                                         intent_family => %(family)s,
                                         warning_min_score => %(warning_min_score)s,
                                         warning_k => %(warning_k)s, reflect_params => %(reflect_params)s)
"""

# whether row-level security limits what this role reads of the memories (a tenant role, docs/security.md)
HEALTH_ROW_SECURITY = "SELECT row_security_active('spark.memories') AS active"

# spark-pg stats (spark_pg/health.py); tenant NULL = every tenant, since NULL = all time
HEALTH_MEMORIES = """
SELECT kind, tier, count(*) AS n FROM spark.memories
WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s::text
GROUP BY kind, tier
"""

# queued: every row of the queue; pending: those a worker still takes; given_up: the others
HEALTH_QUEUE = """
SELECT count(*) AS queued, count(*) FILTER (WHERE attempts < %(max_attempts)s) AS pending,
       count(*) FILTER (WHERE attempts >= %(max_attempts)s) AS given_up,
       -- of the rows still waiting for a worker: one given up would make it grow for ever
       extract(epoch FROM now() - min(enqueued_at) FILTER (WHERE attempts < %(max_attempts)s)) AS oldest_s
FROM spark.embed_queue
WHERE %(tenant)s::text IS NULL OR tenant = %(tenant)s::text
"""

HEALTH_EMBED_LAG = """
SELECT count(*) AS n,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY lag.ms) AS lag_p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY lag.ms) AS lag_p95
FROM spark.embeddings e
JOIN spark.embedding_models m ON m.id = e.model_id AND m.active,
LATERAL (SELECT extract(epoch FROM e.embedded_at - e.queued_at) * 1000 AS ms) lag
WHERE e.queued_at IS NOT NULL
  AND (%(tenant)s::text IS NULL OR e.tenant = %(tenant)s::text)
  AND (%(since)s::timestamptz IS NULL OR e.embedded_at >= %(since)s::timestamptz)
"""

HEALTH_ADVISE = """
SELECT count(*) AS calls,
       count(*) FILTER (WHERE EXISTS (SELECT 1 FROM spark.retrieval_items i
                                      WHERE i.tenant = r.tenant AND i.retrieval_id = r.id)) AS hits,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY r.latency_ms) AS lat_p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY r.latency_ms) AS lat_p95
FROM spark.retrievals r
WHERE (%(tenant)s::text IS NULL OR r.tenant = %(tenant)s::text)
  AND (%(since)s::timestamptz IS NULL OR r.created_at >= %(since)s::timestamptz)
"""

HEALTH_MODELS = """
SELECT m.name, m.active,
       (SELECT count(*) FROM spark.embeddings e
        WHERE e.model_id = m.id AND (%(tenant)s::text IS NULL OR e.tenant = %(tenant)s)) AS vectors
FROM spark.embedding_models m ORDER BY m.id
"""

# spark-pg soak (spark_pg/soak.py)
SOAK_READ = """
SELECT m.tenant FROM spark.retrieve(%(tenant)s, %(query)s, %(embedding)s, 8) r
JOIN spark.memories m ON m.id = r.memory_id
"""

SOAK_STORED = "SELECT tenant, key, text FROM spark.memories WHERE tenant <> spark.system_tenant()"

SOAK_VECTORS = """
SELECT (SELECT count(*) FROM spark.memories WHERE tenant <> spark.system_tenant()),
       (SELECT count(*) FROM spark.memories m
        WHERE m.tenant <> spark.system_tenant()
          AND (SELECT count(*) FROM spark.embeddings e JOIN spark.embedding_models em ON em.id = e.model_id
               WHERE em.active AND e.tenant = m.tenant AND e.memory_id = m.id) = 1),
       (SELECT count(*) FROM spark.embeddings e
        WHERE NOT EXISTS (SELECT 1 FROM spark.memories m WHERE m.tenant = e.tenant AND m.id = e.memory_id)),
       (SELECT count(*) FROM spark.embed_queue),
       (SELECT count(*) FROM (SELECT tenant, key FROM spark.memories GROUP BY 1, 2 HAVING count(*) > 1) d)
"""

SOAK_SAMPLE_VECTORS = """
SELECT m.descriptor, e.embedding
FROM spark.memories m JOIN spark.embeddings e ON e.tenant = m.tenant AND e.memory_id = m.id
WHERE m.tenant <> spark.system_tenant()
ORDER BY hashint8(m.id)
LIMIT 200
"""

# connection slots a client may still open: max_connections less the reserved ones and those in use
FREE_CONNECTIONS = """
SELECT current_setting('max_connections')::int - current_setting('superuser_reserved_connections')::int
       - coalesce(current_setting('reserved_connections', true)::int, 0)
       - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')
"""
