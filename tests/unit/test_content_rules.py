"""app.content.rules: each rule fails the claim it exists for and passes the fixed one.

The "old" sentences and items are the ones issue 15's audit found in the content;
each would now fail ``lowbit content check``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.content import ContentError, Fact, QuizItemBase, load_catalogue, parse_quiz_item
from app.content import rules as content_rules
from app.settings import ROOT
from labs.registry import lab_ids
from tests.factories import DEPTH_TEXT, make_content, write_card


def _item(**kw: Any) -> QuizItemBase:
    base: dict[str, Any] = {"id": "q", "prompt": "A question?", "explanation": "Because."}
    return parse_quiz_item({**base, **kw})


@pytest.mark.parametrize(
    "sentence",
    [
        # fleet-migration.md before the fix
        "A V100 pool would need TP 8 in bf16.",
        # qlora-on-one-card.md before the fix (a T4 run)
        "On the T4 the loss needs its own fp32 copy of the bf16 logits.",
        "Turing serves bf16 checkpoints at full speed.",
        # "from", "first", "half" and a bare "fp16" once counted as negations
        "From V100 onward bf16 and fp16 ran at the same rate.",
        "A T4 runs bf16 first, at half speed.",
        "fp16 and bf16 on a T4 run at the same rate.",
    ],
)
def test_bf16_on_a_gpu_without_bf16_fails(sentence: str) -> None:
    assert any("bf16 on" in m for m in content_rules.sentence_problems(sentence))


@pytest.mark.parametrize(
    "sentence",
    [
        "A V100 pool, which has no bf16, would need TP 8 in fp16 (the same bytes).",
        "Volta (7.0) and Turing (7.5, the T4) lack it, which is why vLLM rejects BF16 there.",
        "On an A100, bf16 and fp16 run at the same rate.",
        "bf16 arrived with Ampere; a T4 cannot use it.",
        "Turing added INT8/INT4, Ampere bf16 and TF32.",  # bf16 is Ampere's clause
        "Served with `--dtype half` on a T4, a BF16-trained model can overflow.",
    ],
)
def test_bf16_sentences_that_say_so_pass(sentence: str) -> None:
    assert content_rules.sentence_problems(sentence) == []


def test_e4m3_nan_threshold() -> None:
    old = "For E4M3, c10's scalar conversion returns NaN for anything at or above 480."
    assert any("464" in m for m in content_rules.sentence_problems(old))
    assert (
        content_rules.sentence_problems(
            "For E4M3, c10's scalar conversion returns NaN for anything above 464."
        )
        == []
    )
    # a sentence that names no threshold is not a threshold claim
    assert content_rules.sentence_problems("E4M3 keeps one NaN pattern, S.1111.111.") == []


def test_arch_specific_target_called_family() -> None:
    old = "NVIDIA's toolkits add family-specific targets (`sm_100a`, `sm_100f`) for any 10.x."
    assert any("architecture-specific" in m for m in content_rules.sentence_problems(old))
    new = (
        "Architecture-specific `sm_100a` runs only on exactly 10.0, and family-specific "
        "`sm_100f` on every 10.x of the family."
    )
    assert content_rules.sentence_problems(new) == []


def test_tma_is_not_an_sm_90a_only_feature() -> None:
    old = "Suffixed targets such as `sm_90a` unlock Hopper's `wgmma` and TMA."
    assert any("TMA" in m for m in content_rules.sentence_problems(old))
    new = "`sm_90a` unlocks `wgmma`; TMA works with sm_90, only its multicast form needs `sm_90a`."
    assert content_rules.sentence_problems(new) == []


def test_more_than_any_single_gpu_is_checked_against_the_registry() -> None:
    # gptq.md and cuda-oom.md before the fix
    old = "The weights of Llama 3.1 70B take 141.1 GB in bf16, more than any single GPU holds."
    assert any("192.3 GB" in m for m in content_rules.sentence_problems(old))
    new = "Llama 3.1 405B takes 811.7 GB in bf16, more than any single GPU holds."
    assert content_rules.sentence_problems(new) == []


def test_ratios_between_gib_and_gb_figures_must_hold_in_bytes() -> None:
    # kv-cache.md and memory-bandwidth.md before the fix
    old = "The cache read per step is 32 GiB, twice the 16.06 GB of weights."
    assert any("ratio is 2.14" in m for m in content_rules.sentence_problems(old))
    new = "The cache read per step is 32 GiB (34.36 GB), 2.1 times the 16.06 GB of weights."
    assert content_rules.sentence_problems(new) == []
    assert content_rules.sentence_problems("It reads 32 GiB, twice the 16 GiB of weights.") == []


def test_launch_resources_is_a_per_block_limit() -> None:
    old = (
        "`too many resources requested for launch` — block size × registers exceeds the SM's file."
    )
    assert content_rules.sentence_problems(old)
    new = "`too many resources requested for launch` — the per-block register limit is exceeded."
    assert content_rules.sentence_problems(new) == []


def test_granularity_compare_outliers_are_elements() -> None:
    old = "granularity-compare picks block 32 on a tensor with outlier channels."
    assert content_rules.sentence_problems(old)
    new = "granularity-compare picks block 32 on a tensor with scattered element outliers."
    assert content_rules.sentence_problems(new) == []


def test_boolean_fact_needs_no_yes_choice_order() -> None:
    fact = {"fn": "weights_fit_on_gpu", "args": {}, "value": 1}
    # large-language-model.md#fits-h200 before the fix keyed "No" at index 1
    old = _item(
        type="single", choices=["Yes, exactly", "No", "Yes, with room"], answer=1, fact=fact
    )
    assert content_rules.item_problems(old)
    new = _item(type="single", choices=["No", "Yes — 9 GiB spare"], answer=1, fact=fact)
    assert content_rules.item_problems(new) == []
    numeric = _item(type="numeric", answer=1, unit="", fact=fact)
    assert content_rules.item_problems(numeric)


def test_numeric_tolerance_accepts_three_significant_digits() -> None:
    # dynamic-range.md#e4m3-min-normal before the fix: tolerance 0, so 0.0156 was wrong
    old = _item(type="numeric", answer=0.015625, unit="")
    assert content_rules.item_problems(old)
    assert (
        content_rules.item_problems(_item(type="numeric", answer=0.015625, unit="", tolerance=0.01))
        == []
    )
    # four significant digits or an integer count: exact keys stay allowed
    assert (
        content_rules.item_problems(_item(type="numeric", answer=21.47, unit="GB", tolerance=0.001))
        == []
    )
    assert content_rules.item_problems(_item(type="numeric", answer=327680, unit="bytes")) == []


def test_db_answers_need_an_absolute_margin() -> None:
    # deriving-a-scale.md#one-outlier-tensor before the fix: ±5 % of 0.16 dB = ±0.008 dB
    old = _item(type="numeric", answer=0.16, unit="dB", tolerance=0.05)
    assert content_rules.item_problems(old)
    new = _item(type="numeric", answer=0.16, unit="dB", tolerance=0.1, tolerance_mode="abs")
    assert content_rules.item_problems(new) == []
    # a relative tolerance is fine where it amounts to 0.05 dB or more
    assert (
        content_rules.item_problems(_item(type="numeric", answer=6.02, unit="dB", tolerance=0.01))
        == []
    )


def test_lab_runs_with_bf16_on_a_gpu_without_bf16() -> None:
    assert content_rules.bf16_lab_problems({"gpu": "v100", "weight_format": "bf16"})
    assert content_rules.bf16_lab_problems({"gpu": "t4", "kv_dtype": "bf16"})
    assert content_rules.bf16_lab_problems({"gpu": "v100", "weight_format": "fp16"}) == []
    assert content_rules.bf16_lab_problems({"gpu": "a100-80gb", "weight_format": "bf16"}) == []


def test_significant_digits() -> None:
    assert [content_rules.significant_digits(x) for x in (145.41, 0.015625, 21.47, 0.5)] == [
        5,
        5,
        4,
        1,
    ]


def test_content_check_reports_a_rule_with_file_and_line(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    body = "\n".join(f"## {d}\n\n{t.format(t='alpha')}\n" for d, t in DEPTH_TEXT.items())
    write_card(
        content, "alpha", ["beta", "gamma"], body=body + "\nA V100 pool needs TP 8 in bf16.\n"
    )
    with pytest.raises(ContentError) as err:
        load_catalogue(content, set())
    problems = [p for p in err.value.problems if "bf16 on V100" in p.message]
    assert problems and problems[0].path.endswith("alpha.md"), err.value.problems
    source = (content / "terms" / "alpha.md").read_text().splitlines()
    assert "V100 pool" in source[problems[0].line - 1]


def test_the_real_content_passes_every_rule() -> None:
    cat = load_catalogue(ROOT / "content", lab_ids())
    assert content_rules.check(cat) == []


def test_fact_model_is_unchanged_for_boolean_facts() -> None:
    # a boolean fact is an ordinary Fact: its value is compared like any other
    assert Fact(fn="weights_fit_on_gpu", value=1).value == 1


def test_a_control_character_is_a_lost_backslash() -> None:
    """marlin.md's deep dive showed "N ⇥imes K" and "P/B ␇pprox 153": ``\\t`` and ``\\a``
    of ``\\times`` and ``\\approx`` had become a tab and a bell."""
    source = "A $N \times K$ GEMM,\nridge $P/B \approx 153$.\n"
    assert list(content_rules.control_characters(source)) == [(1, "\t"), (2, "\a")]
    assert list(content_rules.control_characters("$N \\times K$\n")) == []
