"""Health signals: what each vector is for, how long memories wait for theirs, how long advice takes.

- ``spark.embeddings.task`` and ``spark.query_embeddings.task``: the embedding task each vector was made for,
  recorded per row (a model's conventions differ by task: bge prefixes queries with its retrieval
  instruction and documents with nothing; MiniLM prefixes nothing). A memory's vector is a document's, a
  cached query's a query's: the CHECKs make a mix-up impossible, so retrieval always compares a query
  vector with document vectors.
- ``spark.embeddings.queued_at``: when the memory was queued for this vector (NULL when it was embedded in
  the writing transaction); ``embedded_at - queued_at`` is the write-behind lag ``spark-pg stats`` reports.
- ``spark.embed_queue.not_before``: a failed row's backoff, so ``enqueued_at`` keeps the time the content
  was written.
- ``spark.retrievals.latency_ms``: the server-side time of each advise call.

Revision ID: 0009_health
Revises: 0008_embed_queue
Create Date: 2026-11-22
"""

from alembic import op

revision = "0009_health"
down_revision = "0008_embed_queue"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE spark.embeddings
            ADD COLUMN task text NOT NULL DEFAULT 'document' CHECK (task = 'document'),
            ADD COLUMN queued_at timestamptz;
        ALTER TABLE spark.query_embeddings ADD COLUMN task text NOT NULL DEFAULT 'query' CHECK (task = 'query');
        ALTER TABLE spark.embed_queue ADD COLUMN not_before timestamptz NOT NULL DEFAULT now();
        ALTER TABLE spark.retrievals ADD COLUMN latency_ms real CHECK (latency_ms >= 0);
        -- a memory queued again because its content changed starts afresh, backoff included; the queue row
        -- is taken before the stale vectors are deleted, the order a worker takes them in (claim, then
        -- store): the other order deadlocked a writer against a worker storing the same memory's vector
        CREATE OR REPLACE FUNCTION spark._queue_changed_memories()
        RETURNS trigger
        LANGUAGE plpgsql VOLATILE
        SET search_path = pg_catalog, pg_temp
        AS $fn$
        DECLARE
            n bigint;
        BEGIN
            INSERT INTO spark.embed_queue (tenant, memory_id)
            SELECT nw.tenant, nw.id
            FROM old_rows o JOIN new_rows nw ON nw.tenant = o.tenant AND nw.id = o.id
            WHERE nw.content_hash <> o.content_hash
            ON CONFLICT (tenant, memory_id) DO UPDATE
                SET enqueued_at = now(), not_before = now(), attempts = 0, last_error = NULL;
            GET DIAGNOSTICS n = ROW_COUNT;
            DELETE FROM spark.embeddings e
            USING old_rows o JOIN new_rows nw ON nw.tenant = o.tenant AND nw.id = o.id
            WHERE e.tenant = nw.tenant AND e.memory_id = nw.id AND nw.content_hash <> o.content_hash;
            IF n > 0 THEN
                PERFORM pg_notify('spark_embed', n::text);
            END IF;
            RETURN NULL;
        END
        $fn$;
        COMMENT ON COLUMN spark.embeddings.task IS 'The embedding task the vector was made for: document.';
        COMMENT ON COLUMN spark.query_embeddings.task IS 'The embedding task the vector was made for: query.';
        COMMENT ON COLUMN spark.embeddings.queued_at IS
            'When the memory was queued for this vector (NULL: embedded in the writing transaction).';
        COMMENT ON COLUMN spark.embed_queue.not_before IS 'A failed row is not claimed again before this.';
        COMMENT ON COLUMN spark.retrievals.latency_ms IS 'Server-side duration of the advise call.';
        """
    )


def downgrade() -> None:
    op.execute(
        """
        CREATE OR REPLACE FUNCTION spark._queue_changed_memories()
        RETURNS trigger
        LANGUAGE plpgsql VOLATILE
        SET search_path = pg_catalog, pg_temp
        AS $fn$
        DECLARE
            n bigint;
        BEGIN
            DELETE FROM spark.embeddings e
            USING old_rows o JOIN new_rows nw ON nw.tenant = o.tenant AND nw.id = o.id
            WHERE e.tenant = nw.tenant AND e.memory_id = nw.id AND nw.content_hash <> o.content_hash;
            INSERT INTO spark.embed_queue (tenant, memory_id)
            SELECT nw.tenant, nw.id
            FROM old_rows o JOIN new_rows nw ON nw.tenant = o.tenant AND nw.id = o.id
            WHERE nw.content_hash <> o.content_hash
            ON CONFLICT (tenant, memory_id) DO UPDATE SET enqueued_at = now(), attempts = 0, last_error = NULL;
            GET DIAGNOSTICS n = ROW_COUNT;
            IF n > 0 THEN
                PERFORM pg_notify('spark_embed', n::text);
            END IF;
            RETURN NULL;
        END
        $fn$;
        ALTER TABLE spark.retrievals DROP COLUMN latency_ms;
        ALTER TABLE spark.embed_queue DROP COLUMN not_before;
        ALTER TABLE spark.query_embeddings DROP COLUMN task;
        ALTER TABLE spark.embeddings DROP COLUMN queued_at, DROP COLUMN task;
        """
    )
