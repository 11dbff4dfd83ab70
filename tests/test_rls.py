"""Optional row-level security (docs/security.md): the documented statements, applied as written in a
scratch database, keep one tenant role from ever seeing another's rows; without the policies it would."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest
from psycopg import errors, sql
from psycopg.conninfo import make_conninfo

from spark_pg import health
from spark_pg.client import SparkClient
from spark_pg.config import Settings, load_settings
from spark_pg.db import connect
from spark_pg.embedding import Embedder
from spark_pg.errors import DatabaseError
from spark_pg.health import format_report
from spark_pg.ingest import ensure_model, ingest
from spark_pg.records import validate_row
from spark_pg.retrieve import retrieve
from tests.conftest import temp_database

Conn = psycopg.Connection[Any]
DOC = Path(__file__).resolve().parents[1] / "docs" / "security.md"
DIM = 8
VEC = "[" + ",".join(["1"] + ["0.1"] * (DIM - 1)) + "]"
TEXTS = (
    "Run alembic upgrade head on a staging copy before production.",
    "Deploy the release on Tuesdays; never deploy on Fridays.",
    "Rotate refresh tokens when the login session expires.",
)


def doc_block(tag: str) -> str:
    """The ```sql block of docs/security.md whose first line is ``-- [tag]``."""
    blocks = re.findall(r"```sql\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)
    found = [str(b) for b in blocks if b.startswith(f"-- [{tag}]")]
    assert len(found) == 1, f"docs/security.md must hold one sql block starting with -- [{tag}]"
    return found[0]


@dataclass(frozen=True)
class Roles:
    group: str
    alice: str
    bob: str
    app: str


def renamed(statements: str, roles: Roles) -> str:
    """The documented statements with this run's unique role names (roles are server-wide)."""
    for documented, unique in (
        ("spark_tenant", roles.group),
        ("spark_app", roles.app),
        ("alice", roles.alice),
    ):
        statements = re.sub(rf"\b{documented}\b", unique, statements)
    return statements


def _can_create_roles(server_url: str) -> str | None:
    with psycopg.connect(server_url, autocommit=True) as admin:
        row = admin.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    if row is None or not row[0]:
        # a CREATEROLE non-superuser may not SET ROLE to the roles it creates on every server version
        return "the test server's role is not a superuser: cannot create tenant roles and switch to them"
    return None


@contextmanager
def roles_db(server_url: str) -> Iterator[tuple[str, Roles]]:
    """A fresh install and unique role names (roles are server-wide), both dropped after; skips the test
    where the server's role cannot create roles."""
    reason = _can_create_roles(server_url)
    if reason:
        pytest.skip(reason)
    suffix = uuid.uuid4().hex[:8]
    roles = Roles(f"spark_tenant_{suffix}", f"rls_alice_{suffix}", f"rls_bob_{suffix}", f"spark_app_{suffix}")
    try:
        with temp_database(server_url, install=True) as url:
            yield url, roles
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            for role in (roles.alice, roles.bob, roles.app, roles.group):
                admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture
def rls_db(server_url: str) -> Iterator[tuple[str, Roles]]:
    """A fresh install with memories of two tenants and the pack, and unique role names (dropped after)."""
    with roles_db(server_url) as (url, roles):
        with connect(url, autocommit=True) as admin:
            model = admin.execute("SELECT spark.register_model('rls-model', %s, 'mean', 256)", (DIM,))
            model_id = model.fetchone()[0]  # type: ignore[index]
            for tenant in (roles.alice, roles.bob, "_system"):
                add(admin, tenant, model_id)
        yield url, roles


def add(conn: Conn, tenant: str, model_id: int) -> None:
    """The same keys, texts and vectors for every tenant (a tie for every pool); a trace for reflect."""
    for i, text in enumerate(TEXTS):
        conn.execute(
            """WITH m AS (INSERT INTO spark.memories
                              (tenant, key, text, descriptor, content_hash, kind, metadata)
                          VALUES (%(t)s, %(key)s, %(text)s, %(text)s, sha256(convert_to(%(text)s, 'UTF8')),
                                  %(kind)s, %(meta)s)
                          RETURNING tenant, id, created_at)
               INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
               SELECT tenant, id, %(model)s, created_at, %(vec)s::vector FROM m""",
            {
                "t": tenant,
                "key": f"k{i}",
                "text": text,
                "kind": "trace" if i == 0 else "insight",
                "meta": '{"outcome": "failure"}' if i == 0 else "{}",
                "model": model_id,
                "vec": VEC,
            },
        )
    if tenant != "_system":
        conn.execute("SELECT spark.put_trigger_rule(%s, 'deploy', 'deploy', ARRAY['k1'])", (tenant,))


