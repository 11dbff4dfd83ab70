"""The bars of long index builds and vacuums read PostgreSQL's progress reports from a second connection."""

from __future__ import annotations

import pytest

from spark_pg import index_progress
from spark_pg.db import connect
from spark_pg.index_progress import index_build_progress, vacuum_progress


def test_a_build_shows_its_blocks_and_a_failed_poll_leaves_it_alone(
    db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_progress, "POLL_S", 0.02)
    with connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.progress_probe (v vector(16))")
        try:
            conn.execute(
                """INSERT INTO public.progress_probe
                   SELECT array_agg(random())::vector(16) FROM generate_series(1, 5000) i,
                          generate_series(1, 16) d GROUP BY i"""
            )
            with index_build_progress(db_url, conn.info.backend_pid, "probe index"):
                for name in ("probe_a", "probe_b"):  # two builds in a row, as the per-tenant ones
                    conn.execute(f"CREATE INDEX {name} ON public.progress_probe USING hnsw (v vector_l2_ops)")
            shown = capsys.readouterr().err
            assert "probe index" in shown and "build 1: building index" in shown, shown[-500:]
            assert "build 2: building index" in shown and "build 3" not in shown, shown[-500:]
            # a server the poller cannot reach: no bar, and the block runs as ever
            with index_build_progress("postgresql://nobody@/none?host=/nonexistent", 1, "lost"):
                conn.execute("DROP INDEX public.probe_a, public.probe_b")
        finally:
            conn.execute("DROP TABLE public.progress_probe")


def test_a_vacuum_analyze_shows_its_phases(
    db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_progress, "POLL_S", 0.01)
    with connect(db_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE public.vacuum_probe (i integer, t text)")
        try:
            # rows deleted and an index to clean: enough vacuum work for a poll to see it
            conn.execute(
                "INSERT INTO public.vacuum_probe SELECT i, repeat('x', 200) FROM generate_series(1, 200000) i"
            )
            conn.execute("CREATE INDEX vacuum_probe_i ON public.vacuum_probe (i)")
            conn.execute("DELETE FROM public.vacuum_probe WHERE i % 2 = 0")
            with vacuum_progress(db_url, conn.info.backend_pid, "probe vacuum"):
                conn.execute("VACUUM ANALYZE public.vacuum_probe")
            shown = capsys.readouterr().err
            assert "probe vacuum" in shown and "vacuum: " in shown, shown[-500:]
            with vacuum_progress(db_url, conn.info.backend_pid, "off", enabled=False):
                conn.execute("VACUUM public.vacuum_probe")
            assert "off" not in capsys.readouterr().err
        finally:
            conn.execute("DROP TABLE public.vacuum_probe")
