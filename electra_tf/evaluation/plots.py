"""Pictures of what the measuring commands print, drawn from the same rows as their tables.

One function per kind of chart; each writes a PNG (atomically, `atomic_io.write_bytes`) and
returns the closed `matplotlib.figure.Figure`, whose axes' titles and labels a test can read:

- `curve_parity`: learning curves of the original and of the project, one panel per metric
  (`tools/original_parity/curves.py`);
- `per_seed_accuracy`: the learning test's held-out accuracy per seed and arm, chance marked
  (`electra_tf/evaluation/learning_test.py`);
- `speed_bars`: a benchmark table as bars, one panel per shape (`bench/bench_train.py`,
  `bench/bench_serve.py`);
- `cost_vs_length`: cost against sequence length, one line per system (`bench/cost_curve.py`).

matplotlib is imported inside the functions, with the Agg backend (no display needed): importing
this module, or the project's training and serving code, does not load it. (TensorFlow 2.20
itself would, at `import tensorflow`, through Keras 3; the commands start TensorFlow with
TF_USE_LEGACY_KERAS=1, `electra_tf/runtime/tf_startup.py`, and tests/test_plots.py checks them so.)
The pictures are small (`FIGSIZE`
inches at `DPI`, a 128-colour palette: 10 to 45 KB) so that they can be committed beside the
text.
"""

from __future__ import annotations

import io
import os
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from electra_tf.runtime import atomic_io

