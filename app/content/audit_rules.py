"""Content rules for the kinds of error issue 23's audit found (see ``app.content.rules``
for issue 15's). ``check(cat)`` returns ``Problem``s naming file and line; the loader
adds them to the others, so ``lowbit content check`` fails on them.

- ``lab_output_prompt``: a quick check whose prompt asks what a lab (or the registry)
  reports, gives or prints tests whether the learner ran it, not whether they can
  predict it. Precise on purpose: it fires only when the question's verb is one of
  report/give/print/show/return/measure and its subject is a lab, the registry or "it"
  in a prompt that names a lab, or when the question ends "according to the lab";
  "the lab gives 0.95 — how many flipped?" (a derivation) passes.
- ``support_status``: engine support that changed must name the change (vLLM's 2:4
  sparse kernels, vLLM's ``calculate_kv_scales``) — a sentence about them must say
  removed/deprecated/until or name a version; and "TGI does not load EXL2" is false.
- ``same_unit_ratio``: "5.70 GB instead of 16.06 GB ...: 3.23×" — a ratio stated
  between two figures in the same unit must be their ratio (within 3 %).
- ``flash_attention_traffic``: FlashAttention's HBM traffic is Θ(N²d²/M); only its
  extra memory is O(N). A sentence saying it moves O(N·d) bytes is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.content.rules import sentences

if TYPE_CHECKING:
    from app.content.catalogue import Catalogue, Lesson, Term
    from app.content.problems import Problem

# --- lab_output_prompt -------------------------------------------------------
OUTPUT_VERB = r"(?:report|give|print|show|return|measure)s?"
LAB_SUBJECT = r"(?:the\s+(?:[\w.-]+\s+)?lab(?:'s\s+[\w-]+)?|the\s+registry(?:'s)?|this\s+lab|it)"
ASKS_OUTPUT = re.compile(
    rf"\b(?:what|how\s+many|how\s+much|which)\b[^?]*?\b(?:does|do|did|will|would)\s+"
    rf"{LAB_SUBJECT}\b[^?]*?\b{OUTPUT_VERB}\b",
    re.IGNORECASE,
)
PER_THE_LAB = re.compile(r"\b(?:according\s+to|per)\s+the\s+(?:same\s+)?lab\b[^.?]*\?", re.I)
# Within one sentence: "." ends it only when a space follows (not in "3.1").
IN_SENTENCE = r"(?:(?![.?]\s)[^?])*"
LAB_VALUE_QUESTION = re.compile(
    rf"\blab's\b{IN_SENTENCE}:\s*(?:how\s+many|how\s+much|what)\b", re.IGNORECASE
)
# "The X lab gives the bytes a step reads at batch 1. How many GB?" — the lab's
# output is the object, not a given figure ("the lab gives Llama 26,992 tokens. What
# is that in GiB?" is a derivation): no number of two or more digits before the stop.
NO_FIGURE = r"(?:(?![.?]\s)(?!\d[\d,.]*\d)[^?])*"
LAB_GIVES_THE = re.compile(
    rf"\blab\s+(?:gives|reports|prints|shows|models)\s+{NO_FIGURE}[.:]\s+"
    r"(?:how\s+many|how\s+much|what\s+is)\b[^?]*\?",
    re.IGNORECASE,
)
NAMES_A_LAB = re.compile(r"\b(?:lab|registry)\b", re.IGNORECASE)


def lab_output_prompt(prompt: str) -> bool:
    """True when a quiz prompt asks for a lab's (or the registry's) printed output."""
    if not NAMES_A_LAB.search(prompt):
        return False
    return bool(
        ASKS_OUTPUT.search(prompt)
        or PER_THE_LAB.search(prompt)
        or LAB_VALUE_QUESTION.search(prompt)
        or LAB_GIVES_THE.search(prompt)
    )


LAB_OUTPUT_MESSAGE = (
    "quick check asks what a lab reports: ask the learner to predict it and explain why "
    "(give the inputs, key the answer with a fact), not to recall the lab's printed output"
)


# --- support_status -----------------------------------------------------------
@dataclass(frozen=True)
class SupportRule:
    """A sentence matching every pattern of ``about`` must also match ``must_say``
    (``None``: such a sentence is always wrong)."""

    about: tuple[re.Pattern[str], ...]
    must_say: re.Pattern[str] | None
    message: str


CHANGED = re.compile(
    r"\b(?:removed|deprecated|dropped|no longer|until|up to|before|last release|pin|"
    r"refuses?|raises?|stub)\b|\bv0\.\d+|\b0\.\d+\.(?:x|\d+)\b|\bvLLM\s+0\.\d+|≤",
    re.IGNORECASE,
)
SUPPORT_RULES = (
    SupportRule(
        about=(
            re.compile(r"\bvLLM\b"),
            re.compile(
                r"2:4|Sparse24|semi-structured|Sparse-Marlin|marlin_24|sparse CUTLASS", re.I
            ),
        ),
        must_say=CHANGED,
        message=(
            "vLLM removed its 2:4 sparse paths (Marlin 2:4 in v0.15, PR #32688; the "
            "compressed-tensors Sparse24 CUTLASS path in v0.19, PR #36799): say which "
            "versions, or that it was removed"
        ),
    ),
    SupportRule(
        about=(re.compile(r"calculate[_-]kv[_-]scales", re.I),),
        must_say=CHANGED,
        message=(
            "vLLM's calculate_kv_scales was deprecated (PR #37201) and removed (PR #49389); "
            "scales now come from the checkpoint or default to 1.0: say so"
        ),
    ),
    SupportRule(
        about=(
            re.compile(r"\bTGI\b|Text Generation Inference|text-generation-inference"),
            re.compile(r"\bEXL2\b", re.I),
            re.compile(r"\b(?:do(?:es)?\s+not|cannot|can't|don't|never)\b", re.I),
        ),
        must_say=None,
        message=(
            "Text Generation Inference lists EXL2 among its pre-quantized formats "
            "(--quantize exl2); do not say it cannot load EXL2"
        ),
    ),
)


def support_problems(sentence: str) -> list[str]:
    return [
        rule.message
        for rule in SUPPORT_RULES
        if all(p.search(sentence) for p in rule.about)
        and not (rule.must_say and rule.must_say.search(sentence))
    ]


# --- same_unit_ratio ------------------------------------------------------------
NUMBER = r"(\d[\d,]*(?:\.\d+)?)"
UNIT = r"(GB|GiB|TB|MB|ms|bytes|bits)"
SAME_UNIT_RATIO = re.compile(
    rf"{NUMBER}\s*{UNIT}\s+(?:instead\s+of|rather\s+than|against|versus|vs\.?)\s+"
    rf"{NUMBER}\s*{UNIT}\b[^.;]{{0,60}}?(?<![\d.,]){NUMBER}\s*×"
)
RATIO_SLACK = 0.03


def ratio_problems(sentence: str) -> list[str]:
    out: list[str] = []
    for m in SAME_UNIT_RATIO.finditer(sentence):
        first, unit_a, second, unit_b, said = m.groups()
        if unit_a != unit_b:
            continue  # GiB against GB is app.content.rules' mixed_unit_ratio
        a, b, r = (float(x.replace(",", "")) for x in (first, second, said))
        if min(a, b, r) <= 0:
            continue
        actual = max(a, b) / min(a, b)
        if abs(actual / r - 1) > RATIO_SLACK:
            out.append(
                f"'{m.group(0)}': {max(a, b):g} / {min(a, b):g} is {actual:.2f}×, not {r:g}× — "
                "if the ratio counts different bytes (read, not stored), say which"
            )
    return out


# --- flash_attention_traffic ------------------------------------------------------
FLASH = re.compile(r"FlashAttention|flash attention", re.IGNORECASE)
LINEAR_BIG_O = re.compile(
    r"O\(\s*(?:seq(?:uence)?(?:[ _]len(?:gth)?)?|N|T|n)\s*(?:×|\\times|·|\*|\s)\s*"
    r"(?:head[_ ]dim|d(?:_h)?)\s*\)",
    re.IGNORECASE,
)
TRAFFIC = re.compile(r"\b(?:bytes|traffic|moves?|reads?|HBM access\w*|IO)\b", re.IGNORECASE)


def flash_problems(sentence: str) -> list[str]:
    if FLASH.search(sentence) and LINEAR_BIG_O.search(sentence) and TRAFFIC.search(sentence):
        return [
            "FlashAttention's HBM traffic is Θ(N²·d²/M) for SRAM size M (Dao et al., 2022, "
            "Theorem 2); only its extra memory is O(N): do not call its traffic O(N·d)"
        ]
    return []


def sentence_problems(sentence: str) -> list[str]:
    """Every issue-23 prose rule this sentence breaks."""
    return [*support_problems(sentence), *ratio_problems(sentence), *flash_problems(sentence)]


def _owners(cat: Catalogue) -> Iterator[Term | Lesson]:
    yield from cat.terms.values()
    yield from cat.lessons.values()


def check(cat: Catalogue) -> list[Problem]:
    """Run the issue-23 rules over every card and lesson of ``cat``."""
    from app.content.problems import Problem, line_of_text
    from app.content.rules import _texts

    problems: list[Problem] = []
    for owner in _owners(cat):
        for text in _texts(owner):
            for sentence in sentences(text):
                for message in sentence_problems(sentence):
                    line = line_of_text(owner.source, sentence[:40])
                    problems.append(Problem(owner.path, line, message))
        for item in owner.front.quiz:
            if lab_output_prompt(item.prompt):
                line = line_of_text(owner.source, f"id: {item.id}")
                problems.append(Problem(owner.path, line, f"{item.id}: {LAB_OUTPUT_MESSAGE}"))
    return problems
