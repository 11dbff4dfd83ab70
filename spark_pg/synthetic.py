"""Synthetic but realistic agent-memory texts for benchmarks (never for quality claims)."""

from __future__ import annotations

import hashlib
import random
from datetime import datetime

ACTIONS = (
    "Run",
    "Check",
    "Avoid",
    "Prefer",
    "Always use",
    "Never skip",
    "Document",
    "Cache",
    "Validate",
    "Log",
    "Review",
    "Pin",
    "Retry",
    "Profile",
    "Rotate",
    "Back up",
    "Lint",
    "Index",
    "Mock",
    "Benchmark",
)
OBJECTS = (
    "the database migration",
    "unit tests",
    "the deploy script",
    "API tokens",
    "the retry loop",
    "config files",
    "the CI cache",
    "error messages",
    "the auth middleware",
    "feature flags",
    "the physics timestep",
    "SQL queries",
    "the docker image",
    "rate limits",
    "the search index",
    "the payment webhook",
    "log rotation",
    "the cron schedule",
    "TLS certificates",
    "the GraphQL schema",
    "React components",
    "the message queue",
    "S3 uploads",
    "the login form",
    "memory usage",
)
CONTEXTS = (
    "before pushing to main",
    "when the build is red",
    "in staging first",
    "for every release",
    "after editing models.py",
    "when latency spikes",
    "on the payments service",
    "during code review",
    "before a long refactor",
    "when the user asks for speed",
    "in the nightly job",
    "on large inputs",
    "after a dependency upgrade",
    "when tests are flaky",
    "in production only",
    "for new contributors",
)
REASONS = (
    "because it failed last week",
    "since it saves an hour",
    "to keep the history clean",
    "as the user prefers",
    "to avoid silent data loss",
    "so rollbacks stay cheap",
    "",
    "",
    "after the outage in March",
    "because reviewers asked for it",
)
CATEGORIES = ("security", "git", "testing", "deployment", "database", "debugging", "ci", "ui", "performance")
KINDS = ("insight", "preference", "decision", "rule", "episode", "failure", "learning")


def templates(n: int, seed: int = 7) -> list[tuple[str, str, str, str]]:
    """The (action, object, context, reason) of each of the n texts of :func:`texts` (reason may be "")."""
    rng = random.Random(seed)
    return [
        (rng.choice(ACTIONS), rng.choice(OBJECTS), rng.choice(CONTEXTS), rng.choice(REASONS))
        for _ in range(n)
    ]


def texts(n: int, seed: int = 7) -> list[str]:
    """n distinct texts of 8-20 words: a template of :func:`templates` and a note number."""
    return [" ".join(p for p in parts if p) + f" (note {i})" for i, parts in enumerate(templates(n, seed))]


def queries(n: int, seed: int = 11) -> list[str]:
    """n query texts in the style of an agent's next action."""
    rng = random.Random(seed)
    verbs = ("Edit", "Fix", "Debug", "Deploy", "Refactor", "Test", "Speed up", "Configure")
    return [f"{rng.choice(verbs)} {rng.choice(OBJECTS)} {rng.choice(CONTEXTS)}" for _ in range(n)]


# the benches' bulk load of synthetic memories (bench retrieve and scale, bench rls): rows of memory_row
COPY_MEMORIES = """COPY spark.memories (tenant, key, kind, category, text, descriptor, content_hash,
                                   importance, created_at) FROM STDIN"""


def memory_row(tenant: str, key: str, text: str, rng: random.Random, created: datetime) -> tuple[object, ...]:
    """A row of :data:`COPY_MEMORIES`: ``text`` as its own descriptor, a random kind, category and
    importance (two decimals) from ``rng``."""
    return (
        tenant,
        key,
        rng.choice(KINDS),
        rng.choice(CATEGORIES),
        text,
        text,
        hashlib.sha256(text.encode()).digest(),
        round(rng.random(), 2),
        created,
    )
