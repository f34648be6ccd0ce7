"""‖c − mean_i c_i‖ / ‖mean_i c_i‖ after 100 rounds of convex FedBCGD+: the old defaults against the
revised spec (docs/experiments.md, "Why FedBCGD+ failed before"). From the repository root:

    .venv/bin/python benchmarks/control_drift.py      (about 5 minutes on 2 cores)
"""
from fl_lightning.callbacks import ControlVariates
from fl_lightning.cli import FederatedCLI

CONFIG = "configs/experiments/convex_mnist_logreg.yaml"
SETTINGS = {
    "old defaults (option1, keep all, 1/(MN))": ["--model.algorithm.control_variate", "option1", "--model.algorithm.keep", "all",
                                                 "--model.algorithm.shared_coefficient", "paper"],
    "revised spec (option2, keep uploaded, 1/M)": [],
}

for name, extra in SETTINGS.items():
    cli = FederatedCLI(args=["--config", CONFIG, "--model.algorithm", "fedbcgd_plus", "--model.lr", "0.03",
                             "--trainer.max_epochs", "100", "--trainer.logger", "false", "--trainer.enable_progress_bar",
                             "false", *extra], run=False)
    cli.trainer.fit(cli.model, cli.datamodule)
    (controls,) = [cb for cb in cli.model.loop.callbacks if isinstance(cb, ControlVariates)]
    table = controls.client_controls  # clients never sampled: c_i = 0
    mean_ci = sum(table.read(i) for i in table.clients()) / len(cli.model.loop.clients)
    drift = float((controls.server_control.cpu() - mean_ci).norm() / mean_ci.norm())
    metrics = cli.trainer.callback_metrics
    print(f"{name}: upload_d {cli.model.loop.comm.upload_d:.1f}, |c - mean c_i| / |mean c_i| = {drift:.3f}, "
          f"test acc {float(metrics['val/acc']):.4f}, objective {float(metrics['train/objective']):.4f}", flush=True)
