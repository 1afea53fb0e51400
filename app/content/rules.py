"""Content rules: claims in prose and quiz keys that ``lowbit content check`` can verify.

Issue 15's audit found errors of a few recurring kinds that no fact covered.
Each rule below closes one kind where a regular pattern or a registry lookup
can; ``check(cat)`` returns ``Problem``s naming file and line, and
``app.content.load_catalogue`` adds them to the other problems.

- ``boolean_fact_keys``: a yes/no fact (``labs.catalog.facts.claims.BOOLEAN_FACTS``) keys a
  single-choice item only if choice 0 says "No" and choice 1 says "Yes".
- ``numeric_tolerance``: a non-integer numeric answer written with five or
  more significant digits (a computed value nobody types in full) must accept
  it rounded to three (0.0156 for 0.015625); a decibel answer must accept
  ±0.05 dB (a relative tolerance of a dB value near 0 accepts almost nothing).
- ``bf16_on_gpu_without_bf16``: a sentence that puts bf16 on a GPU (or its
  architecture) whose tensor cores lack it, per ``labs.catalog.gpus``, must say so
  (no, not, lacks, emulated, …).
- ``e4m3_nan_threshold``: a sentence about e4m3 turning NaN that names a
  threshold ("above N", "N and above") must name the one
  ``labs.catalog.facts.claims.fp8_overflow_threshold`` computes (464).
- ``arch_specific_targets``: an ``sm_XXa`` target is architecture-specific
  (exactly one capability); calling it a family target is wrong, and TMA
  (an sm_90 feature, multicast aside) is not one of its instructions.
- ``launch_resources``: "too many resources requested for launch" is a
  per-block limit; a sentence explaining it must say per block.
- ``mixed_unit_ratio``: "32 GiB, twice the 16.06 GB" — a ratio stated between a
  GiB and a GB figure must hold in bytes (within 3 %).
- ``more_than_any_gpu``: "more than any single GPU holds" is checked against
  the largest driver-reported memory in the registry (B200: 192.3 GB).
- ``element_outliers``: the granularity-compare lab scatters its outliers over
  random elements; text about that lab must not call them outlier channels.
- ``bf16_facts_on_gpu_without_bf16``: a fact or exercise that runs a lab with
  bf16 weights or KV cache on such a GPU.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from app.content.quiz import FreeText, Numeric, SingleChoice, _ChoiceItem
from labs.catalog.facts.claims import BOOLEAN_FACTS, fp8_overflow_threshold
from labs.catalog.gpus import GPUS

if TYPE_CHECKING:
    from app.content.catalogue import Catalogue, Lesson, Term
    from app.content.problems import Problem
    from app.content.quiz import QuizItem

SIGNIFICANT_DIGITS = 3
LONG_ANSWER_DIGITS = 5  # answers with this many significant digits are computed, not typed
MIN_DB_TOLERANCE = 0.05  # dB: below this no learner's rounding is accepted

CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f]")  # every control character but the newline
SENTENCE_END = re.compile(r"(?<=[.!?;])\s+|\n\s*\n|\n\s*[-*|]\s")
BF16 = re.compile(r"\b(bf16|bfloat16)\b", re.IGNORECASE)
# Words that say a GPU lacks bf16, uses something else in its place, or ask about it.
# Only these: "from", "since", "first" or a bare "fp16" say nothing of the kind
# ("fp16 and bf16 on a T4 run at the same rate" is a false claim).
NEGATION = re.compile(
    r"\b(no|not|never|none|lacks?|lacking|without|emulat\w*|instead|unsupported|only fp16|"
    r"fp16 only|refuses?|rejects?|fails?|stops?|cannot|can't|isn't|doesn't|don't|whether|"
    r"falls? back|fallbacks?|only supported)\b|n't\b|--dtype[= ]half|torch\.float16",
    re.IGNORECASE,
)
# "bf16 arrived with Ampere": the sentence places bf16 after the older GPU it names.
LATER_ARRIVAL = re.compile(
    r"\b(arrived|introduced|came|new)\b[^.;]{0,20}\b(with|in|on)\b", re.IGNORECASE
)
# The claim needs the GPU and bf16 in one clause ("Turing added INT8, Ampere bf16" names
# bf16 for Ampere only).
CLAUSE_END = re.compile(r"[,;:—()]|\bwhile\b|\bwhereas\b|\bbut\b")
E4M3 = re.compile(r"e4m3", re.IGNORECASE)
NAN = re.compile(r"\bNaN\b")
THRESHOLD = re.compile(
    r"(?:above|beyond|over|past|exceed\w*|at or above|>=?|≥)\s*±?(\d[\d,]*(?:\.\d+)?)"
    r"|(\d[\d,]*(?:\.\d+)?)\s*(?:and above|or above|or more|and up)",
    re.IGNORECASE,
)
ARCH_SPECIFIC = re.compile(r"\bsm_(\d+)a\b")
FAMILY = re.compile(r"family", re.IGNORECASE)
FAMILY_TARGET_NAMED = re.compile(r"\bsm_\d+\b(?!a)")
TMA = re.compile(r"\bTMA\b|Tensor Memory Accelerator")
UNIT_BYTES = {"GB": 10**9, "GiB": 2**30}
RATIO_CLAIM = re.compile(
    r"(\d[\d,]*(?:\.\d+)?)\s*(GiB|GB)\b[^.;]{0,60}?\b(twice|half|(\d+(?:\.\d+)?)\s*times)\b"
    r"[^.;\d]{0,30}(\d[\d,]*(?:\.\d+)?)\s*(GiB|GB)\b"
)
RATIO_WORDS = {"twice": 2.0, "half": 0.5}
RATIO_SLACK = 0.03
ANY_GPU = re.compile(r"more than any (?:single )?(?:GPU|card|accelerator)", re.IGNORECASE)
GB_FIGURE = re.compile(r"(\d[\d,]*(?:\.\d+)?)\s*GB\b")
LARGEST_GPU_BYTES = max(g.visible_memory_bytes for g in GPUS.values())
ELEMENT_OUTLIER_LAB = "granularity-compare"
OUTLIER_CHANNELS = re.compile(r"outlier channels?", re.IGNORECASE)
LAUNCH = re.compile(r"too many resources requested for launch", re.IGNORECASE)
PER_BLOCK = re.compile(r"per[- ]block|regsPerBlock|per thread block", re.IGNORECASE)


def _no_bf16_names() -> dict[str, str]:
    """Names prose uses for GPUs without bf16 tensor cores → registry id (V100, T4, Volta, Turing)."""
    names: dict[str, str] = {}
    for gpu in GPUS.values():
        if not gpu.supports("bf16"):
            names[gpu.id.upper()] = gpu.id
            names[gpu.architecture] = gpu.id
    return names


NO_BF16 = _no_bf16_names()
NO_BF16_RE = re.compile(r"\b(" + "|".join(map(re.escape, NO_BF16)) + r")\b")


def sentences(text: str) -> Iterator[str]:
    """Sentences (and list items, table rows) of Markdown or plain text."""
    for part in SENTENCE_END.split(text):
        if part and part.strip():
            yield part.strip()


def bf16_problems(sentence: str) -> list[str]:
    """bf16 named on a GPU without bf16 tensor cores, unless the sentence says it has none."""
    if NEGATION.search(sentence) or LATER_ARRIVAL.search(sentence):
        return []
    for clause in CLAUSE_END.split(sentence):
        gpu = NO_BF16_RE.search(clause) if BF16.search(clause) else None
        if gpu is not None:
            return [
                f"bf16 on {gpu.group(1)}: the registry says {NO_BF16[gpu.group(1)]} has no "
                "bf16 tensor cores; say so (no/lacks/emulated/fp16 instead) or name another GPU"
            ]
    return []


def e4m3_nan_problems(sentence: str) -> list[str]:
    """A NaN threshold for e4m3 other than the cast's (448 + half a step)."""
    if not (E4M3.search(sentence) and NAN.search(sentence)):
        return []
    want = fp8_overflow_threshold("fp8_e4m3")
    out = []
    for m in THRESHOLD.finditer(sentence):
        number = float((m.group(1) or m.group(2)).replace(",", ""))
        if number != want and 400 <= number <= 1000:
            out.append(
                f"e4m3 NaN threshold {number:g}: a round-to-nearest cast turns NaN above "
                f"{want:g} (448 + half a step), not at {number:g}"
            )
    return out


