"""A tier set by anyone but spark.assign_tiers is the user's: an update of the tier drops the rule's marks.

spark.assign_tiers marks the tiers it sets (``metadata.tier_by_rule`` true and ``tier_reason``) and takes
back only those. Python's ingest dropped the marks when a row set the tier, but an ``UPDATE`` in SQL changed
the tier and left them: a memory the rule had pinned, that the user set back to active and later pinned again
by hand, still read as the rule's pin and was unpinned at the next run ("a user's pin is never taken back");
the same for an archive.

The trigger ``memories_tier_marks`` (BEFORE UPDATE OF tier, when the tier changes) drops both keys, except for
the writes of spark.assign_tiers, which sets ``spark.tier_rule_writes`` to ``on`` for its statement
(``set_config(..., true)``, reset right after) and writes the marks itself. (spark.revalue_apply's lift of a
year-rule archive to active drops them the same way.) The function is frozen here with its trigger, as in 0013
and 0014.

Revision ID: 0018_tier_marks_follow
Revises: 0017_plausible_created_at
Create Date: 2026-11-24
"""

from alembic import op

revision = "0018_tier_marks_follow"
down_revision = "0017_plausible_created_at"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION spark._tier_marks_follow()
        RETURNS trigger
        LANGUAGE plpgsql VOLATILE
        SET search_path = pg_catalog, pg_temp
        AS $fn$
        BEGIN
            NEW.metadata := NEW.metadata - 'tier_by_rule' - 'tier_reason';
            RETURN NEW;
        END
        $fn$;
        COMMENT ON FUNCTION spark._tier_marks_follow() IS
            'Trigger (frozen with memories_tier_marks): an update that changes a memory''s tier, other than '
            'spark.assign_tiers'' (spark.tier_rule_writes on), drops the tier rule''s marks '
            '(metadata.tier_by_rule and tier_reason): the tier it sets is the user''s, never taken back.';
        CREATE TRIGGER memories_tier_marks BEFORE UPDATE OF tier ON spark.memories
            FOR EACH ROW WHEN (current_setting('spark.tier_rule_writes', true) IS DISTINCT FROM 'on'
                               AND NEW.tier IS DISTINCT FROM OLD.tier
                               AND NEW.metadata ?| ARRAY['tier_by_rule', 'tier_reason'])
            EXECUTE FUNCTION spark._tier_marks_follow();
        """
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER memories_tier_marks ON spark.memories")
    op.execute("DROP FUNCTION spark._tier_marks_follow()")
