"""The base of every configuration section: frozen, unknown keys refused."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class ConfModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
