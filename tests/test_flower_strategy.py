"""Any algorithm in a user's own Flower app: ``AlgorithmStrategy`` started by Flower's own ``Strategy.start`` in a
ServerApp, the user's ClientApp training their LightningModule with ``fit_reply`` — messages are Flower's own
``Message`` objects through a Grid of in-process nodes (fl_lightning.deploy.inline_grid; no Ray here). The final
global model is ``fl-lightning fit``'s, bit for bit, with the same counted bytes; the bytes in Flower's messages are
recorded beside them; bad use is one line."""
import copy

import lightning.pytorch as L
import pytest
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

pytest.importorskip("flwr", reason="Flower is an extra: pip install '.[flower]'")

from flwr.app import ArrayRecord, Message, MessageType  # noqa: E402
from flwr.clientapp import ClientApp  # noqa: E402

from fl_lightning.algorithms import FedBCGD, FedBCGDPlus  # noqa: E402
from fl_lightning.deploy.client_helper import answer_join, fit_reply  # noqa: E402
from fl_lightning.deploy.inline_grid import InlineGrid  # noqa: E402
from fl_lightning.deploy.strategy import AlgorithmStrategy  # noqa: E402
from fl_lightning.errors import FLUserError  # noqa: E402
from tests.test_lightning_client import B, M, S, fit_run, make_net, shards_of, user_trainer  # noqa: E402

ALGORITHMS = {"fedavg": ("fedavg", None), "scaffold": ("scaffold", None), "fedbcgd": (FedBCGD(num_blocks=2), None),
              "fedbcgd_plus+qsgd": (FedBCGDPlus(num_blocks=2), "qsgd")}


def client_app(ns, shards, expects=None):
    """The user's ClientApp: their module, their Trainer, their data; ``fit_reply`` is the only FL line."""
    app = ClientApp()
    app.query()(answer_join)

    @app.train()
    def train(message, context):
        shard = shards[context.node_config["partition-id"]]
        return fit_reply(message, context, make_net(ns)(), user_trainer(ns),
                         lambda job: DataLoader(shard, batch_size=B, sampler=job.sampler(shard)), algorithm=expects)

    return app


def flower_run(ns, algorithm, codec, start, shards, rounds=2):
    model = make_net(ns)()
    strategy = AlgorithmStrategy(copy.deepcopy(algorithm), model=model, compression=codec, num_clients=M,
                                 per_round=S, seed=0, fraction_evaluate=0.0)
    grid = InlineGrid(client_app(ns, shards), M)
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(start), num_rounds=rounds)
    return strategy, result


CASES = [(name, L) for name in ALGORITHMS] + [("fedbcgd", pl), ("scaffold", pl)]  # both Lightning namespaces


@pytest.mark.parametrize("name,ns", CASES, ids=[f"{n}-{ns.__name__}" for n, ns in CASES])
def test_a_flower_app_ends_with_the_fits_global_model(name, ns):
    algorithm, codec = ALGORITHMS[name]
    module, data, start = fit_run(ns, algorithm, codec)
    strategy, result = flower_run(ns, algorithm, codec, start, shards_of(data))
    print(name, ns.__name__, "upload_d", strategy.comm.upload_d, "message bytes",
          [(r["round"], r["sent_message_bytes"], r["received_message_bytes"], r["counted_upload_bytes"])
           for r in strategy.traffic])
    assert torch.equal(strategy.server.global_vector, module.global_vector)
    assert strategy.comm.state_dict() == module.loop.comm.state_dict()  # the counted bytes: the fit's
    final = result.arrays.to_torch_state_dict()
    for key, value in module.net.state_dict().items():
        assert torch.equal(final[key], value), key
    assert len(strategy.traffic) == 2 * S and all(r["reported"] for r in strategy.traffic)
    for row in strategy.traffic:  # Flower's message holds the counted upload, plus its framing
        assert row["received_message_bytes"] > row["counted_upload_bytes"] > 0
    assert set(result.train_metrics_clientapp) == {1, 2}


def test_client_rows_stay_on_the_node():
    """SCAFFOLD: c_i lives in the node's context.state, the strategy's own store holds no client rows."""
    module, data, start = fit_run(L, "scaffold", None, rounds=1)
    strategy = AlgorithmStrategy("scaffold", model=make_net(L)(), num_clients=M, per_round=S, seed=0,
                                 fraction_evaluate=0.0)
    grid = InlineGrid(client_app(L, shards_of(data)), M)
    strategy.start(grid=grid, initial_arrays=ArrayRecord(start), num_rounds=1)
    trained = {r["node_id"] for r in strategy.traffic}
    assert all(("fl-lightning.client" in c.state) == (node in trained) for node, c in grid.contexts.items())
    assert not any(table.clients() for table in strategy.server.client_state.tables.values())


