"""A file or folder named for a deploy is no deploy: ``mkdir -p deploy/k8s``, ``ls deploy/k8s``, ``cat
deploy/values.yaml``, ``cd deploy/k8s``, ``touch deploy/README.md``, ``cp config.yaml deploy/`` (until
2026-11-24 each counted as the deployment_ops family through its words, and the pack's ``deployment``
trigger rule matched it too), while ``kubectl apply -f deploy/k8s``, ``helm upgrade``, ``./deploy.sh``,
``make deploy``, ``git push heroku main``, ``fly deploy`` and ``vercel --prod`` stay deploys. The intent
family (spark_pg.intent.families.file_names), the pack rule's pattern (spark_pg/data/trigger_rules.yaml, on
PostgreSQL's regular expressions) and the advisor end to end. The commands are test strings, never run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from spark_pg.advisor import Advisor, trigger_text
from spark_pg.config import Settings
from spark_pg.embedding import Embedder
from spark_pg.intent import classify_family, extract_intent
from spark_pg.intent.families import file_names
from spark_pg.trigger_patterns import pattern_problem
from spark_pg.triggers import load_rules
from tests.conftest import rolled_back, seeded_database

Conn = psycopg.Connection[Any]
PACK_RULES = Path(__file__).resolve().parents[1] / "spark_pg" / "data" / "trigger_rules.yaml"

# calls that create, read, list, enter, copy into or delete a file or folder whose name says deploy or release
NAMED: list[tuple[str, dict[str, Any], str]] = [
    ("Bash", {"command": "mkdir -p deploy/k8s"}, ""),
    ("Bash", {"command": "mkdir -p deploy/k8s", "description": "Create deploy/k8s directory"}, ""),
    ("Bash", {"command": "ls -la deploy/k8s"}, "see which manifests exist"),
    ("Bash", {"command": "cat deploy/values.yaml"}, "check the replica count"),
    ("Bash", {"command": "cd deploy/k8s && ls -la"}, "see which manifests exist"),
    ("Bash", {"command": "touch deploy/README.md"}, ""),
    ("Bash", {"command": "cp config.yaml deploy/"}, ""),
    ("Bash", {"command": "mv api.yaml deploy/k8s/"}, ""),
    ("Bash", {"command": "cat scripts/deploy.sh"}, "see how the script works"),
    ("Bash", {"command": "chmod +x deploy.sh"}, ""),
    ("Bash", {"command": "rm -rf deploy/tmp"}, ""),
    ("Bash", {"command": "mkdir -p releases/v2"}, ""),
    ("Bash", {"command": "cat RELEASE.md"}, "read the notes"),
    ("Read", {"file_path": "/repo/deploy/k8s/overlays/prod/configmap.yaml"}, "check the pool settings"),
]
# a file tool's path words still place a write in its family (writing a manifest is deployment_ops, whose
# domains let the cluster's system memories advise it), but match no deploy rule
WRITES: list[tuple[str, dict[str, Any], str]] = [
    ("Write", {"file_path": "/repo/deploy/k8s/README.md", "content": "Manifests live here."}, ""),
    ("Write", {"file_path": "/repo/scripts/deploy.sh", "content": "#!/bin/sh"}, ""),
    ("Edit", {"file_path": "/repo/.github/workflows/deploy.yml", "old_string": "a", "new_string": "b"}, ""),
]
# calls that deploy: the family stays deployment_ops (git push heroku main is a push, version_control, and
# the deployment rule still matches it, as it matches every call here)
DEPLOYS: list[tuple[str, dict[str, Any], str]] = [
    ("Bash", {"command": "kubectl apply -f deploy/k8s"}, ""),
    ("Bash", {"command": "helm upgrade api ./chart"}, ""),
    ("Bash", {"command": "./deploy.sh"}, ""),
    ("Bash", {"command": "make deploy"}, ""),
    ("Bash", {"command": "fly deploy"}, ""),
    ("Bash", {"command": "vercel --prod"}, ""),
    ("Bash", {"command": "cd deploy && ./deploy.sh"}, ""),  # the folder's name is also its script's
    ("Bash", {"command": "mkdir -p deploy && kubectl apply -f deploy/k8s"}, ""),
    ("Bash", {"command": "bash scripts/deploy.sh production"}, ""),
    ("Bash", {"command": "gh workflow run deploy.yml -f environment=production"}, ""),
    ("Bash", {"command": "kubectl rollout undo deployment/shop-api -n prod"}, ""),
    ("Bash", {"command": "mkdir -p deploy/k8s"}, "Deploy the API to the new cluster"),  # the task says so
]
HEROKU = ("Bash", {"command": "git push heroku main"}, "")


def _ids(calls: list[tuple[str, dict[str, Any], str]]) -> list[str]:
    return [f"{tool} {' '.join(map(str, data.values()))} {context}".strip() for tool, data, context in calls]


@pytest.mark.parametrize(("tool", "tool_input", "context"), NAMED, ids=_ids(NAMED))
def test_a_file_or_folder_named_for_a_deploy_is_no_deployment(
    tool: str, tool_input: dict[str, Any], context: str
) -> None:
    assert extract_intent(tool, tool_input, context).family != "deployment_ops"


@pytest.mark.parametrize(("tool", "tool_input", "context"), DEPLOYS, ids=_ids(DEPLOYS))
def test_a_deploy_stays_a_deployment(tool: str, tool_input: dict[str, Any], context: str) -> None:
    assert extract_intent(tool, tool_input, context).family == "deployment_ops"


def test_classify_family_reads_a_commands_file_names_itself() -> None:
    assert classify_family("Bash", "mkdir -p deploy/k8s") == "general"
    assert classify_family("Bash", "cat deploy/values.yaml") == "file_navigation"
    assert classify_family("Bash", "kubectl apply -f deploy/k8s") == "deployment_ops"
    assert classify_family("Bash", "mkdir -p deploy/k8s", names=()) == "deployment_ops"  # as it was
    assert classify_family("Edit", "deploy k8s api yaml") == "deployment_ops"  # no command: words count


def test_names_still_say_what_a_call_is_about_for_other_families() -> None:
    """Only deployment_ops, the family of changing a running environment, ignores them."""
    assert extract_intent("Bash", {"command": "touch tests/test_auth.py"}).family == "testing_validation"
    assert extract_intent("Bash", {"command": "mkdir -p src/components/cart"}).family == "code_editing"
    assert extract_intent("Bash", {"command": "mkdir -p migrations/versions"}).family == "data_schema"


def test_file_names_are_the_words_only_a_harmless_program_takes() -> None:
    assert {"deploy", "k8s"} <= file_names("mkdir -p deploy/k8s")
    assert "deploy" in file_names("cd /repo && cp config.yaml deploy/")
    assert "deploy" not in file_names("cd deploy && ./deploy.sh")  # its script runs
    assert "deploy" not in file_names("mkdir -p deploy && make deploy")  # its target is made
    assert not {"deploy", "k8s"} & file_names("kubectl apply -f deploy/k8s")
    assert file_names("") == frozenset()


# --- the pack's deployment rule (PostgreSQL's regular expressions) ---------------------------------------


@pytest.fixture(scope="module")
def pdb(server_url: str, model_settings: Settings, embedder: Embedder) -> Iterator[str]:
    """The pack and nothing else (a newcomer's view)."""
    with seeded_database(server_url, model_settings, embedder) as url:
        yield url


@pytest.fixture
def conn(pdb: str) -> Iterator[Conn]:
    with rolled_back(pdb) as connection:
        yield connection


def _deployment_pattern() -> str:
    (rule,) = [r for r in load_rules(PACK_RULES) if r.name == "deployment"]
    return rule.pattern


def test_the_deployment_rule_is_a_safe_pattern(conn: Conn) -> None:
    pattern = _deployment_pattern()
    assert pattern_problem(pattern) is None
    assert conn.execute("SELECT spark._trigger_pattern_problem(%s)", (pattern,)).fetchone() == (None,)
    stored = conn.execute(
        "SELECT pattern FROM spark.trigger_rules WHERE tenant = '_system' AND name = 'deployment'"
    ).fetchone()
    assert stored == (pattern,)  # what the pack loader wrote


def test_the_deployment_rule_matches_deploys_not_file_names(conn: Conn) -> None:
    pattern = _deployment_pattern()
    deploys = [*DEPLOYS, HEROKU]
    deploys += [
        ("Bash", {"command": "make deploy-prod"}, ""),
        ("Bash", {"command": "npm run deploy"}, ""),
        ("Bash", {"command": "cd /repo && ./scripts/release.sh v1.2"}, ""),
        ("Bash", {"command": "helm rollback api 3"}, ""),
        ("Bash", {"command": "gh release create v1.2.0"}, ""),
        ("Bash", {"command": "sudo -u app ./release.sh"}, ""),  # an option and its argument after sudo
        ("Bash", {"command": "sudo -E scripts/deploy.sh --dry-run"}, ""),
        ("Bash", {"command": "git push origin release/1.2"}, ""),  # a release branch
        ("Bash", {"command": "fly deploy --strategy rolling", "description": "Deploy to Fly.io"}, ""),
        ("Bash", {"command": "git status"}, "Error rate jumped after the 14:05 deploy."),
        ("Task", {"description": "Redeploy the worker", "prompt": "Redeploy the worker on staging"}, ""),
        ("mcp__vercel__deploy_to_vercel", {"project": "web"}, ""),
    ]
    named = [
        *NAMED,
        ("Bash", {"command": "cargo build --release"}, ""),  # an option, not a release
        (
            "Bash",
            {"command": "touch deploy/k8s/kustomization.yaml", "description": "Create the kustomization"},
            "",
        ),
        ("Bash", {"command": "git add deploy/k8s"}, ""),
        ("Bash", {"command": "sudo -u app cat deploy/k8s/x.yaml"}, ""),  # reads a file as another user
        ("Bash", {"command": "git push origin feature/release-notes"}, ""),  # not a release branch
        ("Bash", {"command": "kubectl get deployment/api -o yaml"}, ""),  # looks, changes nothing
        *WRITES,
    ]
    texts = {trigger_text(*call) for call in deploys + named}
    matched = dict(
        conn.execute("SELECT t, t ~* %s FROM unnest(%s::text[]) t", (pattern, list(texts))).fetchall()
    )
    assert [trigger_text(*c) for c in deploys if not matched[trigger_text(*c)]] == []
    assert [trigger_text(*c) for c in named if matched[trigger_text(*c)]] == []


def _rules(advice: list[Any]) -> set[str]:
    return {str(r) for a in advice if a.trigger for r in a.trigger.get("rules") or []}


def test_the_advisor_gives_no_deploy_checklist_by_rule_for_a_folder(conn: Conn, embedder: Embedder) -> None:
    advisor = Advisor(conn, embedder, "newcomer")
    for call in NAMED[:2] + NAMED[5:7]:
        assert "deployment" not in _rules(advisor.advise(*call)), call
    for call in [*DEPLOYS[:6], HEROKU]:
        assert "deployment" in _rules(advisor.advise(*call)), call
