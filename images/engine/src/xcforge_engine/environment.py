"""Reading the launcher's own switches (XCFORGE_DEBUG, XCFORGE_SKIP_COMPAT_CHECK) from the environment."""

from __future__ import annotations


def truthy(value: str | None) -> bool:
    """XCFORGE_DEBUG=1 / true / yes / on."""
    return (value or "").strip().lower() in ("1", "true", "yes", "on")
