"""Each DP arm's clip C from run.sh's grid: python docs/privacy/pick_clip.py GRID_DIR (GRID_DIR holds
<algo>_eps<ε>_C<C>/version_0/metrics.csv, run on the selection seed). Per (algo, ε) the C with the best final
val/acc (the validation split held out of the training data, never the test set) is printed as
``pick ALGO EPS C``; when the best C is an end of the grid, ``extend ALGO EPS C'`` names the next value
beyond it (×3 or ÷3), so that the optimum lies inside the grid once run.sh has run it."""
import csv
import sys
from pathlib import Path

STEP = 3.0


def final_val_acc(path: Path) -> float:
    with open(path) as f:
        return float([r for r in csv.DictReader(f) if r.get("round")][-1]["val/acc"])


def main(root: Path) -> None:
    grid: dict[tuple[str, str], dict[float, float]] = {}
    for path in root.glob("*_eps*_C*/**/metrics.csv"):
        name = path.relative_to(root).parts[0]
        algo, rest = name.split("_eps")
        eps, clip = rest.split("_C")
        grid.setdefault((algo, eps), {})[float(clip)] = final_val_acc(path)
    for (algo, eps), accuracy in sorted(grid.items()):
        clips = sorted(accuracy)
        best = max(clips, key=lambda c: accuracy[c])
        if best == clips[0]:
            print(f"extend {algo} {eps} {best / STEP:.4g}")
        elif best == clips[-1]:
            print(f"extend {algo} {eps} {best * STEP:.4g}")
        else:
            print(f"pick {algo} {eps} {best:g}  # val/acc " + ", ".join(f"C={c:g}: {accuracy[c]:.4f}" for c in clips))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
