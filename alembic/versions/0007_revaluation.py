"""Importance revaluation: the decision log and the index the random sample walks.

Importance is given once, when a memory is written, and the writer rewards drama: a contemplative or
quiet memory ("chose not to force it") is recorded at the floor and stays invisible (seeds: v4 retriever,
change 4). A periodic sweep samples low-importance memories for a second look and applies the decisions
(spark.revalue_sample / spark.revalue_apply, sql/065).

- ``spark.revaluations``: one row per decision, a kept importance included (old = new): what was decided,
  by whom, why and when. A memory revalued recently is left out of the next samples.
- ``memories_revalue_idx``: the tenant's low-importance memories in a fixed pseudo-random order
  (``hashint8(id)``). A sample starts at a random point of that order and reads forward until it has n
  eligible rows, so it costs about n / (eligible share) rows however large the tenant is, and sorts nothing.
  Partial (importance under 0.5, the ingest default) so memories of ordinary importance cost ingest nothing.

Revision ID: 0007_revaluation
Revises: 0006_advisor
Create Date: 2026-11-23
"""

from alembic import op

revision = "0007_revaluation"
down_revision = "0006_advisor"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE spark.revaluations (
            tenant         text NOT NULL,
            id             bigint GENERATED ALWAYS AS IDENTITY,
            memory_id      bigint NOT NULL,
            old_importance real NOT NULL CHECK (old_importance BETWEEN 0 AND 1),
            new_importance real NOT NULL CHECK (new_importance BETWEEN 0 AND 1),
            reason         text CHECK (length(reason) <= 1000),
            decided_by     text NOT NULL DEFAULT 'api' CHECK (decided_by <> '' AND length(decided_by) <= 64),
            decided_at     timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant, id),
            FOREIGN KEY (tenant, memory_id) REFERENCES spark.memories (tenant, id) ON DELETE CASCADE
        );
        CREATE INDEX revaluations_memory_idx ON spark.revaluations (tenant, memory_id, decided_at);
        COMMENT ON TABLE spark.revaluations IS
            'Importance revaluation decisions (spark.revalue_apply), kept ones included: old and new '
            'importance, the reason, who decided (auto, interactive, file, api) and when. Memories revalued '
            'within the cooldown are left out of spark.revalue_sample.';

        CREATE INDEX memories_revalue_idx ON spark.memories (tenant, hashint8(id)) WHERE importance < 0.5;
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP INDEX spark.memories_revalue_idx;
        DROP TABLE spark.revaluations;
        """
    )
