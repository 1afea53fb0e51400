"""The ``lowbit`` command line: serve, worker, migrate, content check, lab, user."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _settings():  # type: ignore[no-untyped-def]
    from pydantic import ValidationError

    from app.settings import Settings

    try:
        return Settings()
    except ValidationError as e:
        for err in e.errors():
            print(f"lowbit: configuration error: {err['msg']}", file=sys.stderr)
        raise SystemExit(2) from None


def cmd_migrate(args: argparse.Namespace) -> int:
    from app.migrate import upgrade

    settings = _settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.db_url)
    print(f"database migrated: {settings.db_url.split('@')[-1]}")
    return 0


def cmd_content_check(args: argparse.Namespace) -> int:
    from app.content import ContentError, load_catalogue
    from labs.registry import lab_ids

    settings = _settings()
    content_dir = Path(args.dir) if args.dir else settings.content_dir
    try:
        cat = load_catalogue(content_dir, lab_ids())
    except ContentError as e:
        for p in e.problems:
            print(p, file=sys.stderr)
        print(f"{len(e.problems)} problem(s) in {content_dir}", file=sys.stderr)
        return 1
    print(
        f"content OK: {len(cat.terms)} terms, {len(cat.lessons)} lessons, {len(cat.collections)} collections"
    )
    from labs.judge.check import check_all  # grades every reference solution: imports torch

    count, problems = check_all(content_dir)
    for problem in problems:
        print(f"exercises/{problem}", file=sys.stderr)
    if problems:
        print(f"{len(problems)} problem(s) in {content_dir / 'exercises'}", file=sys.stderr)
        return 1
    print(f"exercises OK: {count}, each reference solution passes every case")
    return 0


def cmd_content_figures(args: argparse.Namespace) -> int:
    """Draw the card figures (matplotlib, lazily) into content/figures/."""
    try:
        from labs.viz.cards.draw import write_figures
    except ImportError as e:  # matplotlib is in the worker extra
        print(f"lowbit: drawing figures needs matplotlib ({e})", file=sys.stderr)
        return 2
    content_dir = Path(args.dir) if args.dir else _settings().content_dir
    changed = write_figures(content_dir / "figures", check=args.check)
    if args.check and changed:
        print("out of date (run `lowbit content figures`): " + ", ".join(changed), file=sys.stderr)
        return 1
    print(("changed: " + ", ".join(changed)) if changed else "figures up to date")
    return 0


def _trim_malloc() -> None:
    """glibc only: cap malloc arenas at 2 (the threadpool's threads would otherwise each
    grow an arena of their own) and hand memory freed while loading content back to the
    system. Elsewhere, nothing."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if sys.platform != "linux" or not name:
        return
    try:
        libc = ctypes.CDLL(name)
        libc.mallopt(M_ARENA_MAX, MALLOC_ARENAS)
        libc.malloc_trim(0)
    except (OSError, AttributeError):  # not glibc (musl has no mallopt/malloc_trim)
        return


M_ARENA_MAX = -8  # glibc malloc.h
MALLOC_ARENAS = 2


def warn_if_kernel_missing() -> None:
    """At server and worker start: say loudly when the install could not build the native
    k-quant kernel (no C compiler), since every q4_k/q6_k lab then runs far slower."""
    import logging

    from labs.quant.native import missing_kernel_warning

    message = missing_kernel_warning()
    if message:
        logging.getLogger("lowbit").warning(message)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from app.content import ContentError
    from app.main import create_app
    from app.supervisor import ServerWithWorker, WorkerSupervisor

    settings = _settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        app = create_app(settings)
    except ContentError as e:
        print("lowbit: refusing to start, the content has problems:", file=sys.stderr)
        for p in e.problems:
            print(p, file=sys.stderr)
        return 1
    warn_if_kernel_missing()
    worker: WorkerSupervisor | None = None
    if args.embedded_worker:
        worker = WorkerSupervisor()
        app.state.embedded_worker = worker
        worker.start()
    _trim_malloc()
    server = ServerWithWorker(
        uvicorn.Config(
            app,
            host=args.host or settings.host,
            port=args.port or settings.port,
            log_level="warning",
            timeout_graceful_shutdown=3,
            # The app decides whom to believe (settings.trusted_proxies); uvicorn's
            # default would trust X-Forwarded-For from any local client.
            proxy_headers=False,
        ),
        worker,
    )
    try:
        server.run()
    finally:  # startup failed (port taken…) or Ctrl-C: stop() is idempotent
        if worker is not None:
            worker.stop()
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    if args.check:
        return worker_check(_settings())
    from app.logging import configure_logging
    from app.runs.worker import main

    configure_logging()
    warn_if_kernel_missing()
    return main(_settings())


