"""Per-tenant statistics and per-tenant vector indexes, kept by spark.refresh_tenant_stats (sql/).

Two costs grew with a tenant's size, and both came from knowing nothing about the tenant:

- Keyword pools. An OR query over the question's lexemes matches every memory holding any of them; in a
  tenant of 20,000 memories one everyday word matches thousands, and each was fetched and ranked. With each
  lexeme's document frequency counted (spark.lexeme_stats), spark.retrieve spends a match budget on the
  rarest lexemes first and leaves the commonest out of the match (they still count in every candidate's
  keyword score, with their counted rarity).
- The semantic pool. One HNSW graph for all tenants must skip every other tenant's vectors (2-4 ms for a
  tenant holding 5-20% of the rows), and an exact scan of a few thousand vectors scattered over the table
  costs more (8 ms for 6,400). A partial HNSW index per large tenant and model answers in under 1 ms;
  spark.tenant_vector_indexes says which exist, so spark.retrieve can name the tenant in its query.

The counts are refreshed like planner statistics, not kept exact on every write: a per-(tenant, lexeme)
counter updated by each insert would serialise concurrent writers of one tenant on their common words.
Stale counts cost speed, never results: a lexeme without a count is treated as rare and matched, and a
tenant without its own index is scanned exactly or through the shared index.

Revision ID: 0005_tenant_stats
Revises: 0004_embeddings_table
Create Date: 2026-11-22
"""

from alembic import op

revision = "0005_tenant_stats"
down_revision = "0004_embeddings_table"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE spark.tenant_stats (
            tenant        text PRIMARY KEY,
            memories      bigint NOT NULL CHECK (memories >= 0),
            lexeme_min_df integer NOT NULL CHECK (lexeme_min_df > 0),
            refreshed_at  timestamptz NOT NULL DEFAULT now()
        );
        COMMENT ON TABLE spark.tenant_stats IS
            'When each tenant''s statistics (spark.lexeme_stats) were last rebuilt, over how many memories, and '
            'the smallest document frequency stored. Written by spark.refresh_tenant_stats.';
        CREATE TABLE spark.lexeme_stats (
            tenant text NOT NULL REFERENCES spark.tenant_stats (tenant) ON DELETE CASCADE,
            lexeme text NOT NULL,
            df     integer NOT NULL CHECK (df > 0),
            PRIMARY KEY (tenant, lexeme)
        );
        COMMENT ON TABLE spark.lexeme_stats IS
            'How many of a tenant''s memories hold each lexeme (the English tsvector of the descriptor), for '
            'lexemes held by at least tenant_stats.lexeme_min_df of them. May lag the memories: a lexeme '
            'without a row counts as rare.';
        CREATE TABLE spark.tenant_vector_indexes (
            tenant     text NOT NULL,
            model_id   smallint NOT NULL REFERENCES spark.embedding_models (id),
            index_name text NOT NULL UNIQUE,
            vectors    bigint NOT NULL CHECK (vectors >= 0),
            built_at   timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant, model_id)
        );
        COMMENT ON TABLE spark.tenant_vector_indexes IS
            'The partial HNSW index over one tenant''s vectors of one model (WHERE tenant = ... AND model_id = '
            '...), and how many vectors it covered when built. Created and dropped by '
            'spark.refresh_tenant_stats; spark.retrieve queries through it when present.';
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DO $$
        DECLARE r record;
        BEGIN
            FOR r IN SELECT index_name FROM spark.tenant_vector_indexes LOOP
                EXECUTE format('DROP INDEX IF EXISTS spark.%I', r.index_name);
            END LOOP;
        END $$;
        DROP TABLE spark.tenant_vector_indexes;
        DROP TABLE spark.lexeme_stats;
        DROP TABLE spark.tenant_stats;
        """
    )
