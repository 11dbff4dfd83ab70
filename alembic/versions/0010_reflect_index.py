"""Reflection's index: a tenant's traces and learnings without reading its other memories.

``spark.reflect`` (sql/070) runs inside every advise call (past failures come back as warnings); without
this index it read the whole tenant to find its traces (12-16 ms at 7,000 memories, 25-28 ms at 30,000).
Partial: only traces and learnings are in it, so other writes do not maintain it.

Revision ID: 0010_reflect_index
Revises: 0009_health
Create Date: 2026-11-22
"""

from alembic import op

revision = "0010_reflect_index"
down_revision = "0009_health"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE INDEX memories_reflect_idx ON spark.memories (tenant, kind, created_at)
            WHERE kind IN ('trace', 'learning');
        """
    )


def downgrade() -> None:
    op.execute("DROP INDEX spark.memories_reflect_idx;")
