-- Trigger rules (table: migration 0006): pattern checks and the one way to write a rule.

CREATE OR REPLACE FUNCTION spark._trigger_pattern_problem(pattern text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
DECLARE
    max_written_out CONSTANT integer := 1000;  -- twice the length limit
    max_compile_steps CONSTANT bigint := 40000;
    cap CONSTANT bigint := 1000000000;  -- skips are counted up to this; a product of two still fits a bigint
    huge CONSTANT bigint := 100000;     -- any bound count of more than 6 digits (PostgreSQL allows 255 at most)
    nested CONSTANT text := 'nests quantifiers (like (a+)+), which can take exponential time';
    empty_repeated CONSTANT text :=
        'repeats something that can be empty (like (a?)+, (a|)*, (a?b?){2,9} or (\m|x)+: \m, ^ and $ match no '
        'character), so compiles slowly';
    n integer;
    i integer := 1;
    c text;
    kind text;  -- what c starts: open, close, quantifier, alternative or atom
    bound text[];
    high text;
    closing integer;
    zero_width boolean;  -- the atom is a constraint (^ $ \m \M \y \Y \A \Z [[:<:]] [[:>:]]): zero-width
    -- what an open group saves of what encloses it, 17 values a group (booleans as 0 or 1): total, holds,
    -- run_s, run_a, head_s, head_a, solid, cost, alts, alt_empty, g_ps, g_pa, g_hs, g_ha, g_ts, g_ta, g_cost
    frames bigint[] := '{}';
    f integer;
    outer_total bigint := 0;  -- atoms of the alternatives enclosing the innermost open group
    total bigint := 0;        -- atoms so far in the innermost open group (all its alternatives) or the pattern
    last bigint := 0;         -- atoms of the piece a bound would repeat (0: none, e.g. after | or ^)
    plain bigint := 0;        -- atoms as written (a bounded repetition's atoms once)
    holds boolean := false;   -- the innermost open group (or the pattern) holds an unbounded repetition
    closed boolean := false;  -- the last piece is a group that holds one
    quantified boolean := false;  -- the last token was a quantifier (so a ? makes it non-greedy)
    repeats boolean;
    after_quantifier boolean;
    -- the current alternative: its open run (skip starts, states), its head once it has a piece that
    -- cannot be empty (solid), its skips so far
    run_s bigint := 0;
    run_a bigint := 0;
    head_s bigint := 0;
    head_a bigint := 0;
    cost bigint := 0;
    solid boolean := false;
    -- the innermost group's finished alternatives: how many, whether one can be empty, the sums of their
    -- parts, heads, tails and skips
    alts bigint := 0;
    alt_empty boolean := false;
    g_ps bigint := 0;
    g_pa bigint := 0;
    g_hs bigint := 0;
    g_ha bigint := 0;
    g_ts bigint := 0;
    g_ta bigint := 0;
    g_cost bigint := 0;
    -- the last piece, not yet added to its alternative: whether there is one and whether it can be empty,
    -- its part (when it can be empty) or head, its tail, its own skips
    piece boolean := false;
    empty boolean := false;
    p_s bigint := 0;
    p_a bigint := 0;
    t_s bigint := 0;
    t_a bigint := 0;
    p_cost bigint := 0;
    low bigint;
    copies bigint;
    times bigint;
    fan bigint;
    branches bigint;
    skips bigint;
    named bigint;
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
    -- and what would compile slowly. One walk over the pattern's pieces, the same as spark_pg.trigger_patterns._walk
    -- (its docstring says what it counts and why): change both together. It counts
    -- * atoms (a character, an escape, a bracket expression) with every bounded repetition written out:
    --   {m} and {m,n} multiply what they follow by m and n, {m,} by m + 1 (spark_pg.trigger_patterns.written_out_size);
    -- * skips: for each state that begins a part that can be skipped (x?, x*, x{0,n}, (x|)), the states
    --   it reaches through empty transitions, which the compiler's clean-up copies transitions between
    --   (after the walk: skips + added copies x kinds of character is the estimate of compile steps);
    -- and finds nested quantifiers (a group holding *, + or {m,}, at any depth, itself repeated: (a+)+,
    -- ((a+))*) and repetitions of what can be empty ((a?)+, (a|)*, (a?b?){2,9}).
    n := length(pattern);
    WHILE i <= n LOOP
        c := substr(pattern, i, 1);
        i := i + 1;
        repeats := closed;
        closed := false;
        after_quantifier := quantified;
        quantified := false;
        bound := CASE WHEN c = '{' THEN regexp_match(substr(pattern, i - 1), '^\{([0-9]+)(,([0-9]*))?\}') END;
        kind := CASE WHEN c = '(' THEN 'open' WHEN c = ')' AND cardinality(frames) > 0 THEN 'close'
                     WHEN c IN ('*', '+', '?') OR bound IS NOT NULL THEN 'quantifier'
                     WHEN c = '|' THEN 'alternative' ELSE 'atom' END;
        IF kind <> 'quantifier' AND piece THEN  -- the last piece joins its alternative (fold)
            cost := least(cost + least(run_s * p_a, cap) + p_cost, cap);
            run_s := least(run_s + p_s, cap);
            run_a := least(run_a + p_a, cap);
            IF NOT empty THEN
                IF NOT solid THEN
                    head_s := run_s;
                    head_a := run_a;
                    solid := true;
                END IF;
                run_s := t_s;
                run_a := t_a;
            END IF;
        END IF;
        IF kind <> 'quantifier' THEN
            piece := false;
        END IF;
        IF kind IN ('close', 'alternative') THEN  -- the alternative joins its group (finish)
            alts := alts + 1;
            alt_empty := alt_empty OR NOT solid;
            g_cost := least(g_cost + cost, cap);
            g_ps := least(g_ps + run_s + CASE WHEN solid THEN head_s ELSE 0 END, cap);
            g_pa := least(g_pa + run_a + CASE WHEN solid THEN head_a ELSE 0 END, cap);
            IF solid THEN
                g_hs := least(g_hs + head_s, cap);
                g_ha := least(g_ha + head_a, cap);
                g_ts := least(g_ts + run_s, cap);
                g_ta := least(g_ta + run_a, cap);
            END IF;
        END IF;
        IF kind = 'open' THEN
            IF substr(pattern, i, 2) = '?:' THEN  -- a non-capturing group
                i := i + 2;
            END IF;
            frames := frames || ARRAY[total, holds::integer, run_s, run_a, head_s, head_a, solid::integer, cost,
                                      alts, alt_empty::integer, g_ps, g_pa, g_hs, g_ha, g_ts, g_ta, g_cost];
            outer_total := outer_total + total;
            total := 0;
            last := 0;
            holds := false;
            run_s := 0; run_a := 0; head_s := 0; head_a := 0; cost := 0; solid := false;
            alts := 0; alt_empty := false;
            g_ps := 0; g_pa := 0; g_hs := 0; g_ha := 0; g_ts := 0; g_ta := 0; g_cost := 0;
        ELSIF kind = 'close' THEN
            branches := CASE WHEN alts > 1 THEN alts ELSE 0 END;  -- the group's start reaches each alternative
            piece := true;
            empty := alt_empty;
            p_cost := g_cost;
            IF empty THEN  -- its start is a skip start too, reaching every alternative
                p_s := least(g_ps + 1, cap);
                p_a := least(g_pa + branches + 1, cap);
                t_s := 0;
                t_a := 0;
                p_cost := least(p_cost + g_pa + branches, cap);
            ELSE
                p_s := g_hs;
                p_a := least(g_ha + branches, cap);
                t_s := g_ts;
                t_a := g_ta;
            END IF;
            last := total;
            f := cardinality(frames) - 16;
            outer_total := outer_total - frames[f];
            total := frames[f] + total;
            closed := holds;
            holds := frames[f + 1] = 1 OR holds;
            run_s := frames[f + 2]; run_a := frames[f + 3]; head_s := frames[f + 4]; head_a := frames[f + 5];
            solid := frames[f + 6] = 1; cost := frames[f + 7];
            alts := frames[f + 8]; alt_empty := frames[f + 9] = 1;
            g_ps := frames[f + 10]; g_pa := frames[f + 11]; g_hs := frames[f + 12]; g_ha := frames[f + 13];
            g_ts := frames[f + 14]; g_ta := frames[f + 15]; g_cost := frames[f + 16];
            frames := frames[1:f - 1];
        ELSIF kind = 'quantifier' THEN
            IF c = '?' AND after_quantifier THEN  -- after a quantifier, ? makes it non-greedy
                CONTINUE;
            END IF;
            IF c <> '?' AND repeats THEN
                RETURN nested;
            END IF;
            low := CASE WHEN bound IS NOT NULL
                        THEN CASE WHEN length(bound[1]) > 6 THEN huge ELSE least(bound[1]::bigint, huge) END
                        WHEN c IN ('*', '?') THEN 0 ELSE 1 END;
            high := CASE WHEN bound[2] IS NULL THEN bound[1] ELSE bound[3] END;  -- '': unbounded ({m,})
            -- how many copies: ? one, * + and {m,} unbounded
            copies := CASE WHEN c = '?' THEN 1 WHEN bound IS NULL OR high = '' THEN huge
                           WHEN length(high) > 6 THEN huge ELSE least(high::bigint, huge) END;
            IF piece AND empty AND copies > 1 AND NOT after_quantifier THEN  -- a*+ is a syntax error: not here
                RETURN empty_repeated;
            END IF;
            quantified := true;
            holds := holds OR c IN ('*', '+') OR (bound IS NOT NULL AND high = '');  -- {m,n} is counted here
            IF bound IS NOT NULL THEN
                i := i - 1 + length('{' || bound[1] || coalesce(bound[2], '') || '}');
                times := greatest(CASE WHEN high = '' THEN low + 1 ELSE copies END, 1);  -- x{0} still compiles
                total := total + last * (times - 1);
                last := last * times;
            END IF;
            IF NOT piece OR after_quantifier THEN
                NULL;
            ELSIF empty THEN  -- (a?)? or (a?){0,1}: one copy; a further skip start when it can be skipped
                IF low = 0 THEN
                    p_cost := least(p_cost + p_a, cap);
                    p_s := least(p_s + 1, cap);
                    p_a := least(p_a + 1, cap);
                END IF;
            ELSIF c = '?' THEN  -- its start skips it, and reaches what it begins with
                p_cost := least(p_cost + p_a, cap);
                p_s := least(1 + p_s + t_s, cap);
                p_a := least(1 + p_a + t_a, cap);
                t_s := 0;
                t_a := 0;
                empty := true;
            ELSIF c = '*' THEN  -- a loop state: the start reaches it, it the head, and the tail reaches it
                p_cost := least(p_cost + least((2 + t_s) * (1 + p_a), cap), cap);
                p_s := least(2 + p_s + t_s, cap);
                p_a := least(2 + p_a + t_a, cap);
                t_s := 0;
                t_a := 0;
                empty := true;
            ELSIF c = '+' THEN  -- its end loops back to its start: the tail reaches the head
                p_cost := least(p_cost + least((1 + t_s) * (1 + p_a), cap), cap);
                p_a := least(1 + p_a, cap);
                t_s := least(1 + t_s, cap);
                t_a := least(1 + t_a, cap);
            ELSE  -- copies: each one's tail reaches the next one's head; the start fans out to every copy
                fan := least(times * (1 + p_a), cap);
                p_cost := least(least(times * p_cost, cap) + least((times - 1) * least(t_s * (1 + p_a), cap), cap),
                                cap);
                IF low = 0 THEN  -- the start is a skip start, reaching every copy
                    p_s := least(1 + t_s, cap);
                    p_a := least(1 + fan + t_a, cap);
                    p_cost := least(p_cost + fan, cap);
                    t_s := 0;
                    t_a := 0;
                    empty := true;
                ELSE
                    p_a := fan;
                END IF;
            END IF;
        ELSIF kind = 'alternative' THEN
            run_s := 0; run_a := 0; head_s := 0; head_a := 0; cost := 0; solid := false;
            last := 0;
        ELSE  -- an atom (a character, an escape, a bracket expression) or a constraint
            -- a constraint: ^ $, the escapes \m \M \y \Y \A \Z, or [[:<:]] [[:>:]] (older spellings of \m \M)
            zero_width := c IN ('^', '$') OR (c = '\' AND substr(pattern, i, 1) IN ('m', 'M', 'y', 'Y', 'A', 'Z'))
                          OR (c = '[' AND substr(pattern, i - 1, 7) IN ('[[:<:]]', '[[:>:]]'));
            IF c = '\' THEN
                i := i + 1;
            ELSIF c = '[' AND zero_width THEN
                i := i + 6;
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
            END IF;
            IF zero_width THEN  -- zero-width, so a piece that can be empty; nothing a quantifier may repeat
                -- (as it joins its alternative at once, it adds nothing to the run: its part is 0 states)
                last := 0;
                IF c NOT IN ('^', '$') THEN  -- an escape or [[:<:]]: an atom (the compiler gives it an arc)
                    total := total + 1;
                    plain := plain + 1;
                END IF;
            ELSE
                piece := true;
                empty := false;
                p_s := 0; p_a := 0; t_s := 0; t_a := 0; p_cost := 0;
                total := total + 1;
                last := 1;
                plain := plain + 1;
            END IF;
        END IF;
        EXIT WHEN outer_total + total > max_written_out;
    END LOOP;
    IF piece THEN  -- the last piece joins its alternative, and that its group (as above)
        cost := least(cost + least(run_s * p_a, cap) + p_cost, cap);
        run_s := least(run_s + p_s, cap);  -- (the rest of the fold changes nothing counted below)
    END IF;
    g_cost := least(g_cost + cost, cap);
    skips := g_cost;
    FOR f IN 0 .. cardinality(frames) / 17 - 1 LOOP  -- groups left open (an invalid pattern)
        skips := skips + least(frames[f * 17 + 8] + frames[f * 17 + 17], cap);
    END LOOP;
    skips := least(skips, cap);
    IF outer_total + total > max_written_out THEN
        RETURN format('repeats too much: with its bounded repetitions ({m,n}) written out it is over %s atoms '
                      'long, which compiles slowly', max_written_out);
    END IF;
    -- how many kinds of character the compiler tells apart (spark_pg.trigger_patterns.kinds): each state of a copy
    -- carries up to that many transitions
    named := 1 + (SELECT count(DISTINCT ch)
                  FROM regexp_split_to_table(translate(regexp_replace(pattern, '\{[0-9]+(,[0-9]*)?\}', '', 'g'),
                                                       'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'),
                                             '') ch
                  WHERE strpos('()|*+?{}[]^$.\', ch) = 0)
               + 8 * (SELECT count(DISTINCT m[1]) FROM regexp_matches(pattern, '(\\[dswDSW]|\[:[a-z]+:\])', 'g') m);
    IF skips + (outer_total + total - plain) * named > max_compile_steps THEN
        RETURN format('repeats too much: compiling it takes about %s steps (the limit is %s): %s for the places its '
                      'optional parts (x?, x*, x{0,n}) can skip to, and %s x %s for the atoms its bounded '
                      'repetitions ({m,n}) add times the kinds of character it names',
                      skips + (outer_total + total - plain) * named, max_compile_steps, skips,
                      outer_total + total - plain, named);
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
    'lookaround, nested quantifiers, a repetition of what can be empty, over 1000 atoms with its bounded '
    'repetitions written out, an estimate of over 40000 compile steps, invalid), or NULL when it can.';

CREATE OR REPLACE FUNCTION spark._trigger_rule_problem(pattern text, context_pattern text)
RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
    problem text;
BEGIN
    IF pattern IS NULL THEN
        RETURN 'pattern is NULL';
    END IF;
    problem := spark._trigger_pattern_problem(pattern);
    IF problem IS NOT NULL THEN
        RETURN 'pattern ' || problem;
    END IF;
    -- '.*', 'a|', 'x?': a pattern that matches an empty text matches every call, and its memories would
    -- surface on all of them
    IF '' ~* pattern THEN
        RETURN format('pattern %s matches an empty text, so every call: say what it looks for',
                      quote_literal(pattern));
    END IF;
    IF context_pattern IS NOT NULL THEN
        problem := spark._trigger_pattern_problem(context_pattern);
        IF problem IS NOT NULL THEN
            RETURN 'context_pattern ' || problem;
        END IF;
    END IF;
    RETURN NULL;
END
$fn$;
COMMENT ON FUNCTION spark._trigger_rule_problem(text, text) IS
    'Internal: why a trigger rule cannot have this pattern and context_pattern (NULL: none), or NULL when it '
    'can: pattern NULL, either one invalid or unsafe (spark._trigger_pattern_problem), or pattern matching an '
    'empty text (every call). To list stored rules that break the checks: SELECT tenant, name, '
    'spark._trigger_rule_problem(pattern, context_pattern) FROM spark.trigger_rules WHERE '
    'spark._trigger_rule_problem(pattern, context_pattern) IS NOT NULL.';

CREATE OR REPLACE FUNCTION spark._check_trigger_patterns(name text, pattern text, context_pattern text)
RETURNS void
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
#variable_conflict use_variable
DECLARE
    problem text := spark._trigger_rule_problem(pattern, context_pattern);
BEGIN
    IF problem IS NOT NULL THEN
        RAISE EXCEPTION 'rule %: %', name, problem
            USING ERRCODE = CASE WHEN pattern IS NULL THEN 'null_value_not_allowed'
                                 ELSE 'invalid_regular_expression' END;
    END IF;
END
$fn$;
COMMENT ON FUNCTION spark._check_trigger_patterns(text, text, text) IS
    'Internal: raise when a trigger rule cannot have this pattern and context_pattern '
    '(spark._trigger_rule_problem says why): 2201B an invalid or unsafe pattern or context_pattern, or a '
    'pattern that matches an empty text (every call); 22004 a NULL pattern. name: the rule''s, for the '
    'message; pattern and context_pattern (NULL: none) as they would be stored. Called by '
    'spark.put_trigger_rule and by the triggers trigger_rules_patterns_insert and _update (revision 0020), so '
    'a rule written in SQL around put_trigger_rule cannot break its tenant''s retrievals.';

CREATE OR REPLACE FUNCTION spark.put_trigger_rule(
    tenant text, name text, pattern text, surface text[], context_pattern text DEFAULT NULL,
    priority text DEFAULT 'normal', interrupt boolean DEFAULT false, origin text DEFAULT 'static',
    confidence real DEFAULT 1, shadow boolean DEFAULT false, metadata jsonb DEFAULT '{}')
RETURNS void
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
#variable_conflict use_variable
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
    PERFORM spark._check_trigger_patterns(name, pattern, context_pattern);
    -- white space as Python's str.strip() takes it (spark_pg.triggers checks surface keys so)
    IF EXISTS (SELECT 1 FROM unnest(surface) s WHERE s <> '' AND (spark._blank(left(s, 1)) OR spark._blank(right(s, 1)))) THEN
        RAISE EXCEPTION 'rule %: a surface key starts or ends with whitespace', name
            USING ERRCODE = 'invalid_parameter_value';
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
    -- every call of the tenant reads its rules: a rule is not a document store
    IF octet_length(metadata::text) > 65536 THEN
        RAISE EXCEPTION 'rule %: metadata must be at most 65,536 bytes as JSON text, got %', name,
            to_char(octet_length(metadata::text), 'FM999,999,999,990') USING ERRCODE = 'invalid_parameter_value';
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
    'and logged, never surfaced; metadata: a JSON object kept with the rule (at most 64 KiB as JSON text). Errors: 22004 any NULL argument '
    'but context_pattern, 22023 bad tenant (the pack''s _system too, unless spark.pack_writes is on), name, surface, priority, origin, confidence or metadata, 2201B '
    'an empty, unsafe or invalid pattern or context_pattern (backreferences, lookarounds, nested '
    'quantifiers, over 500 characters, what would compile slowly), a pattern that matches an empty text '
    '(.*, a|: every call); 22023 also a surface key with leading or trailing whitespace (a tab, a newline, a '
    'no-break space: what Python''s str.strip() removes).';
