"""A memory's text must show something: ``spark.memories`` gets the CHECK ``memories_text_visible``.

The text's CHECK was ``text <> ''``, so a client writing SQL could store a text of spaces, line breaks, a
zero-width space or a BOM: nothing to embed, no lexeme to match, a row no query can surface. Python's ingest
refused a blank text but took one of invisible characters only. Both now refuse the same texts: those made
only of control (Unicode category Cc), format (Cf) and space (Zs, Zl, Zp) characters, by Unicode 14, listed as
code point ranges (``spark_pg.rowfiles.INVISIBLE_RANGES``; a test checks the pattern below against them for
every code point).

Upgrading a database that already holds such texts: the constraint is added ``NOT VALID`` (new and updated
rows are checked, the old ones are not), validated when no row breaks it, and otherwise left unvalidated with
a warning that counts the rows; an update of such a row must then give it a text that shows something.

Revision ID: 0016_visible_text
Revises: 0015_outcome_per_item
Create Date: 2026-11-24
"""

from alembic import op

revision = "0016_visible_text"
down_revision = "0015_outcome_per_item"
branch_labels = None
depends_on = None

# a character outside the ranges (NUL is left out: PostgreSQL text cannot hold it)
VISIBLE = (
    "[^\\U00000001-\\U00000020\\U0000007F-\\U000000A0\\U000000AD-\\U000000AD\\U00000600-\\U00000605"
    "\\U0000061C-\\U0000061C\\U000006DD-\\U000006DD\\U0000070F-\\U0000070F\\U00000890-\\U00000891"
    "\\U000008E2-\\U000008E2\\U00001680-\\U00001680\\U0000180E-\\U0000180E\\U00002000-\\U0000200F"
    "\\U00002028-\\U0000202F\\U0000205F-\\U00002064\\U00002066-\\U0000206F\\U00003000-\\U00003000"
    "\\U0000FEFF-\\U0000FEFF\\U0000FFF9-\\U0000FFFB\\U000110BD-\\U000110BD\\U000110CD-\\U000110CD"
    "\\U00013430-\\U00013438\\U0001BCA0-\\U0001BCA3\\U0001D173-\\U0001D17A\\U000E0001-\\U000E0001"
    "\\U000E0020-\\U000E007F]"
)


def upgrade() -> None:
    op.execute(
        "ALTER TABLE spark.memories ADD CONSTRAINT memories_text_visible "
        f"CHECK (text ~ '{VISIBLE}') NOT VALID"
    )
    op.execute(
        f"""
        DO $$
        DECLARE
            blank bigint;
        BEGIN
            SELECT count(*) INTO blank FROM spark.memories WHERE text !~ '{VISIBLE}';
            IF blank = 0 THEN
                ALTER TABLE spark.memories VALIDATE CONSTRAINT memories_text_visible;
            ELSE
                RAISE WARNING '% memories hold a text of white space and invisible characters only; '
                              'memories_text_visible stays NOT VALID until each is given text or deleted',
                              blank;
            END IF;
        END
        $$
        """
    )


def downgrade() -> None:
    op.execute("ALTER TABLE spark.memories DROP CONSTRAINT memories_text_visible")
