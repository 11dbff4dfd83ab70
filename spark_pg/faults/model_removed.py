"""Scenario c, **model files removed**: retrieval still answers, lexically, and says why (``why.mode`` is
``lexical``, a warning names the missing files), and so does a hook's advice; an ingest that needs the
model fails with ModelNotAvailable and writes nothing; ``--defer-embedding`` still stores; with the files
back the next process is hybrid again and a worker drains what was deferred."""

from __future__ import annotations

import json
from pathlib import Path

from spark_pg.faults.harness import Lab, json_line
from spark_pg.faults.memories import QUERY, counts, records, write_jsonl
from spark_pg.faults.report import Say, Scenario, quiet, scenario
from spark_pg.ingest import ingest


def model_removed(lab: Lab, n: int = 40, deferred: int = 20, say: Say = quiet) -> Scenario:
    tenant, new_tenant = "faults-model", "faults-model-new"
    with scenario("c", "model files removed, then restored", say) as s:
        with lab.connect() as conn:
            ingest(conn, records(tenant, "c", n, seed=51), lab.embedder)
        path = write_jsonl(lab.home / "later.jsonl", records(new_tenant, "d", deferred, seed=61))
        away = lab.model_dir.with_name("model.removed")
        say(f"c: moving the model files away ({lab.model_dir} -> {away.name})")
        lab.model_dir.rename(away)
        try:
            _without_model(lab, s, tenant, new_tenant, path, deferred)
        finally:
            if away.exists():
                away.rename(lab.model_dir)
        say("c: model files restored; a search and a `spark-pg worker --once`, at once")
        (hits, s.timings["search_after_restore"]), (drained, s.timings["backlog_drained"]) = lab.run_both(
            ("search-hybrid", ["search", QUERY, "--tenant", tenant, "--json"]),
            ("worker-c2", ["worker", "--once", "--quiet", "--json"]),
        )
        modes = sorted({h["why"]["mode"] for h in json.loads(hits.stdout or "[]")})
        s.equal("search after the restore: modes", modes, ["hybrid"])
        s.equal("worker --once after the restore exits 0", drained.returncode, 0)
        s.equal(
            "worker --once embedded the deferred memories",
            json_line(drained.stdout).get("embedded"),
            deferred,
        )
        final = counts(lab, new_tenant)
        s.equal(
            "deferred memories: with a vector, queued", (final["with_vector"], final["queued"]), (deferred, 0)
        )
    return s


def _without_model(lab: Lab, s: Scenario, tenant: str, new_tenant: str, path: Path, deferred: int) -> None:
    (found, s.timings["lexical_search"]), (refused, _) = lab.run_both(
        ("search-lexical", ["search", QUERY, "--tenant", tenant, "--json"]),
        ("ingest-no-model", ["ingest", str(path), "--quiet"]),
    )
    hits = json.loads(found.stdout or "[]") if found.returncode == 0 else []
    s.equal("search without the model exits 0", found.returncode, 0)
    s.that("search without the model still finds memories", len(hits) > 0, len(hits))
    s.equal("search without the model: modes", sorted({h["why"]["mode"] for h in hits}), ["lexical"])
    s.that(
        "the cause is logged: 'retrieval runs lexically' and the missing model.onnx",
        "retrieval runs lexically" in found.stderr and "model.onnx" in found.stderr,
        found.stderr.strip()[:160],
    )
    _hook_without_model(lab, s, tenant)
    s.equal("ingest with embedding exits 2 (a spark_pg error)", refused.returncode, 2)
    s.that(
        "its error is ModelNotAvailable naming the folder and the missing files",
        "spark-pg: error: the model files" in refused.stderr
        and str(lab.model_dir) in refused.stderr
        and "missing: model.onnx, tokenizer.json" in refused.stderr,
        refused.stderr.strip()[:200],
    )
    s.equal("rows written by the refused ingest", counts(lab, new_tenant)["memories"], 0)
    stored = lab.run("ingest-deferred", ["ingest", str(path), "--quiet", "--defer-embedding"])
    s.equal("ingest --defer-embedding without the model exits 0", stored.returncode, 0)
    after = counts(lab, new_tenant)
    s.equal("deferred memories stored, queued", (after["memories"], after["queued"]), (deferred, deferred))
    worker = lab.run("worker-c1", ["worker", "--once", "--quiet"])
    s.that(
        "a worker without the model refuses to start (exit 2, ModelNotAvailable)",
        worker.returncode == 2 and "model files" in worker.stderr,
        worker.returncode,
    )
    s.equal("queue left untouched by it", counts(lab, new_tenant)["queued"], deferred)


def _hook_without_model(lab: Lab, s: Scenario, tenant: str) -> None:
    """A PreToolUse hook with no server and no model: the advisor runs (its call is logged), lexically,
    and the hook says why in its one stderr line; it never fails the agent's tool call."""
    session = "faults-c-hook"
    event = {
        "session_id": session,
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": f"git commit -m '{QUERY}'"},
    }
    hook = lab.run(
        "hook-no-model",
        ["hook", "pre-tool-use", "--tenant", tenant, "--socket", str(lab.home / "no-server.sock")],
        stdin=json.dumps(event),
    )
    s.equal("a hook without the model exits 0", hook.returncode, 0)
    s.that(
        "it says its advice is lexical: 'warning: no embedding model'",
        "warning: no embedding model, retrieval runs lexically" in hook.stderr,
        hook.stderr.strip()[:160],
    )
    with lab.connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM spark.retrievals WHERE tenant = %s AND session_id = %s", (tenant, session)
        ).fetchone()
    s.equal("its advise call was made and logged", row[0] if row else 0, 1)