# -- bad use, one line each -------------------------------------------------------------------------------
def one_message(algorithm="fedavg"):
    strategy = AlgorithmStrategy(algorithm, model=make_net(L)(), num_clients=M, per_round=S, seed=0)
    shards = [TensorDataset(torch.rand(20, 1, 8, 8), torch.randint(0, 10, (20,))) for _ in range(M)]
    grid = InlineGrid(client_app(L, shards), M)
    strategy.join(grid)
    (message, *_) = strategy.configure_train(1, ArrayRecord(), __import__("flwr").app.ConfigRecord(), grid)
    message.metadata.__dict__["_message_id"] = "m1"
    return strategy, grid, message, shards


def test_a_client_whose_algorithm_differs_is_refused():
    _, grid, message, shards = one_message("fedavg")
    context = grid.contexts[message.metadata.dst_node_id]
    with pytest.raises(FLUserError, match=r"^fit_reply\(algorithm=...\): this client runs scaffold but the "
                                          r"strategy runs fedavg"):
        client_app(L, shards, expects="scaffold")(message, context)


def test_a_reply_for_another_round_is_refused():
    strategy, grid, message, _ = one_message()
    (reply,) = grid.send_and_receive([message])
    strategy.aggregate_train(1, [reply])
    strategy.configure_train(2, ArrayRecord(), __import__("flwr").app.ConfigRecord(), grid)
    with pytest.raises(FLUserError, match=r"^AlgorithmStrategy: a reply for round 1 of run .* reached round 2"):
        strategy.aggregate_train(2, [reply])
    context = grid.contexts[message.metadata.dst_node_id]  # the same message answered twice on its node
    with pytest.raises(FLUserError, match=r"^fit_reply: round 1 of run .* reached a node that trained round 1 "
                                          r"already"):
        grid.client_app(message, context)


def test_a_message_not_from_the_strategy_is_refused():
    _, grid, message, _ = one_message()
    plain = Message(__import__("flwr").app.RecordDict({"arrays": ArrayRecord()}), dst_node_id=message.metadata.dst_node_id,
                    message_type=MessageType.TRAIN)
    with pytest.raises(FLUserError, match=r"^fit_reply: this message was not sent by AlgorithmStrategy"):
        grid.client_app(plain, grid.contexts[message.metadata.dst_node_id])


def test_the_flower_app_example_ends_with_the_fits_global_model(tmp_path, monkeypatch, capsys):
    """examples/flower_app: its ServerApp and ClientApp on 4 in-process nodes with its pyproject's run config
    (FedBCGD N = 2, 3 rounds, with federated evaluation) save fl-lightning fit's global model, bit for bit."""
    import tomllib

    from fl_lightning import FederatedDataModule, FederatedModule
    from flwr.app import Context, RecordDict
    from tests.conftest import make_trainer

    app_dir = REPO / "examples" / "flower_app"
    monkeypatch.syspath_prepend(str(app_dir))
    from flower_app.client_app import app as client
    from flower_app.server_app import app as server
    from flower_app.task import LitDigits

    config = tomllib.loads((app_dir / "pyproject.toml").read_text())["tool"]["flwr"]
    run_config = dict(config["app"]["config"], save=str(tmp_path / "final_model.pt"))
    nodes = config["federations"]["local-simulation"]["options"]["num-supernodes"]
    grid = InlineGrid(client, nodes, run_config)
    server(grid, Context(run_id=1, node_id=0, node_config={}, state=RecordDict(), run_config=run_config))
    printed = capsys.readouterr().out.splitlines()
    assert printed[-2:] == ["uploaded 1.705 d per client (counted as fl-lightning fit counts it)",
                            "eval_acc after round 3: 0.1616"]  # what docs/callbacks_outside_fl_lightning.md says

    L.seed_everything(0, verbose=False)
    module = FederatedModule(LitDigits(), algorithm=FedBCGD(num_blocks=2), clients_per_round=4, local_epochs=1,
                             batch_size=32, lr=0.1, lr_decay=1.0, weight_decay=0.0)
    module.prints_summary = False
    make_trainer(run_config["num-server-rounds"]).fit(module, FederatedDataModule("digits", num_clients=nodes))
    saved = torch.load(tmp_path / "final_model.pt")
    for key, value in module.net.state_dict().items():
        assert torch.equal(saved[key], value), key