def arch_target_problems(sentence: str) -> list[str]:
    """sm_XXa called a family target, or TMA listed among sm_90a-only features."""
    out = []
    for m in ARCH_SPECIFIC.finditer(sentence):
        window = sentence[max(0, m.start() - 60) : m.start()]
        if FAMILY.search(window) and not re.search(r"architecture-specific|exact", window):
            out.append(
                f"sm_{m.group(1)}a is architecture-specific (runs on exactly one capability); "
                f"the family-specific target is sm_{m.group(1)}f"
            )
    if (
        ARCH_SPECIFIC.search(sentence)
        and TMA.search(sentence)
        and "multicast" not in sentence
        and not FAMILY_TARGET_NAMED.search(sentence)  # contrasts sm_90a with plain sm_90
    ):
        out.append(
            "TMA's tensor copies (cp.async.bulk.tensor) are sm_90 instructions; only their "
            "multicast form needs sm_90a: do not list TMA among sm_90a-only features"
        )
    return out


def unit_ratio_problems(sentence: str) -> list[str]:
    """'X GB is twice Y GiB': a ratio between figures in different units, checked in bytes."""
    out = []
    for m in RATIO_CLAIM.finditer(sentence):
        if m.group(2) == m.group(6):
            continue
        first = float(m.group(1).replace(",", "")) * UNIT_BYTES[m.group(2)]
        second = float(m.group(5).replace(",", "")) * UNIT_BYTES[m.group(6)]
        said = RATIO_WORDS.get(m.group(3), float(m.group(4) or 0))
        if said and abs(first / second / said - 1) > RATIO_SLACK:
            out.append(
                f"'{m.group(0)}': in bytes the ratio is {first / second:.2f}, not {said:g} "
                "— convert both figures to one unit"
            )
    return out


