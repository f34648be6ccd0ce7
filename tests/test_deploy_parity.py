"""One federation, three paths, one x^r: the same rounds through ``fl-lightning fit``, through ``flower-local``'s
ServerApp (``RemoteClients`` → the nodes' ``NodeSession``, the warm worker's code run in this process) and through a
user's own app (``AlgorithmStrategy`` → ``fit_reply`` with the user's Trainer) — both Flower paths on the in-process
grid, over the one deployment protocol (fl_lightning/deploy/protocol.py). The model each saves is the fit's, bit for
bit, for FedAvg, SCAFFOLD (client rows on the nodes), FedBCGD+ with Top-k (blocks, control variates, a codec's
message) and FedAvg with Krum under a sign-flip attack; the counted bytes are the fit's. A data attack (label_flip)
relabels on flower-local's nodes as in the fit."""
import glob
import os

import lightning.pytorch as L
import pytest
import torch
from torch.utils.data import DataLoader

pytest.importorskip("flwr", reason="Flower is an extra: pip install '.[flower]'")

from flwr.app import ArrayRecord  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402

from fl_lightning.cli import main  # noqa: E402
from fl_lightning.deploy import client_app, server_app  # noqa: E402
from fl_lightning.deploy.client_helper import answer_join, fit_reply  # noqa: E402
from fl_lightning.deploy.inline_grid import InlineGrid  # noqa: E402
from fl_lightning.deploy.strategy import AlgorithmStrategy  # noqa: E402
from fl_lightning.deploy.worker import Workers  # noqa: E402

REPO = __import__("pathlib").Path(__file__).resolve().parents[1]
M, S, ROUNDS = 6, 5, 2
CONFIG = f"""\
seed_everything: 0
trainer:
  max_epochs: {ROUNDS}
  enable_progress_bar: false
  enable_model_summary: false
  logger:
    class_path: pytorch_lightning.loggers.CSVLogger
    init_args: {{save_dir: runs, name: parity}}
model:
  clients_per_round: {S}
  local_epochs: 1
  batch_size: 32
  lr: 0.1
  lr_decay: 1.0
  weight_decay: 0.0
  network: flower_app.task.LitDigits
data:
  dataset: digits
  num_clients: {M}
"""
CASES = {  # fit's options, and the same as AlgorithmStrategy's arguments
    "fedavg": ([], {}),
    "scaffold": (["--model.algorithm", "scaffold"], {"algorithm": "scaffold"}),
    "fedbcgd_plus+topk": (["--model.algorithm", "fedbcgd_plus", "--model.algorithm.num_blocks", "2",
                           "--model.compression", "topk"],
                          {"algorithm": {"name": "fedbcgd_plus", "num_blocks": 2}, "compression": "topk"}),
    "krum+sign_flip": (["--model.aggregator", "krum", "--model.attack", "sign_flip", "--model.attack.fraction", "0.2"],
                       {"aggregator": "krum", "attack": {"class_path": "sign_flip", "init_args": {"fraction": 0.2}}}),
}


@pytest.fixture()
def workdir(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "examples" / "flower_app"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "parity.yaml").write_text(CONFIG)
    return tmp_path


def saved_model(save_dir: str) -> dict:
    """The net's parameters in the run's last checkpoint (x^r after the last round)."""
    (path,) = glob.glob(os.path.join(save_dir, "parity", "*", "version_*", "checkpoints", "*.ckpt"))
    state = torch.load(path, weights_only=False)["state_dict"]
    return {key[len("net."):]: value for key, value in state.items() if key.startswith("net.")}


def through_flower_local(args: list[str], monkeypatch) -> dict:
    """flower-local's ServerApp over the in-process grid; each node's worker code answers in this process."""
    monkeypatch.setattr(client_app, "IN_PROCESS", Workers())
    grid = InlineGrid(client_app.app, M)
    for context in grid.contexts.values():
        context.node_config["state-dir"] = os.path.abspath(f"node{context.node_config['partition-id']}")
    assert server_app.serve(grid, [*args, "--trainer.logger.init_args.save_dir", "flower"], 60.0, 60.0) == 0
    return saved_model("flower")


def through_strategy(options: dict) -> tuple[dict, AlgorithmStrategy]:
    """A user's own ServerApp (AlgorithmStrategy) and ClientApp (their LitDigits, their Trainer, fit_reply)."""
    from flower_app.task import BATCH, LitDigits, load_partition, trainer

    shards = [load_partition(i, M) for i in range(M)]
    app = ClientApp()
    app.query()(answer_join)

    @app.train()
    def train(message, context):
        shard = shards[context.node_config["partition-id"]]
        return fit_reply(message, context, LitDigits(), trainer(),
                         lambda job: DataLoader(shard, batch_size=BATCH, sampler=job.sampler(shard)))

    L.seed_everything(0, verbose=False)  # as the fit builds its network
    model = LitDigits()
    strategy = AlgorithmStrategy(model=model, num_clients=M, per_round=S, seed=0, fraction_evaluate=0.0,
                                 **{"algorithm": "fedavg", **options})
    result = strategy.start(grid=InlineGrid(app, M), initial_arrays=ArrayRecord(model.state_dict()),
                            num_rounds=ROUNDS)
    return result.arrays.to_torch_state_dict(), strategy


@pytest.mark.parametrize("case", list(CASES))
def test_fit_flower_local_and_a_users_flower_app_save_the_same_model(case, workdir, monkeypatch):
    fit_options, strategy_options = CASES[case]
    args = ["--config", "parity.yaml", *fit_options]
    assert main(["fit", *args, "--trainer.logger.init_args.save_dir", "fit"]) == 0
    fitted = saved_model("fit")
    deployed = through_flower_local(args, monkeypatch)
    own_app, strategy = through_strategy(strategy_options)
    assert len(fitted) == 4 and fitted.keys() == deployed.keys() and set(fitted) <= set(own_app)  # 2 Linear layers
    for key, value in fitted.items():
        assert torch.equal(deployed[key], value), (case, "flower-local", key)
        assert torch.equal(own_app[key], value), (case, "AlgorithmStrategy", key)
    with open(glob.glob(os.path.join("fit", "parity", "*", "version_*", "metrics.csv"))[0]) as f:
        header, *rows = [line.strip().split(",") for line in f]
    last = dict(zip(header, rows[-1]))
    assert float(last["comm/upload_bytes"]) == strategy.comm.upload_bytes  # the fit's counted bytes


def test_a_data_attack_relabels_the_malicious_nodes_data_as_the_fit_does(workdir, monkeypatch):
    """label_flip changes the malicious clients' data, which flower-local's nodes hold: each node draws the malicious
    clients from the run seed and relabels them as the fit does (``PoisonedData.poison``), so the saved model is the
    attacked fit's, not the clean one's. (AlgorithmStrategy refuses it: the user's own loaders hold the data.)"""
    args = ["--config", "parity.yaml", "--model.attack", "label_flip", "--model.attack.fraction", "0.34"]
    assert main(["fit", *args, "--trainer.logger.init_args.save_dir", "fit"]) == 0
    assert main(["fit", "--config", "parity.yaml", "--trainer.logger.init_args.save_dir", "clean"]) == 0
    fitted, clean = saved_model("fit"), saved_model("clean")
    deployed = through_flower_local(args, monkeypatch)
    assert any(not torch.equal(fitted[key], clean[key]) for key in fitted)  # the attack changed the fit
    for key, value in fitted.items():
        assert torch.equal(deployed[key], value), key
