"""Every write of a trigger rule's patterns is checked, not only spark.put_trigger_rule's.

spark.put_trigger_rule refuses an invalid or unsafe pattern (2201B), but a row written in SQL around it (an
``INSERT`` by the owner, or by a tenant role, which row-level security lets write its own rules:
docs/security.md) was stored as given. Every retrieval of that tenant then failed on the pattern (2201B
inside spark.retrieve; for the pack's ``_system``, every tenant's), or took seconds on a pattern that compiles
slowly.

The triggers ``trigger_rules_patterns_insert`` (BEFORE INSERT) and ``trigger_rules_patterns_update`` (BEFORE
UPDATE of a pattern, when it changes) run the check put_trigger_rule runs, ``spark._check_trigger_patterns``
(sql/045-triggers.sql, re-applied with the other functions: the triggers call it by name, so the checks stay
one and can grow). A CHECK constraint could not call it: it would bind the table to a function sql/ replaces.
The trigger function is frozen here, as in 0013 and 0018.

Upgrading over such rows: they stay (nothing is deleted), and the upgrade warns with their count and the query
that lists them.

Revision ID: 0020_trigger_rule_patterns
Revises: 0019_visible_descriptor
Create Date: 2026-11-24
"""

from alembic import op

revision = "0020_trigger_rule_patterns"
down_revision = "0019_visible_descriptor"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE FUNCTION spark._trigger_rule_patterns_checked()
        RETURNS trigger
        LANGUAGE plpgsql VOLATILE
        SET search_path = pg_catalog, pg_temp
        AS $fn$
        BEGIN
            PERFORM spark._check_trigger_patterns(NEW.name, NEW.pattern, NEW.context_pattern);
            RETURN NEW;
        END
        $fn$;
        COMMENT ON FUNCTION spark._trigger_rule_patterns_checked() IS
            'Trigger (frozen with trigger_rules_patterns_insert and _update): a trigger rule written in SQL '
            'passes the pattern checks of spark.put_trigger_rule (spark._check_trigger_patterns: 2201B an '
            'invalid or unsafe pattern or context_pattern, or a pattern that matches an empty text).';
        CREATE TRIGGER trigger_rules_patterns_insert BEFORE INSERT ON spark.trigger_rules
            FOR EACH ROW EXECUTE FUNCTION spark._trigger_rule_patterns_checked();
        CREATE TRIGGER trigger_rules_patterns_update
            BEFORE UPDATE OF pattern, context_pattern ON spark.trigger_rules
            FOR EACH ROW WHEN (NEW.pattern IS DISTINCT FROM OLD.pattern
                               OR NEW.context_pattern IS DISTINCT FROM OLD.context_pattern)
            EXECUTE FUNCTION spark._trigger_rule_patterns_checked();
        """
    )
    # rules stored before: counted with the checks of the installed functions (a fresh install has no rules
    # and no functions yet: sql/ is applied after the migrations)
    op.execute(
        """
        DO $$
        DECLARE
            bad bigint;
        BEGIN
            IF to_regprocedure('spark._trigger_pattern_problem(text)') IS NULL THEN
                RETURN;
            END IF;
            -- CASE: a pattern the regex engine refuses must not reach the ~* test
            SELECT count(*) INTO bad FROM spark.trigger_rules r
            WHERE CASE WHEN spark._trigger_pattern_problem(r.pattern) IS NOT NULL THEN true
                       WHEN r.context_pattern IS NOT NULL
                            AND spark._trigger_pattern_problem(r.context_pattern) IS NOT NULL THEN true
                       ELSE '' ~* r.pattern END;
            IF bad > 0 THEN
                RAISE WARNING '% trigger rules hold a pattern spark.put_trigger_rule refuses, and the '
                              'retrievals of their tenants may fail on it; list them with SELECT tenant, '
                              'name, spark._trigger_rule_problem(pattern, context_pattern) FROM '
                              'spark.trigger_rules WHERE spark._trigger_rule_problem(pattern, '
                              'context_pattern) IS NOT NULL, then fix or delete them', bad;
            END IF;
        END
        $$
        """
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER trigger_rules_patterns_update ON spark.trigger_rules")
    op.execute("DROP TRIGGER trigger_rules_patterns_insert ON spark.trigger_rules")
    op.execute("DROP FUNCTION spark._trigger_rule_patterns_checked()")
