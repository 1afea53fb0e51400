"""The content loader and checker: valid trees load, every error type is reported
with its file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.content import DEPTHS, ContentError, load_catalogue
from tests.factories import DEPTH_TEXT, make_content, write_card


def problems(content: Path, lab_ids: set[str] | None = None) -> list[str]:
    with pytest.raises(ContentError) as e:
        load_catalogue(content, lab_ids)
    return [str(p) for p in e.value.problems]


def test_valid_tree_loads_and_renders_once(tmp_path: Path) -> None:
    cat = load_catalogue(make_content(tmp_path), lab_ids=set())
    assert set(cat.terms) == {"alpha", "beta", "gamma"}
    alpha = cat.terms["alpha"]
    assert len(alpha.depths_html) == len(DEPTHS)
    # math renders to MathML at load time
    assert "<math" in alpha.depths_html[2]
    assert cat.term_by_name("ALPHA alias").slug == "alpha"


def test_bad_yaml_names_file_and_line(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    p = content / "terms" / "alpha.md"
    lines = p.read_text().splitlines()
    lines[3] = "domain: [unclosed"
    p.write_text("\n".join(lines))
    out = problems(content)
    assert any(s.startswith("content/terms/alpha.md:") and "bad YAML" in s for s in out), out


def test_schema_error_points_at_the_key_line(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    path = write_card(content, "alpha", ["beta", "gamma"], definition="short")
    text = path.read_text().splitlines()
    line = next(i for i, s in enumerate(text, 1) if s.startswith("definition:"))
    out = problems(content)
    assert f"content/terms/alpha.md:{line}: definition:" in out[0], out


def test_missing_depth(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    body = "\n".join(
        f"## {d}\n\n{t.format(t='x')}\n" for d, t in DEPTH_TEXT.items() if d != "Deep dive"
    )
    write_card(content, "alpha", ["beta"], body=body)
    assert any("missing depth section '## Deep dive'" in s for s in problems(content))


def test_depths_out_of_order_or_unknown(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    items = list(DEPTH_TEXT.items())
    body = "\n".join(f"## {d}\n\n{t.format(t='x')}\n" for d, t in [items[1], items[0], *items[2:]])
    write_card(content, "alpha", ["beta"], body=body + "\n## Trivia\n\nmore text\n")
    out = problems(content)
    assert any("unknown section '## Trivia'" in s for s in out)


def test_related_term_must_exist(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    path = write_card(content, "alpha", ["beta", "nope"])
    line = next(i for i, s in enumerate(path.read_text().splitlines(), 1) if s.strip() == "- nope")
    assert f"content/terms/alpha.md:{line}: related term 'nope' does not exist" in problems(content)


def test_lab_must_exist(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    write_card(content, "alpha", ["beta"], labs=["no-such-lab"])
    assert any(
        "lab 'no-such-lab' does not exist" in s for s in problems(content, {"block-quantize"})
    )


def test_duplicate_alias(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    write_card(content, "alpha", ["beta"], aliases=["beta alias"])
    assert any("alias or title 'beta alias' is already used" in s for s in problems(content))


def test_broken_internal_link_names_its_line(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    body = "\n".join(f"## {d}\n\n{t.format(t='x')}\n" for d, t in DEPTH_TEXT.items())
    body = body.replace("for a newcomer", "for a [newcomer](/terms/missing-card)")
    path = write_card(content, "alpha", ["beta"], body=body)
    line = next(i for i, s in enumerate(path.read_text().splitlines(), 1) if "missing-card" in s)
    assert f"content/terms/alpha.md:{line}: broken internal link /terms/missing-card" in problems(
        content
    )


def test_bad_quiz_item(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    bad = [
        {
            "id": "q1",
            "type": "single",
            "prompt": "Which one is it?",
            "choices": ["a", "b"],
            "answer": 5,
            "explanation": "Because of reasons.",
        }
    ]
    write_card(content, "alpha", ["beta"], quiz=bad)
    assert any("quiz.0" in s and "single" in s for s in problems(content))


def test_numeric_item_needs_unit(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    bad = [
        {
            "id": "q1",
            "type": "numeric",
            "prompt": "How many bytes?",
            "answer": 3,
            "explanation": "Three bytes.",
        }
    ]
    write_card(content, "alpha", ["beta"], quiz=bad)
    assert any("unit" in s for s in problems(content))


def test_front_matter_missing(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    (content / "terms" / "delta.md").write_text("# no front matter\n")
    assert "content/terms/delta.md:1: file must start with '---' YAML front matter" in problems(
        content
    )


def test_all_problems_reported_together(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    write_card(content, "alpha", ["nope1"])
    write_card(content, "beta", ["nope2"])
    out = problems(content)
    assert any("nope1" in s for s in out) and any("nope2" in s for s in out)


def test_one_way_entry_must_be_related_and_really_one_way(tmp_path: Path) -> None:
    content = make_content(tmp_path)  # alpha, beta and gamma all link each other
    write_card(
        content,
        "alpha",
        ["beta", "gamma"],
        related_one_way={"beta": "beta links back, so this is stale", "delta": "not related"},
    )
    # the reason may sit on the linked card: alpha -> gamma, and gamma says why not back
    write_card(content, "gamma", ["beta"], related_one_way={"alpha": "alpha links here"})
    write_card(content, "beta", ["alpha", "gamma"])
    out = problems(content)
    assert any(
        s.startswith("content/terms/alpha.md:")
        and "related_one_way names 'beta', but the two cards link each other" in s
        for s in out
    ), out
    assert any("names 'delta', but neither card links the other" in s for s in out), out
    assert not any("gamma.md" in s for s in out), out
