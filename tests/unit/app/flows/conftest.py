"""One app for the learner-flow tests: the real content, a migrated SQLite file, no
worker, and a per-client run limit high enough for a test that starts a run per link."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import migrated_settings


@pytest.fixture(scope="module")
def flows_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    from app.main import create_app

    settings = migrated_settings(tmp_path_factory.mktemp("flows") / "data").model_copy(
        update={"anonymous_runs_per_ip_per_minute": 100_000, "max_active_runs": 100_000}
    )
    app = create_app(settings)
    with TestClient(app):
        yield app


@pytest.fixture
def learner(flows_app: Any) -> Any:
    """A new anonymous learner: its own cookies, and the CSRF header echoing its cookie."""
    from fastapi.testclient import TestClient

    c = TestClient(flows_app, follow_redirects=False)
    c.get("/healthz").raise_for_status()
    c.headers["X-CSRF-Token"] = c.cookies["lowbit_csrf"]
    return c


@pytest.fixture
def member(learner: Any) -> Any:
    """A signed-in learner (GPU labs need an account)."""
    import secrets

    name, pw = "m" + secrets.token_hex(5), "a long password " + secrets.token_hex(4)
    token = learner.headers["X-CSRF-Token"]
    r = learner.post(
        "/signup", data={"username": name, "password": pw, "password2": pw, "csrf_token": token}
    )
    assert r.status_code == 303, r.text
    learner.headers["X-CSRF-Token"] = learner.cookies["lowbit_csrf"]
    return learner


def form_values(form: Any) -> dict[str, str]:
    """What a browser would submit for a parsed <form>: inputs, selected options, text."""
    out: dict[str, str] = {}
    for el in form.find_all(["input", "select", "textarea"]):
        name = el.get("name")
        if not name:
            continue
        if el.name == "select":
            chosen = el.find("option", selected=True) or el.find("option")
            out[name] = chosen.get("value", chosen.text) if chosen else ""
        elif el.name == "textarea":
            out[name] = el.text
        elif el.get("type") == "checkbox":
            if el.has_attr("checked"):
                out[name] = el.get("value", "on")
        else:
            out[name] = el.get("value", "")
    return out
