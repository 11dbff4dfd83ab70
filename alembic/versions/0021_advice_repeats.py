"""Advice a session was shown lately is marked as a repeat, and the log says where it was shown.

``spark.retrieval_items.repeat_of``: for an item ``spark.advise`` surfaced that the same session was shown
within ``repeat_after_minutes`` (a params key, default 30), the earlier call (``spark.retrievals.id``) that
showed it; NULL for an item shown now. The Claude Code hook leaves repeats out of the context it injects:
the model has that advice in its context already, and the same lines on every call of a session were noise.
An item marked a repeat is not "shown", so a memory surfaced on every call is shown again once the window
has passed since it was last shown. The items are logged all the same (outcome inference reads them).

``spark.retrievals.warned``: the past failures ``spark.advise_with_warnings`` showed as warnings with the call
(memory ids; warnings are not logged as items, their signals are not fusion signals). A warning the session
was shown within the window is a repeat the same way.

0022 replaced both look-backs with ``spark.advice_shown`` and dropped ``warned``: this revision is kept as it
first ran, so that a database stamped with it upgrades.

Revision ID: 0021_advice_repeats
Revises: 0020_trigger_rule_patterns
Create Date: 2026-11-24
"""

from alembic import op

revision = "0021_advice_repeats"
down_revision = "0020_trigger_rule_patterns"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE spark.retrieval_items ADD COLUMN repeat_of bigint;
        COMMENT ON COLUMN spark.retrieval_items.repeat_of IS
            'The earlier advise call of the same session that showed this memory within repeat_after_minutes '
            '(spark.retrievals.id): this item repeated it and is not shown again; NULL: shown.';
        ALTER TABLE spark.retrievals ADD COLUMN warned bigint[];
        COMMENT ON COLUMN spark.retrievals.warned IS
            'The past failures (memory ids) spark.advise_with_warnings showed with this call as warnings, '
            'repeats left out; NULL: none.';
        """
    )


def downgrade() -> None:
    op.execute("ALTER TABLE spark.retrievals DROP COLUMN warned")
    op.execute("ALTER TABLE spark.retrieval_items DROP COLUMN repeat_of")
