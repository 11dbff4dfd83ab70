"""`spark-pg faults`: break things on purpose and check, by counting rows, that nothing committed is lost.

Everything runs against a scratch embedded server in a temporary home (never the user's server or data),
so the postmaster itself may be killed (:mod:`.harness`). Three scenarios, each verified by reading the
tables back (:mod:`.memories`) into checks (:mod:`.report`):

a. **worker killed** (:mod:`.worker_killed`): ``spark-pg worker`` is SIGKILLed while it holds a claimed,
   uncommitted batch; the claimed rows return to the queue and a restarted worker embeds them.
b. **database killed** (:mod:`.database_killed`): the postmaster is SIGKILLed mid-ingest
   (:mod:`.chunked_ingest`) while a worker and a hook server are connected (:mod:`.probes`); after crash
   recovery every chunk reported committed is there whole, and the same processes resume by themselves.
c. **model files removed** (:mod:`.model_removed`): retrieval still answers, lexically, and says why; an
   ingest that needs the model writes nothing; with the files back everything is hybrid again.

:func:`run_faults` (:mod:`.run`) runs them on one scratch home.
"""

from __future__ import annotations

from spark_pg.faults.chunked_ingest import ingest_child
from spark_pg.faults.database_killed import database_killed
from spark_pg.faults.harness import FaultError, Lab
from spark_pg.faults.memories import counts, tenant_counts
from spark_pg.faults.model_removed import model_removed
from spark_pg.faults.report import Check, FaultReport, Scenario, format_report
from spark_pg.faults.run import SCENARIOS, run_faults
from spark_pg.faults.worker_killed import worker_killed

__all__ = [
    "SCENARIOS",
    "Check",
    "FaultError",
    "FaultReport",
    "Lab",
    "Scenario",
    "counts",
    "database_killed",
    "format_report",
    "ingest_child",
    "model_removed",
    "run_faults",
    "tenant_counts",
    "worker_killed",
]