FIGSIZE = (9.0, 6.0)  # inches
DPI = 100
# Tab10's first colours: the original, the project, then each mutated run.
ORIGINAL, PROJECT, OUTSIDE = "tab:blue", "tab:orange", "tab:red"
EXTRA = ("tab:green", "tab:purple", "tab:brown", "tab:pink")
METRIC_TITLES = {
    "total_loss": "total loss",
    "masked_lm_accuracy": "masked-LM accuracy (generator)",
    "disc_accuracy": "discriminator accuracy",
    "disc_auc": "discriminator AUC",
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save(figure, path: str):
    """Writes `figure` to `path` as a PNG (atomically) and closes it; returns it."""
    from PIL import Image  # matplotlib's own dependency

    plt = _pyplot()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    plt.close(figure)
    # A 128-colour palette: a third of the RGBA file's bytes, the same picture to the eye.
    image = Image.open(buffer).convert("RGB").quantize(128, Image.Quantize.MEDIANCUT)
    buffer = io.BytesIO()
    image.save(buffer, format="png", optimize=True)
    atomic_io.write_bytes(path, buffer.getvalue())
    return figure


def png_path(png: str | None, *beside: str | None) -> str | None:
    """Where a command draws: `png` (its --png) if given, else the first of `beside` (its
    --json) with `.png` for its extension, else nowhere (None)."""
    if png:
        return png
    first = next((path for path in beside if path), None)
    return os.path.splitext(first)[0] + ".png" if first else None


def _wrapped(text: str, width: int = 110) -> str:
    return "\n".join(textwrap.wrap(text, width)) if text else ""


def curve_parity(
    path: str,
    steps: Sequence[int],
    original: Mapping[str, Sequence[Sequence[float]]],
    project: Mapping[str, Sequence[Sequence[float]]],
    bands: Mapping[str, Mapping[str, Any]],
    mutations: Sequence[tuple[str, Mapping[str, Sequence[Sequence[float]]]]] = (),
    project_label: str = "electra-tf",
    title: str = "",
):
    """Curve parity: a panel per metric of `bands` (in its order), each with the original's
    band shaded (`bands[m]["lo"]` to `["hi"]`: curves.band_check's), one line per seed of
    each side, the project's mean, and a cross where that mean is outside the band
    (`bands[m]["inside"]` false).

    Args:
        steps: the sample steps [points].
        original, project: {metric: [seeds][points]}.
        mutations: (label, {metric: [seeds][points]}) of mutated project runs, each drawn in a
            colour of its own.
    """
    plt = _pyplot()
    names = list(bands)
    rows = -(-len(names) // 2)
    figure, axes = plt.subplots(rows, 2, figsize=FIGSIZE, squeeze=False, layout="constrained")
    for ax, name in zip(axes.flat, names, strict=False):
        band = bands[name]
        ax.fill_between(steps, band["lo"], band["hi"], color=ORIGINAL, alpha=0.2,
                        linewidth=0, label="original's band")  # fmt: skip
        for i, values in enumerate(original[name]):
            ax.plot(steps, values, color=ORIGINAL, linewidth=0.8,
                    label="original, one line per seed" if i == 0 else None)  # fmt: skip
        for i, values in enumerate(project[name]):
            ax.plot(steps, values, color=PROJECT, linewidth=0.8, alpha=0.7,
                    label=f"{project_label}, one line per seed" if i == 0 else None)  # fmt: skip
        mean = band["project_mean"]
        ax.plot(steps, mean, color=PROJECT, linewidth=2, label=f"{project_label}, mean")
        out = [i for i, inside in enumerate(band["inside"]) if not inside]
        ax.plot([steps[i] for i in out], [mean[i] for i in out], "x", color=OUTSIDE,
                markersize=9, markeredgewidth=2, label="mean outside the band")  # fmt: skip
        for (label, curves), colour in zip(mutations, EXTRA, strict=False):
            for i, values in enumerate(curves[name]):
                ax.plot(steps, values, color=colour, linewidth=0.8, linestyle="--",
                        label=f"{label}, one line per seed" if i == 0 else None)  # fmt: skip
        ax.set_title(METRIC_TITLES.get(name, name))
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax in axes.flat[len(names) :]:
        ax.set_visible(False)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=8)
    figure.suptitle(_wrapped(title, 100), fontsize=10)
    return save(figure, path)


def per_seed_accuracy(
    path: str,
    results: Mapping[Any, Mapping[str, float]],
    columns: Sequence[tuple[str, str]],
    chance: float,
    title: str = "",
):
    """The learning test: a dot per seed and arm (`columns`: (key of `results[seed]`, label)),
    each seed's dots joined across the arms, the mean of each arm as a bar, chance as a line.

    Args:
        results: {seed: {column key: held-out accuracy}}.
    """
    plt = _pyplot()
    figure, ax = plt.subplots(figsize=(8.0, 5.0), layout="constrained")
    xs = range(len(columns))
    for seed, result in results.items():
        ax.plot(xs, [result[key] for key, _ in columns], marker="o", linewidth=0.8, alpha=0.8,
                label=f"seed {seed}")  # fmt: skip
    for x, (key, _) in zip(xs, columns, strict=True):
        mean = sum(r[key] for r in results.values()) / len(results)
        ax.hlines(mean, x - 0.25, x + 0.25, color="black", linewidth=2,
                  label="mean over seeds" if x == 0 else None)  # fmt: skip
    ax.axhline(chance, color="grey", linestyle="--", label=f"chance ({chance:g})")
    ax.set_xticks(list(xs), [label for _, label in columns])
    ax.set_xlabel("initialisation of the classifier")
    ax.set_ylabel("held-out accuracy")
    ax.set_ylim(min(0.0, chance - 0.1), 1.02)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(_wrapped(title, 90), fontsize=10)
    return save(figure, path)


def speed_bars(
    path: str,
    panels: Mapping[str, Sequence[tuple[str, float, str]]],
    value_label: str,
    title: str = "",
):
    """A benchmark table as horizontal bars: a panel per entry of `panels` ({panel title:
    [(row label, value, group)]}), bars coloured by group (this project, a peer), each bar's
    value written at its end; `title` (the table's processor line) above."""
    plt = _pyplot()
    groups = list(dict.fromkeys(g for bars in panels.values() for _, _, g in bars))
    colours = dict(zip(groups, (PROJECT, ORIGINAL, *EXTRA), strict=False))
    rows = max(len(bars) for bars in panels.values()) if panels else 1
    height = min(FIGSIZE[1] * 1.5, 1.6 + 0.32 * rows * len(panels))
    figure, axes = plt.subplots(len(panels) or 1, 1, figsize=(FIGSIZE[0], height),
                                squeeze=False, layout="constrained")  # fmt: skip
    for ax, (name, bars) in zip(axes.flat, panels.items(), strict=False):
        labels = [label for label, _, _ in bars][::-1]  # the table's first row on top
        values = [value for _, value, _ in bars][::-1]
        drawn = ax.barh(labels, values, color=[colours[g] for _, _, g in bars][::-1])
        ax.bar_label(drawn, fmt="%.4g", padding=3, fontsize=8)
        ax.set_title(name, fontsize=10)
        ax.set_xlabel(value_label)
        ax.set_xlim(0, max(values, default=1) * 1.15)
        ax.tick_params(axis="y", labelsize=8)
        ax.grid(axis="x", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[g]) for g in groups]
    figure.legend(handles, groups, loc="outside lower center", ncol=len(groups) or 1, fontsize=8)
    figure.suptitle(_wrapped(title), fontsize=8)
    return save(figure, path)


def cost_vs_length(
    path: str,
    panels: Sequence[tuple[str, str, Mapping[str, Mapping[int, float]]]],
    title: str = "",
):
    """Cost against sequence length: a panel per (title, y label, {system: {length: value}}),
    one line per system; lengths missing for a system are left out of its line."""
    plt = _pyplot()
    figure, axes = plt.subplots(1, len(panels), figsize=(FIGSIZE[0], 4.5), squeeze=False,
                                layout="constrained")  # fmt: skip
    # A system keeps its colour in every panel.
    systems_seen = dict.fromkeys(system for _, _, systems in panels for system in systems)
    colours = dict(zip(systems_seen, (PROJECT, ORIGINAL, *EXTRA), strict=False))
    for ax, (name, y_label, systems) in zip(axes.flat, panels, strict=True):
        lengths = sorted({seq for by_seq in systems.values() for seq in by_seq})
        for system, by_seq in systems.items():
            points = sorted((s, v) for s, v in by_seq.items() if v is not None)
            ax.plot([s for s, _ in points], [v for _, v in points], marker="o",
                    color=colours.get(system), label=system)  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_xticks(lengths, [str(s) for s in lengths])
        ax.minorticks_off()
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("sequence length")
        ax.set_ylabel(y_label)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    figure.suptitle(_wrapped(title), fontsize=8)
    return save(figure, path)
