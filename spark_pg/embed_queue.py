"""The embedding queue's give-up rule, shared by the worker, its CLI and the health report."""

from __future__ import annotations

MAX_ATTEMPTS = 5
"""Failures after which the worker leaves a spark.embed_queue row to a person (--max-attempts default)."""
