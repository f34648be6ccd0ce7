"""docs/paper_scale/run.py at the CI size: a packed ImageFolder tree unpacked and read through data.dataset
imagefolder, two algorithms and an arm (FedBCGD+ without SVRG) trained with the batched runner to the same upload budget, the report written."""
import csv
import subprocess
import sys
from pathlib import Path

import torch
import yaml
from torchvision.io import encode_jpeg, write_file

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "paper_scale" / "run.py"


def image_folder(root: Path) -> None:
    g = torch.Generator().manual_seed(0)
    for part, count in (("train", 30), ("test", 5)):
        for label in ("cat", "dog"):
            (root / part / label).mkdir(parents=True)
            for i in range(count):
                image = torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8, generator=g)
                write_file(str(root / part / label / f"{i}.jpg"), encode_jpeg(image))


def test_the_paper_scale_script_runs_the_grid_at_a_tiny_size(tmp_path):
    image_folder(tmp_path / "folder")
    subprocess.run([sys.executable, str(SCRIPT), "pack", str(tmp_path / "folder"), str(tmp_path / "c.pack")],
                   check=True, capture_output=True)
    done = subprocess.run([sys.executable, str(SCRIPT), "--data", str(tmp_path / "c.pack"), "--out",
                           str(tmp_path / "out"), "--tiny", "--jobs", "2", "--seeds", "0", "--rhos", "0.6",
                           "--algorithms", "fedavg,fedbcgd_plus,fedbcgd_plus_no_svrg", "--budget_d", "2", "--eval_every_d", "1",
                           "--accelerator", "cpu", "--seconds_per_round", "0.5", "--target", "0.5"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "rounds {'fedavg': 2, 'fedbcgd_plus': 4, 'fedbcgd_plus_no_svrg': 4}; 500 ms a FedAvg round" in done.stdout
    assert "3 of 3 runs done" in done.stdout
    assert (tmp_path / "c.pack.d" / "train" / "cat" / "0.jpg").read_bytes() == \
        (tmp_path / "folder" / "train" / "cat" / "0.jpg").read_bytes()
    for name in ("fedavg_seed0", "fedbcgd_plus_seed0", "fedbcgd_plus_no_svrg_seed0"):  # each stopped at the budget
        (metrics,) = (tmp_path / "out" / "rho0.6" / name).rglob("metrics.csv")
        with open(metrics) as f:
            uploaded = [float(row["comm/upload_d"]) for row in csv.DictReader(f) if row.get("comm/upload_d")]
        assert uploaded[-1] >= 2.0 > uploaded[-2]
    assert "fedbcgd_plus_seed0" in (tmp_path / "out" / "rho0.6" / "report.md").read_text()
    reductions = {name: yaml.safe_load(next((tmp_path / "out" / "rho0.6" / name).rglob("config.yaml")).read_text())
                  ["model"]["algorithm"]["init_args"]["variance_reduction"]
                  for name in ("fedbcgd_plus_seed0", "fedbcgd_plus_no_svrg_seed0")}
    assert reductions == {"fedbcgd_plus_seed0": None, "fedbcgd_plus_no_svrg_seed0": False}  # None: on, the default


def test_an_unknown_algorithm_or_arm_is_one_line_and_exit_2_before_anything_is_written(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--data", str(tmp_path / "missing.pack"), "--out",
                           str(tmp_path / "out"), "--algorithms", "fedavg,fedbcgd_plus_no_svgr"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "run.py: error: --algorithms: fedbcgd_plus_no_svgr is neither a registered algorithm nor an arm "
        "(fedbcgd_plus_no_svrg); fix the name"]
    assert not (tmp_path / "out").exists()


def test_summarise_tables_the_kept_h200_runs_at_equal_floats():
    # hand-computed from the kept metrics.csv: FedAvg's val/acc at 10 d (0.2155, 0.2775, 0.278) and 50 d
    # (0.5055, 0.4895, 0.52); FedBCGD's at its round that crossed 10 d (10.12 d: 0.311, 0.352, 0.3575); FedBCGD+
    # seed 1 stopped at 8.6 d unevaluated, seeds 0 and 2 at 10.34 d (0.188, 0.1025); nobody but SCAFFOLD at 100 d
    done = subprocess.run([sys.executable, str(SCRIPT.with_name("summarise.py")), "--budgets", "10,50,100"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in done.stdout.splitlines()[2:]}
    assert list(rows) == ["fedavg", "fedavgm", "scaffold", "fedbcgd", "fedbcgd_plus"]
    assert rows["fedavg"][:4] == ["3", "52.0–53.0", "0.2570 ± 0.0359 (3/3)", "0.5050 ± 0.0153 (3/3)"]
    assert rows["fedbcgd"][2] == "0.3402 ± 0.0254 at 10.1 d (3/3)"
    assert rows["fedbcgd_plus"][1:3] == ["8.6–16.4", "0.1452 ± 0.0605 at 10.3 d (2/3)"]
    assert [cells[4].strip(" |") for cells in rows.values()] == ["— (0/3)"] * 2 + ["0.4962 ± 0.0189 (3/3)"] + \
        ["— (0/3)"] * 2
