"""Dependencies point one way: ``app`` → ``labs`` → ``labs.quant`` (DESIGN.md, and
the map in docs/architecture.md). Checked on the source with ``ast``, so an import
inside a function counts as much as one at the top, and nothing needs importing."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.settings import ROOT


def modules(package: str) -> list[Path]:
    """Every Python file of ``package`` (a dotted name under the repository root)."""
    return sorted((ROOT / package.replace(".", "/")).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute module name) of every import in ``path``; relative imports
    are resolved against the file's package, ``from x import y`` yields ``x.y``
    as well as ``x`` (``y`` may be a submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def offences(package: str, forbidden: tuple[str, ...], allowed: tuple[str, ...] = ()) -> list[str]:
    """``file:line imports name`` for each import under ``package`` of a module in
    (or under) ``forbidden`` that is not in (or under) ``allowed``."""

    def within(name: str, roots: tuple[str, ...]) -> bool:
        return any(name == r or name.startswith(r + ".") for r in roots)

    found = []
    for path in modules(package):
        for line, name in imported(path):
            if within(name, forbidden) and not within(name, allowed):
                found.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    return sorted(set(found))


def test_nothing_under_labs_imports_the_web_app() -> None:
    assert offences("labs", ("app",)) == []


def test_the_quantization_library_imports_nothing_else_from_labs() -> None:
    assert offences("labs.quant", ("labs",), allowed=("labs.quant",)) == []


def test_routers_never_import_each_other() -> None:
    # Shared logic lives in app.runs (or another service module), not in a router.
    for path in modules("app.routes"):
        me = module_name(path)
        others = [
            f"{path.relative_to(ROOT)}:{line} imports {name}"
            for line, name in imported(path)
            if name.startswith("app.routes.") and not name.startswith(me)
        ]
        assert others == [], others


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import app.db\n", ["app.db"]),
        (
            "def f():\n    from app.settings import Settings\n",
            ["app.settings", "app.settings.Settings"],
        ),
        ("from .. import quant\n", ["labs", "labs.quant"]),
        ("from . import sandbox\n", ["labs.runtime", "labs.runtime.sandbox"]),
    ],
)
def test_the_import_reader_sees_every_kind_of_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, expected: list[str]
) -> None:
    # A file at labs/runtime/x.py of a fake root: top-level, nested and relative imports.
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    path = tmp_path / "labs" / "runtime" / "x.py"
    path.parent.mkdir(parents=True)
    path.write_text(source, encoding="utf-8")
    assert [name for _, name in imported(path)] == expected


MAX_MODULE_LINES = 600  # DESIGN.md: ~400 is the aim, 600 at most


def test_no_module_is_longer_than_the_cap() -> None:
    """A module over the cap is split along a concept (gguf_k.py was 684 lines: the
    k-quant scale searches now live in kquant_search.py)."""
    long = {
        str(path.relative_to(ROOT)): n
        for package in ("app", "labs")
        for path in modules(package)
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_the_table_of_formats_loads_alone() -> None:
    """``labs.quant.spec`` is the torch-free table of formats: importing it loads no
    format class, no block operation, no native extension and no torch (it loaded 20
    modules of the library and the C extension)."""
    import subprocess
    import sys

    code = (
        "import sys, labs.quant.spec; "
        "print(' '.join(sorted(m for m in sys.modules if m.startswith(('labs', 'torch')))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["labs", "labs.quant", "labs.quant.constants", "labs.quant.spec"]


def test_tests_mirror_the_packages_and_gpu_tests_live_in_one_place() -> None:
    """tests/unit mirrors app/ and labs/ (labs.quant's tests under tests/unit/labs/quant),
    and every ``pytest.mark.gpu`` test is under tests/gpu, which ``make test-gpu`` runs."""
    tests = ROOT / "tests"
    assert sorted(
        p.name for p in (tests / "unit").iterdir() if p.is_dir() and p.name != "__pycache__"
    ) == [
        "app",
        "judge",
        "labs",
    ]
    marked = {
        str(p.relative_to(ROOT))
        for p in tests.rglob("test_*.py")
        if p != Path(__file__).resolve() and "mark.gpu" in p.read_text(encoding="utf-8")
    }
    assert marked and all(p.startswith("tests/gpu/") for p in marked), marked
    assert "pytest -m gpu" in (ROOT / "benchmarks" / "gpu.sh").read_text(encoding="utf-8")


def test_the_figures_library_imports_no_lab_and_nothing_of_the_web_app() -> None:
    """``labs.viz`` (theme, charts, tiles, card figures, inline charts) is library code
    the labs and the web app both use: it imports no lab module (a card figure took the
    KV block size from the kv-capacity lab) and nothing from ``app``."""
    from labs.registry import LAB_MODULES

    assert offences("labs.viz", ("app", "labs.presenters", "labs.registry", *LAB_MODULES)) == []
