"""``fl-lightning sweep`` and ``fl-lightning report``."""
import csv
import math
import os
import shutil
import statistics
from pathlib import Path

import pytest

from fl_lightning.cli import main
from fl_lightning.runs.report import find_runs, floats_to_target, read_curve

QUICKSTART = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")
QUIET = ["--trainer.enable_progress_bar", "false"]


def test_print_lists_one_fit_command_per_grid_point(capsys):
    code = main(["sweep", "--config", QUICKSTART, "--grid", "model.algorithm=fedavg,fedbcgd",
                 "--grid=seed_everything=0,1", "--trainer.max_epochs", "3", "--print"])
    lines = capsys.readouterr().out.splitlines()
    assert code == 0 and len(lines) == 4
    assert lines[0] == (f"fl-lightning fit --config {QUICKSTART} --trainer.max_epochs 3 --model.algorithm fedavg "
                        "--seed_everything 0 --trainer.logger.init_args.name quickstart/algorithm=fedavg,"
                        "seed_everything=0 --ckpt_path last")
    assert [line.split("name ")[1].split()[0] for line in lines] == [
        "quickstart/algorithm=fedavg,seed_everything=0", "quickstart/algorithm=fedavg,seed_everything=1",
        "quickstart/algorithm=fedbcgd,seed_everything=0", "quickstart/algorithm=fedbcgd,seed_everything=1"]
    assert not os.path.exists("runs")


@pytest.mark.parametrize("grid, message", [
    ("model.lrr=0.1,0.2", "--model.lrr: no such option; did you mean --model.lr?"),
    ("model.lr=", "--grid model.lr: empty list of values"),
    ("lr=0.1", "--grid lr: unknown key; grid over model.*, data.*, trainer.* or seed_everything"),
    ("model.lr", "--grid: 'model.lr': write key=value1,value2"),
    ("seed_everything=0 --grid seed_everything=1", "--grid seed_everything: given twice; list every value in one"),
])
def test_bad_grids_fail_before_anything_runs(capsys, grid, message):
    code = main(["sweep", "--config", QUICKSTART, *[w for g in grid.split(" --grid ") for w in ("--grid", g)]])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0]
    assert not os.path.exists("runs")


def pieces(run: Path) -> list[Path]:
    (versions,) = find_runs([run])[0].values()
    return versions


def test_sweep_runs_skips_finished_resumes_interrupted_and_reports(capsys):
    sweep = ["sweep", "--config", QUICKSTART, "--grid", "seed_everything=0,1", "--jobs", "2", *QUIET]
    assert main([*sweep, "--trainer.max_epochs", "2"]) == 0
    runs = Path("runs/quickstart")
    assert sorted(p.name for p in runs.iterdir()) == [".sweep", "seed_everything=0", "seed_everything=1"]
    assert main([*sweep, "--trainer.max_epochs", "2"]) == 0
    assert "2 runs, 2 finished before, 0 to run" in capsys.readouterr().out
    for seed in (0, 1):  # as if the sweep had been killed during these runs, now asked for 3 rounds
        (runs / ".sweep" / f"seed_everything={seed}.done").unlink()
    assert main([*sweep, "--trainer.max_epochs", "3"]) == 0  # each resumes from its checkpoint: only round 3 runs
    resumed = runs / "seed_everything=1"
    with open(resumed / "fedavgm,seed=1" / "version_0" / "metrics.csv") as f:  # resumed in its checkpoint's folder
        assert [row["round"] for row in csv.DictReader(f)] == ["1.0", "2.0", "3.0"]
    assert [r["round"] for r in read_curve(pieces(resumed / "fedavgm,seed=1"))] == [1.0, 2.0, 3.0]  # the versions joined into one curve

    capsys.readouterr()
    assert main(["report", "runs/quickstart", "--target", "0.2", "--out", "out/table"]) == 0
    out = capsys.readouterr().out
    assert "2 runs in 1 groups" in out  # runs differing only in the seed form one group
    with open("out/table.csv") as f:
        (row,) = list(csv.DictReader(f))
    finals = [read_curve(pieces(runs / f"seed_everything={s}" / f"fedavgm,seed={s}"))[-1]["val/acc"] for s in (0, 1)]
    assert row["seeds"] == "2" and float(row["final_val_acc"]) == pytest.approx(statistics.fmean(finals))
    assert float(row["final_val_acc_std"]) == pytest.approx(statistics.stdev(finals))
    assert all(Path(f"out/table.{ext}").is_file() for ext in ("md", "tex", "png"))


