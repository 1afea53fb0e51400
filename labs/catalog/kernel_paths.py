"""Kernel paths: which kernel each checkpoint format (``formats.CHECKPOINT_FORMATS``)
takes, by compute capability, each row citing its source. Data only; the format-support
lab decides and presents.

A row holds for every GPU whose capability (major×10+minor) is at least its ``min_sm``;
rows are in descending ``min_sm`` and every format ends with a ``min_sm=0`` row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from labs.catalog.gpus import ADA, AMPERE, BLACKWELL, PASCAL, TURING, VOLTA

Path = Literal["native", "emulated", "upcast", "unsupported"]

PATH_MEANING: dict[str, str] = {
    "native": "the tensor cores read this type directly: memory, bandwidth and matmul "
    "throughput all improve",
    "emulated": "the weights stay compact in memory and a kernel widens them to 16 bits in "
    "registers before a 16-bit matmul: memory and decode bandwidth improve, matmul "
    "throughput does not",
    "upcast": "the weights are converted to a wider type when loaded: the file's memory "
    "saving is gone on this GPU",
    "unsupported": "no common engine runs this file on this GPU; it runs only after an "
    "offline conversion to a wider type",
}


@dataclass(frozen=True)
class Source:
    title: str
    url: str


PTX_MMA = Source(
    "PTX ISA: warp-level mma (bf16/tf32 need sm_80, e4m3/e5m2 need sm_89; block-scaled "
    "mxf4/mxf4nvf4 kinds need sm_100a/sm_120a)",
    "https://docs.nvidia.com/cuda/parallel-thread-execution/#warp-level-matrix-instructions-mma",
)
CUDA_GUIDE = Source(
    "CUDA C++ Programming Guide: compute capabilities and tensor-core (wmma) element types",
    "https://docs.nvidia.com/cuda/cuda-c-programming-guide/#compute-capabilities",
)
VLLM_HW = Source(
    "vLLM: supported hardware for quantization kernels (Volta 7.0, Turing 7.5, Ampere 8.0/8.6, "
    "Ada 8.9, Hopper 9.0)",
    "https://docs.vllm.ai/en/v0.11.2/features/quantization/",
)
VLLM_BF16 = Source(
    "vLLM: 'Bfloat16 is only supported on GPUs with compute capability of at least 8.0 … "
    "use float16 instead (--dtype=half)'",
    "https://github.com/vllm-project/vllm/blob/v0.6.6/vllm/worker/worker.py",
)
# The Marlin gates are pinned to the release the rules encode: vLLM v0.11.2 (November
# 2025) requires capability 8.0. Later releases (vllm-project/vllm PR #29901, December
# 2025) run FP8 and NVFP4 Marlin on Turing 7.5 too, with fp16 activations; MXFP4 Marlin
# still needs bf16 activations, so 8.0.
VLLM_RULES_VERSION = "v0.11.2"
VLLM_FP8_MARLIN = Source(
    f"vLLM {VLLM_RULES_VERSION} marlin_utils_fp8.py: is_fp8_marlin_supported() = capability "
    ">= 8.0 (weight-only FP8 on GPUs without FP8 tensor cores)",
    f"https://github.com/vllm-project/vllm/blob/{VLLM_RULES_VERSION}/vllm/model_executor/layers/quantization/utils/marlin_utils_fp8.py",
)
VLLM_FP4_MARLIN = Source(
    f"vLLM {VLLM_RULES_VERSION} marlin_utils_fp4.py: is_fp4_marlin_supported() = capability "
    ">= 8.0 (weight-only FP4 on GPUs without FP4 tensor cores)",
    f"https://github.com/vllm-project/vllm/blob/{VLLM_RULES_VERSION}/vllm/model_executor/layers/quantization/utils/marlin_utils_fp4.py",
)
VLLM_TURING_MARLIN = Source(
    "vLLM PR #29901 (after v0.11.2): Marlin kernels on Turing (sm75) for GPTQ, AWQ, FP8 and "
    "NVFP4 weights with fp16 activations; not MXFP4, which needs bf16 activations",
    "https://github.com/vllm-project/vllm/pull/29901",
)
MARLIN = Source(
    "Marlin: mixed-precision int4 × fp16 kernel for Ampere and newer (sm_80+)",
    "https://github.com/IST-DASLab/marlin",
)
LLAMA_MMQ = Source(
    "llama.cpp mmq.cuh: quantized matmul with int8 tensor-core mma on Turing+ and dp4a on "
    "Pascal 6.1+; activations quantized to q8_1",
    "https://github.com/ggml-org/llama.cpp/blob/master/ggml/src/ggml-cuda/mmq.cuh",
)
AMPERE_WP = Source(
    "NVIDIA A100 Tensor Core GPU Architecture whitepaper (BF16/TF32 tensor cores)",
    "https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/nvidia-ampere-architecture-whitepaper.pdf",
)
BLACKWELL_WP = Source(
    "NVIDIA Blackwell architecture: FP4/FP6 tensor cores with MX and NVFP4 block scaling",
    "https://resources.nvidia.com/en-us-blackwell-architecture",
)


@dataclass(frozen=True)
class Rule:
    """Holds for a GPU whose compute capability is at least ``min_sm`` (major×10+minor)."""

    min_sm: int
    path: Path
    kernel: str
    compute: str  # what the matmul runs in: a dense_tflops key, or "fp32" for CUDA cores
    sources: tuple[Source, ...]
    upcast_to: str | None = None  # formats.WEIGHT_FORMATS key of what is resident
    # formats.WEIGHT_FORMATS key of a compact repacking at load (same element type,
    # fewer side tensors): Marlin drops a symmetric GPTQ file's qzeros and g_idx.
    repacked_to: str | None = None
    note: str = ""


_OFFLINE = "dequantize offline to fp16"
_MARLIN_VERSION = (
    f"capability 8.0 is vLLM {VLLM_RULES_VERSION}'s Marlin gate; releases after it (PR #29901) "
    "also run this Marlin path on Turing 7.5 with fp16 activations"
)

# Rows in descending min_sm; the first row a GPU reaches applies. Every format ends
# with a min_sm=0 row, so every capability gets an answer.
RULES: dict[str, tuple[Rule, ...]] = {
    "bf16": (
        Rule(AMPERE.sm, "native", "cuBLAS bf16 GEMM on tensor cores", "bf16", (PTX_MMA, AMPERE_WP)),
        Rule(
            0,
            "upcast",
            "no bf16 tensor cores before sm_80: engines refuse bf16 and ask for --dtype half",
            "fp16",
            (VLLM_BF16, CUDA_GUIDE),
            upcast_to="fp16",
            note="fp16 keeps the 2 bytes but overflows above 65504, a range bf16 models use; "
            "fp32 is safe and doubles the bytes",
        ),
    ),
    "fp16": (
        Rule(VOLTA.sm, "native", "cuBLAS fp16 GEMM on tensor cores", "fp16", (CUDA_GUIDE,)),
        Rule(
            0,
            "emulated",
            "fp16 GEMM on CUDA cores (no tensor cores before sm_70)",
            "fp32",
            (CUDA_GUIDE,),
        ),
    ),
    "fp8": (
        Rule(
            ADA.sm,
            "native",
            "cuBLASLt / CUTLASS FP8 GEMM (E4M3 × E4M3, fp32 accumulate)",
            "fp8",
            (PTX_MMA, VLLM_HW),
        ),
        Rule(
            AMPERE.sm,
            "emulated",
            "FP8 Marlin: weight-only, E4M3 weights widened to bf16 in registers; "
            "activations stay bf16",
            "bf16",
            (VLLM_FP8_MARLIN, VLLM_HW),
            note="the activation scales of the file are unused; " + _MARLIN_VERSION,
        ),
        Rule(
            0,
            "unsupported",
            f"no FP8 kernel below sm_80 in vLLM {VLLM_RULES_VERSION} (FP8 W8A8 and FP8 Marlin "
            "need 8.0+)",
            "fp16",
            (VLLM_HW, VLLM_FP8_MARLIN, VLLM_TURING_MARLIN),
            upcast_to="fp16",
            note=_OFFLINE + " (2× the bytes); " + _MARLIN_VERSION,
        ),
    ),
    "int8": (
        Rule(
            AMPERE.sm,
            "emulated",
            "weight-only int8 GEMM (Marlin 8-bit, TensorRT-LLM weight-only): int8 widened to bf16",
            "bf16",
            (VLLM_HW, MARLIN),
        ),
        Rule(
            0,
            "emulated",
            "weight-only int8 GEMM (GPTQ 8-bit exllama, TensorRT-LLM): int8 widened to fp16",
            "fp16",
            (VLLM_HW,),
        ),
    ),
    "w8a8-int8": (
        Rule(
            TURING.sm,
            "native",
            "int8 × int8 GEMM on tensor cores (IMMA), int32 accumulate",
            "int8",
            (CUDA_GUIDE, VLLM_HW),
        ),
        Rule(
            0,
            "unsupported",
            "no int8 tensor cores on Volta; vLLM runs INT8 W8A8 on Turing and newer only",
            "fp16",
            (VLLM_HW, CUDA_GUIDE),
            upcast_to="fp16",
            note="serve the weights weight-only (int8 path) or " + _OFFLINE,
        ),
    ),
    "awq": (
        Rule(
            AMPERE.sm,
            "emulated",
            "AWQ Marlin: int4 widened to bf16/fp16 in registers, 16-bit MMA",
            "bf16",
            (MARLIN, VLLM_HW),
        ),
        Rule(
            TURING.sm,
            "emulated",
            "AWQ GEMM kernel (vLLM awq, min capability 7.5), fp16 only",
            "fp16",
            (VLLM_HW,),
        ),
        Rule(
            0,
            "unsupported",
            "AWQ kernels need sm_75; vLLM lists AWQ ❌ on Volta",
            "fp16",
            (VLLM_HW,),
            upcast_to="fp16",
            note="use a GPTQ checkpoint of the same model (GPTQ runs on Volta) or " + _OFFLINE,
        ),
    ),
    "gptq": (
        Rule(
            AMPERE.sm,
            "emulated",
            "GPTQ Marlin (Machete on sm_90): int4 widened to bf16 in registers; the "
            "repacked weights keep the fp16 scales and drop the file's qzeros and g_idx "
            "(with act-order, desc_act, g_idx stays, with a permutation)",
            "bf16",
            (MARLIN, VLLM_HW),
            repacked_to="int4",
        ),
        Rule(
            0,
            "emulated",
            "GPTQ exllama kernels (vLLM gptq, min capability 6.0), fp16 only",
            "fp16",
            (VLLM_HW,),
        ),
    ),
    "mxfp4": (
        Rule(
            BLACKWELL.sm,
            "native",
            "block-scaled FP4 MMA (kind::mxf4): E2M1 × E2M1 with E8M0 scales in hardware",
            "fp4",
            (PTX_MMA, BLACKWELL_WP),
        ),
        Rule(
            AMPERE.sm,
            "emulated",
            "weight-only MXFP4 (Marlin / Triton matmul_ogs, as gpt-oss runs on Hopper): "
            "E2M1 widened to bf16",
            "bf16",
            (VLLM_FP4_MARLIN,),
            note=f"capability 8.0 is vLLM {VLLM_RULES_VERSION}'s FP4 Marlin gate",
        ),
        Rule(
            0,
            "unsupported",
            "no MXFP4 kernel below sm_80 (MXFP4 Marlin needs bf16 activations)",
            "fp16",
            (VLLM_FP4_MARLIN, VLLM_TURING_MARLIN),
            upcast_to="fp16",
            note=_OFFLINE + f" (3.8× the bytes); capability 8.0 is vLLM {VLLM_RULES_VERSION}'s FP4 "
            "Marlin gate, and later releases keep MXFP4 Marlin at 8.0+ because it needs bf16 "
            "activations",
        ),
    ),
    "nvfp4": (
        Rule(
            BLACKWELL.sm,
            "native",
            "block-scaled FP4 MMA (kind::mxf4nvf4): E2M1 with E4M3 scales per 16 in hardware",
            "fp4",
            (PTX_MMA, BLACKWELL_WP),
        ),
        Rule(
            AMPERE.sm,
            "emulated",
            "FP4 Marlin: weight-only, E2M1 × E4M3-scale widened to bf16 in registers",
            "bf16",
            (VLLM_FP4_MARLIN,),
            note=_MARLIN_VERSION,
        ),
        Rule(
            0,
            "unsupported",
            f"no NVFP4 kernel below sm_80 in vLLM {VLLM_RULES_VERSION} (FP4 Marlin needs 8.0)",
            "fp16",
            (VLLM_FP4_MARLIN, VLLM_TURING_MARLIN),
            upcast_to="fp16",
            note=_OFFLINE + " (3.6× the bytes); " + _MARLIN_VERSION,
        ),
    ),
    "q4_0": (
        Rule(
            TURING.sm,
            "emulated",
            "llama.cpp MMQ: Q4_0 unpacked to int8, activations quantized to q8_1, "
            "int8 tensor-core mma",
            "int8",
            (LLAMA_MMQ, VLLM_HW),
        ),
        Rule(
            PASCAL.sm,
            "emulated",
            "llama.cpp MMQ with dp4a (4-way int8 dot products on CUDA cores)",
            "fp32",
            (LLAMA_MMQ,),
        ),
        Rule(0, "emulated", "llama.cpp: dequantize to fp16, then cuBLAS", "fp16", (LLAMA_MMQ,)),
    ),
}
