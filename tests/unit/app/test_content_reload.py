"""In development, edits to content/ show on the next request without a restart;
a broken edit keeps the last good catalogue serving."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient

from app.main import create_app
from app.migrate import upgrade
from app.settings import Settings
from tests.factories import make_content, write_card


def test_edit_shows_on_reload(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    s = Settings(env="development", data_dir=tmp_path / "data", content_dir=content)
    s.data_dir.mkdir()
    upgrade(s.db_url)
    with TestClient(create_app(s)) as c:
        assert "Alpha" in c.get("/terms/alpha").text
        time.sleep(1.1)
        write_card(content, "alpha", ["beta", "gamma"], title="Alpha Renamed")
        time.sleep(0.6)
        assert "Alpha Renamed" in c.get("/terms/alpha").text
        # search follows the edit too
        assert "/terms/alpha" in c.get("/search", params={"q": "renamed"}).text
        time.sleep(1.1)
        (content / "terms" / "alpha.md").write_text("broken")
        time.sleep(0.6)
        r = c.get("/terms/alpha")
        assert r.status_code == 200 and "Alpha Renamed" in r.text


def test_server_refuses_invalid_content(tmp_path: Path) -> None:
    import pytest

    from app.content import ContentError

    content = make_content(tmp_path)
    write_card(content, "alpha", ["nope"])
    s = Settings(env="test", data_dir=tmp_path / "data", content_dir=content)
    with pytest.raises(ContentError) as e:
        create_app(s)
    assert "content/terms/alpha.md" in str(e.value)