def test_report_names_what_it_skipped(capsys):
    empty = Path("runs/broken/version_0")
    empty.mkdir(parents=True)
    (empty / "metrics.csv").write_text("round,train/loss\n1.0,2.3\n")
    code = main(["report", "runs", "--target", "0.5"])
    err = capsys.readouterr()
    assert "skipped runs/broken: no val/acc logged" in err.out
    assert code == 2 and "report: no run with metrics under runs" in err.err


def test_runs_are_ordered_by_the_numbers_in_their_names():
    names = ["num_blocks=10", "num_blocks=2", "num_blocks=1,lr=0.2", "num_blocks=1,lr=0.01", "num_blocks=1,lr=0.1",
             "num_blocks=5"]
    for name in names:
        version = Path("runs", name, "version_0")
        version.mkdir(parents=True)
        (version / "metrics.csv").write_text("round,val/acc\n1.0,0.5\n")
    runs, _ = find_runs([Path("runs")])
    assert [run.name for run in runs] == ["num_blocks=1,lr=0.01", "num_blocks=1,lr=0.1", "num_blocks=1,lr=0.2",
                                          "num_blocks=2", "num_blocks=5", "num_blocks=10"]


def test_floats_to_target_first_touch_and_sustained():
    accuracy = [0.5, 0.9, 0.6, 0.8, 0.85, 0.9]
    evaluated = [{"val/acc": a, "comm/upload_d": float(d + 1)} for d, a in enumerate(accuracy)]
    # running means of the last 3: 0.5, 0.7, 0.667, 0.767, 0.75, 0.85 → at or above 0.75 from the 4th on
    assert floats_to_target(evaluated, 0.75, window=3) == (2.0, 4.0)
    assert floats_to_target(evaluated, 0.95, window=3) == (math.inf, math.inf)
    assert floats_to_target(evaluated, 0.75, window=1) == (2.0, 4.0)
    assert floats_to_target(evaluated[:5] + [{"val/acc": 0.1, "comm/upload_d": 6.0}], 0.75, 1)[1] == math.inf