@contextmanager
def as_role(conn: Conn, role: str) -> Iterator[Conn]:
    conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(role)))
    try:
        yield conn
    finally:
        conn.execute("RESET ROLE")


def tenants_of(admin: Conn, ids: list[int]) -> set[str]:
    """The tenants of memory ids (looked up by the admin, who sees every row)."""
    rows = admin.execute("SELECT DISTINCT tenant FROM spark.memories WHERE id = ANY(%s)", (ids,)).fetchall()
    return {r[0] for r in rows}


QUERY = "deploy the release alembic upgrade login session"
READS = (
    ("retrieve", "SELECT memory_id FROM spark.retrieve(%s, %s, NULL, 20)"),
    ("retrieve+vec", "SELECT memory_id FROM spark.retrieve(%s, %s, %s::vector, 20)"),
    ("explain", "SELECT memory_id FROM spark.explain(%s, %s, %s::vector, 20)"),
    ("reflect", "SELECT memory_id FROM spark.reflect(%s, %s, %s::vector, 20)"),
)
WRITES = (
    ("advise", "SELECT memory_id FROM spark.advise(%s, %s, %s::vector, 20)"),
    (
        "advise_with_warnings",
        "SELECT memory_id FROM spark.advise_with_warnings(%s, %s, %s::vector, 20, warning_min_score => 0)",
    ),
)


def calls(conn: Conn, tenant: str) -> dict[str, list[int] | str]:
    """Memory ids each function returns for ``tenant``, or the SQLSTATE it raised."""
    out: dict[str, list[int] | str] = {
        "search_semantic": [
            r[0]
            for r in conn.execute(
                "SELECT memory_id FROM spark.search_semantic(%s, %s::vector, 20)", (tenant, VEC)
            ).fetchall()
        ]
    }
    for name, statement in READS + WRITES:
        args = (tenant, QUERY) if statement.count("%s") == 2 else (tenant, QUERY, VEC)
        try:
            out[name] = [r[0] for r in conn.execute(statement, args).fetchall()]
        except psycopg.Error as exc:
            out[name] = str(exc.sqlstate)
    return out


def ids(result: list[int] | str) -> list[int]:
    assert isinstance(result, list), f"refused with {result}"
    return result


def direct_tenants(conn: Conn) -> dict[str, set[str]]:
    return {
        table: {r[0] for r in conn.execute(f"SELECT DISTINCT tenant FROM spark.{table}").fetchall()}
        for table in ("memories", "embeddings", "trigger_rules", "retrievals")
    }


def test_every_tenant_table_has_a_documented_policy_and_every_function_is_invoker(
    rls_db: tuple[str, Roles],
) -> None:
    url, _ = rls_db
    policies = doc_block("rls-policies")
    with connect(url) as admin:
        tables = [
            r[0]
            for r in admin.execute(
                """SELECT c.relname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid
                   WHERE c.relnamespace = 'spark'::regnamespace AND c.relkind IN ('r', 'p')
                     AND a.attname = 'tenant' AND NOT a.attisdropped ORDER BY 1"""
            ).fetchall()
        ]
        definers = admin.execute(
            "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.pronamespace = 'spark'::regnamespace "
            "AND p.prosecdef"
        ).fetchall()
    assert len(tables) >= 12
    for table in tables:
        assert f"ALTER TABLE spark.{table} ENABLE ROW LEVEL SECURITY;" in policies, table
        assert f"CREATE POLICY tenant_own ON spark.{table} " in policies, table
    assert definers == [], "SECURITY DEFINER functions bypass row-level security"


