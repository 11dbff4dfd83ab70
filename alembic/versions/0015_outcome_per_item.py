"""One verdict per surfaced item and source: ``spark.outcomes`` gets the unique key
``outcomes_item_source_key (tenant, retrieval_id, memory_id, source)``.

``spark.record_outcome`` (sql/050-advise.sql) logged every call it got: a retried call counted twice in
the memory's counters and reliability (which feeds fusion's ``w_outcome``). Now an outcome that names an
advise call keeps one row per call, memory and source: the same verdict again changes nothing, another
verdict replaces it and its count is taken back. Outcomes naming no call (``retrieval_id`` NULL) are not
constrained (NULLs are distinct in a unique key).

Upgrading a database that already holds repeats:

- Of each set of outcomes with the same tenant, call, memory and source, the latest (highest id) is kept,
  as record_outcome now keeps the latest verdict; the others are deleted, and each one's count is taken
  back from its memory's counters (never below 0; a pack memory's counters were never moved by a tenant's
  outcome, so they are left alone). The reliability of every memory whose counters changed is computed
  again from them, by record_outcome's formula: (helpful + followed + 1) / (helpful + followed + unhelpful
  + 0.25 x ignored + 2).
- An outcome naming a call takes the call's session, as record_outcome now stores it (it used to keep the
  session its caller gave): the hooks' "one ignored per memory per session" reads it.
- Outcomes naming a call that did not surface their memory (record_outcome now refuses them) are kept:
  nothing tells a mistaken one from one whose call's items were edited by hand.

Downgrade drops the unique key; the deleted repeats and the sessions replaced are not restored.

Revision ID: 0015_outcome_per_item
Revises: 0014_follow_text_marker
Create Date: 2026-11-24
"""

from alembic import op

revision = "0015_outcome_per_item"
down_revision = "0014_follow_text_marker"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        WITH repeats AS (
            DELETE FROM spark.outcomes o
            USING (SELECT x.tenant, x.id,
                          row_number() OVER (PARTITION BY x.tenant, x.retrieval_id, x.memory_id, x.source
                                             ORDER BY x.id DESC) AS newer
                   FROM spark.outcomes x WHERE x.retrieval_id IS NOT NULL) r
            WHERE r.newer > 1 AND o.tenant = r.tenant AND o.id = r.id
            RETURNING o.tenant, o.memory_tenant, o.memory_id, o.outcome),
        taken AS (
            SELECT d.memory_tenant, d.memory_id,
                   count(*) FILTER (WHERE d.outcome = 'helpful') AS helpful,
                   count(*) FILTER (WHERE d.outcome = 'followed') AS followed,
                   count(*) FILTER (WHERE d.outcome = 'unhelpful') AS unhelpful,
                   count(*) FILTER (WHERE d.outcome = 'ignored') AS ignored
            FROM repeats d WHERE d.memory_tenant = d.tenant  -- the pack's counters never moved
            GROUP BY d.memory_tenant, d.memory_id)
        UPDATE spark.memories m
        SET helpful_count = greatest(0, m.helpful_count - t.helpful),
            followed_count = greatest(0, m.followed_count - t.followed),
            unhelpful_count = greatest(0, m.unhelpful_count - t.unhelpful),
            ignored_count = greatest(0, m.ignored_count - t.ignored),
            reliability = (greatest(0, m.helpful_count - t.helpful)
                           + greatest(0, m.followed_count - t.followed) + 1)::real
                          / (greatest(0, m.helpful_count - t.helpful)
                             + greatest(0, m.followed_count - t.followed)
                             + greatest(0, m.unhelpful_count - t.unhelpful)
                             + 0.25 * greatest(0, m.ignored_count - t.ignored) + 2)::real
        FROM taken t WHERE m.tenant = t.memory_tenant AND m.id = t.memory_id;

        UPDATE spark.outcomes o SET session_id = r.session_id
        FROM spark.retrievals r
        WHERE r.tenant = o.tenant AND r.id = o.retrieval_id AND o.session_id IS DISTINCT FROM r.session_id;

        ALTER TABLE spark.outcomes
            ADD CONSTRAINT outcomes_item_source_key UNIQUE (tenant, retrieval_id, memory_id, source);
        COMMENT ON CONSTRAINT outcomes_item_source_key ON spark.outcomes IS
            'One verdict per surfaced item (advise call and memory) and source; outcomes naming no call are '
            'not constrained. spark.record_outcome replaces a verdict with a different one.';
        """
    )


def downgrade() -> None:
    op.execute("ALTER TABLE spark.outcomes DROP CONSTRAINT outcomes_item_source_key")
