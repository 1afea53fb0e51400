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


def from_module(node: ast.ImportFrom, package: str) -> str:
    """The absolute module ``from … import`` names, a relative one resolved against
    ``package`` (the importing file's package)."""
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


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
            module = from_module(node, package)
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


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def runtime_imports(path: Path, known: set[str], *, type_only: bool = False) -> set[str]:
    """The modules of ``known`` that ``path`` imports when it runs, at the top or inside
    a function: an import under ``if TYPE_CHECKING:`` never runs (``type_only`` counts
    it too: the module still names the other's types); ``from pkg import
    name`` imports ``pkg.name`` where that is a module, else ``pkg``. A module's own
    package (or one above it) runs first anyway, so ``import pkg`` there is no edge; but
    ``from pkg import anything`` inside ``pkg`` goes through the package and is one
    (inside a package, siblings are taken by their full path: ``import pkg.sub as S``),
    so an ``__init__`` that imports the module back closes a cycle."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    me = module_name(path)
    skipped = {
        id(n)
        for block in ast.walk(tree)
        if not type_only and isinstance(block, ast.If) and _is_type_checking(block)
        for stmt in block.body
        for n in ast.walk(stmt)
    }
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found: set[str] = set()

    def add(name: str, *, uses_init: bool = False) -> None:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != me and (uses_init or not me.startswith(name + ".")):
            found.add(name)

    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            module = from_module(node, package)
            for alias in node.names:
                sub = f"{module}.{alias.name}"
                if sub in known:
                    add(sub)
                if sub not in known or me.startswith(module + "."):
                    add(module, uses_init=module in known)
    return found


def runtime_graph(package: str, *, type_only: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports when it runs (``runtime_imports``;
    with ``type_only``, also under TYPE_CHECKING). A compiled extension (a ``.c`` source
    pip builds beside it) is a module too."""
    paths = modules(package)
    root = ROOT / package.replace(".", "/")
    known = {module_name(p) for p in paths}
    known |= {module_name(c) for c in root.rglob("*.c")}
    return {module_name(p): runtime_imports(p, known, type_only=type_only) for p in paths}


# Issue 21 counted 8 cycles inside labs/ (5 lab⇄presenter pairs, claims⇄facts,
# lm.evaluate⇄lm.reference, the quant core⇄formats⇄tensor ring), then the labs.quant ring
# where modules took names (or siblings) through the package's own __init__, and
# catalog.facts⇄facts.kernels; none is left.
KNOWN_CYCLES: list[list[str]] = []


def test_no_import_cycle_inside_labs() -> None:
    assert [c for c in import_cycles(runtime_graph("labs")) if c not in KNOWN_CYCLES] == []


def test_no_import_cycle_inside_labs_even_through_type_only_imports() -> None:
    """The last two (labs.quant.core ⇄ tensor, labs.runtime.mounts ⇄ sandbox) were
    type-only: tensor now reads its format through a protocol and Layout has a module
    of its own; the sandbox's limits and records moved to labs.runtime.limits."""
    assert import_cycles(runtime_graph("labs", type_only=True)) == []


def test_the_cycle_counter_finds_a_lazy_cycle_and_skips_type_checking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a ⇄ b through an import inside a function; c imports a only under TYPE_CHECKING.
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    pkg = tmp_path / "labs"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "a.py").write_text("from labs.b import x\n", encoding="utf-8")
    (pkg / "b.py").write_text("def x():\n    from labs import a\n", encoding="utf-8")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from labs import c2\n",
        encoding="utf-8",
    )
    (pkg / "c2.py").write_text("import labs.c\n", encoding="utf-8")
    assert import_cycles(runtime_graph("labs")) == [["labs.a", "labs.b"]]


