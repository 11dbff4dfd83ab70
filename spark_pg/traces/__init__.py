"""Traces and learnings: what the agent tried, how it went, and what it learned; and reflection over them.

* :mod:`.scrub`: secrets and personal data out of any text, before it is stored or embedded (pure).
* :mod:`.descriptor`: the deterministic trace descriptor ``Intent: ... | Files: ... | Outcome: ... |
  Key issue: ... | Tags: ...`` and a learning's semantic handle, normalised and scrubbed (pure).
* :mod:`.store`: :func:`add_trace` / :func:`add_learning`, memories of kind ``trace`` / ``learning`` keyed
  by their descriptor's hash (a repeat embeds nothing; it counts ``occurrences``).
* :mod:`.reflect`: ``spark.reflect`` rows as :class:`Reflection` (the advisor's ``reflect`` embeds first).
* :mod:`.cli`: ``spark-pg trace add``, ``spark-pg learning add``, ``spark-pg reflect``.

Every name is imported on first use (``from spark_pg.traces import add_trace`` works as usual), so the
command line's parser, which imports :mod:`.cli`, pays for none of them. ``reflect`` and ``scrub`` are both a
function and the submodule that defines it: the package's attribute is always the function, also after the
submodule was imported (reach a submodule with ``from spark_pg.traces.scrub import ...`` or
:func:`importlib.import_module`). docs/traces.md has the whole story.
"""

from __future__ import annotations

# every name is imported on first use: the command line builds its parser from .cli on every run, and the
# scrubber's patterns alone take ~20 ms to compile
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from spark_pg.traces.descriptor import (
        DESCRIPTOR_VERSION,
        OUTCOMES,
        Learning,
        Trace,
        make_learning,
        make_trace,
    )
    from spark_pg.traces.reflect import Reflection, reflect
    from spark_pg.traces.scrub import PLACEHOLDERS, Scrubbed, scrub, scrub_report
    from spark_pg.traces.store import Stored, add_learning, add_trace

_LAZY = {
    "DESCRIPTOR_VERSION": "descriptor",
    "OUTCOMES": "descriptor",
    "Learning": "descriptor",
    "Trace": "descriptor",
    "make_learning": "descriptor",
    "make_trace": "descriptor",
    "PLACEHOLDERS": "scrub",
    "Scrubbed": "scrub",
    "scrub": "scrub",
    "scrub_report": "scrub",
    "Reflection": "reflect",
    "reflect": "reflect",
    "Stored": "store",
    "add_learning": "store",
    "add_trace": "store",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'spark_pg.traces' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"spark_pg.traces.{module}"), name)
    # kept, so this runs once per name; for reflect and scrub it is also what `from spark_pg.traces import
    # scrub` reads next: importing the submodule above would otherwise have left the module there
    globals()[name] = value
    return value


def _keep_the_functions() -> None:
    """Make the import system's ``setattr(package, "scrub", <submodule>)``, done when a submodule is first
    imported (by ``from spark_pg.traces.scrub import ...`` anywhere), leave the package's name alone: it
    stays unset until :func:`__getattr__` resolves it to the function, or stays the function."""
    import sys
    from types import ModuleType

    shadowed = frozenset(name for name, module in _LAZY.items() if name == module)  # reflect, scrub

    class _Package(ModuleType):
        def __setattr__(self, name: str, value: object) -> None:
            if name in shadowed and isinstance(value, ModuleType):
                return
            super().__setattr__(name, value)

    sys.modules[__name__].__class__ = _Package


__all__ = [
    "DESCRIPTOR_VERSION",
    "OUTCOMES",
    "PLACEHOLDERS",
    "Learning",
    "Reflection",
    "Scrubbed",
    "Stored",
    "Trace",
    "add_learning",
    "add_trace",
    "make_learning",
    "make_trace",
    "reflect",
    "scrub",
    "scrub_report",
]

_keep_the_functions()
