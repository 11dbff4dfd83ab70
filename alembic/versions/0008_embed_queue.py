"""Write-behind embedding: the queue of memories that await a vector of the active model.

- ``spark.embed_queue``: one row per memory that needs embedding (inserted, or its content changed), with
  the attempts and last error of the workers that tried. A memory is keyword-findable from its insert on;
  its vector follows when a worker (``spark-pg worker``) or a synchronous ingest stores it.
- Triggers keep the queue without any caller's help: a memory's insert, or an update that changes its
  content (``content_hash``), queues it (and drops the content's now-stale vectors of every model); a vector
  stored for the active model takes its memory off the queue. Statement-level, with transition tables, so
  a 10,000-row ingest costs one queue statement, not 10,000 trigger calls; each queuing statement sends
  one ``NOTIFY spark_embed`` (payload: the number queued) to wake listening workers.
- Workers claim rows with ``FOR UPDATE SKIP LOCKED`` and delete them only by storing the vector in the same
  transaction: a worker that dies mid-batch leaves its rows queued for the next one.

Memories without a vector of the active model at upgrade time are queued. The trigger functions are frozen
here with their triggers (sql/ does not replace them).

Revision ID: 0008_embed_queue
Revises: 0007_revaluation
Create Date: 2026-11-22
"""

from alembic import op

revision = "0008_embed_queue"
down_revision = "0007_revaluation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE spark.embed_queue (
            tenant      text NOT NULL,
            memory_id   bigint NOT NULL,
            enqueued_at timestamptz NOT NULL DEFAULT now(),
            attempts    integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
            last_error  text CHECK (length(last_error) <= 2000),
            PRIMARY KEY (tenant, memory_id),
            FOREIGN KEY (tenant, memory_id) REFERENCES spark.memories (tenant, id) ON DELETE CASCADE
        );
        CREATE INDEX embed_queue_order_idx ON spark.embed_queue (enqueued_at, tenant, memory_id);
        COMMENT ON TABLE spark.embed_queue IS
            'Memories awaiting a vector of the active model (write-behind embedding). Kept by triggers on '
            'spark.memories and spark.embeddings; workers claim rows FOR UPDATE SKIP LOCKED.';

        INSERT INTO spark.embed_queue (tenant, memory_id)
        SELECT m.tenant, m.id FROM spark.memories m
        WHERE NOT EXISTS (
            SELECT 1 FROM spark.embeddings e JOIN spark.embedding_models em ON em.id = e.model_id AND em.active
            WHERE e.tenant = m.tenant AND e.memory_id = m.id);

        CREATE FUNCTION spark._queue_inserted_memories()
        RETURNS trigger
        LANGUAGE plpgsql VOLATILE
        SET search_path = pg_catalog, pg_temp
        AS $fn$
        DECLARE
            n bigint;
        BEGIN
            INSERT INTO spark.embed_queue (tenant, memory_id)
            SELECT nw.tenant, nw.id FROM new_rows nw
            ON CONFLICT (tenant, memory_id) DO NOTHING;
            GET DIAGNOSTICS n = ROW_COUNT;
            IF n > 0 THEN
                PERFORM pg_notify('spark_embed', n::text);
            END IF;
            RETURN NULL;
        END
        $fn$;
        COMMENT ON FUNCTION spark._queue_inserted_memories() IS
            'Trigger (frozen with memories_queue_insert): queue inserted memories for embedding and notify '
            'spark_embed.';
        CREATE TRIGGER memories_queue_insert AFTER INSERT ON spark.memories
            REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT
            EXECUTE FUNCTION spark._queue_inserted_memories();

        CREATE FUNCTION spark._queue_changed_memories()
        RETURNS trigger
        LANGUAGE plpgsql VOLATILE
        SET search_path = pg_catalog, pg_temp
        AS $fn$
        DECLARE
            n bigint;
        BEGIN
            -- a changed content makes every model's vector of it stale
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
        COMMENT ON FUNCTION spark._queue_changed_memories() IS
            'Trigger (frozen with memories_queue_update): a memory whose content_hash changed loses its stale '
            'vectors and is queued again.';
        CREATE TRIGGER memories_queue_update AFTER UPDATE ON spark.memories
            REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT
            EXECUTE FUNCTION spark._queue_changed_memories();

        CREATE FUNCTION spark._dequeue_embedded()
        RETURNS trigger
        LANGUAGE plpgsql VOLATILE
        SET search_path = pg_catalog, pg_temp
        AS $fn$
        BEGIN
            DELETE FROM spark.embed_queue q
            USING new_rows nw JOIN spark.embedding_models em ON em.id = nw.model_id AND em.active
            WHERE q.tenant = nw.tenant AND q.memory_id = nw.memory_id;
            RETURN NULL;
        END
        $fn$;
        COMMENT ON FUNCTION spark._dequeue_embedded() IS
            'Trigger (frozen with embeddings_dequeue_insert / _update): a vector stored for the active model '
            'takes its memory off spark.embed_queue.';
        CREATE TRIGGER embeddings_dequeue_insert AFTER INSERT ON spark.embeddings
            REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION spark._dequeue_embedded();
        CREATE TRIGGER embeddings_dequeue_update AFTER UPDATE ON spark.embeddings
            REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION spark._dequeue_embedded();
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP TRIGGER embeddings_dequeue_update ON spark.embeddings;
        DROP TRIGGER embeddings_dequeue_insert ON spark.embeddings;
        DROP TRIGGER memories_queue_update ON spark.memories;
        DROP TRIGGER memories_queue_insert ON spark.memories;
        DROP FUNCTION spark._dequeue_embedded();
        DROP FUNCTION spark._queue_changed_memories();
        DROP FUNCTION spark._queue_inserted_memories();
        DROP TABLE spark.embed_queue;
        """
    )
