"""Robust aggregation and attacks in real fits (docs/robustness.md): the default and an explicit ``mean`` are one code
path (bit for bit); the kept-uploads path equals it to float precision with a codec and server momentum; the
malicious clients are fixed by the seed and logged; label_flip trains them on flipped labels; refusals are one line."""
import csv

import numpy as np
import pytest
import torch
from pytorch_lightning import Callback
from pytorch_lightning.loggers import CSVLogger

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.aggregation import RobustServer
from fl_lightning.algorithms import FedAvgM, FedBCGD
from fl_lightning.attacks.base import MALICIOUS_STREAM
from fl_lightning.errors import ConfigError
from fl_lightning.federation.seeding import derive_seed
from fl_lightning.models import MLP
from fl_lightning.privacy import PrivacyOptions
from tests.conftest import make_trainer


def fit(rounds=2, name="r", **options):
    torch.manual_seed(0)
    options.setdefault("algorithm", FedAvgM(server_momentum=0.5))
    module = FederatedModule(MLP(64, 10, hidden=[16]), clients_per_round=5, batch_size=20, **options)
    logger = CSVLogger("runs", name=name)
    data = FederatedDataModule("digits", num_clients=10)
    make_trainer(rounds, logger=logger).fit(module, data)
    with open(f"{logger.log_dir}/metrics.csv") as f:
        rows = [{k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(f)]
    return module, rows, data


def test_an_explicit_mean_is_the_default_bit_for_bit_and_kept_uploads_equal_it():
    default, rows, _ = fit(name="a")
    explicit, rows_mean, _ = fit(name="b", aggregator="mean")
    assert explicit.robust is None
    assert torch.equal(default.flat.vector, explicit.flat.vector) and rows == rows_mean
    # a norm bound no upload reaches keeps every upload (ReceivedUploads) and averages them: the same numbers to
    # float precision, through the QSGD codec (decoded values) and the server's momentum on Δ̄
    from fl_lightning.compression import CODECS
    streamed, _, _ = fit(name="c", compression=CODECS["qsgd"]())
    kept, rows_kept, _ = fit(name="d", compression=CODECS["qsgd"](), aggregator={"class_path": "norm_bound",
                                                                                  "init_args": {"max_norm": 1e9}})
    torch.testing.assert_close(kept.flat.vector, streamed.flat.vector, atol=1e-5, rtol=0)
    assert kept.robust is not None and "attack/malicious_in_round" not in rows_kept[0]


def test_malicious_clients_are_fixed_by_the_seed_and_logged_per_round():
    module, rows, data = fit(rounds=3, algorithm=FedBCGD(num_blocks=2, block_division="balanced"), aggregator="median",
                             attack={"class_path": "sign_flip", "init_args": {"fraction": 0.3}})
    bad = sorted(np.random.default_rng(derive_seed(MALICIOUS_STREAM)).choice(10, size=3, replace=False).tolist())
    server = next(cb for cb in module.trainer.callbacks if isinstance(cb, RobustServer))
    assert sorted(server.malicious) == bad
    sampled = [module.loop.sample_clients(r) for r in range(3)]
    assert [float(r["attack/malicious_in_round"]) for r in rows] == [float(len(set(s) & set(bad))) for s in sampled]
    assert all(np.isfinite(float(r["val/loss"])) for r in rows)


def test_label_flip_trains_the_malicious_clients_on_flipped_labels_and_restores_them():
    seen = {}
    module = FederatedModule(MLP(64, 10, hidden=[16]), clients_per_round=5, batch_size=20,
                             attack={"class_path": "label_flip", "init_args": {"clients": [2, 7]}})
    data = FederatedDataModule("digits", num_clients=10)
    original = {}

    class Watch(Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            clients = pl_module.loop.clients
            original["y"] = clients.y.clone()
            seen["offsets"] = list(clients.offsets)

    make_trainer(1, callbacks=[Watch()]).fit(module, data)
    offsets, during, after = seen["offsets"], original["y"], data.clients.y
    for cid in range(10):
        a, b = offsets[cid], offsets[cid + 1]
        expected = 9 - after[a:b] if cid in (2, 7) else after[a:b]
        assert torch.equal(during[a:b], expected), cid


def test_refusals_are_one_line():
    with pytest.raises(ConfigError, match=r"model.aggregator: krum\(f=1\) needs at least 5 uploads per group, but a "
                                          r"block of 4 uploads \(S=8 over N=2 blocks\) has 4"):
        FederatedModule(MLP(64, 10), algorithm=FedBCGD(num_blocks=2, block_division="balanced"),
                        clients_per_round=8, aggregator="krum")
    with pytest.raises(ConfigError, match="model.aggregator: is not combined with model.privacy"):
        FederatedModule(MLP(64, 10), aggregator="median", privacy=PrivacyOptions(noise_multiplier=1.0, clip=1.0))
    with pytest.raises(ConfigError, match="model.attack.fraction: got 1.5"):
        FederatedModule(MLP(64, 10), attack={"class_path": "sign_flip", "init_args": {"fraction": 1.5}})
    from fl_lightning.aggregation import RobustServer, resolve_aggregator, resolve_attack
    from fl_lightning.assembly.fit import Fit
    from fl_lightning.systems.fedbuff import Asynchronous

    for server, fit, line in [  # the same clashes as the part's refuse(fit), on every path (the connector asks it)
        (RobustServer(resolve_aggregator("median"), None, None, 5), Fit(10, 5, privacy_sampling="fixed"),
         "model.aggregator: is not combined with model.privacy"),
        (RobustServer(None, resolve_attack("sign_flip"), None, 5), Fit(10, 5, privacy_sampling="poisson"),
         "model.attack: is not combined with model.privacy"),
        (RobustServer(None, resolve_attack("sign_flip"), None, 5), Fit(10, 5, asynchronous=Asynchronous()),
         "model.attack: needs synchronous rounds"),
    ]:
        assert str(server.refuse(fit)).startswith(line), str(server.refuse(fit))
    assert RobustServer(resolve_aggregator("median"), None, None, 5).refuse(Fit(10, 5)) is None


def test_refusals_count_the_group_the_rule_really_gets():
    """FedBuff: the rule runs on each buffer of K arrivals, not on S; dropout refuses only a rule with a minimum;
    bucket and client momentum need synchronous rounds; fraction 1 and 1.0 are one setting."""
    from fl_lightning.attacks import SignFlip
    from fl_lightning.systems.fedbuff import Asynchronous

    with pytest.raises(ConfigError, match=r"krum\(f=1\) needs at least 5 uploads per group, but a buffer of K=3 "
                                          r"uploads has 3"):
        FederatedModule(MLP(64, 10), clients_per_round=10, system="uniform", aggregator="krum",
                        asynchronous=Asynchronous(buffer_size=3, concurrency=5))
    FederatedModule(MLP(64, 10), clients_per_round=4, system="uniform", aggregator="krum",
                    asynchronous=Asynchronous(buffer_size=6, concurrency=8))  # S = 4 < 5 does not matter there
    with pytest.raises(ConfigError, match=r"^model.aggregator.bucket: needs synchronous rounds"):
        FederatedModule(MLP(64, 10), clients_per_round=4, system="uniform", aggregator={
            "class_path": "median", "init_args": {"bucket": 2}}, asynchronous=Asynchronous(buffer_size=6, concurrency=8))
    FederatedModule(MLP(64, 10), clients_per_round=10, client_dropout=0.95, attack="sign_flip")  # mean: no minimum
    assert SignFlip(fraction=1).options() == SignFlip(fraction=1.0).options() == {"fraction": 1.0, "factor": 1.0}
