"""Every number an exercise's README states that the code can compute, computed."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from labs.catalog.facts import kv_bytes_per_token, mla_kv_bytes_per_token
from labs.catalog.facts.hardware import bandwidth, peak_flops
from labs.catalog.facts.kernels import roofline_seconds
from labs.quant import quantize
from labs.quant.constants import NF4_TABLE

EXERCISES = Path(__file__).resolve().parents[3] / "content" / "exercises"


def readme(ex_id: str) -> str:
    return " ".join((EXERCISES / ex_id / "README.md").read_text().split())


def load_tests(ex_id: str):
    spec = importlib.util.spec_from_file_location(f"facts_{ex_id}", EXERCISES / ex_id / "tests.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_q8_0_readme():
    text = readme("q8_0-quantize")
    x = torch.tensor([63.5, 1.25] + [0.0] * 30)
    q = quantize(x, "q8_0")
    assert float(q.scales[0]) == 0.5 and int(q.codes[1]) == 3
    assert "has `d = 0.5` and `id = 2`; its value 1.25 becomes `roundf(2.5) = 3`" in text
    assert torch.tensor(0.02).half().item() == 0.0200042724609375 and "0.0200042724609375" in text


def test_int8_readmes():
    sym = readme("int8-symmetric-channel")
    q = quantize(torch.tensor([[127.0, 2.5, 3.5]]), "int8", granularity="channel")
    assert q.codes[0, 1:].tolist() == [2, 4] and "2.5 becomes 2, and 3.5 becomes 4" in sym
    assert round(10 / 127, 3) == 0.079 and "10/127 ≈ 0.079" in sym
    asym = readme("int8-asymmetric-channel")
    q = quantize(torch.tensor([[-127.5, 127.5]]), "int8", granularity="channel", zero_point=True)
    assert float(q.scales[0]) == 1.0 and int(q.fields["zero_point"][0]) == 128
    assert q.codes[0].tolist() == [0, 255]  # 256 clamped
    assert "the scale is 1 and the zero point `round(127.5) = 128`" in asym


def test_fp8_readme():
    text = readme("fp8-e4m3-cast")
    assert (
        torch.finfo(torch.float8_e4m3fn).max == 448 and torch.finfo(torch.float8_e5m2).max == 57344
    )
    assert torch.tensor([70000.0]).to(torch.float8_e5m2).float().isinf().all()
    assert "turns 70000 into `inf`" in text
    names = [c.name for c in load_tests("fp8-e4m3-cast").cases()]
    assert any("beyond 4.48" in n for n in names) and 0.01 * 448 == 4.48
    assert any("beyond 5.7344" in n for n in names) and abs(1e-4 * 57344 - 5.7344) < 1e-12


def test_mx_readme():
    text = readme("mx-e8m0-scale")
    below_8 = torch.nextafter(torch.tensor(8.0), torch.tensor(0.0))
    assert f"{float(below_8):.7f}" == "7.9999995" and float(torch.log2(below_8)) == 3.0

    def code(amax, rule):
        x = torch.cat([amax.reshape(1), torch.zeros(31)])
        return int(quantize(x, "mxfp4", scale_rounding=rule).fields["scale_e8m0"][0])

    assert code(torch.tensor(8.0), "floor") == 128 == code(torch.tensor(8.0), "rceil")
    assert code(below_8, "floor") == 127
    assert "floor gives `3 − 2 + 127 = 128`" in text and "floor gives 127" in text


def test_nvfp4_readme():
    cases = {c.name: c for c in load_tests("nvfp4-two-level-scale").cases()}
    x = cases["quiet blocks: E4M3 block scales that underflow"].args[0]
    block = quantize(x, "nvfp4").fields["scale_fp8"].view(torch.float8_e4m3fn).float()
    assert float(block.max()) == 448 and bool((block == 0).any())
    assert "(amax / 6) / (amax / 2688) = 448" in readme("nvfp4-two-level-scale") and 448 * 6 == 2688


def test_nf4_readme():
    table = torch.tensor(NF4_TABLE, dtype=torch.float32)
    mid = (table[7] + table[8]) / 2
    x = torch.cat([torch.tensor([1.0, float(mid)]), torch.zeros(62)])
    assert int(quantize(x, "nf4").codes[1]) == 7 and f"{float(mid):.5f}".startswith("0.0397")
    assert "gets code 7 (0.0), not 8" in readme("nf4-lookup")


def test_kv_readme():
    text = readme("kv-bytes-per-token")
    assert kv_bytes_per_token("llama-3.1-8b", "bf16") == 131_072 == 2 * 32 * 8 * 128 * 2
    assert mla_kv_bytes_per_token("deepseek-v3", "bf16") == 70_272 == 61 * (512 + 64) * 2
    assert "131,072 bytes per token" in text and "70,272 bytes per token" in text


def test_roofline_readme():
    text = readme("roofline-time")
    flops, weight = 2 * 4096 * 4096, 4096 * 4096 * 2
    assert round(flops / 1e6, 1) == 33.6 and round(weight / 1e6, 1) == 33.6
    assert round(roofline_seconds("h100", 0, weight, "bf16", "memory") * 1e6) == 10
    assert round(roofline_seconds("h100", flops, 0, "bf16", "compute") * 1e6, 2) == 0.03
    assert round(peak_flops("h100", "bf16") / bandwidth("h100")) == 295
    big = 2 * 4096**3
    assert roofline_seconds("h100", big, 3 * weight, "bf16", "compute") > roofline_seconds(
        "h100", big, 3 * weight, "bf16", "memory"
    )
    assert "about 295 FLOPs per byte" in text and "about 10 µs" in text


def test_gptq_readme_ratio():
    from labs.judge.kit import Call, load_exercise, run_locally

    ex = load_exercise(EXERCISES / "gptq-column-update")
    first = next(c for c in ex.cases() if c.example)
    [result] = run_locally(ex.solution, [Call(ex.function, first.args)])
    verdict = first.check(first.reference(), result.value)
    assert verdict.detail["round_to_nearest_mse"] > 8 * verdict.detail["reference_mse"]
    assert "more than 8 times GPTQ's" in readme("gptq-column-update")
