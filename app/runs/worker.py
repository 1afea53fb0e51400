"""``lowbit worker``: runs each lab in a sandboxed child of its fork server.

The worker holds credentials (settings, the database engine, the queue pool), so
no lab is forked from it: it starts a fork server first (``labs.runtime.forkserver``,
a fresh interpreter without its settings) that imports torch and everything labs
use once, does no tensor work, and forks one child per run; the worker keeps the
child's pipes and records what it did. Threads in the worker: one
per concurrent run (each polls the queues, claims a run, forks, and pumps the
child's events into the database), ``short_lane_slots`` more that take only short
CPU runs (so a short run never waits behind long ones), plus one maintenance
thread (heartbeats,
cancellation requests, the reaper). SIGTERM/SIGINT stop taking runs, let
running ones finish for a grace period, then stop them and put them back in
the queue; a second signal stops them at once.
"""

from __future__ import annotations

import logging
import os
import platform
import select
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from app.db import Run, make_engine, make_sessionmaker
from app.runs import claims, judging
from app.runs.bells import STREAMS, WORKERS, Bell, Ringer, open_bell
from app.runs.catalog import LabCatalogue, lab_catalogue
from app.runs.queue import QUEUES, RunQueue, lane, lane_of
from app.runs.store import is_short
from app.settings import Settings, pass_models_dir_to_labs
from labs.base import InvalidParams, NeedsGPU
from labs.hardware.nvidia_smi import query_dicts as nvidia_smi
from labs.runtime.executor import Job, Outcome, execute
from labs.runtime.forkserver import ForkServer
from labs.runtime.limits import MIB, SandboxConfig, lab_cpus, lab_threads
from labs.runtime.warm import cpu_model

log = logging.getLogger("lowbit.worker")

# Seconds an idle worker waits between polls of the queues.
QUEUE_POLL_S = 0.05
# Seconds to wait after a queue error (e.g. Redis restarting) before polling again.
QUEUE_ERROR_BACKOFF_S = 1.0
# Seconds between cancellation checks for this worker's running runs.
CANCEL_CHECK_S = 0.25
# Seconds the run threads get to hand back their runs once the labs are stopped.
THREAD_JOIN_S = 10.0
# Upper bound on the reaper period, seconds.
REAPER_MAX_INTERVAL_S = 10.0
NVIDIA_SMI_TIMEOUT_S = 10.0
DB_RETRY_BACKOFF_S = 0.5
# Storing a finished run's result is retried far longer, with backoff up to the
# cap: the work is done and worth keeping through a long outage. Past this the
# worker stops heartbeating the run and the reaper re-queues or fails it.
FINISH_RETRY_S = 300.0
DB_RETRY_BACKOFF_MAX_S = 5.0

T = TypeVar("T")


def is_transient_db_error(e: BaseException) -> bool:
    """A lost connection, a restarting server, a locked or full SQLite file: worth
    retrying. Constraint violations and programming errors are not."""
    return isinstance(e, OperationalError | InterfaceError) or (
        isinstance(e, DBAPIError) and e.connection_invalidated
    )


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


@dataclass
class _Active:
    run_id: str
    started: float


