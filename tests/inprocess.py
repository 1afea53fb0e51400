"""The app in this process for tests that walk every route or send thousands of
requests (tests/unit/app): a learner holding one of everything, and the app's
routes with real values for their path parameters. The ``inproc`` fixture that
builds the app is in tests/unit/app/conftest.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.settings import Settings


@dataclass
class InProcess:
    """The app in this process on the real content (a migrated SQLite file, no
    worker): for tests that send thousands of requests or walk every route."""

    app: Any
    settings: Settings

    def learner(self) -> Any:
        """A new learner: its own cookies, and the CSRF header echoing its cookie."""
        from fastapi.testclient import TestClient

        c = TestClient(self.app, follow_redirects=False)
        c.get("/healthz").raise_for_status()
        c.headers["X-CSRF-Token"] = c.cookies["lowbit_csrf"]
        return c


@dataclass
class Seeded:
    """A learner holding one of everything a learner can own, for access checks."""

    client: Any
    username: str
    run_id: str  # cancelled: final, so its event streams end at once
    queued_run_id: str  # still queued (no worker runs in process)
    card_id: int
    entry_id: str
    marker: str  # text only this learner wrote (a notebook prediction)
    owner: str  # a quiz owner ("term:<slug>") and one of its items
    item_id: str
    submission_id: str = ""  # an exercise submission (cancelled: final, as run_id)

    def path_values(self, app: Any) -> dict[str, str]:
        """A real value for every path parameter of the app's routes."""
        cat = app.state.content.get()
        static = app.state.static
        css = static.url("css/app.css").removeprefix("/static/")
        return {
            "lab_id": "block-quantize",
            "run_id": self.run_id,
            "card_id": str(self.card_id),
            "entry_id": self.entry_id,
            "owner": self.owner,
            "item_id": self.item_id,
            "term_slug": self.owner.partition(":")[2],
            "lesson_slug": cat.sorted_lessons()[0].slug,
            "cid": next(iter(cat.collections)),
            "seq": "1",
            "token": "no-such-share-token",  # a share link (app.routes.shares): 404s
            "name": css,
            "file_name": f"{next(iter(cat.figures))}.svg",  # a card figure
            "exercise_id": next(iter(app.state.exercises), "q8_0-quantize"),
            "submission_id": self.submission_id or "no-such-submission",
        }


def seed_learner(inproc: InProcess, name: str = "") -> Seeded:
    import secrets as _secrets

    from sqlalchemy import select

    from app.db import NotebookEntry, ReviewCard, make_engine, make_sessionmaker

    c = inproc.learner()
    token = c.headers["X-CSRF-Token"]
    username = name or "learner" + _secrets.token_hex(4)
    pw = "a long password " + _secrets.token_hex(4)
    r = c.post(
        "/signup", data={"username": username, "password": pw, "password2": pw, "csrf_token": token}
    )
    assert r.status_code == 303, r.text
    marker = "marker" + _secrets.token_hex(6)
    r = c.post(
        "/labs/sandbox-probe/runs",
        data={"csrf_token": token, "mode": "ok", "target": marker, "_prediction": marker},
        headers={"X-CSRF-Token": ""},
    )
    assert r.status_code == 303, r.text
    run_id = r.headers["location"].rsplit("/", 1)[1]
    assert c.post(f"/api/runs/{run_id}/cancel").json()["status"] == "cancelled"
    queued = c.post("/api/labs/sandbox-probe/runs", json={"mode": "ok"}).json()["id"]
    cat = inproc.app.state.content.get()
    term = next(t for t in cat.sorted_terms() if t.front.quiz)
    item = term.front.quiz[0]
    owner = f"term:{term.slug}"
    r = c.post(f"/quiz/{owner}/{item.id}", data={"answer": "0", "csrf_token": token})
    assert r.status_code in (200, 422), r.text
    engine = make_engine(inproc.settings.db_url)
    try:
        with make_sessionmaker(engine)() as s:
            entry = s.scalar(select(NotebookEntry).where(NotebookEntry.prediction == marker))
            assert entry is not None
            card = s.scalar(select(ReviewCard).where(ReviewCard.learner_id == entry.learner_id))
            if card is None:  # an item graded by self-rating: rate it to make its card
                r = c.post(
                    f"/quiz/{owner}/{item.id}/rate", data={"rating": "3", "csrf_token": token}
                )
                assert r.status_code == 200, r.text
                card = s.scalar(select(ReviewCard).where(ReviewCard.learner_id == entry.learner_id))
            assert card is not None
            submission = ""
            exercises = inproc.app.state.exercises
            if exercises:
                code = f"# {marker}\n"
                r = c.post(
                    f"/api/exercises/{next(iter(exercises))}/submissions", json={"code": code}
                )
                assert r.status_code == 202, r.text
                submission = r.json()["id"]
                # Ended (as the first run): its event stream ends at once.
                assert c.post(f"/api/runs/{submission}/cancel").json()["status"] == "cancelled"
            return Seeded(
                c, username, run_id, queued, card.id, entry.id, marker, owner, item.id, submission
            )
    finally:
        engine.dispose()


def app_routes(app: Any) -> list[tuple[str, Any]]:
    """(path, route) for every HTTP route of the app (FastAPI's and Starlette's, such
    as the docs page), through included routers."""
    from starlette.routing import Route

    out: list[tuple[str, Any]] = []

    def walk(routes: list[Any], prefix: str) -> None:
        for r in routes:
            inner = getattr(r, "original_router", None)
            if inner is not None:
                ctx = getattr(r, "include_context", None)
                walk(inner.routes, prefix + str(getattr(ctx, "prefix", "") or ""))
            elif isinstance(r, Route):
                out.append((prefix + r.path, r))

    walk(app.routes, "")
    return out


def path_params(path: str, values: dict[str, str]) -> dict[str, str]:
    """Real values for the ``{params}`` of ``path``; fails naming a parameter no test
    knows, so a new route cannot slip past the route-walking checks."""
    import re

    out: dict[str, str] = {}
    for raw in re.findall(r"\{([^}]+)\}", path):
        name = raw.split(":")[0]
        key = (
            ("lesson_" if path.startswith("/lessons") else "term_") + name
            if name == "slug"
            else name
        )
        if key not in values:
            raise AssertionError(
                f"route {path}: no real value for path parameter {name!r}; "
                "add one to Seeded.path_values"
            )
        out[name] = values[key]
    return out


def fill_path(path: str, values: dict[str, str]) -> str:
    import re

    params = path_params(path, values)
    return re.sub(r"\{([^}:]+)(:[^}]*)?\}", lambda m: params[m.group(1)], path)
