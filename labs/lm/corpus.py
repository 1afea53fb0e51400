"""The training corpus of ``lowbit-tiny``: Python's own documentation sources.

Debian's ``python3.11-doc`` package ships the reStructuredText sources of the
Python 3.11 documentation as ``*.rst.txt`` under ``_sources``. The text is
licensed under the PSF License Agreement (code examples are dual licensed PSF
and Zero-Clause BSD). About 500 documents, 11 MB of English prose and markup.

The split is by document, so no held-out sentence was ever trained on: every
``HELDOUT_EVERY``-th document in sorted path order is held out. Imports no torch.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_CORPUS_DIR = Path("/usr/share/doc/python3.11/html/_sources")
CORPUS_ENV = "LOWBIT_CORPUS_DIR"
HELDOUT_EVERY = 25  # 1 document in 25 (4 %) is held out
HELDOUT_MAX_CHARS = 400_000  # cap what is shipped in heldout.txt (~100 k tokens)
CORPUS_NAME = "Python 3.11 documentation sources (Debian package python3.11-doc)"
CORPUS_LICENCE = (
    "PSF License Agreement (Python documentation); examples and recipes are dual "
    "licensed under the PSF License Agreement and the Zero-Clause BSD licence"
)


@dataclass(frozen=True)
class Split:
    """Documents (texts, path-sorted) used for training and for held-out evaluation."""

    train: list[str]
    heldout: list[str]
    train_names: list[str]
    heldout_names: list[str]


def corpus_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """Where the documentation sources are: argument, then ``LOWBIT_CORPUS_DIR``, then Debian's."""
    d = Path(explicit or os.environ.get(CORPUS_ENV) or DEFAULT_CORPUS_DIR)
    if not d.is_dir():
        raise FileNotFoundError(
            f"corpus not found at {d}: install it with `apt-get install python3.11-doc` "
            f"or point {CORPUS_ENV} at a directory of *.rst.txt files"
        )
    return d


def _clean(text: str) -> str:
    """Normalise line ends and runs of blank lines; the reST markup itself is kept."""
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").split("\n")]
    out: list[str] = []
    blank = 0
    for ln in lines:
        blank = blank + 1 if not ln else 0
        if blank <= 1:
            out.append(ln)
    return "\n".join(out).strip() + "\n"


def load_split(directory: str | os.PathLike[str] | None = None) -> Split:
    """Read every ``*.rst.txt`` document and split it by document index."""
    root = corpus_dir(directory)
    files = sorted(root.rglob("*.txt"))
    if not files:
        raise FileNotFoundError(f"no *.txt documents under {root}")
    split = Split([], [], [], [])
    for i, f in enumerate(files):
        text = _clean(f.read_text(encoding="utf-8", errors="replace"))
        name = str(f.relative_to(root))
        if i % HELDOUT_EVERY == HELDOUT_EVERY // 2:
            split.heldout.append(text)
            split.heldout_names.append(name)
        else:
            split.train.append(text)
            split.train_names.append(name)
    return split


def heldout_text(split: Split) -> str:
    """The shipped ``heldout.txt``: held-out documents joined by blank lines, capped in size."""
    text = "\n\n".join(split.heldout)
    return text[:HELDOUT_MAX_CHARS]


CALIBRATION_EVERY = 12  # calibration text: every 12th training document …
CALIBRATION_MAX_CHARS = 200_000  # … up to this many characters (~50 k tokens)


def calibration_text(split: Split) -> str:
    """The shipped ``calibration.txt``: training documents only (GPTQ/AWQ calibrate on it)."""
    return "\n\n".join(split.train[::CALIBRATION_EVERY])[:CALIBRATION_MAX_CHARS]
