"""When a model stopped being the active one: a stopped ``reembed`` finishes its clean-up when run again.

``spark-pg reembed`` switches models in one transaction, then drops the old model's HNSW indexes (shared and
per-tenant) and refreshes the per-tenant statistics. A run stopped after the switch left that undone, and a
second run could not tell which inactive model had been the active one (a model built with ``--no-switch``
is inactive too, and its index must stay). ``spark.activate_model`` now stamps the model it replaces with
``retired_at`` (and clears it on the model it activates), so a run for the active model drops the leftover
indexes of retired models and refreshes the statistics. Models retired before this revision keep NULL.

Revision ID: 0012_model_retired_at
Revises: 0011_gin_no_pending_list
Create Date: 2026-11-23
"""

from alembic import op

revision = "0012_model_retired_at"
down_revision = "0011_gin_no_pending_list"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE spark.embedding_models ADD COLUMN retired_at timestamptz")
    op.execute(
        "COMMENT ON COLUMN spark.embedding_models.retired_at IS "
        "'When another model replaced this one as the active model (spark.activate_model); NULL while active "
        "and for a model never active. spark-pg reembed drops the HNSW indexes of retired models.'"
    )


def downgrade() -> None:
    op.execute("ALTER TABLE spark.embedding_models DROP COLUMN retired_at")
