"""Install, upgrade and downgrade: Alembic owns the tables, sql/ the functions."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from alembic.config import Config
from alembic.script import ScriptDirectory
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from spark_pg import schema
from spark_pg.client import SparkClient
from spark_pg.config import Settings
from spark_pg.errors import SchemaError
from tests.conftest import temp_database
from tests.test_rls import _can_create_roles

SNAPSHOT_QUERIES = {
    "columns": """
        SELECT table_name, column_name, data_type, is_nullable, column_default, generation_expression
        FROM information_schema.columns WHERE table_schema = 'spark' ORDER BY 1, 2""",
    "indexes": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = 'spark' ORDER BY 1",
    "constraints": """
        SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid)
        FROM pg_constraint WHERE connamespace = 'spark'::regnamespace ORDER BY 1, 2""",
    "functions": """
        SELECT p.oid::regprocedure::text, md5(pg_get_functiondef(p.oid)), p.provolatile, p.proconfig,
               obj_description(p.oid, 'pg_proc')
        FROM pg_proc p WHERE p.pronamespace = 'spark'::regnamespace ORDER BY 1""",
    "version": "SELECT version_num FROM public.spark_alembic_version",
}


# which function objects exist and who may run them: an init that drops and re-creates a function gives it a
# new oid and the default grants (PUBLIC may execute again), and fails on a view that uses it
IDENTITY_QUERY = """
    SELECT p.oid::regprocedure::text, p.oid::bigint, p.proacl::text
    FROM pg_proc p WHERE p.pronamespace = 'spark'::regnamespace ORDER BY 1"""

# the functions whose result columns changed in the past: sql/ drops a version with other result columns or
# parameter names, and no other
RESHAPED = (
    "spark._candidates",
    "spark.explain",
    "spark.retrieve",
    "spark.reflect",
    "spark.advise_with_warnings",
)


def snapshot(url: str, *, identity: bool = False) -> dict[str, list[tuple[object, ...]]]:
    """The schema's definitions; with ``identity``, also each function's oid and grants (these differ
    between two databases, so only compare them within one)."""
    queries = SNAPSHOT_QUERIES | ({"identity": IDENTITY_QUERY} if identity else {})
    with psycopg.connect(url) as conn:
        return {name: conn.execute(query).fetchall() for name, query in queries.items()}


def revisions() -> list[str]:
    cfg = Config()
    cfg.set_main_option("script_location", str(schema.resource_dir("alembic")))
    return [s.revision for s in reversed(list(ScriptDirectory.from_config(cfg).walk_revisions()))]


def test_fresh_install_has_the_expected_objects(db_url: str) -> None:
    snap = snapshot(db_url)
    tables = {row[0] for row in snap["columns"]}
    assert {"memories", "embedding_models", "install_info"} <= tables
    functions = {row[0].split("(")[0] for row in snap["functions"]}
    assert {"spark.search_semantic", "spark.register_model", "spark.active_model"} <= functions
    assert any("gin (tsv)" in row[1] for row in snap["indexes"])
    assert snap["version"] == [(schema.head_revision(),)]


def test_install_twice_changes_nothing(fresh_db: str) -> None:
    schema.install(fresh_db)
    first = snapshot(fresh_db, identity=True)
    schema.install(fresh_db)
    assert snapshot(fresh_db, identity=True) == first


def test_init_keeps_revoked_grants_and_the_views_over_spark_functions(installed_db: str) -> None:
    """Every function is replaced in place: a REVOKE stays revoked and a user's view does not stop init
    (init used to drop and re-create five functions: 2BP01 on the view, and PUBLIC could execute again)."""
    with psycopg.connect(installed_db) as conn:
        conn.execute("REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA spark FROM PUBLIC")
        for name in RESHAPED[1:]:  # spark._candidates takes 18 arguments: the REVOKE covers it
            view = "public.over_" + name.split(".")[1]
            conn.execute(f"CREATE VIEW {view} AS SELECT * FROM {name}('alice', 'deploy')")
    before = snapshot(installed_db, identity=True)
    for name, _, acl in before["identity"]:  # PUBLIC's entry reads "=X/owner"
        assert acl and not any(entry.startswith("=") for entry in acl.strip("{}").split(",")), name
    schema.install(installed_db)
    assert snapshot(installed_db, identity=True) == before
    with psycopg.connect(installed_db) as conn:
        views = conn.execute("SELECT count(*) FROM pg_views WHERE viewname LIKE 'over\\_%'").fetchone()
        assert views == (len(RESHAPED) - 1,)


@pytest.mark.parametrize("old", ["result", "parameter names"])
def test_init_replaces_an_old_version_of_a_reshaped_function(installed_db: str, old: str) -> None:
    """A version whose result columns or parameter names differ (CREATE OR REPLACE cannot change either)
    is dropped and created anew; only the current version is kept in place."""
    expected = snapshot(installed_db)
    with psycopg.connect(installed_db) as conn:
        for name in RESHAPED:
            row = conn.execute(
                "SELECT pg_get_function_identity_arguments(%s::regproc), pg_get_function_result(%s::regproc)",
                (name, name),
            ).fetchone()
            assert row is not None, name
            args, result = row
            conn.execute(f"DROP FUNCTION {name}({args})")
            if old == "result":
                result = "TABLE(old_column integer)"
            else:
                args = "old_" + args  # the first parameter renamed
            conn.execute(
                f"CREATE FUNCTION {name}({args}) RETURNS {result} LANGUAGE plpgsql AS 'BEGIN RETURN; END'"
            )
    schema.install(installed_db)
    assert snapshot(installed_db) == expected


def test_drop_if_reshaped_at_its_edges(installed_db: str) -> None:
    """spark._drop_if_reshaped (sql/000-install.sql): nothing to drop for a function not installed, the
    current version kept, a NULL argument refused with 22004."""
    with psycopg.connect(installed_db) as conn:
        call = "SELECT spark._drop_if_reshaped(%s, %s, %s)"
        assert conn.execute(call, ("spark.no_such_function(integer)", "x integer", "integer")).fetchone() == (
            False,
        )
        row = conn.execute(
            "SELECT pg_get_function_identity_arguments(f), pg_get_function_result(f) "
            "FROM CAST(%s AS regprocedure) f",
            ("spark._check_k(integer, integer)",),
        ).fetchone()
        assert row is not None
        assert conn.execute(call, ("spark._check_k(integer, integer)", *row)).fetchone() == (False,)
        for args in ((None, "a", "b"), ("spark._check_k(integer, integer)", None, "b"), ("x()", "a", None)):
            with pytest.raises(psycopg.errors.NullValueNotAllowed):
                conn.execute(call, args)
            conn.rollback()


def test_stepwise_upgrade_equals_fresh_install(fresh_db: str, installed_db: str) -> None:
    for revision in revisions():
        schema.upgrade(fresh_db, revision)
        assert schema.current_revision(fresh_db) == revision
    assert snapshot(fresh_db) == snapshot(installed_db)


def test_downgrade_to_base_leaves_nothing_then_reinstalls(fresh_db: str, installed_db: str) -> None:
    schema.install(fresh_db)
    schema.downgrade(fresh_db, "base")
    with psycopg.connect(fresh_db) as conn:
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'spark'").fetchone() == (0,)
        assert conn.execute("SELECT to_regclass('public.spark_alembic_version')").fetchone() == (None,)
        assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'vector'").fetchone() == (0,)
        assert conn.execute(
            "SELECT count(*) FROM pg_proc WHERE proname LIKE '%search_semantic%'"
        ).fetchone() == (0,)
    assert schema.current_revision(fresh_db) is None
    schema.install(fresh_db)
    assert snapshot(fresh_db) == snapshot(installed_db)


def test_downgrade_keeps_a_vector_extension_it_did_not_create(fresh_db: str) -> None:
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
    schema.install(fresh_db)
    schema.downgrade(fresh_db, "base")
    with psycopg.connect(fresh_db) as conn:
        assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'vector'").fetchone() == (1,)
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'spark'").fetchone() == (0,)


def test_a_failing_sql_file_leaves_nothing_half_applied(
    fresh_db: str, monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    broken = tmp_path / "sql"
    broken.mkdir()
    (broken / "001-ok.sql").write_text("CREATE FUNCTION spark.ok() RETURNS int LANGUAGE sql AS 'SELECT 1';")
    (broken / "002-broken.sql").write_text("CREATE FUNCTION spark.broken( RETURNS;")
    real = schema.resource_dir
    monkeypatch.setattr(schema, "resource_dir", lambda name: broken if name == "sql" else real(name))
    with pytest.raises(psycopg.errors.SyntaxError):
        schema.install(fresh_db)
    with psycopg.connect(fresh_db) as conn:
        assert conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'spark'").fetchone() == (0,)
    assert schema.current_revision(fresh_db) is None


def test_misnamed_sql_file_is_rejected(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "sql").mkdir()
    (tmp_path / "sql" / "functions.sql").write_text("SELECT 1;")
    monkeypatch.setattr(schema, "resource_dir", lambda name: tmp_path / name)
    with pytest.raises(schema.SchemaError, match=r"NNN-name\.sql"):
        schema.sql_files()


def test_every_spark_function_pins_search_path_and_is_documented(conn: psycopg.Connection) -> None:  # type: ignore[type-arg]
    rows = conn.execute("""
        SELECT p.oid::regprocedure::text, p.proconfig, obj_description(p.oid, 'pg_proc')
        FROM pg_proc p WHERE p.pronamespace = 'spark'::regnamespace""").fetchall()
    assert rows
    for name, config, comment in rows:
        assert config and any(c.startswith("search_path=pg_catalog") for c in config), name
        assert comment, f"{name} has no COMMENT"


def test_upgrade_to_the_embeddings_table_moves_vectors_and_back(fresh_db: str) -> None:
    """0004 moves each stored vector to spark.embeddings (index included); its downgrade moves it back."""
    vector = "[" + ",".join(["0.5", "0.5"] + ["0"] * 382) + "]"
    schema.upgrade(fresh_db, "0003_tenant_lexemes")
    with psycopg.connect(fresh_db) as conn:
        conn.execute(
            "INSERT INTO spark.embedding_models (name, dim, pooling, max_tokens, active) "
            "VALUES ('m', 384, 'mean', 256, true)"
        )
        conn.execute(
            """INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash, created_at,
                                           embedding, embedding_model_id, embedded_at)
               VALUES ('t', 'a', 'x', 'x', '\\x00', '2026-01-02Z', %s::vector, 1, '2026-01-03Z'),
                      ('t', 'pending', 'y', 'y', '\\x00', '2026-01-02Z', NULL, NULL, NULL)""",
            (vector,),
        )
        conn.execute(
            "CREATE INDEX memories_hnsw_m1 ON spark.memories USING hnsw "
            "((embedding::vector(384)) vector_cosine_ops) WHERE embedding_model_id = 1"
        )
    schema.upgrade(fresh_db, "0004_embeddings_table")
    with psycopg.connect(fresh_db) as conn:
        rows = conn.execute(
            """SELECT m.key, e.model_id, e.created_at = m.created_at, e.embedding::text = %s
               FROM spark.embeddings e JOIN spark.memories m ON m.tenant = e.tenant AND m.id = e.memory_id""",
            (vector,),
        ).fetchall()
        assert rows == [("a", 1, True, True)]
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE schemaname = 'spark'")}
        assert "embeddings_hnsw_m1" in indexes and "memories_hnsw_m1" not in indexes
    schema.downgrade(fresh_db, "0003_tenant_lexemes")
    with psycopg.connect(fresh_db) as conn:
        back = conn.execute(
            "SELECT key, embedding::text = %s, embedding_model_id FROM spark.memories ORDER BY key", (vector,)
        ).fetchall()
        assert back == [("a", True, 1), ("pending", None, None)]


def test_an_upgrade_behind_a_long_transaction_gives_up_and_changes_nothing(fresh_db: str) -> None:
    before, target = "0011_gin_no_pending_list", "0012_model_retired_at"  # 0012 alters embedding_models
    schema.upgrade(fresh_db, before)
    # without the lock timeout the upgrade would wait for ever: this ends the test after 20 s instead
    bounded = make_conninfo(fresh_db, options="-c statement_timeout=20000")
    with psycopg.connect(fresh_db) as holder:  # a reader in a long transaction on the table 0012 alters
        holder.execute("SELECT count(*) FROM spark.embedding_models").fetchone()
        started = time.monotonic()
        with pytest.raises(SchemaError, match="waited 300 ms for a lock"):
            schema.upgrade(bounded, target, lock_timeout_ms=300)
        assert time.monotonic() - started < 10
        assert schema.current_revision(fresh_db) == before  # rolled back whole
    schema.upgrade(fresh_db, target, lock_timeout_ms=300)  # the reader has ended
    assert schema.current_revision(fresh_db) == target


def test_an_init_behind_another_init_gives_up_in_the_sql_step_too(installed_db: str) -> None:
    with psycopg.connect(installed_db) as other:  # another init, its sql/ step not yet committed
        schema.apply_sql(other)
        with pytest.raises(SchemaError, match="waited 300 ms for a lock"):
            schema.install(installed_db, lock_timeout_ms=300)


def test_two_inits_at_once_take_turns(fresh_db: str) -> None:
    """The second init (another process) waits for the first (an advisory lock), then finds nothing to do;
    it used to fail on the version table (23505) or on a function the first was replacing (XX000)."""
    import subprocess
    import sys

    from alembic import command

    with schema._alembic(fresh_db) as (cfg, connection):
        connection.begin()  # held open: alembic then runs inside it
        command.upgrade(cfg, "head")  # the first init, not yet committed
        second = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from spark_pg import schema; schema.install(sys.argv[1])",
                fresh_db,
            ],
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline, waited = time.monotonic() + 30, False
        with psycopg.connect(fresh_db, autocommit=True) as watch:
            while not waited and second.poll() is None and time.monotonic() < deadline:
                row = watch.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock'"
                ).fetchone()
                waited = bool(row and row[0])
                time.sleep(0.05)
        connection.commit()
    _, err = second.communicate(timeout=60)
    assert waited and second.returncode == 0, (waited, second.returncode, err[-1500:])
    assert schema.current_revision(fresh_db) == schema.head_revision()


def test_a_database_a_newer_spark_pg_migrated_says_upgrade_spark_pg(installed_db: str) -> None:
    with psycopg.connect(installed_db) as conn:
        conn.execute("UPDATE public.spark_alembic_version SET version_num = '0099_future'")
    with pytest.raises(SchemaError, match=r"0099_future.*upgrade spark_pg"):
        schema.install(installed_db)
    with psycopg.connect(installed_db) as conn, pytest.raises(SchemaError, match=r"unknown here.*upgrade"):
        schema.require_current(conn)
    assert schema.current_revision(installed_db) == "0099_future"  # nothing changed


@pytest.fixture
def owner_db(server_url: str) -> Iterator[tuple[str, str]]:
    """An empty database owned by a role that is not a superuser, pgvector installed in it by a superuser:
    the URLs of its owner and of a tenant role (a member of the owner's, no superuser either)."""
    reason = _can_create_roles(server_url)
    if reason:
        pytest.skip(reason)
    suffix, password = uuid.uuid4().hex[:10], uuid.uuid4().hex
    owner, tenant = f"spark_owner_{suffix}", f"spark_tenant_{suffix}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(owner), sql.Literal(password))
        )
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {} IN ROLE {}").format(
                sql.Identifier(tenant), sql.Literal(password), sql.Identifier(owner)
            )
        )
    try:
        with temp_database(server_url, install=False) as url:
            with psycopg.connect(url, autocommit=True) as admin:
                dbname = sql.Identifier(conninfo_to_dict(url)["dbname"])
                admin.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(dbname, sql.Identifier(owner)))
                admin.execute("CREATE EXTENSION vector")
            yield (
                make_conninfo(url, user=owner, password=password),
                make_conninfo(url, user=tenant, password=password),
            )
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            for role in (tenant, owner):
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_a_database_owner_that_is_not_a_superuser_can_init(owner_db: tuple[str, str]) -> None:
    """Functions name hnsw.* settings in their SET clauses; until pgvector's library is loaded in the session
    those are placeholders that only a superuser may name (init failed with 42501)."""
    owner_url, tenant_url = owner_db
    schema.install(owner_url)
    schema.install(owner_url)  # and again
    assert schema.current_revision(owner_url) == schema.head_revision()
    vector = "[" + ",".join(["0.1"] * 384) + "]"
    calls = (
        "SELECT * FROM spark.retrieve('alice', 'deploy')",
        "SELECT * FROM spark.explain('alice', 'deploy')",
        "SELECT * FROM spark.reflect('alice', 'deploy')",
        "SELECT * FROM spark.advise_with_warnings('alice', 'deploy')",
        f"SELECT * FROM spark.search_semantic('alice', '{vector}')",
    )
    for url in (owner_url, tenant_url):
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT current_setting('is_superuser')").fetchone() == ("off",)
        for call in calls:  # each the first statement of a new session, which has not loaded pgvector yet
            with psycopg.connect(url) as conn:
                conn.execute(call).fetchall()


def test_pgvector_in_a_schema_of_its_own(fresh_db: str, model_settings: Settings) -> None:
    """The migrations name the type plain ``vector`` (42704 when its schema was not on the search_path); init
    and the client add the extension's schema to their search_path."""
    with psycopg.connect(fresh_db, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA ext")
        conn.execute("CREATE EXTENSION vector SCHEMA ext")
    schema.install(fresh_db)
    first = snapshot(fresh_db, identity=True)
    schema.install(fresh_db)
    assert snapshot(fresh_db, identity=True) == first
    with psycopg.connect(fresh_db) as conn:
        assert conn.execute(
            "SELECT format_type(atttypid, NULL) FROM pg_attribute "
            "WHERE attrelid = 'spark.embeddings'::regclass AND attname = 'embedding'"
        ).fetchone() == ("ext.vector",)
    with SparkClient(model_settings, url=fresh_db) as client:
        client.add("alice", "Deploy the release on Tuesdays; never deploy on Fridays.")
        hits = client.search("alice", "when may I deploy?")
    assert [hit.text for hit in hits] == ["Deploy the release on Tuesdays; never deploy on Fridays."]
    assert "semantic" in hits[0].pools