def largest_gpu_problems(sentence: str) -> list[str]:
    """'more than any GPU' about a size that the registry's largest GPU holds."""
    if not ANY_GPU.search(sentence):
        return []
    sizes = [float(m.group(1).replace(",", "")) * 1e9 for m in GB_FIGURE.finditer(sentence)]
    if not sizes or max(sizes) > LARGEST_GPU_BYTES:
        return []
    return [
        f"{max(sizes) / 1e9:g} GB is not more than any single GPU holds: the registry's "
        f"largest reports {LARGEST_GPU_BYTES / 1e9:.1f} GB (nvidia-smi total)"
    ]


def lab_wording_problems(sentence: str) -> list[str]:
    """What a lab does, said wrong: channel outliers in granularity-compare, per-SM limits
    for a launch failure."""
    out = []
    if ELEMENT_OUTLIER_LAB in sentence and OUTLIER_CHANNELS.search(sentence):
        out.append(element_outlier_message())
    if LAUNCH.search(sentence) and not PER_BLOCK.search(sentence):
        out.append(
            "'too many resources requested for launch' is checked against per-block limits "
            "(regsPerBlock, shared memory per block): say per block"
        )
    return out


SENTENCE_RULES = (
    bf16_problems,
    e4m3_nan_problems,
    arch_target_problems,
    unit_ratio_problems,
    largest_gpu_problems,
    lab_wording_problems,
)


def sentence_problems(sentence: str) -> list[str]:
    """Every rule this one sentence breaks, as messages (empty when it breaks none)."""
    return [message for rule in SENTENCE_RULES for message in rule(sentence)]


def element_outlier_message() -> str:
    return (
        f"{ELEMENT_OUTLIER_LAB}'s outliers are random elements multiplied by outlier_scale, "
        "not channels: say scattered or element outliers"
    )


def exercise_problems(owner: Term | Lesson) -> list[str]:
    """An exercise on the granularity-compare lab that promises outlier channels."""
    exercise = getattr(owner.front, "exercise", None)
    if exercise is None or exercise.lab != ELEMENT_OUTLIER_LAB:
        return []
    text = " ".join(filter(None, (exercise.symptom, exercise.predict, exercise.next_step)))
    # "real activations concentrate them in a few channels" is a contrast, not a claim
    claims = [s for s in sentences(text) if OUTLIER_CHANNELS.search(s) and "real" not in s]
    return [element_outlier_message()] if claims else []


def item_problems(item: QuizItem) -> list[str]:
    """Quiz-key rules for one item: yes/no facts and numeric tolerances."""
    out: list[str] = []
    if item.fact is not None and item.fact.fn in BOOLEAN_FACTS:
        if not isinstance(item, SingleChoice) or len(item.choices) < 2:
            out.append(f"{item.id}: a yes/no fact ({item.fact.fn}) keys a single-choice item")
        elif not (
            item.choices[0].lstrip().startswith("No") and item.choices[1].lstrip().startswith("Yes")
        ):
            out.append(
                f"{item.id}: with a yes/no fact, choice 0 must start with 'No' and choice 1 with "
                "'Yes', so that the answer index is the fact's value"
            )
    if isinstance(item, Numeric) and isinstance(item.answer, int | float):
        answer = float(item.answer)
        if (item.unit or "").strip() == "dB":
            allowed = (
                item.tolerance if item.tolerance_mode == "abs" else item.tolerance * abs(answer)
            )
            if allowed < MIN_DB_TOLERANCE - 1e-12:
                out.append(
                    f"{item.id}: a dB answer must accept ±{MIN_DB_TOLERANCE} dB; this one accepts "
                    f"±{allowed:.3g} dB (use tolerance_mode abs)"
                )
        elif answer != int(answer) and significant_digits(answer) >= LONG_ANSWER_DIGITS:
            rounded = float(f"{answer:.{SIGNIFICANT_DIGITS}g}")
            if not item.within(rounded):
                out.append(
                    f"{item.id}: tolerance {item.tolerance:g} ({item.tolerance_mode}) rejects "
                    f"{rounded:g}, the answer {answer:g} to {SIGNIFICANT_DIGITS} significant digits"
                )
    return out


