"""Advice a session was shown lately is marked as a repeat: ``spark.advice_shown`` remembers what each session
was shown, and when.

``spark.advice_shown`` (tenant, session_id, memory_id): the advise call (``spark.retrievals.id``) that last
showed the memory to the session, and when. ``spark.advise`` reads it for each item it surfaces (one
primary-key probe an item, however long the session) and writes it for each item it shows; an item the
session was shown within ``repeat_after_minutes`` (a params key, default 30) is a repeat instead, and
``spark.advise_with_warnings`` does the same for its past-failure warnings. A caller that shows none of a
call's items (the hook, when an interrupt denies the call) removes that call's rows
(``Advisor.forget_shown``). Rows go with their advise call (foreign key, ON DELETE CASCADE).

``spark.retrieval_items.repeat_of``: for an item that was a repeat, the earlier call that showed it; NULL for
an item shown. The Claude Code hook leaves repeats out of the context it injects: the model has that advice
in its context already, and the same lines on every call of a session were noise. Repeats are logged as
items all the same (outcome inference reads them).

A deployment with row-level security (docs/security.md) gets the new table's policy and the grants its
tenant roles hold on ``spark.retrieval_items``.

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
            'For an item the session was shown within repeat_after_minutes: the earlier advise call that '
            'showed it (spark.retrievals.id); this item is a repeat, not shown again. NULL: shown.';
        CREATE TABLE spark.advice_shown (
            tenant       text NOT NULL,
            session_id   text NOT NULL,
            memory_id    bigint NOT NULL,
            retrieval_id bigint NOT NULL,
            shown_at     timestamptz NOT NULL,
            PRIMARY KEY (tenant, session_id, memory_id),
            FOREIGN KEY (tenant, retrieval_id) REFERENCES spark.retrievals (tenant, id) ON DELETE CASCADE
        );
        CREATE INDEX advice_shown_retrieval_idx ON spark.advice_shown (tenant, retrieval_id);
        COMMENT ON TABLE spark.advice_shown IS
            'What each advise session was last shown, and when (spark.advise, spark.advise_with_warnings): '
            'an item shown within repeat_after_minutes is a repeat.';
        DO $$
        DECLARE
            grantee text;
        BEGIN
            IF (SELECT c.relrowsecurity FROM pg_catalog.pg_class c WHERE c.oid = 'spark.retrievals'::regclass) THEN
                ALTER TABLE spark.advice_shown ENABLE ROW LEVEL SECURITY;
                CREATE POLICY tenant_own ON spark.advice_shown USING (tenant = current_user::text);
            END IF;
            FOR grantee IN
                SELECT DISTINCT g.grantee FROM information_schema.role_table_grants g
                WHERE g.table_schema = 'spark' AND g.table_name = 'retrieval_items'
                  AND g.privilege_type = 'INSERT' AND g.grantee <> current_user
            LOOP
                EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON spark.advice_shown TO %I', grantee);
            END LOOP;
        END $$;
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE spark.advice_shown")
    op.execute("ALTER TABLE spark.retrieval_items DROP COLUMN repeat_of")
