"""Keyword indexes without a pending list: every keyword search stays fast while memories are written.

GIN's fast update appends new entries to a pending list that every search reads in full until VACUUM
merges it (or it reaches gin_pending_list_limit, 4 MB). On the 100,000-memory bench corpus, 4,000 writes
since the last vacuum left 294 pending pages in ``memories_tenant_lexemes_idx``: the tenant-keyed keyword
lookup took 6.7 ms instead of well under 1, and spark.retrieve's candidate step 11.2 ms at the median
instead of 7.9 (docs/performance.md). Writes now update the index entries directly, which keeps read
latency flat and costs writes a little: 3,000 memories stored without embedding, three rounds side by side,
1,121 / 1,519 / 1,424 memories/s with the pending list and 1,159 / 1,221 / 1,147 without (about 13%); with
embedding the model is the bound (about 190 texts/s here). The upgrade merges what is pending.

Revision ID: 0011_gin_no_pending_list
Revises: 0010_reflect_index
Create Date: 2026-11-23
"""

from alembic import op

revision = "0011_gin_no_pending_list"
down_revision = "0010_reflect_index"
branch_labels = None
depends_on = None

INDEXES = ("spark.memories_tenant_lexemes_idx", "spark.memories_tsv_idx")


def upgrade() -> None:
    for index in INDEXES:
        op.execute(f"ALTER INDEX {index} SET (fastupdate = off)")
        op.execute(f"SELECT gin_clean_pending_list('{index}'::regclass)")


def downgrade() -> None:
    for index in INDEXES:
        op.execute(f"ALTER INDEX {index} RESET (fastupdate)")
