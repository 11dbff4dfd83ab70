-- Trigger rules (table: migration 0006): pattern checks and the one way to write a rule.

CREATE OR REPLACE FUNCTION spark._trigger_pattern_problem(pattern text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
BEGIN
    -- patterns run inside every retrieval: refuse what could make one slow, not only what is invalid
    IF pattern IS NULL OR pattern = '' THEN
        RETURN 'is empty';
    ELSIF length(pattern) > 500 THEN
        RETURN format('is %s characters; the limit is 500', length(pattern));
    ELSIF pattern ~ '\\[1-9]' THEN
        RETURN 'uses a backreference (\1 ... \9), which can take exponential time';
    ELSIF pattern ~ '\(\?[=!<]' THEN
        RETURN 'uses a lookaround ((?=, (?!, (?<), which is not allowed';
    ELSIF pattern ~ '\([^()]*[+*}][^()]*\)[+*{]' THEN
        RETURN 'nests quantifiers (like (a+)+), which can take exponential time';
    END IF;
    BEGIN
        PERFORM '' ~* pattern;
    EXCEPTION WHEN invalid_regular_expression THEN
        RETURN 'is not a valid regular expression: ' || SQLERRM;
    END;
    RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION spark._trigger_pattern_problem(text) IS
    'Internal: why pattern cannot be a trigger pattern (empty, over 500 characters, a backreference, a '
    'lookaround, nested quantifiers, invalid), or NULL when it can.';

CREATE OR REPLACE FUNCTION spark.put_trigger_rule(
    tenant text, name text, pattern text, surface text[], context_pattern text DEFAULT NULL,
    priority text DEFAULT 'normal', interrupt boolean DEFAULT false, origin text DEFAULT 'static',
    confidence real DEFAULT 1, shadow boolean DEFAULT false, metadata jsonb DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
    problem text;
BEGIN
    PERFORM spark._check_tenant(tenant);
    IF name IS NULL OR name !~ '^[A-Za-z0-9_.:-]{1,64}$' THEN
        RAISE EXCEPTION 'name must be 1 to 64 letters, digits or _ . : -, got %', coalesce(quote_literal(name), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    problem := spark._trigger_pattern_problem(pattern);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'rule %: pattern %', name, problem USING ERRCODE = 'invalid_regular_expression';
    END IF;
    IF context_pattern IS NOT NULL THEN
        problem := spark._trigger_pattern_problem(context_pattern);
        IF problem IS NOT NULL THEN
            RAISE EXCEPTION 'rule %: context_pattern %', name, problem USING ERRCODE = 'invalid_regular_expression';
        END IF;
    END IF;
    IF surface IS NULL OR cardinality(surface) NOT BETWEEN 1 AND 50
       OR EXISTS (SELECT 1 FROM unnest(surface) s WHERE s IS NULL OR s = '') THEN
        RAISE EXCEPTION 'rule %: surface must list 1 to 50 memory keys', name USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF priority IS NULL OR priority NOT IN ('critical', 'high', 'normal', 'background') THEN
        RAISE EXCEPTION 'rule %: priority must be critical, high, normal or background, got %', name,
            coalesce(priority, 'NULL') USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF origin IS NULL OR origin NOT IN ('static', 'learned') THEN
        RAISE EXCEPTION 'rule %: origin must be static or learned, got %', name, coalesce(origin, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF confidence IS NULL OR confidence NOT BETWEEN 0 AND 1 THEN
        RAISE EXCEPTION 'rule %: confidence must be from 0 to 1, got %', name, coalesce(confidence::text, 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF interrupt IS NULL OR shadow IS NULL THEN
        RAISE EXCEPTION 'rule %: interrupt and shadow must not be NULL', name USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF metadata IS NULL OR jsonb_typeof(metadata) <> 'object' THEN
        RAISE EXCEPTION 'rule %: metadata must be a JSON object', name USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO spark.trigger_rules AS r (tenant, name, pattern, context_pattern, surface, priority, interrupt,
                                         origin, confidence, shadow, metadata)
    VALUES (tenant, name, pattern, context_pattern, surface, priority, interrupt, origin, confidence, shadow,
            metadata)
    ON CONFLICT ON CONSTRAINT trigger_rules_pkey DO UPDATE
        SET pattern = EXCLUDED.pattern, context_pattern = EXCLUDED.context_pattern, surface = EXCLUDED.surface,
            priority = EXCLUDED.priority, interrupt = EXCLUDED.interrupt, origin = EXCLUDED.origin,
            confidence = EXCLUDED.confidence, shadow = EXCLUDED.shadow, metadata = EXCLUDED.metadata,
            updated_at = now();
END
$fn$;
COMMENT ON FUNCTION spark.put_trigger_rule(text, text, text, text[], text, text, boolean, text, real, boolean, jsonb) IS
    'Create or replace the trigger rule (tenant, name). pattern / context_pattern: case-insensitive POSIX '
    'regular expressions matched against the call''s trigger text (both must match); surface: memory keys '
    '(of the tenant or the cold-start pack) to surface; priority raises theirs; interrupt: may block the '
    'call (advisor, opt-in); origin static (YAML) or learned; confidence 0..1 (trigger_conf); shadow: matched '
    'and logged, never surfaced. Errors: 22004 NULL tenant/interrupt/shadow, 22023 bad name, surface, '
    'priority, origin, confidence or metadata, 2201B unsafe or invalid pattern (backreferences, lookarounds, '
    'nested quantifiers, over 500 characters).';
