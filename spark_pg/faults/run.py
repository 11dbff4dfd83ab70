"""Run the chosen fault scenarios, in order, on one scratch home, into one report."""

from __future__ import annotations

import time

from spark_pg.config import Settings
from spark_pg.embedding import MODELS, model_dir_for
from spark_pg.errors import InputError
from spark_pg.faults.database_killed import database_killed
from spark_pg.faults.harness import Lab
from spark_pg.faults.model_removed import model_removed
from spark_pg.faults.report import FaultReport, Say, quiet
from spark_pg.faults.worker_killed import worker_killed

SCENARIOS = ("a", "b", "c")


def run_faults(
    settings: Settings,
    *,
    only: tuple[str, ...] = SCENARIOS,
    memories: int = 1000,
    keep: bool = False,
    say: Say = quiet,
) -> FaultReport:
    """Run the scenarios on a scratch server (the model files are copied from the configured folder)."""
    unknown = [name for name in only if name not in SCENARIOS]
    if unknown:
        raise InputError(f"unknown scenarios {unknown}; choose from {', '.join(SCENARIOS)}")
    if not MODELS[settings.get_str("embedding.model")].offline_files:
        raise InputError("spark-pg faults uses the offline default model all-MiniLM-L6-v2-int8")
    if memories < 500:
        raise InputError(f"memories must be at least 500, got {memories}")
    report = FaultReport()
    started = time.perf_counter()
    with Lab(model_dir_for(settings), keep=keep, say=say) as lab:
        report.setup_s = lab.setup_s
        with lab.connect() as conn:
            row = conn.execute("SELECT current_setting('server_version')").fetchone()
        report.server = f"PostgreSQL {row[0] if row else '?'} (scratch, {lab.home})"
        lab.embedder.embed_query("warm up")
        if "a" in only:
            report.scenarios.append(worker_killed(lab, n=memories * 3 // 5, say=say))
        if "b" in only:
            report.scenarios.append(database_killed(lab, n=memories, chunk=memories // 10, say=say))
        if "c" in only:
            report.scenarios.append(model_removed(lab, say=say))
    report.seconds = time.perf_counter() - started
    return report