def test_policies_keep_a_tenant_role_to_its_own_rows_and_the_pack(rls_db: tuple[str, Roles]) -> None:
    url, roles = rls_db
    with connect(url, autocommit=True) as admin:
        admin.execute("SET statement_timeout = '10s'")
        admin.execute(renamed(doc_block("rls-grants"), roles))
        for tenant in (roles.alice, roles.bob):
            admin.execute(renamed(doc_block("rls-tenant"), roles).replace(roles.alice, tenant))

        # grants only, no policies: alice reads bob's memories, directly and through the functions
        with as_role(admin, roles.alice):
            leaked = direct_tenants(admin)
            via = calls(admin, roles.bob)
        assert roles.bob in leaked["memories"] and roles.bob in leaked["embeddings"]
        for call in ("retrieve", "retrieve+vec", "explain", "search_semantic", "reflect", "advise"):
            assert roles.bob in tenants_of(admin, ids(via[call])), call
        admin.execute("DELETE FROM spark.retrievals")  # the log of those calls

        admin.execute(renamed(doc_block("rls-policies"), roles))
        bob_id = admin.execute(
            "SELECT min(id) FROM spark.memories WHERE tenant = %s", (roles.bob,)
        ).fetchone()
        bob_id = bob_id[0] if bob_id else None
        with as_role(admin, roles.alice):
            direct = direct_tenants(admin)
            own = calls(admin, roles.alice)
            foreign = calls(admin, roles.bob)
            # another tenant's rows cannot be made, changed or removed
            with pytest.raises(errors.InsufficientPrivilege, match="row-level security"):
                admin.execute(
                    "INSERT INTO spark.memories (tenant, key, text, descriptor, content_hash) "
                    "VALUES (%s, 'planted', 'x', 'x', '\\x00')",
                    (roles.bob,),
                )
            with pytest.raises(errors.InsufficientPrivilege, match="row-level security"):
                admin.execute("SELECT spark.put_trigger_rule(%s, 'evil', 'x', ARRAY['k0'])", (roles.bob,))
            changed = admin.execute(
                "UPDATE spark.memories SET text = 'overwritten' WHERE tenant <> %s", (roles.alice,)
            ).rowcount
            removed = admin.execute(
                "DELETE FROM spark.trigger_rules WHERE tenant <> %s", (roles.alice,)
            ).rowcount
            # her own log and outcomes may not name bob's memories: no planted counts, no probing for ids
            logged = admin.execute(
                "INSERT INTO spark.retrievals (tenant, query_text) VALUES (%s, 'x') RETURNING id",
                (roles.alice,),
            ).fetchone()[0]  # type: ignore[index]
            for planted in (
                "INSERT INTO spark.retrieval_items "
                "VALUES (%(t)s, %(rid)s, %(mid)s, %(other)s, 1, 1, '{}', '{}')",
                "INSERT INTO spark.outcomes (tenant, memory_id, memory_tenant, outcome) "
                "VALUES (%(t)s, %(mid)s, %(other)s, 'helpful')",
            ):
                for mid in (bob_id, 10**9):  # an id that exists and one that does not: the same answer
                    with pytest.raises(errors.InsufficientPrivilege, match="row-level security"):
                        admin.execute(
                            planted, {"t": roles.alice, "rid": logged, "mid": mid, "other": roles.bob}
                        )
            with pytest.raises(errors.InsufficientPrivilege):  # the sequences' totals are not hers to read
                admin.execute("SELECT last_value FROM spark.memories_id_seq")
            for seq in ("embedding_models_id_seq", "retrievals_id_seq"):  # nor hers to use up
                with pytest.raises(errors.InsufficientPrivilege):
                    admin.execute(f"SELECT nextval('spark.{seq}')")
        with as_role(admin, roles.bob):
            bobs = calls(admin, roles.bob)
            after = direct_tenants(admin)

        assert direct == {
            "memories": {roles.alice, "_system"},
            "embeddings": {roles.alice, "_system"},
            "trigger_rules": {roles.alice},  # the pack has no rules in this database
            "retrievals": set(),
        }
        assert after["retrievals"] == {roles.bob}  # bob sees his own log, not alice's
        assert (changed, removed) == (0, 0)
        # alice's functions work on her rows and the pack's, bob's on his
        assert tenants_of(admin, ids(own["search_semantic"])) == {roles.alice, "_system"}
        for call in ("retrieve", "retrieve+vec", "explain", "reflect", "advise", "advise_with_warnings"):
            assert roles.alice in tenants_of(admin, ids(own[call])) <= {roles.alice, "_system"}, call
        assert tenants_of(admin, ids(bobs["search_semantic"])) == {roles.bob, "_system"}
        assert roles.bob in tenants_of(admin, ids(bobs["retrieve+vec"])) <= {roles.bob, "_system"}
        # asking for bob as alice: reads show the pack at most, the advise log cannot be written for him
        for call in ("retrieve", "retrieve+vec", "explain", "search_semantic", "reflect"):
            assert tenants_of(admin, ids(foreign[call])) <= {"_system"}, call
        assert foreign["advise"] == foreign["advise_with_warnings"] == "42501"
        # what the log says alice and bob were shown: their own memories or the pack's
        items = admin.execute("SELECT DISTINCT tenant, memory_tenant FROM spark.retrieval_items").fetchall()
        assert {t for t, _ in items} == {roles.alice, roles.bob}
        assert all(m in (t, "_system") for t, m in items)
        texts = admin.execute("SELECT count(*) FROM spark.memories WHERE text = 'overwritten'").fetchone()
        assert texts == (0,)


