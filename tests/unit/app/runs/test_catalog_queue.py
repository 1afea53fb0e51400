"""The lab catalogue (the registry, plus extra lab modules only tests name) and the
queue client that create_app builds without touching the disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.runs.catalog import lab_catalogue
from app.runs.queue import QUEUE_FILE, RunQueue
from app.settings import Settings
from labs.registry import all_labs
from labs.runtime.probe import PROBES
from tests.conftest import TEST_LAB_MODULES, csrf_headers

PROBE_IDS = {lab.id for lab in PROBES}


def test_production_offers_the_registry_and_no_probe(tmp_path: Path) -> None:
    labs = lab_catalogue(Settings(env="production", secret_key="s" * 32, data_dir=tmp_path))
    assert labs == all_labs() and not PROBE_IDS & set(labs)
    # env="test" alone no longer brings the probes in: only the setting does.
    assert not PROBE_IDS & set(lab_catalogue(Settings(env="test", data_dir=tmp_path)))


def test_extra_lab_modules_add_their_labs(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, extra_lab_modules=f" {TEST_LAB_MODULES} ,")
    labs = lab_catalogue(settings)
    assert set(labs) == set(all_labs()) | PROBE_IDS
    assert all(labs[lab.id] is lab for lab in PROBES)


def test_an_extra_module_may_not_shadow_a_registered_lab(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="block-quantize"):
        lab_catalogue(Settings(data_dir=tmp_path, extra_lab_modules="labs.block_quantize"))


def test_the_app_serves_the_catalogue_it_is_handed(migrated: Settings) -> None:
    from fastapi.testclient import TestClient

    from app.main import create_app

    only = {PROBES[0].id: PROBES[0]}
    with TestClient(create_app(migrated, labs=only)) as c:
        assert [lab["id"] for lab in c.get("/api/labs").json()] == [PROBES[0].id]
        assert c.get("/labs/block-quantize").status_code == 404
        h = csrf_headers(c)
        refused = c.post("/api/labs/block-quantize/runs", json={}, headers=h)
        assert refused.status_code == 404 and "GET /api/labs" in refused.json()["detail"]


def test_the_queue_client_opens_its_storage_on_first_use(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data")
    queue = RunQueue(settings)
    assert not (tmp_path / "data" / QUEUE_FILE).exists()
    queue.enqueue("run-1", "cpu")
    assert (tmp_path / "data" / QUEUE_FILE).exists()
    assert queue.pending_ids("cpu") == {"run-1"} and queue.pending_count("gpu") == 0
    assert queue.dequeue(["gpu", "cpu"]) == ("cpu", "run-1")


def test_an_unsupported_queue_url_is_refused_at_once(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unsupported queue_url"):
        RunQueue(Settings(data_dir=tmp_path, queue_url="amqp://broker"))
