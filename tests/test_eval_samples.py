"""Evaluation sized to the run (data.eval_samples: the same seeded subsample of val and test, named in the summary
line), and S < N blocks refused before any data is read."""
import os

import torch

from fl_lightning import FederatedDataModule
from fl_lightning.cli import main
from tests.test_cli import QUICKSTART, QUIET


def test_eval_samples_takes_the_same_subsample_of_val_and_test_every_time():
    dm, again, whole = (FederatedDataModule("digits", num_clients=4, eval_samples=e) for e in (50, 50, None))
    for split in ("val", "test"):
        x, y = getattr(dm, f"{split}_dataloader")().tensors
        x2, y2 = getattr(again, f"{split}_dataloader")().tensors
        wx, wy = getattr(whole, f"{split}_dataloader")().tensors
        assert len(y) == 50 and torch.equal(x, x2) and torch.equal(y, y2)
        rows = [next(i for i in range(len(wy)) if torch.equal(wx[i], row)) for row in x[:5]]  # rows of the whole split
        assert rows == sorted(rows)  # in the split's order
    assert dm.eval_note() == f", val/test on 50 of {len(whole.split.val_y)} / 50 of {len(whole.split.test_y)} images " \
                             "(data.eval_samples)"
    assert whole.eval_note() == ""


def test_the_summary_line_says_evaluation_was_on_a_subsample(capsys):
    assert main(["fit", "--config", QUICKSTART, *QUIET, "--trainer.max_epochs", "1", "--data.eval_samples", "60"]) == 0
    (line,) = [l for l in capsys.readouterr().out.splitlines() if l.startswith("fl-lightning: 1 rounds")]
    assert ", val/test on 60 of 144 / 60 of 360 images (data.eval_samples), comm/upload_d 1.00" in line


def test_eval_samples_below_one_and_s_below_n_are_refused_before_any_data_is_read(capsys):
    code = main(["fit", "--config", QUICKSTART, *QUIET, "--data.eval_samples", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == ["fl-lightning: error: data.eval_samples: must be ≥ 1 (images evaluated per split), got "
                                 "0; leave it unset to evaluate on all"]
    code = main(["fit", "--config", QUICKSTART, *QUIET, "--model.algorithm", "fedbcgd", "--model.algorithm.num_blocks",
                 "6", "--model.clients_per_round", "3", "--data.dataset", "imagefolder", "--data.root", "nowhere"])
    err = capsys.readouterr().err.strip().splitlines()  # no data at "nowhere": the blocks are checked first
    assert code == 2 and err == ["fl-lightning: error: model.clients_per_round: S=3 < N=6 blocks: every block needs a "
                                 "client each round; raise S or lower model.algorithm.num_blocks"]
    assert not os.path.exists("runs")