def test_the_setting_variant_for_a_shared_pool_role(rls_db: tuple[str, Roles]) -> None:
    url, roles = rls_db
    policies = renamed(doc_block("rls-policies"), roles)
    assert "current_user::text" in policies
    with connect(url, autocommit=True) as admin:
        admin.execute("SET statement_timeout = '10s'")
        admin.execute(renamed(doc_block("rls-grants"), roles))
        admin.execute(policies.replace("current_user::text", "current_setting('spark.tenant', true)"))
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN IN ROLE {}").format(
                sql.Identifier(roles.app), sql.Identifier(roles.group)
            )
        )
        with as_role(admin, roles.app):
            unset = direct_tenants(admin)["memories"]
            admin.execute("SELECT set_config('spark.tenant', %s, false)", (roles.alice,))
            as_alice = direct_tenants(admin)["memories"]
            alice_asks_bob = calls(admin, roles.bob)
            alice_asks_alice = calls(admin, roles.alice)
            admin.execute("SELECT set_config('spark.tenant', %s, false)", (roles.bob,))
            as_bob = direct_tenants(admin)["memories"]
            admin.execute("RESET spark.tenant")
            after_reset = direct_tenants(admin)["memories"]
        assert unset == after_reset == {"_system"}  # fail closed
        assert as_alice == {roles.alice, "_system"} and as_bob == {roles.bob, "_system"}
        assert tenants_of(admin, ids(alice_asks_alice["search_semantic"])) == {roles.alice, "_system"}
        for call in ("retrieve", "retrieve+vec", "explain", "search_semantic", "reflect"):
            assert tenants_of(admin, ids(alice_asks_bob[call])) <= {"_system"}, call
        assert alice_asks_bob["advise"] == "42501"


def test_a_tenant_role_uses_the_python_client_with_the_documented_grants(
    rls_db: tuple[str, Roles], tmp_path: Path
) -> None:
    """What docs/security.md promises a tenant role: deferred ingest and search through SparkClient (which
    checks the schema revision first); without the version table's grant, an error saying which grant."""
    url, roles = rls_db
    with connect(url, autocommit=True) as admin:
        for _ in range(2):  # the grants block runs again (an upgrade, a second database): the role exists
            admin.execute(renamed(doc_block("rls-grants"), roles))
        admin.execute(renamed(doc_block("rls-tenant"), roles))
        admin.execute(renamed(doc_block("rls-policies"), roles))
        admin.execute(sql.SQL("ALTER ROLE {} PASSWORD 'rls-test'").format(sql.Identifier(roles.alice)))
    # no model files: the search runs lexically (the database's model is a test model anyway)
    settings = Settings({**load_settings().as_dict(), "embedding.model_dir": tmp_path / "none"}, None)
    alice = make_conninfo(url, user=roles.alice, password="rls-test")
    with SparkClient(settings, url=alice) as client:
        client.add(roles.alice, "Pin the base image digest in every Dockerfile.", key="pin", defer=True)
        hits = client.search(roles.alice, "pin the base image digest", k=20)
        foreign = client.search(roles.bob, QUERY, k=20)
    # with a query vector the wrapper also caches it under the tenant asked for: the policy refuses that
    # row, so the call fails as docs/security.md says (psql's plain call returns pack rows at most)
    with connect(alice) as conn, pytest.raises(errors.InsufficientPrivilege, match="query_embeddings"):
        retrieve(conn, roles.bob, QUERY, embedding=np.array(json.loads(VEC), dtype=np.float32))
    # stats as the tenant role say whose rows they count (they read "all tenants")
    with connect(alice) as conn:
        mine = health.collect(conn, None, None, "m")
    assert mine["row_security"] and mine["memories"]["total"] >= 1
    assert format_report(mine).startswith("all tenants visible to this role (row-level security")
    with connect(url) as admin:
        assert not health.collect(admin, None, None, "m")["row_security"]
        assert "pin" in [h.key for h in hits]
        assert tenants_of(admin, [h.memory_id for h in hits]) <= {roles.alice, "_system"}
        assert tenants_of(admin, [h.memory_id for h in foreign]) <= {"_system"}
        queued = admin.execute(
            "SELECT count(*) FROM spark.embed_queue WHERE tenant = %s", (roles.alice,)
        ).fetchone()
        assert queued == (1,)  # the worker (the owner) embeds it later
        admin.execute(
            sql.SQL("REVOKE SELECT ON public.spark_alembic_version FROM {}").format(
                sql.Identifier(roles.group)
            )
        )
        admin.commit()
    refused = SparkClient(settings, url=alice)
    with pytest.raises(DatabaseError, match=r"GRANT SELECT ON public\.spark_alembic_version"), refused:
        refused.search(roles.alice, "pin the base image digest")