def test_report_target_in_percent_is_one_line(capsys):
    Path("runs").mkdir()
    assert main(["report", "runs", "--target", "85"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fl-lightning: error: report --target: is an accuracy, a fraction in (0, 1], got 85; write 0.85 "
                   "for 85 %"]


def test_sweep_checks_every_grid_point_before_training(capsys):
    for grid, message in ((["model.algorithm=fedavg,fedfoo"], "sweep algorithm=fedfoo: model.algorithm: unknown "
                                                               "algorithm 'fedfoo'"),
                          (["model.lr=0.1,abc"], "sweep lr=abc: model.lr: got 'abc'; it takes a number"),
                          (["model.lr=0.1,-2"], "sweep lr=-2: model.lr: must be > 0, got -2.0")):
        assert main(["sweep", "--config", QUICKSTART, "--grid", *grid, "--trainer.max_epochs", "1"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"fl-lightning: error: {message}"), err
    assert not Path("runs").exists()  # nothing trained, nothing written


def test_kept_runs_outlive_the_run_directory_and_a_sweep_skips_them(capsys):
    """``--keep DIR``: a finished run's metrics.csv and config.yaml (only) are kept; a fresh clone's sweep
    (no runs/) skips them, report reads them, a longer budget runs again, another run's settings refuse."""
    base = ["sweep", "--config", QUICKSTART, "--jobs", "2", "--keep", "kept", *QUIET]
    sweep = [*base, "--grid", "seed_everything=0,1"]
    assert main([*sweep, "--trainer.max_epochs", "2"]) == 0
    kept = Path("kept")
    assert sorted(str(p.relative_to(kept)) for p in kept.rglob("*") if p.is_file()) == [
        f"seed_everything={s}/{name}" for s in (0, 1) for name in (".kept", "version_0/config.yaml",
                                                                   "version_0/metrics.csv")]
    for seed in (0, 1):
        run = Path(f"runs/quickstart/seed_everything={seed}/fedavgm,seed={seed}/version_0")  # kept flat
        assert (kept / f"seed_everything={seed}/version_0/metrics.csv").read_bytes() == (run / "metrics.csv").read_bytes()
    capsys.readouterr()
    assert main(["report", "runs/quickstart", "--target", "0.2", "--out", "out/runs"]) == 0
    shutil.rmtree("runs")  # a fresh clone: only the kept text is there
    assert main([*sweep, "--trainer.max_epochs", "2"]) == 0
    assert "2 runs, 0 finished before, 2 kept in kept, 0 to run" in capsys.readouterr().out
    assert not Path("runs/quickstart/seed_everything=0").exists()  # nothing ran
    assert main([*base, "--grid", "seed_everything=0,1,2", "--trainer.max_epochs", "2", "--print"]) == 0
    assert [line.split("--seed_everything ")[1][0] for line in capsys.readouterr().out.splitlines()] == ["2"]
    assert main(["report", "kept", "--target", "0.2", "--out", "out/kept"]) == 0
    tables = [list(csv.reader(open(f"out/{name}.csv"))) for name in ("kept", "runs")]
    assert [row[1:] for row in tables[0]] == [row[1:] for row in tables[1]]  # the same numbers (group: the folder)

    capsys.readouterr()
    assert main([*base, "--trainer.max_epochs", "3", "--grid", "seed_everything=1"]) == 0
    assert "seed_everything=1 runs again (kept with trainer.max_epochs 2 < 3)" in capsys.readouterr().out
    assert [r["round"] for r in read_curve(pieces(kept / "seed_everything=1"))] == [1.0, 2.0, 3.0]
    assert sorted(p.name for p in kept.iterdir()) == ["seed_everything=0", "seed_everything=1"]  # no partial copy

    assert main([*sweep, "--trainer.max_epochs", "2", "--model.lr", "0.01"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("fl-lightning: error: sweep --keep: kept/seed_everything=0 holds "
                                               "another run (id "), err


def test_kept_runs_are_whole_runs_apart_from_the_run_directories(capsys):
    """Only a copy finished by keep() (its .kept marker) counts; the copies may not overlap the runs'
    own directory (checkpoints); every option that may change at resume has a rule for kept runs."""
    from fl_lightning.runs import kept as kept_runs
    from fl_lightning.runs.identity import TAKES_EFFECT_AT_RESUME

    sorted_out = kept_runs.AT_LEAST + kept_runs.EQUAL + kept_runs.HOW_COMPUTED
    assert {key.split(".", 1)[1] for key in sorted_out if key.startswith("model.")} == TAKES_EFFECT_AT_RESUME
    base = ["sweep", "--config", QUICKSTART, "--grid", "seed_everything=0", "--trainer.max_epochs", "1", *QUIET]
    assert main([*base, "--keep", "runs/quickstart"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["fl-lightning: error: --keep: runs/quickstart overlaps the runs' own directory runs/quickstart; "
                   "keep the copies elsewhere, e.g. docs/runs/<name>"]
    assert main([*base, "--keep="]) == 2 and "--keep: give a directory" in capsys.readouterr().err
    half = Path("kept/seed_everything=0/version_0")  # as if a copy had been killed before its marker
    half.mkdir(parents=True)
    (half / "config.yaml").write_text("seed_everything: 0\n")
    assert main([*base, "--keep", "kept", "--print"]) == 0
    assert "--seed_everything 0" in capsys.readouterr().out  # not kept: it would run again


def test_sweep_stops_after_the_first_run_refused_for_its_configuration(capsys):
    """An error only the fit finds (shards that a class cannot fill): the first run says it, no other starts."""
    code = main(["sweep", "--config", QUICKSTART, "--grid", "seed_everything=0,1,2", "--data.partition", "shards",
                 "--trainer.max_epochs", "1", *QUIET])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 2
    assert out[-1] == ("fl-lightning sweep: stopped: seed_everything=0 was refused (data.samples_per_client: 64 samples "
                       "per client (data.samples_per_client unset: the 1293 samples over 20 clients) with 2 classes "
                       "each need more samples of a class than the data has; set --data.samples_per_client 60 (or "
                       "less) or lower data.num_clients); 2 runs not started; fix it and run the sweep again")
    assert sorted(p.name for p in Path("runs/quickstart/.sweep").iterdir()) == ["seed_everything=0.log"]