def worker_check(settings) -> int:  # type: ignore[no-untyped-def]
    """Container health check: a worker on this host heartbeat within the reaper grace."""
    import socket

    from sqlalchemy import select

    from app.db import Worker, make_engine, make_sessionmaker
    from app.runs.store import worker_is_live

    engine = make_engine(settings.db_url)
    try:
        with make_sessionmaker(engine)() as s:
            alive = s.scalar(
                select(Worker.id).where(
                    Worker.host == socket.gethostname(), worker_is_live(settings)
                )
            )
    finally:
        engine.dispose()
    print("worker healthy" if alive else "no live worker on this host", file=sys.stderr)
    return 0 if alive else 1


def cmd_lab_list(args: argparse.Namespace) -> int:
    from labs.registry import all_labs
    from labs.runtime.cli import lab_list

    return lab_list(all_labs())


def cmd_lab_run(args: argparse.Namespace) -> int:
    from labs.registry import all_labs
    from labs.runtime.cli import lab_run

    return lab_run(all_labs(), args.lab, args.param or [], as_json=args.json)


def cmd_user_create(args: argparse.Namespace) -> int:
    from app.accounts import create_user_cli

    return create_user_cli(_settings(), args.username, admin=args.admin, password=args.password)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lowbit", description="lowbit: learn low-bit inference on real GPUs"
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("serve", help="run the web server")
    s.add_argument("--host")
    s.add_argument("--port", type=int)
    s.add_argument("--embedded-worker", action="store_true", help="also start a lab worker process")
    s.set_defaults(fn=cmd_serve)

    w = sub.add_parser("worker", help="run a lab worker (takes runs from the queue)")
    w.add_argument(
        "--check", action="store_true", help="exit 0 if a worker on this host heartbeats"
    )
    w.set_defaults(fn=cmd_worker)
    sub.add_parser("migrate", help="create or upgrade the database schema").set_defaults(
        fn=cmd_migrate
    )

    c = sub.add_parser("content", help="content tools")
    csub = c.add_subparsers(dest="content_cmd", required=True)
    cc = csub.add_parser("check", help="validate all term cards and lessons; exit 1 on any problem")
    cc.add_argument("--dir", help="content directory (default: settings)")
    cc.set_defaults(fn=cmd_content_check)
    cf = csub.add_parser("figures", help="draw the card figures into content/figures/")
    cf.add_argument("--dir", help="content directory (default: settings)")
    cf.add_argument("--check", action="store_true", help="write nothing; exit 1 if any differs")
    cf.set_defaults(fn=cmd_content_figures)

    lab = sub.add_parser("lab", help="run labs in the terminal")
    lsub = lab.add_subparsers(dest="lab_cmd", required=True)
    lsub.add_parser("list", help="list labs").set_defaults(fn=cmd_lab_list)
    lr = lsub.add_parser("run", help="run a lab here, with a progress bar")
    lr.add_argument("lab")
    lr.add_argument(
        "--param", action="append", metavar="K=V", help="a parameter; V is JSON when valid JSON"
    )
    lr.add_argument("--json", action="store_true", help="print the exact result as JSON")
    lr.set_defaults(fn=cmd_lab_run)

    u = sub.add_parser("user", help="accounts")
    usub = u.add_subparsers(dest="user_cmd", required=True)
    uc = usub.add_parser("create", help="create an account (asks for the password)")
    uc.add_argument("username")
    uc.add_argument("--admin", action="store_true")
    uc.add_argument("--password", help="for scripts; omit to be asked")
    uc.set_defaults(fn=cmd_user_create)

    from labs.lm.cli import add_model_commands  # torch-free until a command runs

    add_model_commands(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    rc: int = args.fn(args)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