def test_a_tenant_role_ingests_with_embedding_once_the_owner_registered_the_model(
    server_url: str, embedder: Embedder
) -> None:
    """A tenant role holds no UPDATE on spark.embedding_models, so the writers' `SELECT ... FOR SHARE` of the
    active model (spark_pg.queries.ACTIVE_MODEL_HELD) refused it with a bare 42501 and only deferred ingest
    worked. In READ COMMITTED, the advisory lock taken first already orders it with a model switch."""
    with roles_db(server_url) as (url, roles):
        with connect(url, autocommit=True) as admin:
            admin.execute(renamed(doc_block("rls-grants"), roles))
            admin.execute(renamed(doc_block("rls-tenant"), roles))
            admin.execute(renamed(doc_block("rls-policies"), roles))
        record = validate_row({"text": "Pin the base image digest."}, Path("-"), 1, roles.alice)
        with connect(url) as conn, as_role(conn, roles.alice):  # no model registered yet
            with pytest.raises(DatabaseError, match=r"may not register .*--defer-embedding"):
                ingest(conn, [record], embedder)
            conn.rollback()
        with connect(url, autocommit=True) as admin:
            ensure_model(admin, embedder)  # the owner registers the model (and builds its index)
        with connect(url) as conn, as_role(conn, roles.alice):
            result = ingest(conn, [record], embedder)
            conn.commit()
            assert result.inserted == 1
        with connect(url) as admin:
            stored = admin.execute(
                "SELECT count(*) FROM spark.embeddings WHERE tenant = %s", (roles.alice,)
            ).fetchone()
            queued = admin.execute(
                "SELECT count(*) FROM spark.embed_queue WHERE tenant = %s", (roles.alice,)
            ).fetchone()
        assert (stored, queued) == ((1,), (0,))


