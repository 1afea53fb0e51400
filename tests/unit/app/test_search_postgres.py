"""Full-text search on PostgreSQL (tsvector + GIN, ts_rank, ts_headline), the same
pages and the same hostile queries as on SQLite."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from fastapi.testclient import TestClient

from app.main import create_app
from app.migrate import upgrade
from app.settings import ROOT, Settings
from tests.unit.app.test_term_pages import check_search_ranking

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def pg_client(pg_url_module: str, tmp_path_factory):  # type: ignore[no-untyped-def]
    upgrade(pg_url_module)
    s = Settings(
        env="test",
        data_dir=tmp_path_factory.mktemp("pg"),
        database_url=pg_url_module,
        content_dir=ROOT / "content",
    )
    with TestClient(create_app(s)) as c:
        yield c


def test_search_ranks_and_highlights_on_postgres(pg_client) -> None:
    page = BeautifulSoup(pg_client.get("/search", params={"q": "microscaling"}).text, "html.parser")
    hrefs = [a["href"] for a in page.select("#results a.nav-item")]
    assert hrefs and hrefs[0] in ("/terms/microscaling", "/terms/mxfp4")
    assert page.select("#results .snippet mark")
    alias_page = BeautifulSoup(
        pg_client.get("/search", params={"q": "key-value cache"}).text, "html.parser"
    )
    assert "/terms/kv-cache" in [a["href"] for a in alias_page.select("#results a")]


@pytest.mark.parametrize(
    "q", ['"', "a & b | !c", "foo:*", "<->", "'; DROP TABLE search_docs; --", "x" * 1000, "the"]
)
def test_hostile_queries_never_500_on_postgres(pg_client, q: str) -> None:
    assert pg_client.get("/search", params={"q": q}).status_code == 200


def test_goto_on_postgres(pg_client) -> None:
    r = pg_client.get("/goto", params={"q": "nvfp"}, headers={"HX-Request": "true"})
    assert "/terms/nvfp4" in r.text


def test_search_ranks_titles_and_aliases_first_on_postgres(pg_client) -> None:
    check_search_ranking(pg_client)
