"""Defect 1 (issue 14): every lab link on a term card and every lab in a lesson opens
its lab exactly as the content writes it, and a run from that form has those params."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest
from bs4 import BeautifulSoup

from labs.registry import get_lab
from tests.unit.app.flows.conftest import form_values


def _expected(lab_id: str, params: dict[str, Any]) -> dict[str, Any]:
    lab = get_lab(lab_id)
    assert lab is not None
    return lab.validate(params).model_dump(mode="json")


def _from_form(lab_id: str, values: dict[str, str]) -> dict[str, Any]:
    from app.runs import forms

    lab = get_lab(lab_id)
    assert lab is not None
    return lab.validate(forms.parse_form(lab, values)).model_dump(mode="json")


def _run_params(learner: Any, lab_id: str, values: dict[str, str]) -> dict[str, Any]:
    r = learner.post(f"/labs/{lab_id}/runs", data=values)
    assert r.status_code == 303, r.text[:2000]
    run_id = r.headers["location"].rsplit("/", 1)[-1]
    params: dict[str, Any] = learner.get(f"/api/runs/{run_id}").json()["params"]
    return params


def _card_links(flows_app: Any) -> list[tuple[str, str, dict[str, Any]]]:
    cat = flows_app.state.content.get()
    out = []
    for slug, term in sorted(cat.terms.items()):
        ex = term.front.exercise
        if ex is not None and ex.lab:
            out.append((slug, ex.lab, dict(ex.params)))
    return out


def test_every_card_link_prefills_its_lab_and_runs_with_those_params(flows_app, member) -> None:
    learner = member
    links = _card_links(flows_app)
    assert sum(1 for _, _, p in links if p) >= 20  # the cards that carry parameters
    for slug, lab_id, params in links:
        page = BeautifulSoup(learner.get(f"/terms/{slug}").text, "html.parser")
        hrefs = [a["href"] for a in page.select("#try a[href^='/labs/']")]
        assert len(hrefs) == 1, (slug, hrefs)
        url = urlsplit(hrefs[0])
        assert url.path == f"/labs/{lab_id}"
        query = dict(parse_qsl(url.query))
        predict = query.pop("predict", None)
        assert (
            predict == flows_app.state.content.get().terms[slug].front.exercise.numeric_prediction
        )
        linked = {k: json.loads(v) for k, v in query.items()}
        assert linked == params, slug  # the link spells the card's params as JSON
        lab_page = learner.get(hrefs[0])
        assert lab_page.status_code == 200, slug
        doc = BeautifulSoup(lab_page.text, "html.parser")
        assert not doc.select(".link-notes, .field.invalid"), (slug, lab_page.text[:500])
        values = form_values(doc.select_one("#lab-form"))
        want = _expected(lab_id, params)
        assert _from_form(lab_id, values) == want, slug
        assert _run_params(learner, lab_id, values) == want, slug


def test_every_lesson_lab_is_prefilled_and_runs_with_its_params(flows_app, member) -> None:
    learner = member
    cat = flows_app.state.content.get()
    seen = 0
    for lesson in cat.sorted_lessons():
        doc = BeautifulSoup(learner.get(f"/lessons/{lesson.slug}").text, "html.parser")
        embeds = doc.select("section.lab-embed form")
        labs = [seg for kind, seg in lesson.segments if kind == "lab"]
        assert len(embeds) == len(labs), lesson.slug
        for form, seg in zip(embeds, labs, strict=True):
            values = form_values(form)
            want = _expected(seg.lab, dict(seg.params))
            assert _from_form(seg.lab, values) == want, (lesson.slug, seg.lab)
            values.pop("_source")  # the lesson's own JSON answer; the redirect is the lab's
            assert _run_params(learner, seg.lab, values) == want, (lesson.slug, seg.lab)
            seen += 1
        for a in doc.select("article a[href^='/labs/']"):
            assert learner.get(a["href"]).status_code == 200, a["href"]
    assert seen > 0


@pytest.mark.parametrize(
    "query",
    [
        "format=int4&shape=256,256&distribution=laplace&seed=3",  # plain spelling
        'format="int4"&shape=[256, 256]&distribution="laplace"&seed=3',  # JSON
    ],
)
def test_link_values_in_either_spelling(learner, query: str) -> None:
    doc = BeautifulSoup(learner.get(f"/labs/block-quantize?{query}").text, "html.parser")
    values = form_values(doc.select_one("#lab-form"))
    assert values["format"] == "int4" and values["shape"] == "256, 256"
    assert values["distribution"] == "laplace" and values["seed"] == "3"


def test_unknown_keys_and_bad_values_are_messages_not_errors(learner) -> None:
    r = learner.get('/labs/block-quantize?colour="red"&format="int5"&shape=[0, 5]&seed=x')
    assert r.status_code == 200
    doc = BeautifulSoup(r.text, "html.parser")
    assert "colour" in doc.select_one(".link-notes").text
    invalid = {el["name"] for el in doc.select("[aria-invalid=true]")}
    assert invalid == {"format", "shape", "seed"}
    r = learner.get("/labs/block-quantize?shape=%ff%fe[&values=" + "9" * 5000)
    assert r.status_code == 200


def test_block_quantize_cards_ask_for_the_granularity_the_link_runs(flows_app) -> None:
    """A card that asks about a per-tensor scale must link a format the lab runs per
    tensor (the lab's int4 is group-128 and its int8 per row)."""
    import re

    from labs.quant.spec import SPECS, FormatKey

    cat = flows_app.state.content.get()
    wrong = []
    for slug, term in sorted(cat.terms.items()):
        ex = term.front.exercise
        if ex is None or ex.lab != "block-quantize" or "format" not in ex.params:
            continue
        spec = SPECS[FormatKey(ex.params["format"])]
        per_tensor = spec.block_size is None and not spec.scale_bits and spec.tensor_scale_bits
        if re.search(r"per[- ]tensor", ex.predict) and not per_tensor:
            wrong.append(slug)
    assert wrong == []


# Issue 20 item 9: the cards on what a model lab measures link that lab, prefilled, with
# the output to predict one the lab accepts and grades.
MODEL_LAB_CARDS = {
    "perplexity": ("model-quality", "perplexity"),
    "kl-divergence": ("model-quality", "kl_divergence"),
    "top-1-agreement": ("model-quality", "top1_agreement"),
    "gptq": ("quant-algorithms", "best_method"),
    "awq": ("quant-algorithms", "best_method"),
    "kv-cache-quantization": ("kv-quant", "kl_divergence"),
    "imatrix": ("model-quality", "kl_divergence"),
    "mixed-precision": ("tensor-sensitivity", "most_sensitive_kind"),
    "quantization": ("block-quantize", "nbytes"),
}


def test_cards_link_their_model_lab_with_a_prediction_it_accepts(member) -> None:
    for slug, (lab_id, key) in MODEL_LAB_CARDS.items():
        page = BeautifulSoup(member.get(f"/terms/{slug}").text, "html.parser")
        (href,) = [a["href"] for a in page.select("#try a[href^='/labs/']")]
        url = urlsplit(href)
        assert url.path == f"/labs/{lab_id}" and dict(parse_qsl(url.query))["predict"] == key
        lab = get_lab(lab_id)
        assert lab is not None
        doc = BeautifulSoup(member.get(href).text, "html.parser")
        if key in dict(lab.numeric_outputs):  # the number to predict is preselected
            chosen = doc.select_one("#lab-form select[name=_metric] option[selected]")
            assert chosen is not None and chosen["value"] == key, slug
        else:  # a choice: the lab offers it
            (choice,) = [c for c in lab.choice_outputs if c.key == key]
            values = {o["value"] for o in doc.select("#lab-form select[name=_choice] option")}
            assert {f"{key}:{o}" for o in choice.options} <= values, slug
    predict = BeautifulSoup(member.get("/terms/quantization").text, "html.parser").select_one(
        "#try"
    )
    assert "SQNR you expect to lose" not in predict.get_text()
