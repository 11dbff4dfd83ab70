"""Scenario a, **worker killed**: ``spark-pg worker`` is SIGKILLed while it holds a claimed, uncommitted
batch. The claimed rows must return to the queue; a restarted worker must embed them, and every memory
must end with exactly one vector and the queue empty."""

from __future__ import annotations

import signal
import time

from spark_pg.faults.harness import FaultError, Lab, last_json, wait_for
from spark_pg.faults.memories import counts, records, tenant_counts
from spark_pg.faults.report import Say, Scenario, quiet, scenario
from spark_pg.ingest import ingest

IN_FLIGHT = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL
"""
UNCLAIMED = (
    "SELECT count(*) FROM (SELECT 1 FROM spark.embed_queue WHERE tenant = %s FOR UPDATE SKIP LOCKED) x"
)


def worker_killed(lab: Lab, n: int = 600, batch: int = 64, say: Say = quiet) -> Scenario:
    tenant = "faults-worker"
    with scenario("a", "worker SIGKILLed mid-batch", say) as s:
        with lab.connect() as conn:
            ingest(conn, records(tenant, "w", n, seed=21), None)
        say(f"a: {n} memories stored with deferred embedding; starting `spark-pg worker --batch {batch}`")
        worker = lab.spawn("worker-a1", ["worker", "--batch", str(batch), "--quiet", "--poll", "5"])
        in_flight = 0
        try:
            with lab.connect(autocommit=True) as conn:
                deadline = time.monotonic() + 120
                while True:
                    if worker.poll() is not None:
                        raise FaultError(f"the worker exited ({worker.returncode}): {lab.log('worker-a1')}")
                    if time.monotonic() > deadline:
                        raise FaultError("no batch was seen in flight within 120 s")
                    vectors = tenant_counts(conn, tenant)["vectors"]
                    row = conn.execute(IN_FLIGHT).fetchone()
                    in_flight = int(row[0]) if row else 0
                    if 0 < vectors < n and in_flight > 0:  # a batch committed, the next one is claimed
                        worker.send_signal(signal.SIGKILL)
                        break
                    time.sleep(0.01)
        finally:
            lab.stop(worker)
        s.that("a claimed batch was in flight when the worker was SIGKILLed", in_flight > 0, in_flight)
        released = wait_for("the killed worker's rows to be released", lambda: _unclaimed(lab, tenant), 30)
        s.timings["rows_released_after_kill"] = released
        after = counts(lab, tenant)
        s.counts.update(memories=n, vectors_at_kill=after["vectors"], queued_after_kill=after["queued"])
        s.that(
            f"some but not all vectors committed before the kill (0 < {after['vectors']} < {n})",
            0 < after["vectors"] < n,
            after["vectors"],
        )
        s.equal("rows back in the queue (memories - vectors)", after["queued"], n - after["vectors"])
        say(f"a: killed with {after['vectors']} embedded; {after['queued']} back in the queue; restarting")
        started = time.perf_counter()
        first_batch: float | None = None
        again = lab.spawn("worker-a2", ["worker", "--batch", str(batch), "--quiet", "--poll", "5", "--json"])
        try:
            deadline = time.monotonic() + 180
            while (now := counts(lab, tenant))["queued"] > 0:
                if first_batch is None and now["vectors"] > after["vectors"]:
                    first_batch = time.perf_counter() - started
                if again.poll() is not None or time.monotonic() > deadline:
                    raise FaultError(f"the restarted worker did not drain the queue: {lab.log('worker-a2')}")
                time.sleep(0.05)
            s.timings["restart_to_first_batch"] = first_batch or time.perf_counter() - started
            s.timings["restart_to_queue_empty"] = time.perf_counter() - started
            code = lab.stop(again)
        finally:
            lab.stop(again)
        summary = last_json(again)
        s.equal("restarted worker exits 0 on SIGTERM", code, 0)
        s.equal("restarted worker embedded exactly the rows left", summary.get("embedded"), after["queued"])
        final = counts(lab, tenant)
        s.equal("memories", final["memories"], n)
        s.equal("memories with a vector", final["with_vector"], n)
        s.equal("vectors (exactly one per memory)", final["vectors"], n)
        s.equal("most vectors of one memory", final["most_per_memory"], 1)
        s.equal("queue", final["queued"], 0)
    return s


def _unclaimed(lab: Lab, tenant: str) -> bool:
    with lab.connect(autocommit=True) as conn:
        queued = tenant_counts(conn, tenant)["queued"]
        row = conn.execute(UNCLAIMED, (tenant,)).fetchone()
    return row is not None and int(row[0]) == queued
