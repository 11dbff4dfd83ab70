-- Helpers the later files call while they are applied (spark_pg.schema.apply_sql), not at query time.

-- CREATE OR REPLACE cannot change a function's result columns or parameter names. A file that changes
-- them calls this before its CREATE: the installed version is dropped only when it differs, so the current
-- one is replaced in place and keeps its oid, its grants and the views that use it (sql/README.md).
CREATE OR REPLACE FUNCTION spark._drop_if_reshaped(signature text, arguments text, result text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, @vector_schema@, pg_temp
AS $fn$
DECLARE
    fn regprocedure;
BEGIN
    IF signature IS NULL OR arguments IS NULL OR result IS NULL THEN
        RAISE EXCEPTION '% must not be NULL',
            CASE WHEN signature IS NULL THEN 'signature' WHEN arguments IS NULL THEN 'arguments' ELSE 'result' END
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    fn := to_regprocedure(signature);  -- NULL when no such function is installed (a fresh install)
    IF fn IS NULL OR (pg_get_function_identity_arguments(fn) = arguments
                      AND pg_get_function_result(fn) = result) THEN
        RETURN false;
    END IF;
    EXECUTE format('DROP FUNCTION %s', fn);
    RETURN true;
END
$fn$;
COMMENT ON FUNCTION spark._drop_if_reshaped(text, text, text) IS
    'Internal (applying sql/): drop the installed function signature (argument types, as to_regprocedure '
    'reads them) when its parameters (arguments: as pg_get_function_identity_arguments writes them) or its '
    'result (as pg_get_function_result writes it) differ from those given; whether it dropped it. Nothing '
    'happens when no such function is installed. Errors: 22004 a NULL argument; a signature that is not one '
    'raises as to_regprocedure does (22P02 / 42704 for an unknown type).';
