"""The one place lowbit reads its configuration (environment variables with the
``LOWBIT_`` prefix, or keyword arguments in tests)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ROOT = Path(__file__).resolve().parent.parent
DEV_SECRET = "lowbit-development-secret-do-not-use-in-production"  # noqa: S105 - refused outside development


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LOWBIT_", extra="ignore")

    env: Literal["development", "test", "production"] = Field(
        "development",
        description="development enables content reload; production refuses the default secret",
    )
    data_dir: Path = Field(
        ROOT / "data", description="Directory for the SQLite database and queue files"
    )
    database_url: str = Field(
        "", description="SQLAlchemy URL; empty means sqlite:///<data_dir>/lowbit.db"
    )
    queue_url: str = Field(
        "",
        description="huey backend: empty means SQLite under data_dir; redis://host:port/db for Redis",
    )
    secret_key: str = Field(
        DEV_SECRET, description="Signs session cookies; required outside development"
    )
    host: str = Field("127.0.0.1", description="Interface the web server binds")
    port: int = Field(8000, ge=1, le=65535, description="Port the web server binds")
    content_dir: Path = Field(
        ROOT / "content", description="Term cards and lessons (Markdown + YAML)"
    )
    static_dir: Path = Field(ROOT / "static", description="CSS, JS and built vendor files")
    reload_content: bool | None = Field(
        None, description="Re-read content when files change; defaults to on in development"
    )
    secure_cookies: bool = Field(False, description="Mark cookies Secure (set behind HTTPS)")
    max_active_runs: int = Field(2, ge=1, description="Queued or running runs one learner may have")
    max_streams_per_learner: int = Field(
        8, ge=1, description="Run event streams one learner may hold open at once (app/streams.py)"
    )
    max_streams_per_client: int = Field(
        64,
        ge=1,
        description="Run event streams one client (address; IPv6 /64) may hold open at once",
    )
    daily_run_quota: int = Field(200, ge=1, description="Runs one learner may start per UTC day")
    daily_gpu_quota: int = Field(
        20, ge=0, description="GPU lab runs one signed-in account may start per day"
    )
    gpu_labs_require_account: bool = Field(
        True, description="Anonymous learners may not run GPU labs"
    )
    heartbeat_seconds: float = Field(
        2.0, gt=0, description="How often a worker heartbeats a running run"
    )
    reaper_grace_seconds: float = Field(
        15.0, gt=0, description="A running run whose heartbeat is older than this is reaped"
    )
    db_retry_seconds: float = Field(
        20.0,
        gt=0,
        description="How long a worker retries a run's database writes (claim, events) "
        "through a database restart or a full disk before leaving the run to the reaper",
    )
    max_attempts: int = Field(
        2, ge=1, description="Attempts before a run lost with its worker is failed"
    )
    worker_concurrency: int = Field(1, ge=1, description="Runs one worker process executes at once")
    short_run_seconds: float = Field(
        5.0,
        ge=0,
        description="Runs estimated (app/runs/cost.py) under this many seconds go in the short "
        "lane: taken before long runs, and by the short-lane slots too",
    )
    short_lane_slots: int = Field(
        2,
        ge=0,
        description="Slots each worker keeps for short CPU runs alone, beside worker_concurrency, "
        "so a short run never waits behind long ones (0: none). Two, so short runs behind a "
        "long one get two thirds of two cores, not half (docs/reliability.md)",
    )
    worker_shutdown_grace_seconds: float = Field(
        10.0,
        ge=0,
        description="After SIGTERM, how long running labs may finish before they are stopped "
        "and re-queued (the embedded worker of `lowbit serve` uses 2 s, so the whole tree "
        "stops within 5 s)",
    )
    worker_queues: str = Field(
        "cpu", description="Comma-separated queues this worker takes: cpu, gpu"
    )
    extra_exercise_content: str = Field(
        "",
        description="Comma-separated content directories whose exercises/ (and terms/) join "
        "content/exercises; only the tests set it (the sandbox's escape exercise)",
    )
    extra_lab_modules: str = Field(
        "",
        description="Comma-separated modules whose LAB/LABS join the lab catalogue of the web "
        "app and the worker; only the tests set it (labs.runtime.probe, the sandbox probes)",
    )
    sandbox_user: str = Field(
        "nobody", description="Unprivileged user lab children run as when the worker is root"
    )
    review_daily_limit: int = Field(50, ge=1, description="New review cards shown per day")
    login_attempts_per_minute: int = Field(
        10, ge=1, description="Sign-in attempts allowed per minute for one username from one client"
    )
    login_attempts_per_ip_per_minute: int = Field(
        30, ge=1, description="Sign-in attempts allowed per minute from one client, any username"
    )
    login_attempts_per_user_per_hour: int = Field(
        100,
        ge=1,
        description="Sign-in attempts per hour for one username from all clients together "
        "(slows a distributed guess without letting one client lock the owner out)",
    )
    session_days: float = Field(
        30, gt=0, description="Days a signed-in session lives before the learner signs in again"
    )
    trusted_proxies: str = Field(
        "",
        description="Comma-separated addresses or CIDR ranges of reverse proxies whose "
        "X-Forwarded-For is believed; empty trusts none",
    )
    rate_limit_storage: str = Field(
        "",
        description="limits storage URI for per-client limits (memory://, redis://...); empty "
        "means the Redis queue when queue_url is Redis, else this process's memory",
    )
    new_learners_per_ip_per_minute: int = Field(
        60, ge=1, description="Anonymous learners one client may create per minute"
    )
    anonymous_runs_per_ip_per_minute: int = Field(
        10, ge=1, description="Lab runs anonymous learners from one client may start per minute"
    )
    models_dir: Path | None = Field(
        None,
        description="Further Hugging Face checkpoints the model labs offer as `model` choices. "
        "Labs never import app settings: the web app and the worker write this setting into "
        "LOWBIT_MODELS_DIR at start (pass_models_dir_to_labs), which labs.lm.models reads and "
        "the lab sandbox's environment keeps",
    )
    web_threads: int = Field(
        16, ge=4, le=256, description="Threads serving sync routes; the database pool matches it"
    )
    web_cpu_threads: int = Field(
        2,
        ge=1,
        le=256,
        description="Of those, how many may run Python at once (the rest wait for the "
        "database or for a turn; app/cpu.py). The GIL runs one anyway: more only make "
        "the event loop wait longer for its turn",
    )
    max_body_bytes: int = Field(
        1_048_576, ge=1024, description="Largest request body accepted (bytes); larger gets 413"
    )
    body_drain_bytes: int = Field(
        64 * 1_048_576,
        ge=0,
        description="How much of a refused (413) body is read and discarded so the client, "
        "still sending, receives the 413 instead of a connection reset (bytes)",
    )
    max_json_depth: int = Field(
        32, ge=2, description="Deepest nesting of arrays/objects accepted in a JSON body or field"
    )
    metrics_token: str = Field(
        "",
        description="Bearer token Prometheus sends for /metrics; empty serves /metrics to "
        "loopback clients only",
    )

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.env == "production" and self.secret_key == DEV_SECRET:
            raise ValueError(
                "LOWBIT_SECRET_KEY must be set to a private value when LOWBIT_ENV=production"
            )
        if len(self.secret_key) < 16:
            raise ValueError("LOWBIT_SECRET_KEY must be at least 16 characters")
        return self

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'lowbit.db'}"

    @property
    def content_reload(self) -> bool:
        return self.env == "development" if self.reload_content is None else self.reload_content

    @property
    def rate_limit_uri(self) -> str:
        if self.rate_limit_storage:
            return self.rate_limit_storage
        return self.queue_url if self.queue_url.startswith("redis") else "memory://"

    @property
    def queues(self) -> list[str]:
        return [q.strip() for q in self.worker_queues.split(",") if q.strip()]

    @property
    def extra_lab_module_names(self) -> list[str]:
        return [m.strip() for m in self.extra_lab_modules.split(",") if m.strip()]

    @property
    def exercise_roots(self) -> list[Path]:
        """Content directories holding exercises/: content_dir, then ``extra_exercise_content``."""
        extra = [Path(d.strip()) for d in self.extra_exercise_content.split(",") if d.strip()]
        return [self.content_dir, *extra]


def pass_models_dir_to_labs(settings: Settings) -> None:
    """Make ``settings.models_dir`` the directory the labs see.

    ``labs`` never imports ``app``, and a lab runs in a sandboxed child whose environment
    keeps only an allow-list (``labs.runtime.sandbox``), so the setting travels as the
    variable ``labs.lm.models.MODELS_ENV`` (``LOWBIT_MODELS_DIR``, the same name the
    setting is read from). A ``Settings`` built in code would otherwise not reach the
    labs: the web app and the worker call this at start, and child processes inherit it.
    """
    from labs.lm.models import MODELS_ENV

    if settings.models_dir is None:
        os.environ.pop(MODELS_ENV, None)
    else:
        os.environ[MODELS_ENV] = str(settings.models_dir)
