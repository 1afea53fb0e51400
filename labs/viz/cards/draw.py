"""Draw the card figures with matplotlib (object API, no pyplot state) as SVG.

Imported only by ``lowbit content figures`` and the tests: the web process serves the
committed files and never imports matplotlib. Every number drawn comes from the figure's
``FigureData`` (``labs.viz.cards.data``); colours and rcParams come from
``labs.viz.theme`` (``PALETTE``, ``CARD_RC``), so that ``finish_svg`` can recolour them
for dark mode. Sizes are in inches at 72 pt.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from labs.viz.cards import DRAWN_WITH_ATTR, FIGURES, FINGERPRINT_ATTR
from labs.viz.cards.data import FigureData, Segment
from labs.viz.cards.svg import finish_svg
from labs.viz.theme import CARD_RC, PALETTE

C = {name: light for name, (light, _) in PALETTE.items()}
BINADE_COLOURS = ("orange", "blue", "green", "purple")
ROLE_COLOURS = {"scale": "orange", "min": "purple", "sub": "green", "codes": "blue"}
GPU_COLOURS = ("blue", "orange", "green")


def _e2m1(fig: Any, d: FigureData) -> None:
    values = cast(tuple[float, ...], d.extra["values"])
    ax = fig.subplots()
    ax.axhline(0, color=C["muted"], linewidth=1)
    for code, v in enumerate(values):
        binade = max(0, code >> 1)  # E2M1: exponent field = code >> 1 (one mantissa bit)
        colour = C[BINADE_COLOURS[binade]]
        for sign, s in ((1, 0), (-1, 8)):
            if v == 0 and sign < 0:
                continue
            x = sign * v
            ax.plot([x], [0], "o", color=colour, markersize=7)
            ax.text(x, -0.32, f"{x:g}", ha="center", va="top", fontsize=9)
            ax.text(x, 0.3, f"{code + s:04b}", ha="center", va="bottom", fontsize=7,
                    color=C["muted"], rotation=90)  # fmt: skip
    spans = (
        (0, 1, "subnormal", 0),
        (1, 2, "step 0.5", 1),
        (2, 4, "step 1", 2),
        (4, 6, "step 2", 3),
    )
    for lo, hi, label, b in spans:
        colour = C[BINADE_COLOURS[b]]
        ax.plot([lo, hi], [1.15, 1.15], color=colour, linewidth=3, solid_capstyle="butt")
        ax.text((lo + hi) / 2, 1.3, label, ha="center", va="bottom", fontsize=8, color=colour)
    ax.text(-3.25, 1.3, "negative codes: sign bit set (1xxx)", ha="center", va="bottom",
            fontsize=8, color=C["muted"])  # fmt: skip
    ax.set_xlim(-6.6, 6.6)
    ax.set_ylim(-0.9, 1.7)
    ax.set_yticks([])
    ax.set_xticks([])
    for side in ("left", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_title(f"E2M1: {int(d.numbers['count'])} magnitudes, 15 distinct values, "
                 f"max {d.numbers['max']:g}; code = sign · exponent(2) · mantissa(1)",
                 fontsize=9.5)  # fmt: skip


def _block_row(ax: Any, y: float, segs: tuple[Segment, ...], blocks: int) -> float:
    """Draw ``blocks`` blocks of ``segs`` along row ``y`` (separate-tensor bytes after a
    gap, as their own tensor); return the x where the row ends, in bytes."""
    x = 0.0
    inline = [s for s in segs if not s.separate]
    apart = [s for s in segs if s.separate]
    for _ in range(blocks):
        for s in inline:
            ax.barh(y, s.nbytes, left=x, height=0.6, color=C[ROLE_COLOURS[s.role]],
                    edgecolor=C["bg"], linewidth=0.6)  # fmt: skip
            x += s.nbytes
    if apart:
        x += 4  # a visible gap: another tensor
        ax.text(x, y - 0.36, "scale tensor", fontsize=7, color=C["muted"], va="bottom")
        for _ in range(blocks):
            for s in apart:
                ax.barh(y, s.nbytes, left=x, height=0.6, color=C[ROLE_COLOURS[s.role]],
                        edgecolor=C["bg"], linewidth=0.6)  # fmt: skip
                x += s.nbytes
    return x


def _blocks(fig: Any, d: FigureData) -> None:
    layouts = cast(dict[str, tuple[Segment, ...]], d.extra["layouts"])
    values = int(max(d.numbers[f"{k}_block_size"] for k in layouts))  # one q4_k super-block
    ax = fig.subplots()
    names = list(layouts)
    for i, key in enumerate(names):
        segs = layouts[key]
        size = int(d.numbers[f"{key}_block_size"])
        end = _block_row(ax, i, segs, values // size)
        total = d.numbers[f"{key}_block_bytes"]
        note = f"{total:g} B per {size} values = {d.numbers[f'{key}_bits_per_value']:g} bits/value"
        ax.text(end + 3, i, note, va="center", fontsize=8)
    ax.set_yticks(range(len(names)), [n.upper() for n in names])
    ax.invert_yaxis()
    ax.set_xlim(0, 250)
    ax.set_xlabel(f"bytes that store {values} values (one Q4_K super-block)")
    ax.spines["left"].set_visible(False)
    ax.tick_params(axis="y", length=0)
    from matplotlib.patches import Patch

    labels = {
        "scale": "block scale (d, E4M3, E8M0)",
        "min": "block min (dmin)",
        "sub": "6-bit sub-block scales + mins",
        "codes": "4-bit codes",
    }
    legend = [Patch(color=C[ROLE_COLOURS[r]], label=t) for r, t in labels.items()]
    ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.28), ncol=4,
              frameon=False, fontsize=8, handlelength=1.2)  # fmt: skip
    ax.set_title("Scales inside each block (GGUF) or in a tensor of their own (NVFP4, MXFP4)",
                 fontsize=9.5)  # fmt: skip


def _roofline(fig: Any, d: FigureData) -> None:
    import numpy as np

    from labs.viz.cards.data import ROOFLINE_GPUS

    ax = fig.subplots()
    xs = np.logspace(-1, 4, 200)
    for gid, colour in zip(ROOFLINE_GPUS, GPU_COLOURS, strict=True):
        peak = d.numbers[f"{gid}_peak_tflops"]
        bw = d.numbers[f"{gid}_bandwidth_tb_s"]  # TB/s × FLOP/byte = TFLOP/s
        ridge = d.numbers[f"{gid}_ridge"]
        ax.plot(xs, np.minimum(peak, xs * bw), color=C[colour], linewidth=2,
                label=f"{gid.upper()}: {peak:g} TFLOP/s, {bw:g} TB/s")  # fmt: skip
        ax.plot([ridge], [peak], "o", color=C[colour], markersize=6)
        above = gid == "h200"  # H100 and H200 share a peak: one label above, one below
        ax.annotate(f"ridge {ridge:.0f}", (ridge, peak), textcoords="offset points",
                    xytext=(-5, 6) if above else (6, -13), ha="right" if above else "left",
                    fontsize=8, color=C[colour])  # fmt: skip
    ax.axvline(1, color=C["muted"], linestyle="--", linewidth=1)
    ax.text(1.12, 0.03, "decode, batch 1,\nbf16 weights: ~1 FLOP/byte", fontsize=8,
            color=C["muted"], va="bottom")  # fmt: skip
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(0.1, 1e4)
    ax.set_ylim(0.02, 3000)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable TFLOP/s (dense bf16)")
    ax.grid(True, which="major", linewidth=0.6)
    ax.legend(loc="lower right", frameon=False, fontsize=8)
    ax.set_title("min(peak, intensity × bandwidth): left of the ridge, bandwidth decides",
                 fontsize=9.5)  # fmt: skip


def _kv_page(fig: Any, d: FigureData) -> None:
    from matplotlib.patches import Rectangle

    n = d.numbers
    tokens, heads = int(n["block_tokens"]), int(n["num_kv_heads"])
    used = int(n["last_block_used"])
    ax = fig.subplots()
    for t in range(tokens):
        for r in range(2 * heads):
            role = "blue" if r < heads else "orange"
            face = C[role] if t < used else C["soft"]
            ax.add_patch(Rectangle((t, r), 1, 1, facecolor=face, edgecolor=C["bg"],
                                   linewidth=0.8))  # fmt: skip
    for r in range(2 * heads):
        ax.text(-0.3, r + 0.5, f"{'KV'[r // heads]} head {r % heads}", ha="right",
                va="center", fontsize=7)  # fmt: skip
    for t in range(tokens):
        ax.text(t + 0.5, 2 * heads + 0.3, str(t), ha="center", va="top", fontsize=7,
                color=C["muted"])  # fmt: skip
    ax.text(tokens / 2, 2 * heads + 1.3, "token slot in the block", ha="center", fontsize=8,
            color=C["muted"])  # fmt: skip
    notes = (
        f"one cell: {int(n['head_dim'])} dims × {int(n['element_bytes'])} B "
        f"= {int(n['head_vector_bytes'])} B",
        f"one slot (column): {2 * heads} cells = {int(n['bytes_per_token'] / n['num_layers']):,} B",
        f"one block, one layer: {int(n['layer_block_bytes']) // 1024} KiB",
        f"× {int(n['num_layers'])} layers = {n['block_bytes'] / 2**20:g} MiB per block",
        f"a {int(n['sequence_tokens'])}-token sequence: {int(n['sequence_blocks'])} blocks,",
        f"last one {used} of {tokens} slots used (shaded: empty)",
    )
    for i, line in enumerate(notes):
        ax.text(tokens + 0.8, 1 + i * 1.6, line, fontsize=8, va="center")
    ax.set_xlim(-3.2, tokens + 11.5)
    ax.set_ylim(2 * heads + 1.9, -0.3)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"The last KV block of a sequence, one layer of {d.extra['model_name']} "
                 f"(bf16): K (blue) and V (orange) per KV head", fontsize=9.5)  # fmt: skip


DRAW: dict[str, tuple[Callable[[Any, FigureData], None], tuple[float, float]]] = {
    "e2m1-grid": (_e2m1, (8.0, 2.6)),
    "block-bytes": (_blocks, (8.0, 3.0)),
    "roofline": (_roofline, (7.0, 4.2)),
    "kv-page": (_kv_page, (8.0, 4.0)),
}


def render_svg(name: str) -> str:
    """The finished SVG text of figure ``name`` (deterministic: same library, same bytes)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    data = FIGURES[name]()
    draw, size = DRAW[name]
    with matplotlib.rc_context(cast(Any, CARD_RC)):
        fig = Figure(figsize=size, layout="constrained")
        draw(fig, data)
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    return finish_svg(
        buf.getvalue(),
        title=data.title,
        attrs={FINGERPRINT_ATTR: data.fingerprint, DRAWN_WITH_ATTR: drawn_with()},
    )


def drawn_with() -> str:
    """The drawing library and its version, as recorded in each figure."""
    import matplotlib

    return f"matplotlib {matplotlib.__version__}"


def write_figures(out_dir: Path, check: bool = False) -> list[str]:
    """Draw every figure into ``out_dir/<name>.svg``; return the names whose file was (or,
    with ``check``, would be) changed. With ``check`` nothing is written."""
    changed = []
    for name in FIGURES:
        svg = render_svg(name)
        path = out_dir / f"{name}.svg"
        if not path.exists() or path.read_text(encoding="utf-8") != svg:
            changed.append(name)
            if not check:
                out_dir.mkdir(parents=True, exist_ok=True)
                path.write_text(svg, encoding="utf-8")
    return changed
