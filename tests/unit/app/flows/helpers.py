"""Rows the learner-flow tests need without a worker: a finished run and its notebook entry."""

from __future__ import annotations

from typing import Any


def learner_id(client: Any) -> str:
    from app.middleware import session_serializer

    data = session_serializer(client.app.state.settings).loads(client.cookies["lowbit_session"])
    return str(data["l"])


def make_run(client: Any, **fields: Any) -> str:
    """A run of the client's learner (block-quantize, succeeded unless told otherwise)."""
    from app.db import Run
    from app.deps import ensure_learner

    learner = learner_id(client)
    row: dict[str, Any] = {
        "lab_id": "block-quantize",
        "status": "succeeded",
        "params": {"format": "int4", "shape": [256, 256], "values": None, "seed": 0},
        "result": {"bits_per_value": 4.25, "nbytes": 34816, "sqnr_db": 20.41},
        "environment": {"host": "w1", "device": "cpu"},
    }
    row.update(fields)
    with client.app.state.sessionmaker() as s:
        ensure_learner(s, learner)
        run = Run(learner_id=learner, **row)
        s.add(run)
        s.commit()
        return str(run.id)


def make_entry(client: Any, run_id: str, **fields: Any) -> str:
    from app.db import NotebookEntry

    row: dict[str, Any] = {"source": "lab:block-quantize", "lab_id": "block-quantize"}
    row.update(fields)
    with client.app.state.sessionmaker() as s:
        entry = NotebookEntry(learner_id=learner_id(client), run_id=run_id, **row)
        s.add(entry)
        s.commit()
        return str(entry.id)
