"""Python's ingest marks its writes, so the text-follows trigger never mistakes an edit for one of them.

0013's ``memories_follow_text`` told Python's writes from a client's by one guess: a descriptor that
already ends with the new text was taken for the writer's own (Python moves a category tag between text
and category that way). A client's edit that cuts the front off the text ("Never deploy on Friday
afternoons" to "Friday afternoons") matched the guess too, so the old wording stayed in the descriptor,
the keyword index, the hash and the vector, and the next edit glued it in front of the new text as if it
were a tag.

Now Python's ingest sets ``spark.ingest_writes`` to ``on`` for its upsert (``set_config(..., true)``, reset
right after), and the trigger's WHEN clause skips exactly those writes. Every other ``UPDATE`` of the text
alone has the descriptor follow it: the old text is replaced at the end of the descriptor (the tags stay),
or the descriptor becomes the text when it did not end with the old text. The function is frozen here
with its trigger, as in 0013.

Revision ID: 0014_follow_text_marker
Revises: 0013_psql_writes
Create Date: 2026-11-23
"""

from alembic import op

revision = "0014_follow_text_marker"
down_revision = "0013_psql_writes"
branch_labels = None
depends_on = None

_FUNCTION = """
CREATE OR REPLACE FUNCTION spark._follow_text()
RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF NEW.text IS DISTINCT FROM OLD.text AND NEW.descriptor IS NOT DISTINCT FROM OLD.descriptor {tail} THEN
        IF right(OLD.descriptor, length(OLD.text)) = OLD.text THEN
            NEW.descriptor := left(OLD.descriptor, length(OLD.descriptor) - length(OLD.text)) || NEW.text;
        ELSE
            NEW.descriptor := NEW.text;
        END IF;
        -- the old text's scores do not describe the new one: unscored, as any SQL-written memory
        NEW.action_domain := NULL;
        NEW.actionability := NULL;
        NEW.content_hash := sha256(convert_to(NEW.descriptor, 'UTF8'));  -- whatever hash came with it
    ELSIF NEW.descriptor IS DISTINCT FROM OLD.descriptor
          AND NEW.content_hash IS NOT DISTINCT FROM OLD.content_hash AND NEW.descriptor IS NOT NULL THEN
        NEW.content_hash := sha256(convert_to(NEW.descriptor, 'UTF8'));
    END IF;
    RETURN NEW;
END
$fn$;
COMMENT ON FUNCTION spark._follow_text() IS
    'Trigger (frozen with memories_follow_text): an update that changes the text but not the descriptor '
    'carries the new text into the descriptor (tags kept); one that changes the descriptor but not the '
    'content_hash recomputes the hash, so the memory is re-indexed and re-queued. {who}';
DROP TRIGGER memories_follow_text ON spark.memories;
CREATE TRIGGER memories_follow_text BEFORE UPDATE OF text, descriptor ON spark.memories
    FOR EACH ROW WHEN ({skip}
        (NEW.text IS DISTINCT FROM OLD.text AND NEW.descriptor IS NOT DISTINCT FROM OLD.descriptor {tail})
        OR (NEW.descriptor IS DISTINCT FROM OLD.descriptor
            AND NEW.content_hash IS NOT DISTINCT FROM OLD.content_hash))
    EXECUTE FUNCTION spark._follow_text();
"""


def upgrade() -> None:
    op.execute(
        _FUNCTION.format(
            tail="",
            skip="current_setting('spark.ingest_writes', true) IS DISTINCT FROM 'on' AND",
            who="Skipped for Python ingest''s upsert, which sets spark.ingest_writes and both columns.",
        )
    )


def downgrade() -> None:  # 0013's guess
    op.execute(
        _FUNCTION.format(
            tail="AND right(NEW.descriptor, length(NEW.text)) IS DISTINCT FROM NEW.text",
            skip="",
            who="A descriptor that already ends with the new text is left as it is.",
        )
    )
