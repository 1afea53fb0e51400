"""Throughput of labs.quant's quantizers, as ratios against baselines run on the same input.

    python benchmarks/quant.py                 # CPU (2 threads), and CUDA when present
    python benchmarks/quant.py --device cuda   # only the CUDA table
    python benchmarks/quant.py --formats q4_0 nvfp4 --repeats 5

On a 4096 x 4096 float32 tensor (64 MiB) and for each format it reports quantize and
dequantize throughput in GB/s of float32 input (GB = 1e9 bytes), the ratio to a plain
``clone()`` of the same tensor in the same run (the memory-bandwidth yardstick: a clone
reads and writes every byte once), and the speed-up over the peer reference where it is
installed: gguf-py's numpy quantizer (q8_0, q4_0, q4_1), torchao's emulated MX and NVFP4
(CPU path), bitsandbytes' NF4. Targets on 2 CPU threads: quantize >= 0.2 of clone, and
>= 0.1 for the k-quants (q4_k, q6_k: their reference quantizers search ~20 candidate
scales per sub-block, bit-exact with llama.cpp, issue 14), >= 2x gguf-py, >= 1.5x
torchao and bitsandbytes. Each time is the best of ``--repeats``
runs after one warm-up. This is a plain script, not a test: speed is reported, never
asserted.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from labs.quant import FORMATS, quantize  # noqa: E402
from labs.quant import constants as C  # noqa: E402

GB = 1e9
CPU_THREADS = 2
SIDE = 4096
CLONE_TARGET = 0.2
# llama.cpp's k-quant reference quantizers search candidate scales, each candidate a
# full pass over the sub-block (q4_K: the initial scale + is = 0..20; q6_K: the initial
# scale + is = -9..9 without 0): issue 14 sets their target to 0.1 of clone.
SEARCH_PASSES = {
    "q4_k": 1 + C.Q4_K_SEARCH_STEPS + 1,
    "q6_k": 1 + 2 * C.Q6_K_SEARCH_STEPS,
}
K_QUANT_CLONE_TARGET = 0.1
PEER_TARGETS = {"gguf-py": 2.0, "torchao": 1.5, "bitsandbytes": 1.5}


def best_time(fn: Callable[[], Any], repeats: int, device: torch.device) -> float:
    """Best wall time of ``repeats`` calls after one warm-up, in seconds."""

    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    fn()
    sync()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        best = min(best, time.perf_counter() - start)
    return best


def peer_for(key: str, x: torch.Tensor) -> tuple[str, Callable[[], Any] | None, str]:
    """(peer name, a callable running the peer on x, or None, and why not)."""
    if key in ("q8_0", "q4_0", "q4_1"):
        try:
            import gguf
        except ImportError:
            return "gguf-py", None, "n/a (not installed)"
        qtype = {
            "q8_0": gguf.GGMLQuantizationType.Q8_0,
            "q4_0": gguf.GGMLQuantizationType.Q4_0,
            "q4_1": gguf.GGMLQuantizationType.Q4_1,
        }[key]
        x_np = x.cpu().numpy()
        return "gguf-py", lambda: gguf.quants.quantize(x_np, qtype), ""
    if key.startswith("mx") or key == "nvfp4":
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from torchao.prototype.mx_formats import constants, mx_tensor, nvfp4_tensor
        except ImportError:
            return "torchao", None, "n/a (not installed)"
        if key == "nvfp4":

            def run_nvfp4() -> Any:
                scale = nvfp4_tensor.per_tensor_amax_to_scale(x.abs().amax())
                return nvfp4_tensor.nvfp4_quantize(x, 16, scale)

            return "torchao", run_nvfp4, ""
        elem = {
            "mxfp8_e4m3": torch.float8_e4m3fn,
            "mxfp8_e5m2": torch.float8_e5m2,
            "mxfp6_e2m3": constants.DTYPE_FP6_E2M3,
            "mxfp6_e3m2": constants.DTYPE_FP6_E3M2,
            "mxfp4": torch.float4_e2m1fn_x2,
        }[key]
        return "torchao", lambda: mx_tensor.to_mx(x, elem, 32), ""
    if key == "nf4":
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                import bitsandbytes.functional as bnb
        except ImportError:
            return "bitsandbytes", None, "n/a (not installed)"
        if x.device.type != "cpu":
            return "bitsandbytes", None, "n/a (CPU only here)"
        return "bitsandbytes", lambda: bnb.quantize_4bit(x, blocksize=64, quant_type="nf4"), ""
    return "", None, "n/a (no peer)"


def verdict(ratio: float, target: float) -> str:
    return "PASS" if ratio >= target else "MISS"


def run_table(
    device: torch.device, keys: list[str], repeats: int, peer_repeats: int
) -> list[dict[str, Any]]:
    x = torch.randn(SIDE, SIDE, generator=torch.Generator().manual_seed(0)).to(device)
    input_gb = x.numel() * x.element_size() / GB
    clone_s = best_time(lambda: x.clone(), repeats, device)
    print(
        f"\n{device.type.upper()} ({torch.get_num_threads()} threads)"
        if device.type == "cpu"
        else f"\n{torch.cuda.get_device_name(device)}"
    )
    print(
        f"input {SIDE}x{SIDE} float32 = {input_gb:.3f} GB; clone {clone_s * 1e3:.1f} ms = {input_gb / clone_s:.2f} GB/s"
    )
    header = f"{'format':12s} {'quant GB/s':>10s} {'dequant GB/s':>12s} {'vs clone':>9s} {'':4s} {'peer':12s} {'vs peer':>20s}"
    print(header)
    print("-" * len(header))
    rows = []
    for key in keys:

        def run_quantize(key: str = key) -> Any:
            return quantize(x, key)

        quant_s = best_time(run_quantize, repeats, device)
        q = quantize(x, key)
        dequant_s = best_time(q.dequantize, repeats, device)
        clone_ratio = clone_s / quant_s
        clone_target = K_QUANT_CLONE_TARGET if key in SEARCH_PASSES else CLONE_TARGET
        peer, peer_fn, why = peer_for(key, x)
        if peer_fn is not None:
            peer_s = best_time(peer_fn, peer_repeats, device)
            peer_ratio = peer_s / quant_s
            peer_text = f"{peer_ratio:6.2f}x {verdict(peer_ratio, PEER_TARGETS[peer])} (>= {PEER_TARGETS[peer]})"
        else:
            peer_ratio = None
            peer_text = why
        print(
            f"{key:12s} {input_gb / quant_s:10.2f} {input_gb / dequant_s:12.2f} {clone_ratio:9.3f} "
            f"{verdict(clone_ratio, clone_target) if device.type == 'cpu' else '':4s} {peer:12s} {peer_text:>20s}"
            + (
                f"  (target {clone_target:.3f}: {SEARCH_PASSES[key]} search passes)"
                if key in SEARCH_PASSES
                else ""
            )
        )
        rows.append(
            {
                "format": key,
                "quant_s": quant_s,
                "dequant_s": dequant_s,
                "clone_ratio": clone_ratio,
                "peer": peer,
                "peer_ratio": peer_ratio,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--device",
        choices=["auto", "cpu", "cuda"],
        default="auto",
        help="auto: CPU, then CUDA when present",
    )
    parser.add_argument(
        "--formats", nargs="*", default=sorted(FORMATS), help="format keys (default: all)"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="timed runs per measurement (best is kept)"
    )
    parser.add_argument("--peer-repeats", type=int, default=1, help="timed runs of each peer")
    args = parser.parse_args(argv)
    torch.set_num_threads(CPU_THREADS)
    devices = []
    if args.device in ("auto", "cpu"):
        devices.append(torch.device("cpu"))
    if args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available()):
        devices.append(torch.device("cuda"))
    start = time.perf_counter()
    for device in devices:
        run_table(device, args.formats, args.repeats, args.peer_repeats)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
