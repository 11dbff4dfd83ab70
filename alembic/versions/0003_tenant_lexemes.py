"""A tenant-aware keyword index: one GIN entry per (tenant, lexeme).

The plain GIN index on ``tsv`` is shared by every tenant: an OR query over common lexemes walks the posting
lists of the whole table (about 14,000 rows at 100,000 memories) before the tenant filter removes most of
them. btree_gin would allow a (tenant, tsv) index, but it is a contrib module that the embedded server does
not ship; an expression index over tenant-prefixed lexemes needs nothing but core PostgreSQL.

The expression's function lives here, not in sql/: an index depends on it, so its body must never change
under the index. A new format means a new function and a new index in a new revision.

Revision ID: 0003_tenant_lexemes
Revises: 0002_retrieval
Create Date: 2026-11-22
"""

from alembic import op

revision = "0003_tenant_lexemes"
down_revision = "0002_retrieval"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION spark._tenant_lexemes(tenant text, tsv tsvector)
        RETURNS text[]
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
        SET search_path = pg_catalog, pg_temp
        AS $fn$
            -- length-prefixed so no (tenant, lexeme) pair can spell another one
            SELECT array_agg(length(tenant) || ':' || tenant || ':' || lexeme)
            FROM unnest(tsvector_to_array(tsv)) lexeme
        $fn$;
        COMMENT ON FUNCTION spark._tenant_lexemes(text, tsvector) IS
            'Internal, frozen (the index memories_tenant_lexemes_idx is built on it): each lexeme of tsv as '
            '"<length of tenant>:<tenant>:<lexeme>". NULL for an empty tsvector.';
        CREATE INDEX memories_tenant_lexemes_idx ON spark.memories
            USING gin (spark._tenant_lexemes(tenant, tsv));
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP INDEX spark.memories_tenant_lexemes_idx;
        DROP FUNCTION spark._tenant_lexemes(text, tsvector);
        """
    )
