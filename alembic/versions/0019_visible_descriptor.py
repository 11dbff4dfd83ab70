"""A memory's descriptor must show something too: the CHECK ``memories_descriptor_visible``.

The descriptor is what gets embedded and keyword-indexed. 0016 refused a text of white space and invisible
characters only, but a client writing SQL could still set such a descriptor (its CHECK was ``descriptor <>
''``): the worker then failed on it ("document texts must not be empty") until it gave up after its attempts,
and the row stayed in the backlog for good, counted against ``backlog_watermark`` and as a reembed failure.
The same ranges as 0016 (``spark_pg.rowfiles.INVISIBLE_RANGES``). Python's descriptor is the text behind its
tags, so it always shows something when the text does.

Upgrading over such rows: the constraint is added ``NOT VALID``, validated when no row breaks it, and otherwise
left unvalidated with a warning that counts the rows (as 0016 does).

Revision ID: 0019_visible_descriptor
Revises: 0018_tier_marks_follow
Create Date: 2026-11-24
"""

import runpy
from pathlib import Path

from alembic import op

revision = "0019_visible_descriptor"
down_revision = "0018_tier_marks_follow"
branch_labels = None
depends_on = None


# 0016's pattern, read from its file (both migrations are frozen: one list of ranges, not two copies)
VISIBLE: str = runpy.run_path(str(Path(__file__).with_name("0016_visible_text.py")))["VISIBLE"]


def upgrade() -> None:
    op.execute(
        "ALTER TABLE spark.memories ADD CONSTRAINT memories_descriptor_visible "
        # (a text that shows nothing is memories_text_visible's to name: its descriptor, the text itself when
        # the client gave none, is not checked twice)
        f"CHECK (descriptor ~ '{VISIBLE}' OR text !~ '{VISIBLE}') NOT VALID"
    )
    op.execute(
        f"""
        DO $$
        DECLARE
            blank bigint;
        BEGIN
            SELECT count(*) INTO blank FROM spark.memories
            WHERE descriptor !~ '{VISIBLE}' AND text ~ '{VISIBLE}';
            IF blank = 0 THEN
                ALTER TABLE spark.memories VALIDATE CONSTRAINT memories_descriptor_visible;
            ELSE
                RAISE WARNING '% memories hold a descriptor of white space and invisible characters only, '
                              'which no model can embed; memories_descriptor_visible stays NOT VALID until '
                              'each is given a descriptor (or its text: UPDATE ... SET descriptor = text)', blank;
            END IF;
        END
        $$
        """
    )


def downgrade() -> None:
    op.execute("ALTER TABLE spark.memories DROP CONSTRAINT memories_descriptor_visible")
