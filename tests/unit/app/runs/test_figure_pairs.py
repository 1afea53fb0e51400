"""The compare page pairs the same figure of two runs by its ``id`` (events schema 2,
``labs.events``); runs stored before figures had ids still pair by title. The worker
stores the events' schema version with each run."""

from __future__ import annotations

from typing import Any

import pytest

from app.db import Learner, Run, RunEvent, make_engine, make_sessionmaker
from app.runs import claims, service, store
from app.runs.queue import RunQueue
from app.settings import Settings
from labs.base import EventContext
from labs.events import SCHEMA_VERSION, Figure
from labs.runtime.probe import PROBES

SVG = "<svg></svg>"


def _figure(title: str, figure_id: str = "", lead: bool = False) -> dict[str, Any]:
    data: dict[str, Any] = {"title": title, "svg": SVG, "data": {"lead": True} if lead else {}}
    if figure_id:
        data["id"] = figure_id
    return data


@pytest.fixture
def factory(migrated: Settings) -> Any:
    factory = make_sessionmaker(make_engine(migrated.db_url))
    with factory() as s:
        s.add(Learner(id="ada"))
        s.commit()
    yield factory
    factory.kw["bind"].dispose()


def _run(factory: Any, figures: list[dict[str, Any]]) -> str:
    with factory() as s:
        run = Run(learner_id="ada", lab_id="block-quantize", status="succeeded", params={})
        s.add(run)
        s.flush()
        s.add_all(
            RunEvent(run_id=run.id, seq=i, kind="plot", data=f)
            for i, f in enumerate(figures, start=1)
        )
        s.commit()
        return run.id


def _pair(factory: Any, a: str, b: str) -> list[str | None]:
    with factory() as s:
        ra, rb = s.get(Run, a), s.get(Run, b)
        pair = service.paired_figures(s, ra, rb)
    return [None if e is None else e["data"]["title"] for e in pair]


def test_figures_pair_by_id_whatever_their_titles(factory: Any) -> None:
    a = _run(factory, [_figure("Block 0 on the E2M1 grid", "grid", lead=True)])
    b = _run(factory, [_figure("Another title", "other"), _figure("Renamed", "grid")])
    assert _pair(factory, a, b) == ["Block 0 on the E2M1 grid", "Renamed"]


def test_alike_titles_with_different_ids_do_not_pair(factory: Any) -> None:
    # The title regex would pair these (it drops the parenthesis); their ids say otherwise.
    a = _run(factory, [_figure("Error (q4_k)", "errors", lead=True)])
    b = _run(factory, [_figure("Error (q6_k)", "values", lead=True)])
    assert _pair(factory, a, b) == ["Error (q4_k)", "Error (q6_k)"]  # each run's own lead
    c = _run(factory, [_figure("Values", "values"), _figure("Error (q6_k)", "errors")])
    assert _pair(factory, a, c) == ["Error (q4_k)", "Error (q6_k)"]  # by id: the second


def test_runs_stored_before_ids_pair_by_title(factory: Any) -> None:
    old_a = _run(factory, [_figure("Your tensor's values (q4_k)"), _figure("Error (q4_k)")])
    old_b = _run(factory, [_figure("Error (q6_k)")])
    assert _pair(factory, old_a, old_b) == ["Error (q4_k)", "Error (q6_k)"]
    # an old run against a new one: the old one has no id, so the title decides
    new = _run(factory, [_figure("Error (nvfp4)", "errors")])
    assert _pair(factory, old_a, new) == ["Error (q4_k)", "Error (nvfp4)"]
    assert _pair(factory, new, old_a) == ["Error (nvfp4)", "Error (q4_k)"]


def test_a_figure_event_carries_its_id_and_typed_parts() -> None:
    got: list[tuple[str, dict[str, Any]]] = []
    ctx = EventContext(lambda kind, data: got.append((kind, data)))
    ctx.plot("T", SVG, {"caption": "c", "lead": True, "table": {"columns": [], "rows": []}}, id="x")
    ctx.plot("U", SVG)  # no id: stored as before (a run of schema 1 looked like this)
    assert got == [
        (
            "plot",
            {
                "title": "T",
                "svg": SVG,
                "data": {"lead": True, "caption": "c", "table": {"columns": [], "rows": []}},
                "id": "x",
            },
        ),
        ("plot", {"title": "U", "svg": SVG, "data": {}}),
    ]
    figure = Figure.of("x", "T", SVG, {"caption": "c", "bins": [1]})
    assert (figure.caption, figure.extra, figure.lead) == ("c", {"bins": [1]}, False)


def test_the_worker_stores_the_events_schema_with_the_run(migrated: Settings) -> None:
    factory = make_sessionmaker(make_engine(migrated.db_url))
    with factory() as s:
        s.add(Learner(id="alice"))
        s.commit()
    with factory() as s:
        run = store.submit(s, migrated, RunQueue(migrated), "alice", PROBES[0], PROBES[0].params())
        assert run.events_version is None  # nothing stored yet
    claims.claim(factory, run.id, "w1")
    assert claims.append_events(factory, run.id, "w1", [("log", {"text": "a"})])
    with factory() as s:
        assert s.get(Run, run.id).events_version == SCHEMA_VERSION == 2
    factory.kw["bind"].dispose()
