"""GPTQ's stored element tables (labs/quant/element_tables.json) are what probing each
format gives today: a format whose elements change fails here until the file is
written again (``python -m labs.quant.gptq``)."""

import json

import pytest
import torch

from labs.quant import gptq

CONFIGURATIONS = gptq.stored_configurations()


def test_the_file_holds_every_stored_configuration_and_nothing_else():
    stored = json.loads(gptq.TABLES_FILE.read_text())
    assert sorted(stored) == sorted(gptq._table_name(k, o) for k, o in CONFIGURATIONS)
    assert len(CONFIGURATIONS) == 24  # 16 formats, and tensor/channel for int8/int4/fp8


@pytest.mark.parametrize(("key", "options"), CONFIGURATIONS, ids=lambda c: str(c))
def test_a_stored_table_is_the_probe_of_today(key, options):
    stored = gptq.element_table(key, options)
    assert torch.equal(stored, gptq.probe_elements(key, options))
    assert stored.dtype == torch.float32 and bool((stored[1:] > stored[:-1]).all())


def test_a_configuration_not_stored_is_probed(monkeypatch):
    gptq.element_table.cache_clear()
    monkeypatch.setattr(gptq, "_stored_tables", lambda: {})
    try:
        assert gptq.element_table("int4", (("granularity", 64),)).tolist() == list(range(-7, 8))
    finally:
        gptq.element_table.cache_clear()
