"""Base model for every hand-off type: frozen, no unknown fields, JSON round-trip."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Immutable pydantic model that rejects unknown fields (typos in cluster files fail loudly)."""

    model_config = ConfigDict(frozen=True, extra="forbid", protected_namespaces=())
