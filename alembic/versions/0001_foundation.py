"""Foundation: schema spark, embedding_models, memories.

Revision ID: 0001_foundation
Revises:
Create Date: 2026-11-22
"""

from alembic import op

revision = "0001_foundation"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE SCHEMA spark;
        COMMENT ON SCHEMA spark IS 'spark_pg: retrieval layer for AI-agent memory';

        -- what this install created outside its schema, so a downgrade removes exactly that
        CREATE TABLE spark.install_info (
            key   text PRIMARY KEY,
            value text NOT NULL
        );
        INSERT INTO spark.install_info (key, value)
        SELECT 'created_extension_vector',
               (NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'vector'))::text;
        CREATE EXTENSION IF NOT EXISTS vector;

        -- A global registry (a reference table under Citus): vectors of different models are never compared.
        CREATE TABLE spark.embedding_models (
            id              smallint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            name            text NOT NULL UNIQUE CHECK (name <> ''),
            dim             integer NOT NULL CHECK (dim BETWEEN 1 AND 2000),
            pooling         text NOT NULL CHECK (pooling IN ('mean', 'cls')),
            normalized      boolean NOT NULL DEFAULT true,
            max_tokens      integer NOT NULL CHECK (max_tokens > 0),
            query_prefix    text NOT NULL DEFAULT '',
            document_prefix text NOT NULL DEFAULT '',
            active          boolean NOT NULL DEFAULT false,
            created_at      timestamptz NOT NULL DEFAULT now()
        );
        CREATE UNIQUE INDEX embedding_models_one_active ON spark.embedding_models (active) WHERE active;

        CREATE TABLE spark.memories (
            tenant             text NOT NULL CHECK (tenant <> '' AND length(tenant) <= 128),
            id                 bigint GENERATED ALWAYS AS IDENTITY,
            key                text NOT NULL CHECK (key <> '' AND length(key) <= 512),
            kind               text NOT NULL DEFAULT 'insight' CHECK (kind IN (
                                   'insight', 'preference', 'decision', 'rule', 'episode', 'trace',
                                   'learning', 'seed', 'failure', 'fact', 'note')),
            category           text NOT NULL DEFAULT 'general' CHECK (category <> '' AND length(category) <= 64),
            source             text NOT NULL DEFAULT 'user' CHECK (source <> '' AND length(source) <= 128),
            action_domain      text,
            text               text NOT NULL CHECK (text <> ''),
            context            text,
            descriptor         text NOT NULL CHECK (descriptor <> ''),
            content_hash       bytea NOT NULL,
            importance         real NOT NULL DEFAULT 0.5 CHECK (importance BETWEEN 0 AND 1),
            tier               text NOT NULL DEFAULT 'active' CHECK (tier IN ('pinned', 'active', 'archive')),
            priority           text NOT NULL DEFAULT 'normal'
                                   CHECK (priority IN ('critical', 'high', 'normal', 'background')),
            created_at         timestamptz NOT NULL DEFAULT now(),
            updated_at         timestamptz NOT NULL DEFAULT now(),
            last_seen_at       timestamptz,
            surfaced_count     integer NOT NULL DEFAULT 0,
            helpful_count      integer NOT NULL DEFAULT 0,
            unhelpful_count    integer NOT NULL DEFAULT 0,
            followed_count     integer NOT NULL DEFAULT 0,
            ignored_count      integer NOT NULL DEFAULT 0,
            reliability        real NOT NULL DEFAULT 0.5 CHECK (reliability BETWEEN 0 AND 1),
            tsv                tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, descriptor)) STORED,
            embedding          vector,
            embedding_model_id smallint REFERENCES spark.embedding_models (id),
            embedded_at        timestamptz,
            metadata           jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
            PRIMARY KEY (tenant, id),
            UNIQUE (tenant, key),
            CONSTRAINT memories_embedding_has_model CHECK ((embedding IS NULL) = (embedding_model_id IS NULL))
        );
        COMMENT ON TABLE spark.memories IS
            'One row per thing that can be surfaced. descriptor is what gets embedded and keyword-indexed; '
            'embedding stays NULL until a model has embedded it (keyword and recency still find the row).';
        CREATE INDEX memories_tsv_idx ON spark.memories USING gin (tsv);
        CREATE INDEX memories_tenant_created_idx ON spark.memories (tenant, created_at DESC);
        CREATE INDEX memories_pending_idx ON spark.memories (tenant, id) WHERE embedding IS NULL;
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DO $$
        DECLARE created boolean;
        BEGIN
            SELECT value::boolean INTO created FROM spark.install_info WHERE key = 'created_extension_vector';
            DROP SCHEMA spark CASCADE;
            IF created THEN
                BEGIN
                    DROP EXTENSION IF EXISTS vector;
                EXCEPTION WHEN dependent_objects_still_exist THEN
                    RAISE NOTICE 'extension vector is used outside schema spark; leaving it installed';
                END;
            END IF;
        END $$;
        """
    )
