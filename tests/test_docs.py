"""Documentation that must track the code."""

from __future__ import annotations

from pathlib import Path

from spark_pg.config import KEYS

ROOT = Path(__file__).resolve().parent.parent


def test_tuneables_doc_lists_every_key_with_its_env_var_and_default() -> None:
    doc = (ROOT / "docs" / "tuneables.md").read_text()
    for key in KEYS:
        row = next((line for line in doc.splitlines() if line.startswith(f"| `{key.name}` |")), None)
        assert row is not None, f"{key.name} missing from docs/tuneables.md"
        assert f"`{key.env}`" in row
        assert ("(none)" if key.default is None else f"`{key.default}`") in row


def test_readme_opens_with_the_two_commands() -> None:
    head = "\n".join((ROOT / "README.md").read_text().splitlines()[:15])
    assert "make demo" in head and "make test" in head


def test_retrieve_param_keys_default_to_the_sql_defaults(conn) -> None:  # type: ignore[no-untyped-def]
    from spark_pg.config import KEY_BY_NAME, RETRIEVE_PARAM_KEYS

    row = conn.execute("SELECT spark.retrieve_defaults()").fetchone()
    assert row is not None
    for name in RETRIEVE_PARAM_KEYS:
        assert KEY_BY_NAME[f"retrieval.{name}"].default == row[0][name], name
