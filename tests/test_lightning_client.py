"""A plain Lightning script as a federated client (examples/federate_a_lightning_script.py),
in either namespace's Trainer, with the server simulated in-process."""
import importlib.util
from pathlib import Path

import lightning.pytorch as L
import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader

from fl_lightning.errors import FLUserError
from fl_lightning.federation.lightning_client import FederatedClient, InProcessServer
from tests.lightning_fixtures import make_classifier

spec = importlib.util.spec_from_file_location("example", Path(__file__).parents[1] / "examples" /
                                              "federate_a_lightning_script.py")
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)


def plain_trainer(ns, **kwargs):
    return ns.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False, **kwargs)


def test_the_example_federates_and_learns():
    accuracy = example.main(rounds=3, num_clients=3)
    print("federated val_acc", accuracy)
    assert accuracy > 0.8


@pytest.mark.parametrize("ns", [pl, L], ids=["pytorch_lightning", "lightning.pytorch"])
def test_one_client_one_round_is_the_plain_script(ns):
    """FedAvg with one client holding all the data is the centralised step: same weights (up to x + (y − x))."""
    train, _ = example.datasets()
    L.seed_everything(0, verbose=False)
    model = make_classifier(ns)()  # the user's module and Trainer from the same namespace, as Lightning needs
    start = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(1)
    plain_trainer(ns).fit(model, DataLoader(train, batch_size=32, shuffle=True))
    plain = model.state_dict()
    federated_model = make_classifier(ns)()
    federated_model.load_state_dict(start)
    server = InProcessServer(federated_model)
    client = FederatedClient(server)
    torch.manual_seed(1)
    plain_trainer(ns, callbacks=[client]).fit(federated_model, DataLoader(train, batch_size=32, shuffle=True))
    server.end_round()
    assert client.num_samples == len(train)
    for name, value in plain.items():
        torch.testing.assert_close(server.state[name], value, atol=1e-6, rtol=0)


def test_the_proximal_term_keeps_the_client_near_the_global_model():
    train, _ = example.datasets()
    moved = {}
    for mu in (0.0, 1.0):
        L.seed_everything(0, verbose=False)
        model = example.LitClassifier()
        server = InProcessServer(model, weighted=False)
        torch.manual_seed(1)
        plain_trainer(L, callbacks=[FederatedClient(server, mu=mu)]).fit(model, DataLoader(train, batch_size=32))
        start = server.download()
        server.end_round()
        moved[mu] = sum((server.state[k] - start[k]).pow(2).sum() for k in start if start[k].is_floating_point())
    print("squared distance moved:", {mu: float(v) for mu, v in moved.items()})
    assert moved[1.0] < 0.9 * moved[0.0]


def test_a_negative_mu_is_one_line():
    with pytest.raises(FLUserError, match=r"^FederatedClient.mu: must be ≥ 0"):
        FederatedClient(InProcessServer(torch.nn.Linear(2, 2)), mu=-1)