class LabWorker:
    """One worker process: polls the queues, claims runs, forks a sandboxed child
    per run and records what it did. ``labs`` is the catalogue it can run (by
    default the one ``settings`` describe, as the web app's)."""

    def __init__(
        self,
        settings: Settings,
        worker_id: str | None = None,
        labs: LabCatalogue | None = None,
    ):
        self.settings = settings
        self.engine = make_engine(settings.db_url)
        self.factory = make_sessionmaker(self.engine)
        self.queue = RunQueue(settings)
        self.labs = lab_catalogue(settings) if labs is None else labs
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
        self.forks: ForkServer | None = None
        # Learner code never reaches the fork server: it runs in the judge's sandbox.
        self.grading = judging.Grading(settings)
        # Streams on this host read a run's news when rung, not at their next poll;
        # the queue's bell wakes this worker when a run is queued (app.runs.bells).
        self.news = Ringer(settings.data_dir, STREAMS)
        self.queue_bell: Bell | None = None

    # -- set-up -----------------------------------------------------------

    def prepare(self) -> None:
        """Start the fork server (it imports torch and the labs), then describe this worker."""
        self.forks = ForkServer(self.settings.extra_lab_module_names, probe_cuda=bool(self.gpus))
        info = self.forks.info
        failed: dict[str, str] = info.get("preload_failed") or {}
        for name, why in failed.items():
            log.warning("preload failed", extra={"preload_module": name, "error": why})
        if self.gpus and info.get("torch_cuda"):
            # The server counts through NVML, which leaves CUDA uninitialised for its children.
            self.device = "cuda" if int(info.get("cuda_devices") or 0) > 0 else "cpu"
        self.grading.use_gpu(self.device == "cuda")  # Triton exercises compile there
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
            "cpu": cpu_model(),
            "cpu_count": os.cpu_count(),
            "torch": info.get("torch"),
            "torch_cuda_build": info.get("torch_cuda"),
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

    def run_job(
        self,
        job: Job,
        on_events: Callable[[list[tuple[str, dict[str, Any]]]], bool],
        should_stop: Callable[[], bool],
    ) -> Outcome:
        """Run ``job`` in a sandboxed child of the fork server (``prepare`` first)."""
        if self.forks is None:
            raise RuntimeError("LabWorker.prepare() starts the fork server before any run")
        return execute(job, on_events, should_stop, launch=self.forks)

    # -- running ----------------------------------------------------------

    def run_forever(self) -> int:
        self.prepare()
        claims.register_worker(
            self.factory,
            self.worker_id,
            socket.gethostname(),
            os.getpid(),
            self.queues,
            {
                "device": self.device,
                "gpus": self.gpus or [],
                "concurrency": self.settings.worker_concurrency,
                "short_lane_slots": self.settings.short_lane_slots,
            },
        )
        log.info(
            "worker started",
            extra={"worker": self.worker_id, "queues": self.queues, "device": self.device},
        )
        maint = threading.Thread(target=self._maintenance, name="lowbit-maintenance", daemon=True)
        maint.start()
        threads = [
            threading.Thread(
                target=self._take_runs, args=(self.lanes(),), name=f"lowbit-run-{i}", daemon=True
            )
            for i in range(self.settings.worker_concurrency)
        ]
        short = self.lanes(short_only=True)
        if short:
            threads += [
                threading.Thread(
                    target=self._take_runs, args=(short,), name=f"lowbit-short-{i}", daemon=True
                )
                for i in range(self.settings.short_lane_slots)
            ]
        self.queue_bell = open_bell(self.settings.data_dir, WORKERS)
        for t in threads:
            t.start()
        self.stopping.wait()
        deadline = time.monotonic() + self.settings.worker_shutdown_grace_seconds
        while self.active and time.monotonic() < deadline and not self.killing.is_set():
            time.sleep(0.05)
        self.killing.set()
        for t in threads:
            t.join(timeout=THREAD_JOIN_S)
        try:
            claims.heartbeat(self.factory, self.worker_id, status="stopped")
        except Exception:
            log.exception("could not mark the worker stopped")
        if self.forks is not None:
            self.forks.close()
        self.grading.close()
        if self.queue_bell is not None:
            self.queue_bell.close()
        self.engine.dispose()
        log.info("worker stopped", extra={"worker": self.worker_id})
        return 0

    def stop(self, now: bool = False) -> None:
        if now or self.stopping.is_set():
            self.killing.set()
        self.stopping.set()

    def lanes(self, short_only: bool = False) -> list[str]:
        """The lanes a run slot takes turns from, first first: each queue's short lane
        before its long one. The short-lane slots take short CPU runs only: a GPU runs
        one lab at a time."""
        if short_only:
            return [lane(q, True) for q in self.queues if q == "cpu"]
        return [lane(q, short) for q in self.queues for short in (True, False)]

    def _take_runs(self, lanes: list[str]) -> None:
        while not self.stopping.is_set():
            try:
                item = self.queue.dequeue(lanes)
            except Exception:
                log.exception("queue unavailable")
                time.sleep(QUEUE_ERROR_BACKOFF_S)
                continue
            if item is None:
                self._nap(QUEUE_POLL_S)
                continue
            try:
                self.take_turn(item[0])
            except Exception:
                log.exception("run handling failed", extra={"lane": item[0]})

    def _nap(self, seconds: float) -> None:
        """Wait ``seconds`` for the queue, or less if a run is queued meanwhile."""
        bell = self.queue_bell
        if bell is None:
            time.sleep(seconds)
            return
        try:
            select.select([bell], [], [], seconds)
        except (OSError, ValueError):  # closed by run_forever's shutdown
            time.sleep(seconds)
            return
        bell.drain()

    def _db(self, what: str, fn: Callable[[], T], patience_s: float | None = None) -> T:
        """``fn()``, retried for ``patience_s`` seconds (``settings.db_retry_seconds``)
        while the database is unavailable, the pause doubling from DB_RETRY_BACKOFF_S
        up to its cap."""
        patience = self.settings.db_retry_seconds if patience_s is None else patience_s
        deadline = time.monotonic() + patience
        pause = DB_RETRY_BACKOFF_S
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
                if self.killing.wait(pause):
                    raise
                pause = min(pause * 2, DB_RETRY_BACKOFF_MAX_S)

    def take_turn(self, lane_name: str) -> None:
        """A message's turn in its lane: claim the run of that lane whose turn it is."""
        queue, short = lane_of(lane_name)
        run = self._db(
            "claim",
            lambda: claims.claim_next(self.factory, self.worker_id, queue, short, self.settings),
        )
        if run is None:
            return  # the lane is empty: its runs were cancelled or other workers have them
        self.handle(run)

    def handle(self, run: Run) -> None:
        """Execute a run this worker has claimed and record how it ended."""
        run_id = run.id
        with self.lock:
            self.active[run_id] = _Active(run_id, time.monotonic())
        self.news.ring(run_id)  # running now
        log.info(
            "run started",
            extra={"run": run_id, "lab": run.lab_id, "attempt": run.attempts, "queue": run.queue},
        )
        try:
            lane_name = lane(run.queue, is_short(run.estimate_s, self.settings))
            if run.kind == "submission":
                self._judge(run_id, lane_name)
            else:
                self._execute(run_id, run.lab_id, run.params, run.attempts, lane_name)
        except Exception as e:  # never leave a claimed run heartbeating forever
            log.exception("run failed inside the worker", extra={"run": run_id})
            claims.finish(
                self.factory,
                run_id,
                self.worker_id,
                claims.Ending(
                    "failed",
                    error=f"The worker could not run this lab ({type(e).__name__}: {e}).",
                    environment=self.static_env,
                ),
            )
        finally:
            with self.lock:
                self.active.pop(run_id, None)
                self.cancelled.discard(run_id)
            self.news.ring(run_id)  # it ended (or went back to the queue)

    def _execute(
        self, run_id: str, lab_id: str, raw_params: dict[str, Any], attempt: int, lane_name: str
    ) -> None:
        env = dict(self.static_env, attempt=attempt)
        lab = self.labs.get(lab_id)
        if lab is None:
            claims.finish(
                self.factory,
                run_id,
                self.worker_id,
                claims.Ending(
                    "failed", error=f"This worker has no lab {lab_id!r}.", environment=env
                ),
            )
            return
        try:  # the stored params, checked by the validator the web used
            params = lab.validate(raw_params)
        except InvalidParams as e:
            claims.finish(
                self.factory,
                run_id,
                self.worker_id,
                claims.Ending("failed", error=f"Invalid parameters: {e}", environment=env),
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
            threads=lab_threads(self.settings.worker_concurrency, lab.wide_ops),
            cpus=lab_cpus(self.settings.worker_concurrency),
        )

        def store(batch: list[tuple[str, dict[str, Any]]]) -> bool:
            owned = self._db(
                "events", lambda: claims.append_events(self.factory, run_id, self.worker_id, batch)
            )
            if owned:
                self.news.ring(run_id)
            return owned

        def should_stop() -> bool:
            return run_id in self.cancelled or self.killing.is_set()

        outcome = self.run_job(Job(lab, params, cfg), store, should_stop)
        self._record(run_id, lane_name, outcome, env)

    def _judge(self, run_id: str, lane_name: str) -> None:
        """Grade an exercise submission (``app.runs.judging``) and record the verdict.
        A cancel stops the learner's code at once (``cancelled``), as for a lab run;
        a worker shutdown stops it and hands the submission back to the queue."""
        sub = self._db("submission", lambda: judging.load(self.factory, run_id))

        def should_stop() -> bool:
            return run_id in self.cancelled or self.killing.is_set()

        verdict = self.grading.grade(sub.exercise_id, sub.mode, sub.code, should_stop)
        if verdict.verdict == "cancelled" and run_id not in self.cancelled:
            self._hand_back(run_id, lane_name)
            return
        if not self._db(
            "finish",
            lambda: judging.record(
                self.factory, run_id, self.worker_id, sub.learner_id, sub.exercise_id, verdict
            ),
            FINISH_RETRY_S,
        ):
            log.warning("submission ended elsewhere first", extra={"run": run_id})
            return
        log.info("submission judged", extra={"run": run_id, "verdict": verdict.verdict})

    def _record(self, run_id: str, lane_name: str, outcome: Outcome, env: dict[str, Any]) -> None:
        env = {**env, **outcome.environment}
        if (
            outcome.reason
        ):  # why the child ended (time, memory, output, crash…): /metrics counts these
            env["end_reason"] = outcome.reason
        if outcome.status == "lost":
            log.warning("run taken over by another worker", extra={"run": run_id})
            return
        if outcome.status == "cancelled" and run_id not in self.cancelled:
            self._hand_back(run_id, lane_name)
            return
        ending = claims.Ending(
            outcome.status,
            result=outcome.result,
            error=outcome.error,
            environment=env,
            sandbox=outcome.sandbox,
            duration_s=outcome.duration_s,
        )
        if not self._db(
            "finish",
            lambda: claims.finish(self.factory, run_id, self.worker_id, ending),
            FINISH_RETRY_S,
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

    def _hand_back(self, run_id: str, lane_name: str) -> None:
        """Stopped by a worker shutdown, not by the learner: back in the queue."""
        if claims.requeue_own(
            self.factory,
            run_id,
            self.worker_id,
            "The worker was stopped; the run was queued again.",
        ):
            log.info("run handed back to the queue", extra={"run": run_id})
            queue, short = lane_of(lane_name)
            self.queue.enqueue(run_id, queue, short)

    # -- maintenance --------------------------------------------------------

    def _maintenance(self) -> None:
        s = self.settings
        reap_every = min(s.reaper_grace_seconds / 2, REAPER_MAX_INTERVAL_S)
        last_beat = last_reap = 0.0
        while not self.killing.is_set():
            now = time.monotonic()
            try:
                if now - last_beat >= s.heartbeat_seconds:
                    with self.lock:
                        executing = list(self.active)
                    cancels = claims.heartbeat(self.factory, self.worker_id, executing)
                    last_beat = now
                elif self.active:
                    with self.factory() as session:
                        cancels = claims.cancel_requests(session, self.worker_id)
                else:
                    cancels = set()
                if cancels:
                    with self.lock:
                        self.cancelled |= cancels
                if now - last_reap >= reap_every and not self.stopping.is_set():
                    claims.reap(self.factory, self.queue, s)
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


# Set by ``lowbit serve --embedded-worker`` to its own pid (app.supervisor).
SUPERVISOR_PID_ENV = "LOWBIT_SUPERVISOR_PID"
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def follow_supervisor() -> None:
    """An embedded worker gets SIGTERM when the server that started it dies, however it
    dies (SIGKILL included), so no worker outlives its server. A server already gone
    before the request took effect (re-parented) means: stop now."""
    pid = os.environ.get(SUPERVISOR_PID_ENV)
    if not pid:
        return
    try:
        import ctypes

        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the server's own stop() still ends us
        return
    if os.getppid() != int(pid):
        os.kill(os.getpid(), signal.SIGTERM)


def main(settings: Settings) -> int:
    """The ``lowbit worker`` process: consume the configured queues until SIGTERM/SIGINT."""
    from app.logging import configure_logging

    configure_logging()
    pass_models_dir_to_labs(settings)
    worker = LabWorker(settings)
    install_signal_handlers(worker)
    follow_supervisor()
    try:
        rc = worker.run_forever()
    except KeyboardInterrupt:
        rc = 130
    # Everything is committed by now; skip the interpreter's teardown of torch and
    # friends, which takes seconds and makes restarts (and Ctrl-C) feel stuck.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
