"""The trajectory check's verdict: per-step tolerance bands from the float32 drift of the
original (trajectory.py's docstring states the rule), the PARITY line, and the per-step table.
Pure functions of the recorded curves (no TensorFlow).
"""

from __future__ import annotations

import csv

from tools.original_parity.runtime import log

LOSSES = ("total", "generator", "discriminator")


def running_max(values):
    out, top = [], 0.0
    for v in values:
        top = max(top, float(v))
        out.append(top)
    return out


def tolerance_band(drift, factor: float, floor) -> list[float]:
    """tol(t) = factor * max_{s<=t} drift(s) + floor(t); `floor` a number or one per step."""
    floors = floor if isinstance(floor, list | tuple) else [floor] * len(drift)
    return [factor * m + f for m, f in zip(running_max(drift), floors, strict=True)]


def outside(dev: list[float], band: list[float]) -> tuple[list[int], float]:
    """The steps whose deviation is outside the band (NaN counts as outside), and the largest
    deviation / band ratio over the steps with a band above 0."""
    bad = [t for t in range(len(dev)) if not dev[t] <= band[t]]
    ratios = [d / b for d, b in zip(dev, band, strict=True) if b > 0]
    return bad, max(ratios, default=0.0)


def evaluate(curves: dict, factor: float, loss_rtol: float, weight_floor: float) -> dict:
    """The verdict from per-step curves: `project_<loss>`, `original_<loss>`,
    `reference_<loss>` (the perturbed original) for each of LOSSES, `weight_distance`
    (project vs original) and `reference_weight_distance`. Returns bands, worst ratios and
    `failures` (one line per quantity: its first step outside the band)."""
    out = {"failures": [], "max_loss_deviation": 0.0, "max_weight_distance": 0.0, "bands": {}}
    steps = len(curves["weight_distance"])
    worst_ratio = 0.0
    for name in LOSSES:
        ref = [
            abs(a - b)
            for a, b in zip(curves[f"original_{name}"], curves[f"reference_{name}"], strict=True)
        ]
        dev = [
            abs(a - b)
            for a, b in zip(curves[f"project_{name}"], curves[f"original_{name}"], strict=True)
        ]
        band = tolerance_band(ref, factor, [loss_rtol * abs(x) for x in curves[f"original_{name}"]])
        out["bands"][name] = band
        out[f"deviation_{name}"] = dev
        out["max_loss_deviation"] = max(out["max_loss_deviation"], max(dev, default=0.0))
        bad, ratio = outside(dev, band)
        worst_ratio = max(worst_ratio, ratio)
        if bad:
            t = bad[0]
            out["failures"].append(
                f"{name} loss: {len(bad)} step(s) outside the band, first at step {t}: "
                f"|project - original| {dev[t]:.3e} > tol {band[t]:.3e} (project {curves[f'project_{name}'][t]:.6f}, "
                f"original {curves[f'original_{name}'][t]:.6f})"
            )
    dev = list(curves["weight_distance"])
    band = tolerance_band(curves["reference_weight_distance"], factor, weight_floor)
    out["bands"]["weights"] = band
    out["max_weight_distance"] = max(dev, default=0.0)
    bad, ratio = outside(dev, band)
    worst_ratio = max(worst_ratio, ratio)
    if bad:
        t = bad[0]
        out["failures"].append(
            f"weights: {len(bad)} step(s) outside the band, first after step {t}: max|project - "
            f"original| {dev[t]:.3e} > tol {band[t]:.3e}"
        )
    out["worst_ratio"] = worst_ratio
    out["final_loss_band"] = {name: out["bands"][name][-1] for name in LOSSES} if steps else {}
    out["final_weight_band"] = band[-1] if steps else 0.0
    return out


def verdict_line(result: dict, factor: float) -> str:
    tol = (
        f"tolerance {factor:g} x running max of the 1-ulp-per-step drift of the original + floor "
        f"(at the last step: losses {', '.join(f'{k} {v:.2e}' for k, v in result['final_loss_band'].items())}; "
        f"weights {result['final_weight_band']:.2e}); worst deviation / band {result['worst_ratio']:.2f}"
    )
    if result["failures"]:
        return f"PARITY FAILED ({len(result['failures'])} quantity(ies) outside the band; {tol})"
    return (
        f"PARITY OK (max per-step loss deviation {result['max_loss_deviation']:.3e}, max weight "
        f"distance {result['max_weight_distance']:.3e}, {tol})"
    )


def max_distance(a: dict, b: dict, np) -> float:
    return max(float(np.max(np.abs(a[n].astype(np.float64) - b[n]))) for n in a)


def report(result: dict, factor: float) -> int:
    """Prints the verdict (and failures); the exit status."""
    log("")
    for line in result["failures"]:
        log(f"  - {line}")
    log(verdict_line(result, factor))
    return 1 if result["failures"] else 0


def write_csv(path, curves, result):
    names = ["step", "lr"]
    for n in LOSSES:
        names += [f"{n}_project", f"{n}_original", f"{n}_deviation", f"{n}_tolerance"]
    names += [
        "weight_distance",
        "weight_tolerance",
        "reference_drift_loss_total",
        "reference_drift_weights",
    ]
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(names)
        for t in range(len(curves["weight_distance"])):
            row = [t, curves["lr_original"][t]]
            for n in LOSSES:
                row += [
                    curves[f"project_{n}"][t],
                    curves[f"original_{n}"][t],
                    result[f"deviation_{n}"][t],
                    result["bands"][n][t],
                ]
            row += [curves["weight_distance"][t], result["bands"]["weights"][t],
                    abs(curves["original_total"][t] - curves["reference_total"][t]), curves["reference_weight_distance"][t]]  # fmt: skip
            w.writerow(row)
