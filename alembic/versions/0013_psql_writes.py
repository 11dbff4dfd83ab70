"""Writes from any client: the descriptor and content hash follow the text when a caller does not set them.

Python ingest computes a memory's ``descriptor`` (the text behind its category and action-domain tags) and
``content_hash`` (SHA-256 of the descriptor's UTF-8). A client writing SQL (psql, another language) had to
do the same or be refused (both are NOT NULL), and an ``UPDATE ... SET text`` left both stale: the keyword
index and the vector kept matching the old text and nothing queued it for embedding again.

Two row triggers fill the gap, and only when the writer left it (their WHEN clauses keep them from running
at all for Python's writes, which always set both consistently):
- ``memories_fill_descriptor`` (insert): a NULL ``descriptor`` becomes the text itself (the action-domain
  classifier lives in Python; a caller who wants the tags writes the descriptor), a NULL ``content_hash``
  the hash of the descriptor.
- ``memories_follow_text`` (update): a new ``text`` with the descriptor untouched (and not already ending
  with the new text) replaces the old text at the end of the descriptor (its tags stay) or, when the
  descriptor did not end with it, becomes the descriptor; the hash is then that descriptor's, and the
  action domain and actionability (scores of the old text) become NULL, as for any memory written in SQL.
  A new descriptor with the hash untouched gets its hash. The changed hash then re-queues the memory
  through ``memories_queue_update`` (0008).

The functions are frozen here with their triggers (sql/ does not replace them).

Revision ID: 0013_psql_writes
Revises: 0012_model_retired_at
Create Date: 2026-11-23
"""

from alembic import op

revision = "0013_psql_writes"
down_revision = "0012_model_retired_at"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION spark._fill_descriptor()
        RETURNS trigger
        LANGUAGE plpgsql VOLATILE
        SET search_path = pg_catalog, pg_temp
        AS $fn$
        BEGIN
            NEW.descriptor := coalesce(NEW.descriptor, NEW.text);
            IF NEW.content_hash IS NULL AND NEW.descriptor IS NOT NULL THEN
                NEW.content_hash := sha256(convert_to(NEW.descriptor, 'UTF8'));
            END IF;
            RETURN NEW;
        END
        $fn$;
        COMMENT ON FUNCTION spark._fill_descriptor() IS
            'Trigger (frozen with memories_fill_descriptor): an inserted memory without a descriptor gets its '
            'text; without a content_hash, the SHA-256 of its descriptor.';
        CREATE TRIGGER memories_fill_descriptor BEFORE INSERT ON spark.memories
            FOR EACH ROW WHEN (NEW.descriptor IS NULL OR NEW.content_hash IS NULL)
            EXECUTE FUNCTION spark._fill_descriptor();

        CREATE FUNCTION spark._follow_text()
        RETURNS trigger
        LANGUAGE plpgsql VOLATILE
        SET search_path = pg_catalog, pg_temp
        AS $fn$
        BEGIN
            -- a descriptor that already ends with the new text is the writer's own (Python moves a tag between
            -- category and text that way): left as it is
            IF NEW.text IS DISTINCT FROM OLD.text AND NEW.descriptor IS NOT DISTINCT FROM OLD.descriptor
               AND right(NEW.descriptor, length(NEW.text)) IS DISTINCT FROM NEW.text THEN
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
            'Trigger (frozen with memories_follow_text): an update that changes the text but not the '
            'descriptor carries the new text into the descriptor (tags kept); one that changes the descriptor '
            'but not the content_hash recomputes the hash, so the memory is re-indexed and re-queued.';
        CREATE TRIGGER memories_follow_text BEFORE UPDATE OF text, descriptor ON spark.memories
            FOR EACH ROW WHEN (
                (NEW.text IS DISTINCT FROM OLD.text AND NEW.descriptor IS NOT DISTINCT FROM OLD.descriptor
                 AND right(NEW.descriptor, length(NEW.text)) IS DISTINCT FROM NEW.text)
                OR (NEW.descriptor IS DISTINCT FROM OLD.descriptor
                    AND NEW.content_hash IS NOT DISTINCT FROM OLD.content_hash))
            EXECUTE FUNCTION spark._follow_text();
        """
    )


def downgrade() -> None:
    op.execute(
        """
        DROP TRIGGER memories_follow_text ON spark.memories;
        DROP TRIGGER memories_fill_descriptor ON spark.memories;
        DROP FUNCTION spark._follow_text();
        DROP FUNCTION spark._fill_descriptor();
        """
    )
