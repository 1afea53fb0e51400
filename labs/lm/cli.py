"""``lowbit model …``: train the shipped model (imports torch only when a command runs)."""

from __future__ import annotations

import argparse
from dataclasses import fields, replace
from pathlib import Path


def cmd_train(args: argparse.Namespace) -> int:
    from labs.lm.train import MODEL_DIR, TrainConfig, train

    cfg = TrainConfig()
    changes = {
        f.name: getattr(args, f.name)
        for f in fields(TrainConfig)
        if f.name != "extra" and getattr(args, f.name, None) is not None
    }
    train(Path(args.out) if args.out else MODEL_DIR, replace(cfg, **changes), args.corpus)
    return 0


def add_model_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``model train`` to the ``lowbit`` command line."""
    from labs.lm.train import TrainConfig

    m = sub.add_parser("model", help="the shipped language model (lowbit-tiny)")
    msub = m.add_subparsers(dest="model_cmd", required=True)
    t = msub.add_parser(
        "train",
        help="train lowbit-tiny from scratch on Python's documentation (apt-get install "
        "python3.11-doc); about an hour on one CPU thread",
    )
    t.add_argument("--out", help="output directory (default: labs/lm/lowbit-tiny)")
    t.add_argument("--corpus", help="directory of *.rst.txt (default: Debian's python3.11-doc)")
    for f in fields(TrainConfig):
        if f.type in ("int", "float"):
            t.add_argument(
                f"--{f.name.replace('_', '-')}",
                dest=f.name,
                type=int if f.type == "int" else float,
                help=f"default {getattr(TrainConfig(), f.name)}",
            )
    t.set_defaults(fn=cmd_train)
