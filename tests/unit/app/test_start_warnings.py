"""`lowbit serve` and `lowbit worker` say at start when the install could not build
the native k-quant kernel (no C compiler): labs would run ~20x slower, silently."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import app.runs.worker
import app.supervisor
from app import cli
from labs.quant import native


class NoServer:
    def __init__(self, *args: Any) -> None:
        pass

    def run(self) -> None:
        pass


def start(monkeypatch: pytest.MonkeyPatch, settings: Any, command: str) -> None:
    monkeypatch.setattr(cli, "_settings", lambda: settings)
    monkeypatch.setattr(app.supervisor, "ServerWithWorker", NoServer)
    monkeypatch.setattr(app.runs.worker, "main", lambda settings: 0)
    assert cli.main([command]) == 0


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_start_warns_with_the_cost_and_the_fix_when_the_kernel_is_missing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, settings: Any, command: str
) -> None:
    monkeypatch.setattr(native, "kernel_built", lambda: False)
    start(monkeypatch, settings, command)
    said = [m for m in warnings(caplog) if "_kquants.c" in m]
    assert len(said) == 1
    assert "20x slower" in said[0] and "C compiler" in said[0] and "make install" in said[0]


@pytest.mark.parametrize("command", ["serve", "worker"])
def test_start_says_nothing_when_the_kernel_is_built(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, settings: Any, command: str
) -> None:
    monkeypatch.setattr(native, "kernel_built", lambda: True)
    start(monkeypatch, settings, command)
    assert not [m for m in warnings(caplog) if "_kquants.c" in m]
