-- Memory tiers assigned from outcomes (rules in docs/advisor.md).

-- The tier rule for one memory as it is: 'tier:reason' (the reason empty for active). spark.assign_tiers
-- takes it inside its UPDATE, so a row another transaction changed meanwhile is judged as committed.
CREATE OR REPLACE FUNCTION spark._tier_verdict(m spark.memories, at timestamptz)
RETURNS text
LANGUAGE sql STABLE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
SELECT CASE
           -- an archive the user set stays, as a user's pin does: only an archive this function gave can be
           -- taken back, which its metadata says (a JSON true, metadata being free-form at ingest) with an
           -- archive rule's reason; a rule's pin the user then archived by hand still carries true, with the
           -- pin's reason. Judged first: the user's archive holds even when the memory earns a pin.
           WHEN m.tier = 'archive'
                AND NOT (m.metadata -> 'tier_by_rule' IS NOT DISTINCT FROM 'true'::jsonb
                         AND coalesce(m.metadata ->> 'tier_reason', '') IN (
                             'reliability under 0.3 after 4+ outcomes', 'a year unused, importance under 0.3'))
               THEN 'archive:archived by the user'
           -- earned a pin: validated many times and almost always right. Thresholds are reals, as the
           -- columns are: the double 0.9 is above the real 0.9 (0.89999998), which a stored 0.9 holds
           WHEN m.helpful_count + m.followed_count >= 15 AND m.reliability >= 0.9::real
               THEN 'pinned:validated 15+ times with reliability 0.9+'
           -- a pin the user set stays: only a pin this function gave can be taken back, which its metadata
           -- says (a JSON true) with the pin's reason; a rule's archive the user then pinned by hand still
           -- carries true, with the archive's reason
           WHEN m.tier = 'pinned'
                AND NOT (m.metadata -> 'tier_by_rule' IS NOT DISTINCT FROM 'true'::jsonb
                         AND m.metadata ->> 'tier_reason' IS NOT DISTINCT FROM
                             'validated 15+ times with reliability 0.9+')
               THEN 'pinned:pinned by the user'
           -- judged and found wanting
           WHEN m.helpful_count + m.followed_count + m.unhelpful_count + m.ignored_count >= 4
                AND m.reliability < 0.3::real
               THEN 'archive:reliability under 0.3 after 4+ outcomes'
           -- old, unimportant and never once useful
           WHEN coalesce(m.last_seen_at, m.created_at) < at - interval '365 days'
                AND m.helpful_count + m.followed_count = 0 AND m.importance < 0.3::real
               THEN 'archive:a year unused, importance under 0.3'
           ELSE 'active:' END
$fn$;
COMMENT ON FUNCTION spark._tier_verdict(spark.memories, timestamptz) IS
    'Internal (spark.assign_tiers): the tier rule that holds for memory row m at time at, as '
    '''tier:reason'' (active: an empty reason). m: a spark.memories row; at: the time the year rule counts '
    'to. The rules: docs/advisor.md, Tiers.';

CREATE OR REPLACE FUNCTION spark.assign_tiers(tenant text, as_of timestamptz DEFAULT NULL)
RETURNS TABLE (key text, old_tier text, new_tier text, reason text)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
#variable_conflict use_column
DECLARE
    at timestamptz := coalesce(as_of, now());
BEGIN
    PERFORM spark._check_writer(tenant);
    -- 'infinity' would age every memory past the year rule; a time near 4714 BC minus the year is no time
    IF NOT spark._plausible_time(at) THEN
        RAISE EXCEPTION 'as_of must be a time from year 1 to 9999, got %', as_of
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The verdict is taken in the UPDATE, on the row being updated: when another transaction changed a
    -- memory meanwhile (a revaluation raising its importance, an outcome), PostgreSQL re-reads the row as
    -- committed and the rule is judged on that, not on the statement's older snapshot. A rule's archive
    -- whose rule changed (a year unused, now reliability) gets the new reason, which spark.revalue_apply's
    -- lift reads; that refresh is not reported as a move.
    -- its own tier writes keep the marks it writes (the trigger memories_tier_marks, schema 0018, drops them
    -- from any other write that changes a tier: that tier is the user's); off again right after
    PERFORM set_config('spark.tier_rule_writes', 'on', true);
    RETURN QUERY
    WITH moved AS (
        -- the verdict once for the test and once for the write (a row left as it is: once)
        UPDATE spark.memories m
        SET (tier, metadata) = (
                SELECT split_part(v.verdict, ':', 1),
                       m.metadata || jsonb_build_object(
                           'tier_by_rule', split_part(v.verdict, ':', 1) <> 'active',
                           'tier_reason', nullif(split_part(v.verdict, ':', 2), ''))
                FROM (SELECT spark._tier_verdict(m, at) AS verdict) v),
            updated_at = now()
        FROM (SELECT m0.id, m0.tier FROM spark.memories m0 WHERE m0.tenant = assign_tiers.tenant) j
        WHERE m.tenant = assign_tiers.tenant AND m.id = j.id
          AND (SELECT m.tier <> split_part(v.verdict, ':', 1)
                      OR (m.tier = 'archive' AND v.verdict LIKE 'archive:%'
                          AND v.verdict <> 'archive:archived by the user'
                          AND m.metadata -> 'tier_by_rule' = 'true'::jsonb
                          AND m.metadata ->> 'tier_reason' IS DISTINCT FROM split_part(v.verdict, ':', 2))
               FROM (SELECT spark._tier_verdict(m, at) AS verdict) v)
        RETURNING m.key, j.tier AS old_tier, m.tier AS new_tier, m.metadata ->> 'tier_reason' AS why)
    SELECT mv.key, mv.old_tier, mv.new_tier, coalesce(mv.why, 'no archive or pin rule holds any more')
    FROM moved mv WHERE mv.old_tier <> mv.new_tier ORDER BY mv.key;
    PERFORM set_config('spark.tier_rule_writes', 'off', true);
END
$fn$;
COMMENT ON FUNCTION spark.assign_tiers(text, timestamptz) IS
    'Re-assign tenant''s memory tiers by the documented rules (docs/advisor.md): pinned when validated '
    '(helpful + followed) 15+ times with reliability 0.9+ (as stored: a real 0.9 counts), or pinned by the '
    'user; archive when archived by the user (an archive no rule set is left alone, even when the memory '
    'earns a pin), when reliability is under 0.3 after 4+ outcomes, or unused for a year with no helpful '
    'outcome and importance under 0.3; else active. as_of: the time the year is counted to (default now). '
    'Each row is judged as last committed (a concurrent revaluation or outcome is waited for, then '
    'counted). Returns the memories that moved, with the rule; an archive whose rule changed gets the new '
    'reason without being reported. spark.retrieve searches the archive only when the other tiers yield '
    'fewer than k. Errors: 22004 NULL tenant, 22023 an empty or over-long tenant or the pack''s tenant '
    '_system, an as_of outside years 1 to 9999 (infinity included).';
