"""Build small, valid content trees for tests; override any part to make it invalid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

DEPTH_TEXT = {
    "Orientation": "A {t} is explained here for a newcomer, with one concrete example of where it shows up in practice.",
    "Practical use": "When nvidia-smi reports 79 GiB used and the job dies with CUDA out of memory, {t} is the first thing to check.",
    "Technical understanding": "The mechanism of {t}: $s = \\max|x| / q_{{max}}$ and $q = \\mathrm{{round}}(x / s)$ for every element.",
    "Operations and debugging": "Watch torch.cuda.memory_allocated() and the error histogram; the usual failure of {t} is a wrong scale.",
    "Deep dive": "Derivation for {t}: the rounding error of a uniform quantizer with step $s$ has variance $s^2/12$.",
}

COLLECTIONS = [
    {"id": "numerics-and-formats", "title": "Numerics and formats", "description": "Formats."},
    {"id": "memory-and-capacity", "title": "Memory and capacity", "description": "Memory."},
]


def card_front(slug: str, related: list[str], **over: Any) -> dict[str, Any]:
    front: dict[str, Any] = {
        "title": slug.replace("-", " ").title(),
        "aliases": [f"{slug} alias"],
        "domain": "numerics",
        "collections": ["numerics-and-formats"],
        "definition": f"The one-line definition of {slug}, specific enough to quote.",
        "references": [
            {"title": "A primary source", "url": "https://example.org/a"},
            {"title": "Another primary source", "url": "https://example.org/b"},
        ],
        "related": related,
        "exercise": {
            "symptom": "The job stops with CUDA out of memory at batch 8.",
            "predict": "How many GiB the weights take before running.",
            "command": "nvidia-smi --query-gpu=memory.used,memory.total --format=csv",
            "next_step": "Lower the batch to 4 and measure again.",
        },
        "quiz": [
            {
                "id": "q1",
                "type": "single",
                "prompt": "Which is right here?",
                "choices": ["a", "b"],
                "answer": 1,
                "explanation": "Because b is right.",
                "depth": 1,
            },
            {
                "id": "q2",
                "type": "numeric",
                "prompt": "How many bits per value?",
                "answer": 4.5,
                "tolerance": 0.01,
                "unit": "bits",
                "explanation": "4 + 8/16 = 4.5 bits.",
                "depth": 3,
            },
        ],
    }
    front.update(over)
    return front


def write_card(
    content: Path, slug: str, related: list[str], body: str | None = None, **over: Any
) -> Path:
    (content / "terms").mkdir(parents=True, exist_ok=True)
    front = card_front(slug, related, **over)
    if body is None:
        body = "\n".join(f"## {d}\n\n{t.format(t=slug)}\n" for d, t in DEPTH_TEXT.items())
    path = content / "terms" / f"{slug}.md"
    path.write_text(
        "---\n" + yaml.safe_dump(front, sort_keys=False) + "---\n\n" + body, encoding="utf-8"
    )
    return path


def make_content(root: Path, slugs: tuple[str, ...] = ("alpha", "beta", "gamma")) -> Path:
    content = root / "content"
    (content / "lessons").mkdir(parents=True, exist_ok=True)
    (content / "collections.yaml").write_text(yaml.safe_dump(COLLECTIONS), encoding="utf-8")
    for s in slugs:
        write_card(content, s, [o for o in slugs if o != s])
    return content