REPO = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_initial_arrays_of_another_model_are_refused():
    strategy = AlgorithmStrategy("fedavg", model=make_net(L)(), num_clients=M, per_round=S)
    with pytest.raises(FLUserError, match=r"^AlgorithmStrategy.start\(initial_arrays=...\): is not the state dict "
                                          r"of the strategy's model"):
        strategy.start(grid=InlineGrid(ClientApp(), M), initial_arrays=ArrayRecord({"w": torch.zeros(2)}))


def test_a_codec_the_nodes_cannot_carry_is_refused_at_construction():
    """The deployment's refusal (``NodeClients.refuse``), the same part as flower-local's, asked at construction."""
    with pytest.raises(FLUserError, match=r"^AlgorithmStrategy\(compression=...\): the codec's messages are not "
                                          r"deployable on Flower yet; use topk, randk or qsgd$"):
        AlgorithmStrategy("fedavg", model=make_net(L)(), compression="powersgd", num_clients=M, per_round=S)


# -- a killed ServerApp resumes from its checkpoint ------------------------------------------------------
def grid_with_state_dirs(shards, root):
    """A new Flower run's nodes: fresh ``context.state``; each node's ``state-dir`` is kept across runs."""
    grid = InlineGrid(client_app(L, shards), M)
    for context in grid.contexts.values():
        context.node_config["state-dir"] = str(root / f"node{context.node_config['partition-id']}")
    return grid


def test_a_killed_strategy_resumes_from_its_checkpoint_exactly(tmp_path):
    """FedBCGD+ (server c and momentum with the strategy, c_i on the nodes): 2 rounds with checkpoint=, round 3
    trained by the nodes but never aggregated (the ServerApp killed mid-round), then a new strategy and a new Flower
    run (fresh context.state, the same state-dirs) with num_rounds=3: the fit's 3-round model, bit for bit."""
    algorithm = FedBCGDPlus(num_blocks=2)
    module, data, start = fit_run(L, algorithm, None, rounds=3)
    shards, checkpoint = shards_of(data), str(tmp_path / "strategy.ckpt")

    def strategy():
        return AlgorithmStrategy(copy.deepcopy(algorithm), model=make_net(L)(), num_clients=M, per_round=S, seed=0,
                                 fraction_evaluate=0.0, checkpoint=checkpoint)

    first, grid = strategy(), grid_with_state_dirs(shards, tmp_path)
    first.start(grid=grid, initial_arrays=ArrayRecord(start), num_rounds=2)
    assert torch.load(checkpoint, weights_only=True)["server"]["round"] == 2
    grid.send_and_receive(first.configure_train(3, ArrayRecord(), __import__("flwr").app.ConfigRecord(), grid))
    del first  # killed before aggregate_train: its nodes hold round 3's rows, pending

    resumed, grid = strategy(), grid_with_state_dirs(shards, tmp_path)
    result = resumed.start(grid=grid, initial_arrays=ArrayRecord(make_net(L)().state_dict()), num_rounds=3)
    assert set(result.train_metrics_clientapp) == {1}  # Flower's rounds restart at 1: one round was left
    assert torch.equal(resumed.server.global_vector, module.global_vector)
    assert resumed.comm.state_dict() == module.loop.comm.state_dict()
    assert [r["round"] for r in resumed.traffic] == [1, 1, 2, 2, 3, 3]
    for key, value in module.net.state_dict().items():
        assert torch.equal(result.arrays.to_torch_state_dict()[key], value), key


def test_a_checkpoint_of_other_options_is_refused(tmp_path):
    checkpoint = str(tmp_path / "strategy.ckpt")
    AlgorithmStrategy("fedavg", model=make_net(L)(), num_clients=M, per_round=S, seed=0).save(checkpoint)
    other = AlgorithmStrategy("scaffold", model=make_net(L)(), num_clients=M, per_round=S, seed=0,
                              checkpoint=checkpoint)
    with pytest.raises(FLUserError, match=r"^AlgorithmStrategy\(algorithm=...\): is .*scaffold.* but .*fedavg.* in "
                                          r"the saved server: resume with the same options"):
        other.start(grid=InlineGrid(ClientApp(), M), initial_arrays=ArrayRecord(make_net(L)().state_dict()))
