"""Every preset's quickstart metrics (5 rounds, one thread): recorded once before the algorithm
API refactor (``python tests/preset_golden.py record``), asserted bit for bit by
tests/test_preset_golden.py ever since. Each case is a list of command-line options after
``fit --config configs/quickstart.yaml``."""
from __future__ import annotations

import csv
import glob
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "data" / "preset_golden.json"
PRESETS = ["fedavg", "fedavgm", "fedadam", "fedyogi", "fedprox", "scaffold", "feddc", "fedbcgd", "fedbcgd_freezing",
           "fedbcgd_plus", "topk", "fedpaq", "fedbcgd_qsgd", "fedbcgd_plus_qsgd", "centralized"]


def run_metrics(args: list[str], threads: int = 1) -> dict:
    """metrics.csv of a 5-round quickstart fit (every value as written) and a digest of the final weights."""
    from fl_lightning.cli.lightning_cli import FederatedCLI

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        cli = FederatedCLI(args=["fit", "--config", str(ROOT / "configs" / "quickstart.yaml"),
                                 "--trainer.max_epochs", "5", "--trainer.enable_progress_bar", "false",
                                 "--trainer.enable_model_summary", "false", "--trainer.enable_checkpointing", "false",
                                 "--trainer.logger.init_args.save_dir", tmp, *args])
        (path,) = glob.glob(os.path.join(tmp, "**", "version_*", "metrics.csv"), recursive=True)
        rows = [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(open(path))]
        weights = torch.cat([p.detach().flatten() for p in cli.model.net.state_dict().values()
                             if p.is_floating_point()])
    return {"rows": rows, "weights_sha256": hashlib.sha256(weights.numpy().tobytes()).hexdigest()}


if __name__ == "__main__" and sys.argv[1:2] == ["record"]:
    if GOLDEN.exists() and "--force" not in sys.argv:
        sys.exit(f"{GOLDEN} holds the metrics from before the algorithm API refactor; re-recording them would "
                 "make the test compare the code with itself (add --force only on purpose)")
    cases = {name: ["--model.algorithm", name] for name in PRESETS}
    cases.update({  # options that are not the presets' defaults, in the pre-refactor spelling
        "fedprox_mu0.5": ["--model.algorithm", "fedprox", "--model.fedprox_mu", "0.5"],
        "scaffold_option1": ["--model.algorithm", "scaffold", "--model.control_variate", "option1"],
        "scaffold_authors": ["--model.algorithm", "scaffold", "--model.control_rule", "authors"],
        "fedbcgd_plus_authors": ["--model.algorithm", "fedbcgd_plus", "--model.control_rule", "authors"],
        "fedbcgd_plus_paper_keepall_novr": ["--model.algorithm", "fedbcgd_plus", "--model.shared_control_coefficient",
                                            "paper", "--model.control_keep", "all", "--model.variance_reduction",
                                            "false"],
        "feddc_alpha0.1": ["--model.algorithm", "feddc", "--model.feddc_alpha", "0.1"],
        "fedavg_randk_ef": ["--model.algorithm", "fedavg", "--model.compression", "randk", "--model.compression_k",
                            "0.2", "--model.error_feedback", "true"],
        "fedavg_qsgd15": ["--model.algorithm", "fedavg", "--model.compression", "qsgd", "--model.qsgd_levels", "15",
                          "--model.qsgd_bucket_size", "64"],
        "topk_no_ef_k50": ["--model.algorithm", "topk", "--model.compression_k", "50", "--model.error_feedback",
                           "false"],
        "fedbcgd_n3_noshared": ["--model.algorithm", "fedbcgd", "--model.num_blocks", "3", "--model.shared_block",
                                "false", "--model.server_momentum", "0.9"],
        "fedavgm_weighted_dropout": ["--model.algorithm", "fedavgm", "--model.weighted_aggregation", "true",
                                     "--model.client_dropout", "0.3", "--model.server_lr", "0.7"],
        "fedadam_lr0.03": ["--model.algorithm", "fedadam", "--model.server_lr", "0.03"],
        "fedbcgd_plus_clip": ["--model.algorithm", "fedbcgd_plus", "--model.grad_clip", "1.0",
                              "--model.server_momentum", "0.6"],
    })
    golden = {}
    for case, args in cases.items():
        golden[case] = {"args": args, **run_metrics(args)}
        print(case, golden[case]["rows"][-1].get("val/acc"), flush=True)
    GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
