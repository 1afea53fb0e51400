"""What the loader reports: one finding per problem, one row per shard file."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Severity = Literal["error", "warning"]


class Finding(BaseModel):
    severity: Severity
    code: str = Field(
        description="missing-shard, shape-mismatch, dtype-mismatch, quant-config-mismatch, …"
    )
    file: str | None
    tensor: str | None
    expected: str
    found: str
    detail: str
    next_step: str


class ShardFile(BaseModel):
    name: str
    present: bool
    bytes_on_disk: int
    tensors_in_index: int
    tensors_in_file: int
