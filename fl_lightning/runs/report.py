"""``fl-lightning report RUNS... [--target ACC] [--out PREFIX]``: runs → the paper's tables and plots.

A run is a directory with ``version_N/metrics.csv``, or one ``version_N`` directory given itself, or a folder
with its own metrics.csv (a W&B run's ``<save_dir>/<project>/<id>``).
A resumed run writes several versions: they are read as one curve (a later version's row
replacing an earlier one's for the same round) only when they are the same run — the same run id
at the top of their config.yaml (fl_lightning.runs.identity; for older runs, the same settings);
otherwise the report stops with one line naming them. validate/test outputs (no rounds) are
ignored and named. A run that did not end (its fit still holds ``.fit.lock``, or it logged fewer rounds than planned
and no budget stopped it) is left out with one line naming it (``rounds 4/10, unfinished``); with
``--unfinished include`` it is kept and its group's label says so. Without ``--target`` the table gives the final
and best accuracy (no floats to target). Runs are grouped by every model and data setting in their ``config.yaml``
that differs between them, except the seed; per group: mean ± sample std over seeds of the final and best val/acc and of the floats
to reach the target, as Markdown, CSV and LaTeX (groups as rows, the paper's "acc ± std (d)"),
and a PNG of val/acc against comm/upload_d — mean line, band of ± one std over seeds.

Floats to target, two ways (docs/sweep_and_report.md, "Grids of runs"):
* first touch: comm/upload_d at the first evaluation with val/acc ≥ target;
* sustained: the first evaluation from which the running mean of the last ``k`` evaluations
  stays ≥ target until the end of the run. Accuracy of the block algorithms swings from round
  to round, so a single lucky evaluation says little; verdicts use the sustained number.
∞ when never reached; a group's mean is ∞ if any seed never reached it.
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
from pathlib import Path
from typing import Optional

from fl_lightning.errors import ConfigError, check_accuracy
from fl_lightning.runs.baselines import LOCAL_KEYS, PRIOR_KEYS, add_baselines
from fl_lightning.runs.figures import AXES, X_AXES, colour_of, finish
from fl_lightning.runs.reading import (check_one_run, find_runs, is_fit, merge_note, numeric_order,  # noqa: F401
                                       read_curve, read_settings, unfinished, version_id, version_number)
from fl_lightning.runs.pval_histogram import write_histogram



def reaches(value: float, target: float, mode: str) -> bool:
    return value <= target if mode == "min" else value >= target


def column(metric: str) -> str:
    """val/acc → val_acc (the paper's columns); any other logged metric by its own name."""
    return metric.replace("/", "_")


def floats_to_target(evaluated: list[dict], target: float, window: int, x_key: str = "comm/upload_d",
                     metric: str = "val/acc", mode: str = "max") -> tuple[float, float]:
    """(first touch, sustained) ``x_key`` (comm/upload_d; time/sim_s: time to target) to ``target``; inf when never."""
    accuracy = [r[metric] for r in evaluated]
    first = next((r[x_key] for r in evaluated if reaches(r[metric], target, mode)), math.inf)
    means = [statistics.fmean(accuracy[max(0, i - window + 1):i + 1]) for i in range(len(accuracy))]
    sustained = math.inf
    for i in range(len(means) - 1, -1, -1):
        if not reaches(means[i], target, mode):
            break
        sustained = evaluated[i][x_key]
    return first, sustained


def summarise(curve: list[dict], target: Optional[float], window: int, budgets: list[float], metric: str = "val/acc",
              mode: str = "max") -> dict:
    evaluated, c, best = [r for r in curve if metric in r], column(metric), min if mode == "min" else max
    first, sustained = floats_to_target(evaluated, target, window, metric=metric, mode=mode) if target is not None \
        else (math.nan, math.nan)
    if curve[-1]["comm/upload_d"] == 0:  # uploads nothing (centralised SGD): no floats to count
        first = sustained = math.nan
    summary = {"rounds": curve[-1]["round"], "upload_d_total": curve[-1]["comm/upload_d"],
               f"final_{c}": evaluated[-1][metric], f"best_{c}": best(r[metric] for r in evaluated),
               **({"d_to_target_first": first, "d_to_target_sustained": sustained} if target is not None else {})}
    for budget in budgets:
        within = [r for r in evaluated if r["comm/upload_d"] <= budget + 1e-9]
        reached = evaluated[-1]["comm/upload_d"] >= budget - 1e-6
        summary[f"{'acc' if c == 'val_acc' else c}_at_{budget:g}d"] = within[-1][metric] if within and reached else math.nan
        if "train/objective" in evaluated[-1]:
            summary[f"objective_at_{budget:g}d"] = within[-1]["train/objective"] if within and reached else math.nan
    if "time/sim_s" in evaluated[-1] and target is not None:  # simulated seconds to the target, first and sustained
        summary["sim_s_to_target_first"], summary["sim_s_to_target_sustained"] = floats_to_target(
            evaluated, target, window, "time/sim_s", metric, mode)
    if "train/objective" in evaluated[-1]:
        summary["final_train_objective"] = evaluated[-1]["train/objective"]
    if "privacy/epsilon" in curve[-1]:  # the client-level ε spent by the end, its δ and how clients were sampled
        summary["final_epsilon"], summary["delta"] = curve[-1]["privacy/epsilon"], curve[-1]["privacy/delta"]
        summary["sampling"] = "poisson" if curve[-1].get("privacy/poisson") == 1 else "fixed"
        if "privacy/poisson" not in curve[-1]:  # logged before accounting version 2 (docs/privacy.md)
            summary["sampling"] = "fixed; its logged ε under-reports (old accounting)"
    personal = [r for r in curve if "pval/acc_mean" in r]  # the clients' own models on their own data
    if personal:
        summary.update({f"final_pval_{k}": personal[-1][f"pval/{k}"] for k in ("acc_mean", "acc_p10", "acc_std")})
        if "pval_new/acc_mean" in personal[-1]:  # clients that never trained, after fine-tuning
            summary["final_pval_new_acc_mean"] = personal[-1]["pval_new/acc_mean"]
    return summary


def setting_label(key: str, value) -> str:
    """``server_momentum=0.8``; a class path as its owner and class name: ``algorithm=FedBCGD``."""
    if key == "trainer.callbacks" and isinstance(value, list):  # callbacks=Proximal(mu=0.1)
        return "callbacks=" + "+".join(
            f"{str(c.get('class_path')).rsplit('.', 1)[-1]}({','.join(f'{k}={v}' for k, v in (c.get('init_args') or {}).items())})"
            for c in value)
    if key.endswith(".class_path"):
        return f"{key.split('.')[-2]}={str(value).rsplit('.', 1)[-1]}"
    return f"{key.split('.')[-1]}={value}"


def without_seed(name: str) -> str:
    """A folder's name less its seed (``seed_everything=N`` of a sweep, ``seed=N`` of a fit's label)."""
    return ",".join(p for p in name.split(",") if not p.startswith(("seed_everything=", "seed=")))


def place(run: Path) -> str:
    """The nearest folder above a run's that says more than a seed (``quickstart`` of
    ``runs/quickstart/seed_everything=0/fedavg,seed=0``)."""
    return next((without_seed(p.name) for p in run.parents if without_seed(p.name)), run.parent.name)


def group_runs(runs: dict[Path, Optional[dict]], by_dir: bool = False) -> dict[str, list[Path]]:
    """Label → runs: the settings that differ between runs (the seed and logging aside), or with
    ``by_dir`` the run's folders below the runs' common folder, less their seeds (``seed_everything=N``,
    ``seed=N``): ``X/<label>`` of a fit named X (runs/X/<label>/version_N)."""
    if by_dir:
        groups: dict[str, list[Path]] = {}
        root = Path(os.path.commonpath([str(run.resolve().parent) for run in runs])) if runs else Path(".")
        for run in runs:
            parts = [without_seed(part) for part in run.resolve().relative_to(root).parts]
            groups.setdefault("/".join(part for part in parts if part) or run.name, []).append(run)
        return groups
    keys = set()
    for settings in runs.values():
        keys |= set(settings or {})
    keys = {k for k in keys if k.startswith(("model.", "data.", "trainer."))}
    differing = sorted(k for k in keys if len({repr((s or {}).get(k)) for s in runs.values()}) > 1)
    if "model.algorithm.class_path" in differing:  # options only some algorithms have say nothing more
        differing = [k for k in differing if not k.startswith("model.algorithm.init_args.")
                     or all((s or {}).get(k) is not None for s in runs.values())]
    groups = {}
    for run, settings in runs.items():
        if settings is None:
            label = run.name
        else:
            parts = [setting_label(k, settings.get(k)) for k in differing if settings.get(k) is not None
                     and not without_effect(k, settings)]
            for key in differing:  # an option set on other runs only, as a whole (model.privacy.*): "privacy=none"
                owner = ".".join(key.split(".")[:2])
                if key.count(".") > 1 and not any(k.startswith(owner + ".") and v is not None for k, v in settings.items()):
                    parts += [] if f"{owner.split('.')[-1]}=none" in parts else [f"{owner.split('.')[-1]}=none"]
            label = ", ".join(parts) or place(run)
        groups.setdefault(label, []).append(run)
    return groups


def without_effect(key: str, settings: dict) -> bool:
    """A setting that changes nothing in this run: adaptive clipping's step and count noise without adaptive clipping."""
    return key.endswith(("privacy.clip_lr", "privacy.count_noise")) and \
        settings.get(key.rsplit(".", 1)[0] + ".adaptive_quantile") is None


def with_epsilon(summaries: dict[str, list[dict]]) -> dict[str, str]:
    """Label → label: a DP group's ends with the ε its runs reached; a group whose runs reached different ε keeps its
    label (check_same_privacy then refuses it, naming that label)."""
    def one_epsilon(runs: list[dict]) -> bool:
        first = runs[0].get("final_epsilon")
        return first is not None and all(math.isclose(r.get("final_epsilon", math.inf), first, rel_tol=1e-6)
                                         for r in runs)

    return {label: f"{label}, ε={s[0]['final_epsilon']:.3g}" if one_epsilon(s) else label
            for label, s in summaries.items()}


def mean_std(values: list[float]) -> tuple[float, float]:
    if any(math.isinf(v) for v in values):
        return math.inf, math.nan
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return math.nan, math.nan
    return statistics.fmean(finite), statistics.stdev(finite) if len(finite) > 1 else math.nan


def fmt(value: float, digits: int = 4) -> str:
    """``0.3472``; a value too small for ``digits`` decimals (δ = 1e-5) in scientific notation, never 0.0000."""
    if math.isnan(value):
        return "—"
    if math.isinf(value):
        return "∞"
    return f"{value:.3g}" if 0 < abs(value) < 10 ** -(digits - 1) else f"{value:.{digits}f}"


def paper_cell(acc: tuple[float, float], floats: float) -> str:
    """The paper's cell: accuracy % ± std (floats to target in d)."""
    d = "∞" if math.isinf(floats) else ("—" if math.isnan(floats) else f"{floats:.1f}d")
    spread = "" if math.isnan(acc[1]) else f" ± {100 * acc[1]:.1f}"
    return f"{100 * acc[0]:.1f}{spread} ({d})"


def check_same_privacy(label: str, summaries: list[dict]) -> None:
    """A row's runs must share ε, δ and sampling: a mean over different guarantees is no guarantee."""
    guarantees = {(s.get("final_epsilon", math.inf), s.get("delta"), s.get("sampling", "no DP")) for s in summaries}
    values = sorted({g[0] for g in guarantees})
    if len({g[1:] for g in guarantees}) > 1 or not math.isclose(values[0], values[-1], rel_tol=1e-6):
        shown = ", ".join(f"ε {e:.4g} δ {d if d is None else f'{d:.3g}'} {m}" for e, d, m in sorted(guarantees, key=str))
        raise ConfigError("report", f"group {label!r} mixes runs of different privacy ({shown}); one cell cannot "
                          "average them: report them separately (other run folders, or --label dir)")


def table(groups: dict[str, list[dict]], target: Optional[float], window: int, budgets: list[float],
          metric: str = "val/acc") -> list[dict]:
    rows, c = [], column(metric)
    for label, summaries in groups.items():
        row = {"group": label, "seeds": len(summaries)}
        to_target = ["d_to_target_first", "d_to_target_sustained"] if target is not None else []
        keys = [f"final_{c}", f"best_{c}", *to_target, "upload_d_total",
                *(f"{'acc' if c == 'val_acc' else c}_at_{b:g}d" for b in budgets)]
        if "final_train_objective" in summaries[0]:
            keys += [f"objective_at_{b:g}d" for b in budgets] + ["final_train_objective"]
        if all("sim_s_to_target_first" in s for s in summaries):  # time to target, mean ± std
            keys += ["sim_s_to_target_first", "sim_s_to_target_sustained"]
        if any("final_epsilon" in s for s in summaries):  # DP: one ε, δ and sampling per row, never averaged
            check_same_privacy(label, summaries)
            keys += ["final_epsilon", "delta"]
        if all("final_pval_acc_mean" in s for s in summaries):  # personalised accuracy, mean ± std
            keys += ["final_pval_acc_mean", "final_pval_acc_p10", "final_pval_acc_std"]
            keys += ["final_pval_new_acc_mean"] if all("final_pval_new_acc_mean" in s for s in summaries) else []
            keys += [k for k in PRIOR_KEYS + LOCAL_KEYS if all(k in s for s in summaries)]  # runs.baselines
        for key in keys:
            row[key], row[f"{key}_std"] = mean_std([s[key] for s in summaries])
        if "sampling" in summaries[0]:
            row["sampling"] = summaries[0]["sampling"]
        if target is not None:
            reached = sum(math.isfinite(s["d_to_target_sustained"]) for s in summaries)
            if c == "val_acc":  # the paper's cell is an accuracy in %
                row[f"paper_style_{target:g}"] = paper_cell((row[f"final_{c}"], row[f"final_{c}_std"]),
                                                            row["d_to_target_sustained"])
            row["reached_sustained"] = f"{reached}/{len(summaries)}"
        rows.append(row)
    return rows


def write_tables(rows: list[dict], out: Path, target: Optional[float], window: int, mode: str = "max") -> str:
    out.parent.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(key for row in rows for key in row))  # every group's columns, first seen first
    with open(out.with_suffix(".csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, restval="")
        writer.writeheader()
        writer.writerows(rows)
    shown = [k for k in fields if not k.endswith("_std") and k not in ("upload_d_total",)]

    def cell(row, key):
        if key not in row:  # a column only some groups have (final_epsilon: runs with and without DP)
            return "—"
        value = row[key]
        if isinstance(value, str) or key == "seeds":
            return str(value)
        std = row.get(f"{key}_std", math.nan)
        return fmt(value) + ("" if math.isnan(std) or math.isinf(value) or math.isnan(value) else f" ± {fmt(std)}")

    header = (f"target {target:g}; floats in d; sustained = running mean of the last {window} evaluations stays "
              f"{'≤' if mode == 'min' else '≥'} target; mean ± sample std over seeds" if target is not None else
              "floats in d; final and best over each run's evaluations; mean ± sample std over seeds")
    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join(cell(r, k) for k in shown) + " |" for r in rows]
    markdown = "\n".join(lines) + f"\n\n({header})\n"
    out.with_suffix(".md").write_text(markdown)
    latex = ["\\begin{tabular}{l" + "r" * (len(shown) - 1) + "}", " & ".join(k.replace("_", "\\_") for k in shown)
             + " \\\\ \\hline"]
    latex += [" & ".join(cell(r, k).replace("±", "$\\pm$").replace("∞", "$\\infty$").replace("_", "\\_")
                         for k in shown) + " \\\\" for r in rows]
    out.with_suffix(".tex").write_text("\n".join(latex + ["\\end{tabular}", f"% {header}"]) + "\n")
    return markdown


def plot(curves: dict[str, list[list[dict]]], out: Path, target: Optional[float], title: str, x_key: str = "comm/upload_d",
         metric: str = "val/acc") -> None:
    """Mean ± std over seeds of val/acc (and the training objective) against ``x_key``: floats uploaded,
    rounds or wall time; one colour per algorithm, line styles for its variants."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    extras = [key for key in ("train/objective", "pval/acc_mean")  # personalised accuracy, when logged
              if any(key in r for runs in curves.values() for c in runs for r in c)]
    panels = [metric] + extras
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 + 4.5 * len(extras), 4.2), squeeze=False)
    variants: dict[str, int] = {}
    for label, runs in curves.items():
        colour = colour_of(label)
        style = ["-", "--", ":", "-."][variants.setdefault(colour, 0) % 4]
        variants[colour] += 1
        if not all([r for r in curve if metric in r and x_key in r] for curve in runs):
            continue
        for ax, key in zip(axes[0], panels):
            evaluated = [[r for r in curve if key in r and x_key in r] for curve in runs]
            if not all(evaluated):
                continue
            if x_key == "comm/upload_d" and max(e[-1][x_key] for e in evaluated) == 0:  # uploads nothing
                ax.axhline(statistics.fmean(e[-1][key] for e in evaluated), color="black", lw=1, ls=":",
                           label=f"{label} (final, no upload)")
                continue
            end = min(e[-1][x_key] for e in evaluated)
            grid = np.linspace(min(e[0][x_key] for e in evaluated), end, 200)
            values = np.array([np.interp(grid, [r[x_key] for r in e], [r[key] for r in e]) for e in evaluated])
            line, = ax.plot(grid, values.mean(0), style, color=colour, lw=1.3, label=f"{label} ({len(runs)} seed{'s' if len(runs) != 1 else ''})")
            if len(runs) > 1:
                std = values.std(0, ddof=1)
                ax.fill_between(grid, values.mean(0) - std, values.mean(0) + std, color=line.get_color(), alpha=0.2)
    axes[0][0].set(xlabel=AXES[x_key], ylabel=AXES.get(metric, metric), title=title)
    if target is not None:
        axes[0][0].axhline(target, color="grey", lw=0.8, ls="--", label=f"target {target:g}")
    for ax, key in zip(axes[0][1:], extras):
        ax.set(xlabel=AXES[x_key], ylabel=AXES[key], **({"yscale": "log"} if key == "train/objective" else {}))
    finish(fig, axes[0], str(out))
    plt.close(fig)


def main(args: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="fl-lightning report", description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="run directories, or folders holding them")
    parser.add_argument("--target", type=float, help="target val/acc (or --metric), e.g. 0.7: floats to reach it "
                        "(without: final and best only)")
    parser.add_argument("--unfinished", choices=("leave-out", "include"), default="leave-out",
                        help="runs that did not end: left out with one line each (default), or kept, marked")
    parser.add_argument("--metric", default="val/acc", help="any logged evaluation metric (default val/acc)")
    parser.add_argument("--mode", choices=("min", "max"), help="min: lower is better (a loss); default max")
    parser.add_argument("--out", type=Path, default=Path("report"), help="output prefix (.md, .csv, .tex, .png)")
    parser.add_argument("--window", type=int, default=3, help="k of the sustained floats-to-target (default 3)")
    parser.add_argument("--at-d", default="", help="budgets in d, e.g. 10,25,50: val/acc at each")
    parser.add_argument("--title", default="")
    parser.add_argument("--x", choices=tuple(X_AXES), default="upload_d",
                        help="the plot's x axis: floats uploaded per client (default), rounds, or training wall time")
    parser.add_argument("--label", choices=("settings", "dir"), default="settings",
                        help="name groups by the settings that differ (default) or by run directory")
    options = parser.parse_args(args)
    if options.metric == "val/acc":
        if options.target is not None:
            check_accuracy("report --target", options.target)
    elif options.mode is None:
        raise ConfigError("report --mode", f"say whether {options.metric} is better low (min, e.g. a loss) or "
                          "high (max)")
    metric, mode = options.metric, options.mode or "max"
    for path in options.runs:
        if not path.exists():
            raise ConfigError("report", f"{path}: no such directory")
    budgets = [float(b) for b in options.at_d.split(",") if b]
    curves, skipped, marks = {}, [], {}
    runs, ignored = find_runs(options.runs)
    for run, versions in runs.items():
        check_one_run(run, versions)
        curve = read_curve(versions)
        if merge_note(run, versions):
            print(f"fl-lightning report: {merge_note(run, versions)}")
        if not any(metric in r for r in curve):
            skipped.append(f"{run}: no {metric} logged")
            continue
        mark = unfinished(versions, curve)
        if mark is not None and options.unfinished == "leave-out":
            print(f"fl-lightning report: left out {run} ({mark}; --unfinished include shows it, marked)")
            continue
        curves[run] = curve
        if mark is not None:
            marks[run] = mark
    for line in skipped:
        print(f"fl-lightning report: skipped {line}")
    if ignored:
        print(f"fl-lightning report: ignored {len(ignored)} validate/test output(s), not fit runs: {', '.join(ignored)}")
    if not curves:
        raise ConfigError("report", f"no run with metrics under {', '.join(map(str, options.runs))} "
                          "(a run is a folder with version_N/metrics.csv, or a W&B run's folder with metrics.csv)")
    settings = {run: read_settings(runs[run]) for run in curves}
    groups = group_runs(settings, by_dir=options.label == "dir")
    groups = {label + "".join(f" [{marks[r]}]" for r in members if r in marks): members
              for label, members in groups.items()}
    summaries = {label: [summarise(curves[r], options.target, options.window, budgets, metric, mode) for r in runs]
                 for label, runs in groups.items()}
    for line in add_baselines({label: [(runs[r], settings[r]) for r in members] for label, members in groups.items()},
                              summaries):
        print(f"fl-lightning report: {line}")
    names = with_epsilon(summaries)
    groups, summaries = ({names[label]: value for label, value in d.items()} for d in (groups, summaries))
    print(write_tables(table(summaries, options.target, options.window, budgets, metric), options.out,
                       options.target, options.window, mode), end="")
    plot({label: [curves[r] for r in runs] for label, runs in groups.items()}, options.out, options.target,
         options.title, X_AXES[options.x], metric)
    if write_histogram({label: [runs[r] for r in members] for label, members in groups.items()}, options.out):
        print(f"fl-lightning report: per-client personalised accuracy → {options.out}_pval_hist.png/.pdf")
    print(f"fl-lightning report: {len(curves)} runs in {len(groups)} groups → {options.out}.md/.csv/.tex/.png/.pdf")
    return 0
