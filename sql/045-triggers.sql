-- Trigger rules (table: migration 0006): pattern checks and the one way to write a rule.

CREATE OR REPLACE FUNCTION spark._trigger_pattern_problem(pattern text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
DECLARE
    max_written_out CONSTANT integer := 1000;  -- twice the length limit
    nested CONSTANT text := 'nests quantifiers (like (a+)+), which can take exponential time';
    n integer;
    i integer := 1;
    c text;
    saved bigint[] := '{}';  -- the count before each open group
    total bigint := 0;       -- atoms so far in the innermost open group (or the pattern)
    last bigint := 0;        -- atoms of the piece a bound would repeat (0: none, e.g. after | or ^)
    bound text[];
    digits text;
    times bigint;
    closing integer;
    held boolean[] := '{}';   -- for each open group: whether what encloses it holds an unbounded repetition
    unbounded boolean := false;  -- the innermost open group (or the pattern) holds one so far
    closed boolean := false;  -- the last piece is a group that holds one
    repeats boolean;
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
    END IF;
    -- and what would compile slowly: the regex compiler copies x{m,n}'s x n times, and its NFA clean-up
    -- grows faster than the copies ('(a|b){0,255}' x 30: ~1 s). Count the atoms (a character, an escape, a
    -- bracket expression) of the pattern with every bounded repetition written out: {m} and {m,n} multiply
    -- what they follow by m and n, {m,} by m + 1. The same count as spark_pg.triggers.written_out_size:
    -- change both together. The same walk finds nested quantifiers: a group holding an unbounded repetition
    -- (*, + or {m,}, at any depth) that is itself repeated (*, + or a bound): (a+)+, ((a+))*; not (a+)? nor
    -- bounded ones inside, which the count limits. The same walk as spark_pg.triggers._walk.
    n := length(pattern);
    WHILE i <= n LOOP
        c := substr(pattern, i, 1);
        i := i + 1;
        repeats := closed;
        closed := false;
        IF c = '\' THEN
            i := i + 1;
            total := total + 1;
            last := 1;
        ELSIF c = '[' THEN  -- to its closing ], past [:class:] [=x=] [.x.], escapes, and a leading ] or ^]
            IF substr(pattern, i, 1) = '^' THEN
                i := i + 1;
            END IF;
            IF substr(pattern, i, 1) = ']' THEN
                i := i + 1;
            END IF;
            WHILE i <= n AND substr(pattern, i, 1) <> ']' LOOP
                IF substr(pattern, i, 1) = '[' AND substr(pattern, i + 1, 1) IN (':', '=', '.') THEN
                    closing := strpos(substr(pattern, i + 2), substr(pattern, i + 1, 1) || ']');
                    i := CASE WHEN closing = 0 THEN n + 1 ELSE i + closing + 3 END;
                ELSE
                    i := i + CASE WHEN substr(pattern, i, 1) = '\' THEN 2 ELSE 1 END;
                END IF;
            END LOOP;
            i := i + 1;
            total := total + 1;
            last := 1;
        ELSIF c = '(' THEN
            saved := saved || total;
            held := held || unbounded;
            total := 0;
            last := 0;
            unbounded := false;
        ELSIF c = ')' AND cardinality(saved) > 0 THEN
            last := total;
            total := saved[cardinality(saved)] + total;
            saved := saved[1:cardinality(saved) - 1];
            closed := unbounded;
            unbounded := held[cardinality(held)] OR unbounded;
            held := held[1:cardinality(held) - 1];
        ELSIF c = '{' AND substr(pattern, i - 1) ~ '^\{[0-9]+(,[0-9]*)?\}' THEN
            IF repeats THEN
                RETURN nested;
            END IF;
            bound := regexp_match(substr(pattern, i - 1), '^\{([0-9]+)(,([0-9]*))?\}');
            unbounded := unbounded OR (bound[2] IS NOT NULL AND bound[3] = '');  -- {m,} is unbounded
            digits := CASE WHEN bound[2] IS NULL OR bound[3] = '' THEN bound[1] ELSE bound[3] END;
            -- a count of more than 6 digits is taken as 100000 (PostgreSQL allows 255 at most)
            times := CASE WHEN length(digits) > 6 THEN 100000 ELSE least(digits::bigint, 100000) END;
            IF bound[2] IS NOT NULL AND bound[3] = '' THEN
                times := times + 1;
            END IF;
            times := greatest(times, 1);  -- x{0} still gets compiled
            total := total + last * (times - 1);
            last := last * times;
            i := i - 1 + length('{' || bound[1] || coalesce(bound[2], '') || '}');
            EXIT WHEN total + (SELECT coalesce(sum(s), 0) FROM unnest(saved) s) > max_written_out;
        ELSIF c IN ('*', '+') THEN
            IF repeats THEN
                RETURN nested;
            END IF;
            unbounded := true;
        ELSIF c = '?' THEN
            NULL;
        ELSIF c IN ('|', '^', '$') THEN
            last := 0;
        ELSE
            total := total + 1;
            last := 1;
        END IF;
    END LOOP;
    IF total + (SELECT coalesce(sum(s), 0) FROM unnest(saved) s) > max_written_out THEN
        RETURN format('repeats too much: with its bounded repetitions ({m,n}) written out it is over %s atoms '
                      'long, which compiles slowly', max_written_out);
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
    'lookaround, nested quantifiers, over 1000 atoms with its bounded repetitions written out, invalid), or '
    'NULL when it can.';

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
    PERFORM spark._check_writer(tenant);
    IF name IS NULL OR pattern IS NULL OR surface IS NULL OR priority IS NULL OR interrupt IS NULL
       OR origin IS NULL OR confidence IS NULL OR shadow IS NULL OR metadata IS NULL THEN
        RAISE EXCEPTION '% must not be NULL', CASE WHEN name IS NULL THEN 'name' WHEN pattern IS NULL THEN 'pattern'
            WHEN surface IS NULL THEN 'surface' WHEN priority IS NULL THEN 'priority'
            WHEN interrupt IS NULL THEN 'interrupt' WHEN origin IS NULL THEN 'origin'
            WHEN confidence IS NULL THEN 'confidence' WHEN shadow IS NULL THEN 'shadow' ELSE 'metadata' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF name !~ '^[A-Za-z0-9_.:-]{1,64}$' THEN
        RAISE EXCEPTION 'name must be 1 to 64 letters, digits or _ . : -, got %', coalesce(quote_literal(name), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    problem := spark._trigger_pattern_problem(pattern);
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'rule %: pattern %', name, problem USING ERRCODE = 'invalid_regular_expression';
    END IF;
    -- '.*', 'a|', 'x?': a pattern that matches an empty text matches every call, and its memories would
    -- surface on all of them
    IF '' ~* pattern THEN
        RAISE EXCEPTION 'rule %: pattern % matches an empty text, so every call: say what it looks for', name,
            quote_literal(pattern) USING ERRCODE = 'invalid_regular_expression';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(surface) s WHERE s <> btrim(s)) THEN
        RAISE EXCEPTION 'rule %: a surface key starts or ends with whitespace', name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF context_pattern IS NOT NULL THEN
        problem := spark._trigger_pattern_problem(context_pattern);
        IF problem IS NOT NULL THEN
            RAISE EXCEPTION 'rule %: context_pattern %', name, problem USING ERRCODE = 'invalid_regular_expression';
        END IF;
    END IF;
    -- a one-dimensional list of keys a memory can have (spark.memories.key: 1 to 512 characters)
    IF surface IS NULL OR cardinality(surface) NOT BETWEEN 1 AND 50 OR array_ndims(surface) <> 1
       OR EXISTS (SELECT 1 FROM unnest(surface) s WHERE s IS NULL OR s = '' OR length(s) > 512) THEN
        RAISE EXCEPTION 'rule %: surface must list 1 to 50 memory keys of 1 to 512 characters', name
            USING ERRCODE = 'invalid_parameter_value';
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
    'and logged, never surfaced; metadata: a JSON object kept with the rule. Errors: 22004 any NULL argument '
    'but context_pattern, 22023 bad tenant (the pack''s _system too, unless spark.pack_writes is on), name, surface, priority, origin, confidence or metadata, 2201B '
    'an empty, unsafe or invalid pattern or context_pattern (backreferences, lookarounds, nested '
    'quantifiers, over 500 characters), a pattern that matches an empty text (.*, a|: every call); 22023 '
    'also a surface key with leading or trailing whitespace.';
