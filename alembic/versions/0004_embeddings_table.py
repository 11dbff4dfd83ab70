"""Vectors move from spark.memories to their own narrow table, spark.embeddings.

Why: a 384-dimension vector (1,544 bytes) pushed most memory rows past PostgreSQL's 2 kB TOAST threshold,
so the vector went out of line and every exact scan paid a TOAST lookup per row (13 ms for a tenant of
3,855 memories, 2 ms from a narrow table). The keyword pools read narrower memory rows too. And one row per
(memory, model) lets a new model's vectors be built beside the old ones while those keep serving.

created_at is copied from the memory so the as_of filter needs no join; a trigger keeps it in step.
The trigger function is frozen here with its trigger (sql/ does not replace it).

Revision ID: 0004_embeddings_table
Revises: 0003_tenant_lexemes
Create Date: 2026-11-22
"""

from alembic import op

revision = "0004_embeddings_table"
down_revision = "0003_tenant_lexemes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE spark.embeddings (
            tenant      text NOT NULL,
            memory_id   bigint NOT NULL,
            model_id    smallint NOT NULL REFERENCES spark.embedding_models (id),
            created_at  timestamptz NOT NULL,
            embedding   vector NOT NULL,
            embedded_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant, memory_id, model_id),
            FOREIGN KEY (tenant, memory_id) REFERENCES spark.memories (tenant, id) ON DELETE CASCADE
        );
        -- inline (compressed only if a row would not fit a page): out-of-line vectors cost a lookup per row
        ALTER TABLE spark.embeddings ALTER COLUMN embedding SET STORAGE MAIN;
        COMMENT ON TABLE spark.embeddings IS
            'One vector per (memory, model). created_at mirrors the memory''s (trigger memories_sync_created_at). '
            'A memory without a row for the active model awaits its embedding; keyword and recency still find it.';
        CREATE INDEX embeddings_scan_idx ON spark.embeddings (tenant, model_id, created_at);

        INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding, embedded_at)
        SELECT tenant, id, embedding_model_id, created_at, embedding, coalesce(embedded_at, now())
        FROM spark.memories WHERE embedding IS NOT NULL;

        -- each model's partial HNSW index moves with its vectors
        DO $$
        DECLARE r record;
        BEGIN
            FOR r IN SELECT i.indexrelid::regclass AS idx FROM pg_index i
                     JOIN pg_class c ON c.oid = i.indexrelid
                     WHERE i.indrelid = 'spark.memories'::regclass AND c.relname LIKE 'memories\\_hnsw\\_m%'
            LOOP
                EXECUTE format('DROP INDEX %s', r.idx);
            END LOOP;
            FOR r IN SELECT m.id, m.dim FROM spark.embedding_models m LOOP
                EXECUTE format('CREATE INDEX %I ON spark.embeddings USING hnsw ((embedding::vector(%s)) '
                               'vector_cosine_ops) WHERE model_id = %s', 'embeddings_hnsw_m' || r.id, r.dim, r.id);
            END LOOP;
        END $$;

        ALTER TABLE spark.memories DROP CONSTRAINT memories_embedding_has_model;
        ALTER TABLE spark.memories DROP COLUMN embedding, DROP COLUMN embedding_model_id, DROP COLUMN embedded_at;
        COMMENT ON TABLE spark.memories IS
            'One row per thing that can be surfaced. descriptor is what gets embedded (spark.embeddings, one '
            'vector per model) and keyword-indexed; a memory is keyword-findable before it has a vector.';

        CREATE FUNCTION spark._sync_embedding_created_at()
        RETURNS trigger
        LANGUAGE plpgsql VOLATILE
        SET search_path = pg_catalog, pg_temp
        AS $fn$
        BEGIN
            UPDATE spark.embeddings e SET created_at = NEW.created_at
            WHERE e.tenant = NEW.tenant AND e.memory_id = NEW.id;
            RETURN NULL;
        END
        $fn$;
        COMMENT ON FUNCTION spark._sync_embedding_created_at() IS
            'Internal, trigger: copies a memory''s new created_at to its vectors (spark.embeddings.created_at).';
        CREATE TRIGGER memories_sync_created_at
            AFTER UPDATE OF created_at ON spark.memories
            FOR EACH ROW WHEN (OLD.created_at IS DISTINCT FROM NEW.created_at)
            EXECUTE FUNCTION spark._sync_embedding_created_at();
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP TRIGGER memories_sync_created_at ON spark.memories;
        DROP FUNCTION spark._sync_embedding_created_at();
        ALTER TABLE spark.memories
            ADD COLUMN embedding vector,
            ADD COLUMN embedding_model_id smallint REFERENCES spark.embedding_models (id),
            ADD COLUMN embedded_at timestamptz,
            ADD CONSTRAINT memories_embedding_has_model CHECK ((embedding IS NULL) = (embedding_model_id IS NULL));
        CREATE INDEX memories_pending_idx ON spark.memories (tenant, id) WHERE embedding IS NULL;
        COMMENT ON TABLE spark.memories IS
            'One row per thing that can be surfaced. descriptor is what gets embedded and keyword-indexed; '
            'embedding stays NULL until a model has embedded it (keyword and recency still find the row).';
        -- one column holds one vector: the active model's
        UPDATE spark.memories m SET embedding = e.embedding, embedding_model_id = e.model_id,
                                    embedded_at = e.embedded_at
        FROM spark.embeddings e JOIN spark.embedding_models md ON md.id = e.model_id AND md.active
        WHERE e.tenant = m.tenant AND e.memory_id = m.id;
        DO $$
        DECLARE r record;
        BEGIN
            FOR r IN SELECT m.id, m.dim FROM spark.embedding_models m LOOP
                EXECUTE format('CREATE INDEX %I ON spark.memories USING hnsw ((embedding::vector(%s)) '
                               'vector_cosine_ops) WHERE embedding_model_id = %s',
                               'memories_hnsw_m' || r.id, r.dim, r.id);
            END LOOP;
        END $$;
        DROP TABLE spark.embeddings;
        """
    )