def test_the_cycle_counter_sees_a_module_using_its_own_packages_init(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # labs/p/__init__.py imports labs.p.core, which takes a name the __init__ defines:
    # a cycle. labs.p.ok takes a sibling and a compiled extension through the package
    # (edges to both and to the package); labs.p.direct takes them by full path.
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    pkg = tmp_path / "labs" / "p"
    pkg.mkdir(parents=True)
    (tmp_path / "labs" / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "__init__.py").write_text("from labs.p.core import f\nTABLE = {}\n", encoding="utf-8")
    (pkg / "core.py").write_text("def f():\n    from labs.p import TABLE\n", encoding="utf-8")
    (pkg / "ok.py").write_text("from labs.p import core, _ext\n", encoding="utf-8")
    (pkg / "direct.py").write_text(
        "import labs.p.core\nimport labs.p._ext as E\n", encoding="utf-8"
    )
    (pkg / "_ext.c").write_text("/* built by pip */\n", encoding="utf-8")
    graph = runtime_graph("labs")
    assert graph["labs.p.ok"] == {"labs.p", "labs.p.core", "labs.p._ext"}
    assert graph["labs.p.direct"] == {"labs.p.core", "labs.p._ext"}
    assert import_cycles(graph) == [["labs.p", "labs.p.core"]]


def lab_files(lab: str) -> list[Path]:
    """The files of a registered lab: its module, or every module of its package."""
    module = ROOT / (lab.replace(".", "/") + ".py")
    return [module] if module.exists() else modules(lab)


def lab_imports_of_labs(labs: tuple[str, ...]) -> list[str]:
    """``file:line imports name`` for each import by one lab of another of ``labs``."""

    def within(name: str, root: str) -> bool:
        return name == root or name.startswith(root + ".")

    return sorted(
        {
            f"{path.relative_to(ROOT)}:{line} imports {name}"
            for lab in labs
            for path in lab_files(lab)
            for line, name in imported(path)
            if any(within(name, other) for other in labs if other != lab)
        }
    )


def test_no_lab_imports_another_lab() -> None:
    from labs.registry import LAB_MODULES

    assert all(lab_files(lab) for lab in LAB_MODULES)
    assert lab_imports_of_labs(LAB_MODULES) == []


def test_the_lab_import_check_sees_a_module_lab_importing_a_package_lab(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    (tmp_path / "labs" / "big").mkdir(parents=True)
    (tmp_path / "labs" / "big" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "labs" / "small.py").write_text(
        "def run():\n    from labs.big.model import Params\n", encoding="utf-8"
    )
    assert lab_imports_of_labs(("labs.small", "labs.big")) == [
        "labs/small.py:2 imports labs.big.model",
        "labs/small.py:2 imports labs.big.model.Params",
    ]


def test_the_library_packages_import_no_lab() -> None:
    from labs.registry import LAB_MODULES

    labs_ = tuple(LAB_MODULES)
    libraries = (
        "labs.quant",
        "labs.lm",
        "labs.viz",
        "labs.catalog",
        "labs.runtime",
        "labs.hardware",
        "labs.judge",
    )
    for package in libraries:
        assert offences(package, labs_) == [], package


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


MAX_FUNCTION_LINES = 100  # DESIGN.md: 60 is the aim, 100 at most


def long_functions(source: str, limit: int) -> list[tuple[str, int]]:
    """(name, lines) of every function or method in ``source`` longer than ``limit``."""
    return [
        (node.name, n)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (n := (node.end_lineno or node.lineno) - node.lineno + 1) > limit
    ]


def test_no_function_is_longer_than_the_cap() -> None:
    long = {
        f"{path.relative_to(ROOT)}:{name}": n
        for package in ("app", "labs")
        for path in modules(package)
        for name, n in long_functions(path.read_text(encoding="utf-8"), MAX_FUNCTION_LINES)
    }
    assert long == {}


def test_the_function_length_check_counts_a_long_method() -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(101))
    source = f"class A:\n    async def long(self):\n{body}\n\ndef short():\n    return 1\n"
    assert long_functions(source, MAX_FUNCTION_LINES) == [("long", 102)]


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

    assert offences("labs.viz", ("app", "labs.registry", *LAB_MODULES)) == []


# What labs.catalog may import: itself, the quantization library, the Lab base types
# (the budget labs' shared params subclass LabParams) and the registry, through which the
# ``lab_result`` fact runs a lab by its id (resolved when called, never a lab module named
# in the source). Any other ``labs.<name>`` is a lab or a lab's helper.
CATALOG_MAY_IMPORT = ("labs.catalog", "labs.quant", "labs.base", "labs.registry")


def test_the_catalog_imports_no_lab() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {name}"
        for path in modules("labs.catalog")
        for line, name in imported(path)
        if name.startswith("labs.")
        and not any(name == a or name.startswith(a + ".") for a in CATALOG_MAY_IMPORT)
    ]
    assert found == []


def import_graph(package: str) -> dict[str, set[str]]:
    """Module → the modules of ``package`` it imports. ``from pkg import mod`` is an edge
    to ``pkg.mod`` alone: a package's ``__init__`` runs before any of its modules anyway,
    so that edge is no dependency on what the ``__init__`` defines."""
    paths = modules(package)
    names = {module_name(p) for p in paths}
    graph: dict[str, set[str]] = {}
    for path in paths:
        me = module_name(path)
        by_line: dict[int, set[str]] = {}
        for line, name in imported(path):
            by_line.setdefault(line, set()).add(name)
        edges = set()
        for targets in by_line.values():
            found = {n if n in names else n.rpartition(".")[0] for n in targets}
            found &= names
            # "from pkg import mod": the module, not the package, is what this line uses.
            edges |= {n for n in found if not any(t.startswith(n + ".") for t in found)}
        graph[me] = edges - {me}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle of ``graph``, each once, as the modules along it (Tarjan's strongly
    connected components of more than one module)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            component.append(v)
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_the_cycle_finder_finds_a_two_module_cycle() -> None:
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": set()}
    assert import_cycles(graph) == [["a", "b"]]


def test_no_import_cycles_inside_the_catalog() -> None:
    graph = import_graph("labs.catalog")
    assert "labs.catalog.facts.claims" in graph  # the walk saw the facts package
    assert import_cycles(graph) == []
