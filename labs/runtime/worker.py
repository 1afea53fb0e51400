"""``lowbit worker``: a warm parent that forks one sandboxed child per run.

The parent imports torch and everything labs use once, then does no tensor
work (a fork after threaded torch work can hang). Threads in the parent: one
per concurrent run (each polls the queues, claims a run, forks, and pumps the
child's events into the database), plus one maintenance thread (heartbeats,
cancellation requests, the reaper). SIGTERM/SIGINT stop taking runs, let
running ones finish for a grace period, then stop them and put them back in
the queue; a second signal stops them at once.
"""

from __future__ import annotations

import importlib
import logging
import os
import platform
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from app.db import make_engine, make_sessionmaker
from app.settings import Settings
from labs.base import NeedsGPU
from labs.runtime import runs
from labs.runtime.catalog import available_labs
from labs.runtime.executor import Job, Outcome, execute
from labs.runtime.queue import QUEUES, RunQueue
from labs.runtime.sandbox import MIB, SandboxConfig, lab_threads

log = logging.getLogger("lowbit.worker")

# Seconds an idle worker waits between polls of the queues.
QUEUE_POLL_S = 0.05
# Seconds to wait after a queue error (e.g. Redis restarting) before polling again.
QUEUE_ERROR_BACKOFF_S = 1.0
# Seconds between cancellation checks for this worker's running runs.
CANCEL_CHECK_S = 0.25
# Seconds running labs may finish after SIGTERM before they are stopped and re-queued.
SHUTDOWN_GRACE_S = 10.0
# Upper bound on the reaper period, seconds.
REAPER_MAX_INTERVAL_S = 10.0
NVIDIA_SMI_TIMEOUT_S = 10.0
# Seconds a worker keeps retrying a run's database writes (claim, events, result)
# through a database restart or a full disk before leaving the run to the reaper.
DB_RETRY_S = 20.0
DB_RETRY_BACKOFF_S = 0.5

T = TypeVar("T")


def is_transient_db_error(e: BaseException) -> bool:
    """A lost connection, a restarting server, a locked or full SQLite file: worth
    retrying. Constraint violations and programming errors are not."""
    return isinstance(e, OperationalError | InterfaceError) or (
        isinstance(e, DBAPIError) and e.connection_invalidated
    )


# Imported once in the parent so no run pays for them.
PRELOAD = (
    "torch",
    "torch.nn.functional",
    "numpy",
    "safetensors",
    "safetensors.torch",
    "matplotlib",
    "matplotlib.figure",
    "matplotlib.font_manager",
    "matplotlib.backends.backend_svg",
    "matplotlib.backends.backend_agg",
    "labs.quant",
    "labs.quant.metrics",
    "tokenizers",
    "transformers",
    "transformers.models.llama.modeling_llama",
    "transformers.integrations.sdpa_attention",
    "labs.plots",
    "encodings.idna",
    "json",
    "subprocess",
    "shlex",
)
REDACTED = "(redacted in lab processes)"
GPU_SNAPSHOT_FIELDS = (
    "name",
    "driver_version",
    "temperature.gpu",
    "clocks.sm",
    "clocks.mem",
    "clocks.max.sm",
    "power.draw",
    "pstate",
)


def preload() -> dict[str, str]:
    """Import the numeric stack and every lab module; returns modules that failed."""
    import matplotlib

    matplotlib.use("Agg")
    failed: dict[str, str] = {}
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception as e:  # a missing optional module must not stop the worker
            failed[name] = f"{type(e).__name__}: {e}"
    return failed


def nvidia_smi(fields: tuple[str, ...]) -> list[dict[str, str]] | None:
    """One dict per GPU, or None without an NVIDIA driver. Never initialises CUDA."""
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=NVIDIA_SMI_TIMEOUT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    rows = [
        [c.strip() for c in line.split(",")] for line in out.strip().splitlines() if line.strip()
    ]
    return [dict(zip(fields, r, strict=False)) for r in rows] or None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclass
class _Active:
    run_id: str
    started: float


