"""The web process never imports torch or transformers (start-up stays fast, memory
small): not the app, not its run routes and store, not the terminal runner, not the
lab catalogue with the tests' probe labs in it."""

from __future__ import annotations

import subprocess
import sys

from app.settings import ROOT
from tests.conftest import TEST_LAB_MODULES

HEAVY = ("torch", "transformers", "numpy", "matplotlib", "safetensors")


def test_the_web_app_imports_no_numeric_stack() -> None:
    code = (
        "import sys\n"
        "from app.main import create_app\n"
        "import app.routes.labs, app.routes.runs, app.runs.store, app.runs.service\n"
        "import labs.runtime.cli\n"
        "from app.runs.catalog import lab_catalogue\n"
        "from app.settings import Settings\n"
        "import labs.registry as r\n"
        "r.all_labs()\n"
        f"lab_catalogue(Settings(env='test', extra_lab_modules={TEST_LAB_MODULES!r}))\n"
        f"bad = sorted(m for m in {HEAVY!r} if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"web process imported: {out.stdout.strip()}"
