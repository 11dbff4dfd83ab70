"""A memory's ``created_at`` lies between 0001-01-02 and 9999-12-30 (UTC): the CHECK ``memories_created_at_range``.

Python's ingest refused a file row's time outside these bounds, but a row written in SQL (psql, another
client) could hold any time PostgreSQL takes, 4713 BC to 294276 AD. A client reads such a row back into its
own type and fails: psycopg cannot make a Python datetime of 1 BC or of 10000 AD, so every spark.retrieve
and spark.explain that surfaced the row failed, for the whole tenant, with an error that blamed the caller's
input. The bounds keep a day to spare at each end, so the time is a datetime in every time zone
(``spark_pg.records.EARLIEST`` and ``LATEST``, which ingest checks).

Upgrading a database that already holds such rows: the constraint is added ``NOT VALID``, validated when no
row breaks it, and otherwise left unvalidated with a warning that counts the rows (as 0016 does).

Revision ID: 0017_plausible_created_at
Revises: 0016_visible_text
Create Date: 2026-11-24
"""

from alembic import op

revision = "0017_plausible_created_at"
down_revision = "0016_visible_text"
branch_labels = None
depends_on = None

INSIDE = (
    "created_at >= '0001-01-02 00:00:00+00'::timestamptz "
    "AND created_at <= '9999-12-30 23:59:59.999999+00'::timestamptz"
)


def upgrade() -> None:
    op.execute(f"ALTER TABLE spark.memories ADD CONSTRAINT memories_created_at_range CHECK ({INSIDE}) NOT VALID")
    op.execute(
        f"""
        DO $$
        DECLARE
            outside bigint;
        BEGIN
            SELECT count(*) INTO outside FROM spark.memories WHERE NOT ({INSIDE});
            IF outside = 0 THEN
                ALTER TABLE spark.memories VALIDATE CONSTRAINT memories_created_at_range;
            ELSE
                RAISE WARNING '% memories were created before 0001-01-02 or after 9999-12-30 (UTC), which no '
                              'client can read back as a date; memories_created_at_range stays NOT VALID until '
                              'each is given a created_at inside or deleted', outside;
            END IF;
        END
        $$
        """
    )


def downgrade() -> None:
    op.execute("ALTER TABLE spark.memories DROP CONSTRAINT memories_created_at_range")
