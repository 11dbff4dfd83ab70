"""The schema keeps the rules a tenant-distributed deployment needs (docs/scale.md, Citus).

Citus distributes a table by one column (here ``tenant``) and enforces a primary key or unique constraint
only when it contains that column, and a foreign key between distributed tables only when both sides are
colocated and the key carries the column. These tests read the installed catalog, so a migration that
breaks a rule fails here, not on a cluster. The few known exceptions are named in docs/scale.md with the
change that removes them; a new one must be added there too.
"""

from __future__ import annotations

from pathlib import Path

import psycopg

SCALE_DOC = Path(__file__).resolve().parents[1] / "docs" / "scale.md"

# tables without a tenant column: reference tables or coordinator-local under Citus (docs/scale.md)
GLOBAL_TABLES = {"embedding_models", "install_info"}
# unique indexes without the tenant column, and why they are acceptable (docs/scale.md names each)
UNIQUE_WITHOUT_TENANT = {
    "tenant_vector_indexes_index_name_key": "a reference table under Citus (no per-tenant indexes there)",
}
# foreign keys between tenant tables that do not go through the referencing row's own tenant column
CROSS_TENANT_FOREIGN_KEYS = {
    "retrieval_items_memory_tenant_memory_id_fkey": "the cold-start pack moves to reference tables",
    "outcomes_memory_tenant_memory_id_fkey": "the cold-start pack moves to reference tables",
}

TABLES = """
SELECT c.relname,
       EXISTS (SELECT 1 FROM pg_attribute a
               WHERE a.attrelid = c.oid AND a.attname = 'tenant' AND NOT a.attisdropped) AS has_tenant
FROM pg_class c
WHERE c.relnamespace = 'spark'::regnamespace AND c.relkind IN ('r', 'p')
ORDER BY 1
"""

# every unique index (primary keys included) with its key columns in order (expressions as NULL)
UNIQUE_INDEXES = """
SELECT t.relname, i.relname, x.indisprimary,
       ARRAY(SELECT a.attname FROM unnest(x.indkey[0:x.indnkeyatts - 1]) WITH ORDINALITY k(att, n)
             LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.att
             ORDER BY k.n) AS cols
FROM pg_index x
JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class t ON t.oid = x.indrelid
WHERE t.relnamespace = 'spark'::regnamespace AND x.indisunique
ORDER BY 1, 2
"""

# every foreign key: the referencing column paired with each referenced column
FOREIGN_KEYS = """
SELECT c.conname, src.relname, dst.relname,
       ARRAY(SELECT sa.attname || '->' || da.attname
             FROM unnest(c.conkey, c.confkey) k(s, d)
             JOIN pg_attribute sa ON sa.attrelid = c.conrelid AND sa.attnum = k.s
             JOIN pg_attribute da ON da.attrelid = c.confrelid AND da.attnum = k.d) AS pairs
FROM pg_constraint c
JOIN pg_class src ON src.oid = c.conrelid
JOIN pg_class dst ON dst.oid = c.confrelid
WHERE c.connamespace = 'spark'::regnamespace AND c.contype = 'f'
ORDER BY 1
"""


def _tables(url: str) -> dict[str, bool]:
    with psycopg.connect(url) as conn:
        return {name: has for name, has in conn.execute(TABLES).fetchall()}


def test_only_the_global_tables_lack_a_tenant_column(db_url: str) -> None:
    tables = _tables(db_url)
    assert len(tables) > 10
    without = {name for name, has in tables.items() if not has}
    assert without == GLOBAL_TABLES, f"tables without a tenant column: {sorted(without)}"


def test_every_tenant_table_has_tenant_first_in_its_primary_key(db_url: str) -> None:
    tables = _tables(db_url)
    with psycopg.connect(db_url) as conn:
        primary = {t: cols for t, _, is_pk, cols in conn.execute(UNIQUE_INDEXES).fetchall() if is_pk}
    tenant_tables = {name for name, has in tables.items() if has}
    assert tenant_tables <= set(primary), tenant_tables - set(primary)  # no tenant table without a key
    wrong = {t: primary[t] for t in tenant_tables if primary[t][0] != "tenant"}
    assert not wrong, f"primary keys not led by tenant: {wrong}"


def test_unique_indexes_of_tenant_tables_contain_tenant(db_url: str) -> None:
    tables = _tables(db_url)
    with psycopg.connect(db_url) as conn:
        indexes = conn.execute(UNIQUE_INDEXES).fetchall()
    without = {index for table, index, _, cols in indexes if tables[table] and "tenant" not in cols}
    assert without == set(UNIQUE_WITHOUT_TENANT), f"unique indexes without tenant: {sorted(without)}"


def test_foreign_keys_between_tenant_tables_carry_the_tenant(db_url: str) -> None:
    tables = _tables(db_url)
    with psycopg.connect(db_url) as conn:
        keys = conn.execute(FOREIGN_KEYS).fetchall()
    between = [(name, pairs) for name, src, dst, pairs in keys if tables[src] and tables[dst]]
    assert len(between) >= 10
    cross = {name for name, pairs in between if "tenant->tenant" not in pairs}
    assert cross == set(CROSS_TENANT_FOREIGN_KEYS), f"foreign keys not through tenant: {sorted(cross)}"
    # a tenant table may point at a global one (a reference table under Citus), never the other way
    backwards = [name for name, src, dst, _ in keys if not tables[src] and tables[dst]]
    assert not backwards, f"global tables pointing at tenant tables: {backwards}"


def test_the_exceptions_are_the_ones_docs_scale_names() -> None:
    doc = SCALE_DOC.read_text()
    for name in [*GLOBAL_TABLES, *UNIQUE_WITHOUT_TENANT, *CROSS_TENANT_FOREIGN_KEYS]:
        assert name in doc, f"docs/scale.md does not name {name}"
