"""The web process never imports torch (start-up stays fast, memory small)."""

from __future__ import annotations

import subprocess
import sys

from app.settings import ROOT


def test_web_app_does_not_import_torch() -> None:
    code = (
        "import sys\n"
        "from app.main import create_app\n"
        "import labs.registry as r\n"
        "r.all_labs()\n"
        "bad = sorted(m for m in ('torch', 'numpy', 'matplotlib', 'safetensors') if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"web process imported: {out.stdout.strip()}"
