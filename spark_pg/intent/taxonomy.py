"""The action-domain taxonomy: the domains a memory can belong to and, per intent family, the domains whose
memories may advise it. ``"general"`` is allowed for every family, code work never sees ``social``,
``user_context`` or ``training_log`` memories, and no family asks for training logs at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

ACTION_DOMAINS: tuple[str, ...] = (
    "code",
    "system",
    "data",
    "security",
    "research",
    "social",
    "user_context",
    "training_log",
    "general",
)

# Which memories may advise an intent family. "general" is always allowed; code work never sees "social",
# "user_context" or "training_log" memories, and no family asks for training logs at all.
INTENT_FAMILIES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "auth_security": ("security", "code", "system", "general"),
        "deployment_ops": ("system", "code", "data", "security", "general"),
        "testing_validation": ("code", "data", "general"),
        "debugging_errors": ("code", "system", "data", "general"),
        "code_editing": ("code", "data", "security", "general"),
        "data_schema": ("data", "code", "system", "security", "general"),
        "version_control": ("code", "system", "security", "general"),
        "build_dependencies": ("code", "system", "security", "general"),
        "research_decision_support": ("research", "code", "data", "system", "security", "general"),
        "social_content": ("social", "user_context", "research", "general"),
        "file_navigation": ("code", "system", "data", "security", "general"),
        "general": ("code", "system", "data", "security", "research", "general"),
    }
)