def test_a_tenant_roles_write_past_the_index_threshold_leaves_the_index_to_the_owner(server_url: str) -> None:
    """Was (audit S): once the tenant held 1,500 vectors, every write of a tenant role failed with 42501
    "must be owner of table embeddings", after its row was stored: the statistics refresh tried to build the
    tenant's HNSW index, which only the table's owner may. Now the role's refresh updates the statistics and
    leaves the index to the owner, whose next refresh builds it."""
    with roles_db(server_url) as (url, roles):
        with connect(url, autocommit=True) as admin:
            admin.execute(renamed(doc_block("rls-grants"), roles))
            admin.execute(renamed(doc_block("rls-tenant"), roles))
            admin.execute(renamed(doc_block("rls-policies"), roles))
            model_id = admin.execute("SELECT spark.register_model('rls-model', %s, 'mean', 256)", (DIM,))
            admin.execute(
                """WITH m AS (INSERT INTO spark.memories (tenant, key, text)
                              SELECT %(t)s, 'n' || g, 'note number ' || g FROM generate_series(1, 1500) g
                              RETURNING tenant, id, created_at)
                   INSERT INTO spark.embeddings (tenant, memory_id, model_id, created_at, embedding)
                   SELECT tenant, id, %(model)s, created_at,
                          (SELECT array_agg(sin(id * 3.1 + d))::vector FROM generate_series(1, %(dim)s) d)
                   FROM m""",
                {"t": roles.alice, "model": model_id.fetchone()[0], "dim": DIM},  # type: ignore[index]
            )
        record = validate_row({"text": "Pin the base image digest."}, Path("-"), 1, roles.alice)
        with connect(url) as conn, as_role(conn, roles.alice):
            assert ingest(conn, [record], None).inserted == 1  # deferred: no model files needed
            conn.commit()
        with connect(url, autocommit=True) as admin:
            stats = admin.execute("SELECT memories FROM spark.tenant_stats WHERE tenant = %s", (roles.alice,))
            assert stats.fetchone() == (1501,)  # the statistics were refreshed
            plan = admin.execute("SELECT action FROM spark.tenant_index_plan(%s)", (roles.alice,)).fetchall()
            assert plan == [("build",)]  # the index was left to the owner
            admin.execute("SELECT spark.refresh_tenant_stats(%s)", (roles.alice,))
            assert admin.execute(
                "SELECT tenant FROM spark.tenant_vector_indexes WHERE tenant = %s", (roles.alice,)
            ).fetchall() == [(roles.alice,)]


def test_a_tenant_roles_refresh_of_every_tenant_refreshes_its_own(rls_db: tuple[str, Roles]) -> None:
    """Was (audit W): with tenant NULL the refresh took in the pack's tenant, which a tenant role sees
    (policy pack_read) but may not write statistics for: 42501 on every forced call."""
    url, roles = rls_db
    with connect(url, autocommit=True) as admin:
        for tag in ("rls-grants", "rls-tenant", "rls-policies"):
            admin.execute(renamed(doc_block(tag), roles))
        assert admin.execute("SELECT spark.refresh_tenant_stats(NULL, true)").fetchone() == (3,)
        stamps = "SELECT tenant, refreshed_at FROM spark.tenant_stats ORDER BY tenant"
        before = dict(admin.execute(stamps).fetchall())
    with connect(url, autocommit=True) as conn, as_role(conn, roles.alice):
        assert conn.execute("SELECT spark.refresh_tenant_stats(NULL, true)").fetchone() == (1,)
        with pytest.raises(errors.InsufficientPrivilege):  # named, the pack's statistics stay the owner's
            conn.execute("SELECT spark.refresh_tenant_stats('_system', true)")
    with connect(url, autocommit=True) as admin:
        after = dict(admin.execute(stamps).fetchall())
    assert sorted(before) == sorted(after) == sorted([roles.alice, roles.bob, "_system"])
    assert [t for t in before if after[t] != before[t]] == [roles.alice]


def test_a_tenant_role_is_shown_advice_once_a_session_and_sees_only_its_own(
    rls_db: tuple[str, Roles],
) -> None:
    """spark.advice_shown (migration 0022) is written by a tenant role's advise calls under the documented
    grants and policies, and keeps each role to its own sessions."""
    url, roles = rls_db
    with connect(url, autocommit=True) as admin:
        admin.execute(renamed(doc_block("rls-grants"), roles))
        for tenant in (roles.alice, roles.bob):
            admin.execute(renamed(doc_block("rls-tenant"), roles).replace(roles.alice, tenant))
        admin.execute(renamed(doc_block("rls-policies"), roles))
        call = (
            "SELECT key, why ? 'repeat' FROM spark.advise(%s, 'deploy the service', %s::vector, 3, '{}', 'S')"
        )
        for role in (roles.alice, roles.bob):
            with as_role(admin, role):
                first = dict(admin.execute(call, (role, VEC)).fetchall())
                second = dict(admin.execute(call, (role, VEC)).fetchall())
            assert first and not any(first.values()), role
            assert any(second.values()), role  # shown by the first call: a repeat (critical items aside)
        with as_role(admin, roles.alice):
            seen = {r[0] for r in admin.execute("SELECT tenant FROM spark.advice_shown").fetchall()}
        assert seen == {roles.alice}
