"""The torch-free facts the web process validates with match labs.quant and the model."""

from __future__ import annotations

import subprocess
import sys

from labs.catalog import formats
from labs.lm import models, spec
from labs.quant import FORMATS


def test_format_keys_and_block_sizes_match_labs_quant() -> None:
    assert set(formats.QUANT_FORMAT_KEYS) == set(FORMATS)
    assert {k: f.block_size for k, f in FORMATS.items()} == formats.QUANT_BLOCK_SIZES


def test_every_linear_width_of_the_shipped_model_is_a_multiple_of_256() -> None:
    s = spec.load_spec(models.SHIPPED)
    names = s.linear_names()
    assert len(names) == 7 * s.num_layers
    assert all(s.in_width(n) % 256 == 0 for n in names)
    assert 4096 <= s.vocab_size <= 8192 and s.num_kv_heads < s.num_attention_heads


def test_patterns() -> None:
    names = spec.load_spec(models.SHIPPED).linear_names()
    q, kept = spec.select(names, ["layers.0.*", "down_proj"])
    assert all(n.startswith("model.layers.0.") or n.endswith("down_proj") for n in kept)
    assert len(q) + len(kept) == len(names)


def test_the_web_process_imports_neither_torch_nor_transformers() -> None:
    code = (
        "import sys\n"
        "import labs.registry as r\n"
        "for lab in r.all_labs().values(): lab.params.model_validate({})\n"
        "print(','.join(m for m in ('torch', 'transformers', 'tokenizers') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""
