"""The pieces every content model shares: strict models and checked facts."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Strict(BaseModel):
    """Unknown keys are errors (a typo must not silently drop a field)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class Fact(Strict):
    """A number the text states that code can compute (see ``labs.catalog.facts``)."""

    fn: str
    args: dict[str, Any] = {}
    value: float
    scale: float = Field(
        1.0, description="multiplies fn's result before comparing (e.g. 1e-9 for bytes -> GB)"
    )
    rel: float = Field(1e-6, ge=0)
    abs: float = Field(0.0, ge=0)