class LabWorker:
    def __init__(self, settings: Settings, worker_id: str | None = None):
        self.settings = settings
        self.engine = make_engine(settings.db_url)
        self.factory = make_sessionmaker(self.engine)
        self.queue = RunQueue(settings)
        self.labs = available_labs(settings)
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.stopping = threading.Event()
        self.killing = threading.Event()
        self.active: dict[str, _Active] = {}
        self.cancelled: set[str] = set()
        self.lock = threading.Lock()
        self.gpus = nvidia_smi(("name", "driver_version", "memory.total", "compute_cap"))
        self.device = "cpu"
        self.queues = [q for q in settings.queues if q in QUEUES]
        self.static_env: dict[str, Any] = {}

    # -- set-up -----------------------------------------------------------

    def prepare(self) -> None:
        failed = preload()
        for name, why in failed.items():
            log.warning("preload failed", extra={"preload_module": name, "error": why})
        import torch

        if self.gpus and torch.version.cuda:
            # device_count() asks NVML, which leaves CUDA uninitialised: children can still use it.
            self.device = "cuda" if torch.cuda.device_count() > 0 else "cpu"
        if "gpu" in self.queues and self.device != "cuda":
            log.warning("no usable GPU: this worker will not take the gpu queue")
            self.queues = [q for q in self.queues if q != "gpu"]
        if self.device == "cuda":  # a GPU worker takes GPU runs first, then CPU ones
            self.queues = sorted(set(self.queues) | {"gpu"}, key=lambda q: q != "gpu")
        self._secure_data_dir()
        self.static_env = {
            "host": socket.gethostname(),
            "worker": self.worker_id,
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpu": _cpu_model(),
            "cpu_count": os.cpu_count(),
            "torch": torch.__version__,
            "torch_cuda_build": torch.version.cuda,
            "queue_backend": self.queue.backend,
            "database": make_url(self.settings.db_url).get_backend_name(),
        }
        if self.gpus:
            gpu = self.gpus[0]
            self.static_env.update(
                gpu_count=len(self.gpus),
                gpu=gpu.get("name"),
                driver=gpu.get("driver_version"),
                compute_capability=gpu.get("compute_cap"),
            )
        if failed:
            self.static_env["preload_failed"] = sorted(failed)

    def _secure_data_dir(self) -> None:
        """The data dir (database, queue) is hidden from labs by a mount; where mounts
        are not allowed, file permissions must keep the sandbox user out."""
        d = self.settings.data_dir
        try:
            if d.exists() and d.stat().st_uid == os.geteuid():
                d.chmod(0o700)
        except OSError as e:
            log.warning("could not restrict the data dir", extra={"error": str(e)})

    def hidden_paths(self) -> tuple[str, ...]:
        paths = {str(self.settings.data_dir.resolve())}
        url = make_url(self.settings.db_url)
        if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
            paths.add(str(os.path.realpath(os.path.dirname(url.database) or ".")))
        return tuple(sorted(paths))

    def _scrub(self) -> str:
        """Run in the child: drop the secrets this process's settings hold."""
        object.__setattr__(self.settings, "secret_key", REDACTED)
        object.__setattr__(self.settings, "database_url", REDACTED)
        return "the worker's settings are redacted in the lab process"

    # -- running ----------------------------------------------------------

    def run_forever(self) -> int:
        self.prepare()
        runs.register_worker(
            self.factory,
            self.worker_id,
            socket.gethostname(),
            os.getpid(),
            self.queues,
            {
                "device": self.device,
                "gpus": self.gpus or [],
                "concurrency": self.settings.worker_concurrency,
            },
        )
        log.info(
            "worker started",
            extra={"worker": self.worker_id, "queues": self.queues, "device": self.device},
        )
        maint = threading.Thread(target=self._maintenance, name="lowbit-maintenance", daemon=True)
        maint.start()
        threads = [
            threading.Thread(target=self._take_runs, name=f"lowbit-run-{i}", daemon=True)
            for i in range(self.settings.worker_concurrency)
        ]
        for t in threads:
            t.start()
        self.stopping.wait()
        deadline = time.monotonic() + SHUTDOWN_GRACE_S
        while self.active and time.monotonic() < deadline and not self.killing.is_set():
            time.sleep(0.05)
        self.killing.set()
        for t in threads:
            t.join(timeout=SHUTDOWN_GRACE_S)
        try:
            runs.heartbeat(self.factory, self.worker_id, status="stopped")
        except Exception:
            log.exception("could not mark the worker stopped")
        self.engine.dispose()
        log.info("worker stopped", extra={"worker": self.worker_id})
        return 0

    def stop(self, now: bool = False) -> None:
        if now or self.stopping.is_set():
            self.killing.set()
        self.stopping.set()

    def _take_runs(self) -> None:
        while not self.stopping.is_set():
            try:
                item = self.queue.dequeue(self.queues)
            except Exception:
                log.exception("queue unavailable")
                time.sleep(QUEUE_ERROR_BACKOFF_S)
                continue
            if item is None:
                time.sleep(QUEUE_POLL_S)
                continue
            try:
                self.handle(item[1])
            except Exception:
                log.exception("run handling failed", extra={"run": item[1]})

    def _db(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()``, retried for ``DB_RETRY_S`` seconds while the database is unavailable."""
        deadline = time.monotonic() + DB_RETRY_S
        while True:
            try:
                return fn()
            except Exception as e:
                if not is_transient_db_error(e) or time.monotonic() >= deadline:
                    raise
                log.warning(
                    "database unavailable; retrying",
                    extra={"what": what, "error": f"{type(e).__name__}: {str(e)[:200]}"},
                )
                if self.killing.wait(DB_RETRY_BACKOFF_S):
                    raise

    def handle(self, run_id: str) -> None:
        run = self._db("claim", lambda: runs.claim(self.factory, run_id, self.worker_id))
        if run is None:
            return  # duplicate message, cancelled, or another worker has it
        with self.lock:
            self.active[run_id] = _Active(run_id, time.monotonic())
        log.info(
            "run started",
            extra={"run": run_id, "lab": run.lab_id, "attempt": run.attempts, "queue": run.queue},
        )
        try:
            self._execute(run_id, run.lab_id, run.params, run.attempts, run.queue)
        except Exception as e:  # never leave a claimed run heartbeating forever
            log.exception("run failed inside the worker", extra={"run": run_id})
            runs.finish(
                self.factory,
                run_id,
                self.worker_id,
                runs.Ending(
                    "failed",
                    error=f"The worker could not run this lab ({type(e).__name__}: {e}).",
                    environment=self.static_env,
                ),
            )
        finally:
            with self.lock:
                self.active.pop(run_id, None)
                self.cancelled.discard(run_id)

    def _execute(
        self, run_id: str, lab_id: str, raw_params: dict[str, Any], attempt: int, queue: str
    ) -> None:
        env = dict(self.static_env, attempt=attempt)
        lab = self.labs.get(lab_id)
        if lab is None:
            runs.finish(
                self.factory,
                run_id,
                self.worker_id,
                runs.Ending("failed", error=f"This worker has no lab {lab_id!r}.", environment=env),
            )
            return
        try:
            params = lab.params.model_validate(raw_params)
        except ValidationError as e:
            msg = "; ".join(
                f"{'.'.join(map(str, x['loc'])) or 'params'}: {x['msg']}" for x in e.errors()
            )
            runs.finish(
                self.factory,
                run_id,
                self.worker_id,
                runs.Ending("failed", error=f"Invalid parameters: {msg}", environment=env),
            )
            return
        device = "cuda" if self.device == "cuda" and lab.needs_gpu is not NeedsGPU.no else "cpu"
        if device == "cuda":
            snap = nvidia_smi(GPU_SNAPSHOT_FIELDS)
            if snap:
                env["gpu_at_start"] = snap[0]
        cfg = SandboxConfig(
            wall_s=lab.time_limit_s,
            memory_bytes=lab.memory_limit_mb * MIB,
            device=device,
            user=self.settings.sandbox_user,
            hide=self.hidden_paths(),
            threads=lab_threads(self.settings.worker_concurrency),
        )

        def store(batch: list[tuple[str, dict[str, Any]]]) -> bool:
            return self._db(
                "events", lambda: runs.append_events(self.factory, run_id, self.worker_id, batch)
            )

        def should_stop() -> bool:
            return run_id in self.cancelled or self.killing.is_set()

        outcome = execute(Job(lab, params, cfg), store, should_stop, scrub=self._scrub)
        self._record(run_id, queue, outcome, env)

    def _record(self, run_id: str, queue: str, outcome: Outcome, env: dict[str, Any]) -> None:
        env = {**env, **outcome.environment}
        if (
            outcome.reason
        ):  # why the child ended (time, memory, output, crash…): /metrics counts these
            env["end_reason"] = outcome.reason
        if outcome.status == "lost":
            log.warning("run taken over by another worker", extra={"run": run_id})
            return
        if outcome.status == "cancelled" and run_id not in self.cancelled:
            # Stopped by a worker shutdown, not by the learner: back in the queue.
            if runs.requeue_own(
                self.factory,
                run_id,
                self.worker_id,
                "The worker was stopped; the run was queued again.",
            ):
                log.info("run handed back to the queue", extra={"run": run_id})
                self.queue.enqueue(run_id, queue)
            return
        ending = runs.Ending(
            outcome.status,
            result=outcome.result,
            error=outcome.error,
            environment=env,
            sandbox=outcome.sandbox,
            duration_s=outcome.duration_s,
        )
        if not self._db(
            "finish", lambda: runs.finish(self.factory, run_id, self.worker_id, ending)
        ):
            log.warning("run ended elsewhere before this worker finished it", extra={"run": run_id})
            return
        log.info(
            "run finished",
            extra={
                "run": run_id,
                "status": outcome.status,
                "end_reason": outcome.reason,
                "duration_s": outcome.duration_s,
            },
        )

    # -- maintenance --------------------------------------------------------

    def _maintenance(self) -> None:
        s = self.settings
        reap_every = min(s.reaper_grace_seconds / 2, REAPER_MAX_INTERVAL_S)
        last_beat = last_reap = 0.0
        while not self.killing.is_set():
            now = time.monotonic()
            try:
                if now - last_beat >= s.heartbeat_seconds:
                    cancels = runs.heartbeat(self.factory, self.worker_id)
                    last_beat = now
                elif self.active:
                    with self.factory() as session:
                        cancels = runs.cancel_requests(session, self.worker_id)
                else:
                    cancels = set()
                if cancels:
                    with self.lock:
                        self.cancelled |= cancels
                if now - last_reap >= reap_every and not self.stopping.is_set():
                    runs.reap(self.factory, self.queue, s)
                    last_reap = now
            except Exception as e:
                if is_transient_db_error(e):  # an outage: one line per attempt, no traceback
                    log.warning(
                        "maintenance: database unavailable; retrying",
                        extra={"error": f"{type(e).__name__}: {str(e)[:200]}"},
                    )
                else:
                    log.exception("maintenance failed; retrying")
            self.killing.wait(CANCEL_CHECK_S)


def install_signal_handlers(worker: LabWorker) -> None:
    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal received", extra={"signal": signal.Signals(signum).name})
        worker.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