def significant_digits(x: float) -> int:
    """Significant digits of ``x`` as written (145.41 → 5, 0.015625 → 5, 21.47 → 4)."""
    digits = f"{abs(x):.15g}".replace(".", "").lstrip("0")
    if "e" in digits:
        digits = digits.split("e", 1)[0]
    return len(digits.rstrip("0")) or 1


def bf16_lab_problems(params: dict[str, Any]) -> list[str]:
    """A lab run with bf16 weights or KV cache on a GPU whose tensor cores have no bf16."""
    gpu = params.get("gpu")
    if gpu not in GPUS or GPUS[gpu].supports("bf16"):
        return []
    return [
        f"{key} bf16 on {gpu}, which has no bf16 (registry): use fp16, the same bytes"
        for key in ("weight_format", "kv_dtype", "adapter_dtype")
        if params.get(key) == "bf16"
    ]


def _lab_params(owner: Any) -> Iterator[dict[str, Any]]:
    """Parameters of every lab run the owner states: facts, quiz facts, its exercise."""
    front = owner.front
    facts = [*front.facts, *(q.fact for q in front.quiz if q.fact)]
    for fact in facts:
        if fact.fn == "lab_result" and isinstance(fact.args.get("params"), dict):
            yield fact.args["params"]
    exercise = getattr(front, "exercise", None)
    if exercise is not None and exercise.params:
        yield exercise.params
    for kind, segment in getattr(owner, "segments", []):
        if kind == "lab" and segment.params:
            yield segment.params


def _texts(owner: Any) -> Iterator[str]:
    """Every piece of prose of a term or lesson: body, definition, exercise, quiz."""
    front = owner.front
    body = getattr(owner, "body_md", None)
    if body is None:
        body = "\n\n".join(owner.depths_md)
    yield body
    for name in ("definition",):
        if getattr(front, name, None):
            yield getattr(front, name)
    exercise = getattr(front, "exercise", None)
    if exercise is not None:
        for name in ("symptom", "predict", "next_step", "evidence"):
            if getattr(exercise, name, None):
                yield getattr(exercise, name)
    for item in front.quiz:
        yield item.prompt
        yield item.explanation
        if isinstance(item, _ChoiceItem):
            yield from item.choices
        if isinstance(item, FreeText) and item.model_answer:
            yield item.model_answer


def control_characters(source: str) -> Iterator[tuple[int, str]]:
    """(line, character) of every control character but the newline: a tab or a bell in
    Markdown is almost always a lost backslash (``\\times``, ``\\approx``)."""
    for m in CONTROL.finditer(source):
        yield source.count("\n", 0, m.start()) + 1, m.group(0)


def check(cat: Catalogue) -> list[Problem]:
    """Run every rule over every card and lesson of ``cat``."""
    from app.content.problems import Problem, line_of_text

    problems: list[Problem] = []
    owners: list[Term | Lesson] = [*cat.terms.values(), *cat.lessons.values()]
    for owner in owners:
        for line_no, char in control_characters(owner.source):
            problems.append(
                Problem(
                    owner.path,
                    line_no,
                    f"control character {char!r} in the text: a LaTeX command written in a "
                    "YAML double-quoted string or a Python string lost its backslash "
                    "(\\t of \\times became a tab)",
                )
            )
        for text in _texts(owner):
            for sentence in sentences(text):
                for message in sentence_problems(sentence):
                    line = line_of_text(owner.source, sentence[:40])
                    problems.append(Problem(owner.path, line, message))
        for message in exercise_problems(owner):
            problems.append(Problem(owner.path, line_of_text(owner.source, "exercise:"), message))
        for params in _lab_params(owner):
            for message in bf16_lab_problems(params):
                line = line_of_text(owner.source, f"gpu: {params['gpu']}")
                problems.append(Problem(owner.path, line, message))
        for item in owner.front.quiz:
            for message in item_problems(item):
                line = line_of_text(owner.source, f"id: {item.id}")
                problems.append(Problem(owner.path, line, message))
    return problems
