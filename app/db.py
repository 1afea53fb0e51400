"""Database models (SQLAlchemy 2) and engine set-up for SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    create_engine,
    event,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

RUN_STATUSES = ("queued", "running", "succeeded", "failed", "timed_out", "cancelled")
FINAL_STATUSES = frozenset({"succeeded", "failed", "timed_out", "cancelled"})


# The largest value an Integer column holds on every backend (PostgreSQL's
# integer is 32-bit): ids and sequence numbers from a URL are checked against it.
INT32_MAX = 2**31 - 1


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_id() -> str:
    return uuid.uuid4().hex


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both SQLite (which drops the zone) and PostgreSQL."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value


JSONType = JSON().with_variant(JSONB(), "postgresql")


class Base(DeclarativeBase):
    pass


class Learner(Base):
    __tablename__ = "learners"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    username: Mapped[str | None] = mapped_column(String(40), unique=True)
    password_hash: Mapped[str | None] = mapped_column(String(200))
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    merged_into: Mapped[str | None] = mapped_column(String(32))


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (
        Index("ix_runs_learner_created", "learner_id", "created_at"),
        Index("ix_runs_status_heartbeat", "status", "heartbeat_at"),
        Index("ix_runs_lab_created", "lab_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    learner_id: Mapped[str] = mapped_column(ForeignKey("learners.id", ondelete="CASCADE"))
    lab_id: Mapped[str] = mapped_column(String(64))
    # "lab" or "submission" (learner code for the judge: app.runs.submissions); both
    # share the queue, the quotas, the claims and the reaper.
    kind: Mapped[str] = mapped_column(String(16), default="lab", server_default="lab")
    status: Mapped[str] = mapped_column(String(16), default="queued")
    queue: Mapped[str] = mapped_column(String(16), default="cpu")
    params: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    error: Mapped[str | None] = mapped_column(Text)
    environment: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    sandbox: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker_id: Mapped[str | None] = mapped_column(String(64))
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    event_count: Mapped[int] = mapped_column(Integer, default=0)
    duration_s: Mapped[float | None] = mapped_column(Float)
    # Seconds the run should take, estimated from its parameters when it was queued
    # (app.runs.cost): its lane, its place among the queued and the wait shown.
    estimate_s: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    @property
    def is_final(self) -> bool:
        return self.status in FINAL_STATUSES


class Submission(Base):
    """Learner code for one exercise; its run row (same id) carries the status."""

    __tablename__ = "submissions"
    __table_args__ = (
        Index("ix_submissions_learner_exercise", "learner_id", "exercise_id", "created_at"),
    )

    id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True)
    learner_id: Mapped[str] = mapped_column(ForeignKey("learners.id", ondelete="CASCADE"))
    exercise_id: Mapped[str] = mapped_column(String(80))
    mode: Mapped[str] = mapped_column(String(16))  # examples | submit
    code: Mapped[str] = mapped_column(Text)
    # passed | failed | error | timed_out | cancelled once judged; None while queued or running
    verdict: Mapped[str | None] = mapped_column(String(16))
    message: Mapped[str | None] = mapped_column(Text)
    tests: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    output: Mapped[str] = mapped_column(Text, default="")
    output_truncated: Mapped[bool] = mapped_column(Boolean, default=False)
    seconds: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ExerciseState(Base):
    """A learner's standing on one exercise: the saved draft, hints shown, passed, gave up."""

    __tablename__ = "exercise_states"

    learner_id: Mapped[str] = mapped_column(
        ForeignKey("learners.id", ondelete="CASCADE"), primary_key=True
    )
    exercise_id: Mapped[str] = mapped_column(String(80), primary_key=True)
    draft: Mapped[str | None] = mapped_column(Text)
    hints_shown: Mapped[int] = mapped_column(Integer, default=0)
    passed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    gave_up_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class RunEvent(Base):
    __tablename__ = "run_events"
    __table_args__ = (UniqueConstraint("run_id", "seq", name="uq_run_events_run_seq"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    data: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Worker(Base):
    __tablename__ = "workers"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    queues: Mapped[str] = mapped_column(String(64))
    capabilities: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_heartbeat: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    status: Mapped[str] = mapped_column(String(16), default="up")


class SearchDoc(Base):
    """Content mirrored into the database so its own full-text engine can rank it
    (an FTS5 table on SQLite, a tsvector GIN index on PostgreSQL; both made by
    the migration, not by these models)."""

    __tablename__ = "search_docs"
    __table_args__ = (UniqueConstraint("kind", "slug", name="uq_search_docs_kind_slug"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    kind: Mapped[str] = mapped_column(String(16))
    slug: Mapped[str] = mapped_column(String(120))
    title: Mapped[str] = mapped_column(String(200))
    aliases: Mapped[str] = mapped_column(Text, default="")
    definition: Mapped[str] = mapped_column(Text, default="")
    body: Mapped[str] = mapped_column(Text, default="")


class Meta(Base):
    """Small key/value facts the app keeps (e.g. the content hash last indexed)."""

    __tablename__ = "meta"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class QuizAttempt(Base):
    __tablename__ = "quiz_attempts"
    __table_args__ = (Index("ix_quiz_attempts_learner_item", "learner_id", "owner", "item_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    learner_id: Mapped[str] = mapped_column(ForeignKey("learners.id", ondelete="CASCADE"))
    owner: Mapped[str] = mapped_column(String(140))  # "term:<slug>" or "lesson:<slug>"
    item_id: Mapped[str] = mapped_column(String(80))
    answer: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    correct: Mapped[bool | None] = mapped_column(Boolean)
    rating: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ReviewCard(Base):
    """A spaced-review card (FSRS state) for one quick-check item or one wrong prediction."""

    __tablename__ = "review_cards"
    __table_args__ = (
        UniqueConstraint("learner_id", "kind", "ref", name="uq_review_cards_learner_ref"),
        Index("ix_review_cards_learner_due", "learner_id", "due"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    learner_id: Mapped[str] = mapped_column(ForeignKey("learners.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(16))  # quiz | prediction
    ref: Mapped[str] = mapped_column(String(240))  # "term:<slug>/<item>" or a notebook entry id
    fsrs: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    due: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    reps: Mapped[int] = mapped_column(Integer, default=0)
    lapses: Mapped[int] = mapped_column(Integer, default=0)
    last_review: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ReviewLog(Base):
    __tablename__ = "review_logs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    card_id: Mapped[int] = mapped_column(
        ForeignKey("review_cards.id", ondelete="CASCADE"), index=True
    )
    learner_id: Mapped[str] = mapped_column(
        ForeignKey("learners.id", ondelete="CASCADE"), index=True
    )
    rating: Mapped[int] = mapped_column(Integer)
    reviewed_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class NotebookEntry(Base):
    """Predict, run, compare, reflect: one exercise attempt in a learner's notebook."""

    __tablename__ = "notebook_entries"
    __table_args__ = (Index("ix_notebook_learner_created", "learner_id", "created_at"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    learner_id: Mapped[str] = mapped_column(ForeignKey("learners.id", ondelete="CASCADE"))
    source: Mapped[str] = mapped_column(String(140))  # term:<slug>, lesson:<slug> or lab:<id>
    lab_id: Mapped[str | None] = mapped_column(String(64))
    run_id: Mapped[str | None] = mapped_column(ForeignKey("runs.id", ondelete="SET NULL"))
    prediction: Mapped[str] = mapped_column(Text, default="")
    predicted_value: Mapped[float | None] = mapped_column(Float)
    predicted_unit: Mapped[str | None] = mapped_column(String(20))
    metric: Mapped[str | None] = mapped_column(String(64))
    # A prediction by choice (which weight kind, which method): what was chosen and won.
    predicted_choice: Mapped[str | None] = mapped_column(String(64))
    actual_choice: Mapped[str | None] = mapped_column(String(64))
    actual_value: Mapped[float | None] = mapped_column(Float)
    prediction_correct: Mapped[bool | None] = mapped_column(Boolean)
    next_step: Mapped[str] = mapped_column(Text, default="")
    evidence: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class PageVisit(Base):
    """Terms read (per depth) and lessons opened or completed, for /progress."""

    __tablename__ = "page_visits"
    __table_args__ = (
        UniqueConstraint("learner_id", "kind", "slug", "detail", name="uq_page_visits"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    learner_id: Mapped[str] = mapped_column(
        ForeignKey("learners.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[str] = mapped_column(String(16))  # term | lesson | lesson-done
    slug: Mapped[str] = mapped_column(String(120))
    detail: Mapped[str] = mapped_column(String(16), default="")  # depth for terms
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class AuthSession(Base):
    """A signed-in session. The cookie carries a random token; only its SHA-256 is
    stored, so a copy of this table signs nobody in. Deleting the row ends the
    session everywhere at once (sign-out, password change, "sign out everywhere")."""

    __tablename__ = "auth_sessions"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    learner_id: Mapped[str] = mapped_column(
        ForeignKey("learners.id", ondelete="CASCADE"), index=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


class RunShare(Base):
    """A run its learner made public: anyone with the link (``/shared/<token>``) may
    read it. The token is random (256 bits); deleting the row revokes the link, and
    sharing again makes a new one, so a revoked link never comes back."""

    __tablename__ = "run_shares"

    token: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str] = mapped_column(
        ForeignKey("runs.id", ondelete="CASCADE"), unique=True, index=True
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


# Seconds a request waits for a pooled connection before it is answered 503.
POOL_TIMEOUT_S = 10
# Connections beyond one per web thread: event-stream polls and the middleware's
# session look-ups run in the same threads, so a few spare cover start-up tasks.
POOL_SPARE = 8


def insert_if_absent(session: Session, model: type[Base], index: list[str], **values: Any) -> None:
    """``INSERT … ON CONFLICT (index) DO NOTHING`` on either backend: concurrent
    inserts of the same row all succeed and leave one."""
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    session.execute(insert(model).values(**values).on_conflict_do_nothing(index_elements=index))


def make_engine(url: str, pool_size: int = 5) -> Engine:
    """An engine whose pool holds ``pool_size`` connections (plus a few spare): the
    web app passes its thread count, so a burst queues for threads, not for
    connections."""
    pool = {"pool_size": pool_size, "max_overflow": POOL_SPARE, "pool_timeout": POOL_TIMEOUT_S}
    if url.startswith("sqlite"):
        engine = create_engine(
            url, connect_args={"check_same_thread": False, "timeout": 30}, **pool
        )

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    return create_engine(url, pool_pre_ping=True, **pool)


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
