"""The container topology, checked by parsing (no Docker engine runs here):
every image and service is wired the way docs/deploy.md says."""

from __future__ import annotations

import re
import subprocess

import yaml

from app.settings import ROOT

COMPOSE = yaml.safe_load((ROOT / "compose.yaml").read_text())
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def test_dockerfile_has_three_targets_non_root_and_healthchecks() -> None:
    targets = re.findall(r"^FROM \S+ AS (\S+)$", DOCKERFILE, flags=re.M)
    assert {"web", "worker-cpu", "worker-cuda"} <= set(targets)
    code = "\n".join(line for line in DOCKERFILE.splitlines() if not line.lstrip().startswith("#"))
    stages = re.split(r"^FROM ", code, flags=re.M)
    for stage in stages:
        name = stage.split("\n", 1)[0]
        if any(name.endswith(f"AS {t}") for t in ("web", "worker-cpu", "worker-cuda")):
            assert "\nUSER 10001" in stage, name
            assert "HEALTHCHECK" in stage, name
    web = next(s for s in stages if s.split("\n", 1)[0].endswith("AS web"))
    assert "torch" not in web, "the web image must not install torch"
    cuda = next(s for s in stages if s.split("\n", 1)[0].endswith("AS worker-cuda"))
    assert cuda.startswith("nvidia/cuda:") and "whl/cu" in cuda
    cpu = next(s for s in stages if s.split("\n", 1)[0].endswith("AS worker-cpu"))
    assert "whl/cpu" in cpu


def test_hadolint_passes() -> None:
    hadolint = ROOT / ".venv" / "bin" / "hadolint"
    out = subprocess.run([str(hadolint), "Dockerfile"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_compose_topology() -> None:
    s = COMPOSE["services"]
    assert {"postgres", "redis", "migrate", "web", "proxy", "worker-cpu", "worker-gpu"} <= set(s)
    assert s["web"]["deploy"]["replicas"] == 2
    assert s["proxy"]["ports"] == ["8000:8080"]
    assert s["web"]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
    dev = s["worker-gpu"]["deploy"]["resources"]["reservations"]["devices"][0]
    assert dev["driver"] == "nvidia" and "gpu" in dev["capabilities"]
    assert "gpu" in s["worker-gpu"]["environment"]["LOWBIT_WORKER_QUEUES"]
    assert s["worker-cpu"]["environment"]["LOWBIT_WORKER_QUEUES"] == "cpu"
    assert COMPOSE["networks"]["backend"]["internal"] is True
    for name in ("worker-cpu", "worker-gpu", "postgres", "redis"):
        assert s[name]["networks"] == ["backend"], name
    for name in ("web", "worker-cpu", "worker-gpu"):
        assert s[name]["read_only"] is True
    # every setting the services pass exists in the one settings class
    from app.settings import Settings

    fields = {f"LOWBIT_{k.upper()}" for k in Settings.model_fields}
    for svc in s.values():
        for key in svc.get("environment") or {}:
            if key.startswith("LOWBIT_"):
                assert key in fields, key
