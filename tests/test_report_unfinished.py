"""``report`` as a newcomer meets it: a run that did not end is never shown as final (left out with one line, or
kept and marked), and without ``--target`` the table gives final and best accuracy."""
import csv
from pathlib import Path

from fl_lightning.cli import main

QUICKSTART = str(Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml")
SMALL = ["--config", QUICKSTART, "--trainer.enable_progress_bar", "false", "--model.network.init_args.hidden", "[16]"]


def test_an_unfinished_run_is_left_out_or_marked_and_no_target_gives_final_and_best(capsys):
    assert main(["fit", *SMALL, "--trainer.max_epochs", "3"]) == 0
    assert main(["fit", *SMALL, "--trainer.max_epochs", "3", "--seed_everything", "1"]) == 0
    killed = Path("runs/quickstart/fedavgm,hidden=[16],seed=1/version_0")
    (killed / ".fit.lock").touch()  # what a fit still running, or SIGKILLed, leaves (tests/test_kill.py)
    finished = list(csv.DictReader(open("runs/quickstart/fedavgm,hidden=[16],seed=0/version_0/metrics.csv")))
    capsys.readouterr()
    assert main(["report", "runs/quickstart", "--out", "plain"]) == 0
    out = capsys.readouterr().out
    assert f"fl-lightning report: left out {killed.parent} (rounds 3/3, unfinished; --unfinished include shows it, " \
           "marked)" in out
    rows = list(csv.DictReader(open("plain.csv")))
    final = [float(r["val/acc"]) for r in finished if r.get("val/acc")]
    assert len(rows) == 1 and rows[0]["seeds"] == "1" and "d_to_target_first" not in rows[0]
    assert float(rows[0]["final_val_acc"]) == final[-1] and float(rows[0]["best_val_acc"]) == max(final)
    assert main(["report", "runs/quickstart", "--out", "marked", "--unfinished", "include"]) == 0
    (row,) = csv.DictReader(open("marked.csv"))
    assert row["group"] == "quickstart [rounds 3/3, unfinished]" and row["seeds"] == "2"
    # fewer rounds than planned, no budget reached, no lock and no curve (what Ctrl-C leaves: on_train_end never ran)
    (killed / ".fit.lock").unlink()
    (killed / "accuracy_vs_upload_d.png").unlink()
    config = killed / "config.yaml"
    config.write_text(config.read_text().replace("max_epochs: 3", "max_epochs: 10"))
    assert main(["report", "runs/quickstart", "--target", "0.2", "--out", "target"]) == 0
    assert "(rounds 3/10, unfinished;" in capsys.readouterr().out
    (killed / "accuracy_vs_upload_d.png").touch()  # a fit that ended on its own (a time budget, EarlyStopping)
    assert main(["report", "runs/quickstart", "--target", "0.2", "--out", "ended"]) == 0
    assert "unfinished" not in capsys.readouterr().out
