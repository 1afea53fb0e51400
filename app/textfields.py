"""What a learner types is refused when it is longer than its field allows, with
the limit named, and never cut: a cut value would be stored, checked or graded as
something the learner did not write. Forms keep their ``maxlength`` attributes as
a convenience; this is the check that holds when a client bypasses them."""

from __future__ import annotations


def too_long(label: str, value: str, limit: int) -> str | None:
    """The message for ``value`` when it has more than ``limit`` characters, else None.
    ``label`` starts the sentence ("Your next step")."""
    if len(value) <= limit:
        return None
    return f"{label} can be at most {limit:,} characters; this one has {len(value):,}."
