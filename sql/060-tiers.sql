-- Memory tiers assigned from outcomes (rules in docs/advisor.md).

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
    RETURN QUERY
    WITH judged AS (
        SELECT m.id, m.key, m.tier,
               CASE
                   -- earned a pin: validated many times and almost always right
                   WHEN m.helpful_count + m.followed_count >= 15 AND m.reliability >= 0.9
                       THEN 'pinned:validated 15+ times with reliability 0.9+'
                   -- a pin the user set stays: only a pin this function gave can be taken back, which its
                   -- metadata says (a JSON true, metadata being free-form at ingest) with the pin's reason; a
                   -- rule's archive the user then pinned by hand still carries true, with the archive's reason
                   WHEN m.tier = 'pinned'
                        AND NOT (m.metadata -> 'tier_by_rule' IS NOT DISTINCT FROM 'true'::jsonb
                                 AND m.metadata ->> 'tier_reason' IS NOT DISTINCT FROM
                                     'validated 15+ times with reliability 0.9+')
                       THEN 'pinned:pinned by the user'
                   -- judged and found wanting
                   WHEN m.helpful_count + m.followed_count + m.unhelpful_count + m.ignored_count >= 4
                        AND m.reliability < 0.3
                       THEN 'archive:reliability under 0.3 after 4+ outcomes'
                   -- old, unimportant and never once useful
                   WHEN coalesce(m.last_seen_at, m.created_at) < at - interval '365 days'
                        AND m.helpful_count + m.followed_count = 0 AND m.importance < 0.3
                       THEN 'archive:a year unused, importance under 0.3'
                   ELSE 'active:' END AS verdict
        FROM spark.memories m
        WHERE m.tenant = assign_tiers.tenant),
    moved AS (
        UPDATE spark.memories m
        SET tier = split_part(j.verdict, ':', 1), updated_at = now(),
            metadata = m.metadata || jsonb_build_object(
                'tier_by_rule', split_part(j.verdict, ':', 1) <> 'active',
                'tier_reason', nullif(split_part(j.verdict, ':', 2), ''))
        FROM judged j
        WHERE m.tenant = assign_tiers.tenant AND m.id = j.id AND m.tier <> split_part(j.verdict, ':', 1)
        RETURNING m.key, j.tier AS old_tier, m.tier AS new_tier, nullif(split_part(j.verdict, ':', 2), '') AS why)
    SELECT mv.key, mv.old_tier, mv.new_tier, coalesce(mv.why, 'no archive or pin rule holds any more')
    FROM moved mv ORDER BY mv.key;
END
$fn$;
COMMENT ON FUNCTION spark.assign_tiers(text, timestamptz) IS
    'Re-assign tenant''s memory tiers by the documented rules (docs/advisor.md): pinned when validated '
    '(helpful + followed) 15+ times with reliability 0.9+, or pinned by the user; archive when reliability is '
    'under 0.3 after 4+ outcomes, or unused for a year with no helpful outcome and importance under 0.3; else '
    'active. as_of: the time the year is counted to (default now). Returns the memories that moved, with the '
    'rule. spark.retrieve searches the archive only when the other tiers yield fewer than k. Errors: 22004 '
    'NULL tenant, 22023 an empty or over-long tenant or the pack''s tenant _system, an as_of outside years 1 '
    'to 9999 (infinity included).';
