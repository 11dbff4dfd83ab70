"""Retrieval support: the query-embedding cache and an index for pinned memories.

Revision ID: 0002_retrieval
Revises: 0001_foundation
Create Date: 2026-11-22
"""

from alembic import op

revision = "0002_retrieval"
down_revision = "0001_foundation"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        -- Vectors the Python side computed for query texts, so psql can retrieve again by text alone and see
        -- exactly what the agent saw. Keyed by tenant first like every tenant-scoped table.
        CREATE TABLE spark.query_embeddings (
            tenant       text NOT NULL CHECK (tenant <> '' AND length(tenant) <= 128),
            model_id     smallint NOT NULL REFERENCES spark.embedding_models (id) ON DELETE CASCADE,
            query_hash   bytea NOT NULL,
            query_text   text NOT NULL,
            embedding    vector NOT NULL,
            created_at   timestamptz NOT NULL DEFAULT now(),
            last_used_at timestamptz NOT NULL DEFAULT now(),
            uses         integer NOT NULL DEFAULT 1,
            PRIMARY KEY (tenant, model_id, query_hash)
        );
        COMMENT ON TABLE spark.query_embeddings IS
            'Query-embedding cache: query_hash = sha256(query_text). Written by the Python side, read by '
            'spark.retrieve when it is called without a query_embedding.';
        CREATE INDEX memories_pinned_idx ON spark.memories (tenant, importance DESC) WHERE tier = 'pinned';
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP INDEX spark.memories_pinned_idx;
        DROP TABLE spark.query_embeddings;
        """
    )
