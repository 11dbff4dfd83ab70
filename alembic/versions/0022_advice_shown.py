"""What each session was last shown lives in ``spark.advice_shown``; ``spark.retrievals.warned`` goes.

0021's look-back read the session's earlier calls for every item: about 18 us per call of the session per
item (110 ms at 6,000 calls, measured). ``spark.advice_shown`` (tenant, session_id, memory_id) holds the advise
call that last showed the memory to the session, and when (one primary-key probe an item, however long the
session), and the record it replaced (``prev_retrieval_id``, ``prev_shown_at``), which
``Advisor.forget_shown`` puts back when the caller showed none of a call's items (the hook, when an
interrupt denies the call): a deny must not erase what an earlier call of the session showed.

Rows go with their advise call (foreign key, ON DELETE CASCADE). A deployment with row-level security
(docs/security.md) gets, on the new table, the policies ``spark.retrievals`` has (the same expressions:
current_user or the shared-pool ``spark.tenant`` setting) and the grants ``spark.retrieval_items`` has
(read from its ACL: grants made by other roles and to PUBLIC too). Safe over either form of 0021 that ran.

Revision ID: 0022_advice_shown
Revises: 0021_advice_repeats
Create Date: 2026-11-24
"""

from alembic import op

revision = "0022_advice_shown"
down_revision = "0021_advice_repeats"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        ALTER TABLE spark.retrievals DROP COLUMN IF EXISTS warned;
        CREATE TABLE IF NOT EXISTS spark.advice_shown (
            tenant       text NOT NULL,
            session_id   text NOT NULL,
            memory_id    bigint NOT NULL,
            retrieval_id bigint NOT NULL,
            shown_at     timestamptz NOT NULL,
            PRIMARY KEY (tenant, session_id, memory_id),
            FOREIGN KEY (tenant, retrieval_id) REFERENCES spark.retrievals (tenant, id) ON DELETE CASCADE
        );
        ALTER TABLE spark.advice_shown ADD COLUMN IF NOT EXISTS prev_retrieval_id bigint,
                                       ADD COLUMN IF NOT EXISTS prev_shown_at timestamptz;
        CREATE INDEX IF NOT EXISTS advice_shown_retrieval_idx ON spark.advice_shown (tenant, retrieval_id);
        COMMENT ON TABLE spark.advice_shown IS
            'What each advise session was last shown, and when (spark.advise, spark.advise_with_warnings): '
            'an item shown within repeat_after_minutes is a repeat. prev_*: the record this one replaced '
            '(put back when the caller showed none of the call''s items).';
        DO $$
        DECLARE
            pol record;
            acl record;
        BEGIN
            IF (SELECT c.relrowsecurity FROM pg_catalog.pg_class c WHERE c.oid = 'spark.retrievals'::regclass) THEN
                ALTER TABLE spark.advice_shown ENABLE ROW LEVEL SECURITY;
                FOR pol IN
                    SELECT p.policyname, p.permissive, p.roles, p.cmd, p.qual, p.with_check
                    FROM pg_catalog.pg_policies p
                    WHERE p.schemaname = 'spark' AND p.tablename = 'retrievals'
                      AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_policies q
                                      WHERE q.schemaname = 'spark' AND q.tablename = 'advice_shown'
                                        AND q.policyname = p.policyname)
                LOOP
                    EXECUTE format('CREATE POLICY %I ON spark.advice_shown AS %s FOR %s TO %s%s%s',
                        pol.policyname, pol.permissive, pol.cmd,
                        (SELECT string_agg(CASE WHEN r = 'public' THEN 'PUBLIC' ELSE quote_ident(r) END, ', ')
                         FROM unnest(pol.roles) r),
                        CASE WHEN pol.qual IS NOT NULL THEN format(' USING (%s)', pol.qual) ELSE '' END,
                        CASE WHEN pol.with_check IS NOT NULL THEN format(' WITH CHECK (%s)', pol.with_check)
                             ELSE '' END);
                END LOOP;
            END IF;
            FOR acl IN
                SELECT DISTINCT a.grantee
                FROM pg_catalog.pg_class c, aclexplode(c.relacl) a
                WHERE c.oid = 'spark.retrieval_items'::regclass AND a.privilege_type = 'INSERT'
                  AND a.grantee <> c.relowner
            LOOP
                EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON spark.advice_shown TO %s',
                               CASE WHEN acl.grantee = 0 THEN 'PUBLIC'
                                    ELSE quote_ident((SELECT r.rolname FROM pg_catalog.pg_roles r
                                                      WHERE r.oid = acl.grantee)) END);
            END LOOP;
        END $$;
        """
    )


def downgrade() -> None:
    op.execute("DROP TABLE IF EXISTS spark.advice_shown")
    op.execute("ALTER TABLE spark.retrievals ADD COLUMN IF NOT EXISTS warned bigint[]")
