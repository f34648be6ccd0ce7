"""A plain Lightning script federated with every algorithm: ``InProcessServer`` and ``job.callback`` on the user's
own Trainer (either namespace) end with ``fl-lightning fit``'s global model, bit for bit (same data, partition,
seed, batch order and local SGD); the server's state resumes exactly; bad use is one line."""
import copy
import os
import subprocess
import sys
import textwrap

import lightning.pytorch as L
import pytest
import pytorch_lightning as pl
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from fl_lightning import FederatedDataModule, FederatedModule
from fl_lightning.algorithms import FedBCGD, FedBCGDPlus, FedDyn, FedProx
from fl_lightning.assembly.outside import InProcessServer
from fl_lightning.errors import FLUserError
from fl_lightning.federation.lightning_client import FederatedClient
from tests.conftest import make_trainer

M, S, B, LR = 4, 2, 50, 0.1
NAMESPACES = pytest.mark.parametrize("ns", [pl, L], ids=["pytorch_lightning", "lightning.pytorch"])


def make_net(ns):
    class Net(ns.LightningModule):
        """A user's module: its own training_step and SGD."""

        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, 10))

        def forward(self, x):
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = F.cross_entropy(self(x), y)
            self.log("train_loss", loss)
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=LR)

    return Net


def user_trainer(ns, epochs=1, **kwargs):
    return ns.Trainer(max_epochs=epochs, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, **kwargs)


def fit_run(ns, algorithm, compression=None, rounds=2, per_round=S, batch=B, **data_options):
    """``fl-lightning fit`` from Python: the same user module as the network, SGD at LR, no decay."""
    pl.seed_everything(0, verbose=False)
    net = make_net(ns)()
    start = copy.deepcopy(net.state_dict())
    module = FederatedModule(net, algorithm=copy.deepcopy(algorithm), compression=compression,
                             clients_per_round=per_round, local_epochs=1, batch_size=batch, lr=LR, lr_decay=1.0, weight_decay=0.0)
    module.prints_summary = False
    data = FederatedDataModule("digits", num_clients=M, **(data_options or dict(dirichlet_rho=0.5)))
    make_trainer(rounds).fit(module, data)
    return module, data, start


def shards_of(data):
    return [TensorDataset(*data.clients.of(client)) for client in range(M)]


def script_rounds(ns, server, model, shards, rounds, batch=B):
    """The user's loop: each sampled client is one Trainer.fit of their module with the job's callback."""
    for _ in range(rounds):
        for job in server.round():
            shard = shards[job.client_id]
            user_trainer(ns, callbacks=[job.callback]).fit(model, DataLoader(shard, batch_size=batch,
                                                                             sampler=job.sampler(shard)))


ALGORITHMS = {"fedavg": ("fedavg", None), "fedavgm": ("fedavgm", None), "fedprox": (FedProx(mu=0.1), None),
              "scaffold": ("scaffold", None), "feddyn": (FedDyn(alpha=0.1), None), "fednova": ("fednova", None),
              "fedbcgd": (FedBCGD(num_blocks=2), None), "fedbcgd_plus": (FedBCGDPlus(num_blocks=2), None),
              "fedbcgd+qsgd": (FedBCGD(num_blocks=2), "qsgd")}


@NAMESPACES
@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_plain_script_ends_with_the_fits_global_model(name, ns):
    algorithm, codec = ALGORITHMS[name]
    module, data, start = fit_run(ns, algorithm, codec)
    model = make_net(ns)()
    model.load_state_dict(start)
    server = InProcessServer(model, algorithm=copy.deepcopy(algorithm), compression=codec, clients=M, per_round=S,
                             seed=0)
    initial = server.global_vector.clone()
    script_rounds(ns, server, model, shards_of(data), rounds=2)
    print(name, ns.__name__, "upload_d", server.comm.upload_d, "moved", float((server.global_vector - initial).norm()))
    assert torch.equal(server.global_vector, module.global_vector)
    assert not torch.equal(server.global_vector, initial)
    assert server.comm.upload_d == module.loop.comm.upload_d  # bytes counted from the same messages
    assert server.comm.state_dict() == module.loop.comm.state_dict()
    model.load_state_dict(server.global_state())  # x^R as the user's own state dict
    torch.testing.assert_close(model.net[1].weight, module.net.net[1].weight, rtol=0, atol=0)


def test_fedbcgd_plus_on_uneven_clients_with_a_partial_last_minibatch_is_the_fits_bit_for_bit():
    """FedBCGD+ at the Flower example's batch 32 on clients of 255, 56, 56 and 925 samples (none a multiple of 32):
    every local epoch and every SVRG pass for ∇f_i(x^r) ends on a partial minibatch, weighted by its size, and
    ∇f_i(x^r; ζ) replays it; the user's Trainer gives the fit's x^R bit for bit. (Bit for bit needs both processes
    on the same CPU kernels: tests/conftest.py's ATEN_CPU_CAPABILITY; AVX2 against AVX-512 differ by ~1e-7.)"""
    algorithm, batch = FedBCGDPlus(num_blocks=2), 32
    module, data, start = fit_run(L, algorithm, batch=batch, partition="quantity", quantity_sigma=1.0)
    sizes = [data.clients.num_samples(client) for client in range(M)]
    assert sizes == [255, 56, 56, 925] and all(n % batch for n in sizes)
    model = make_net(L)()
    model.load_state_dict(start)
    server = InProcessServer(model, algorithm=copy.deepcopy(algorithm), clients=M, per_round=S, seed=0)
    initial = server.global_vector.clone()
    script_rounds(L, server, model, shards_of(data), rounds=2, batch=batch)
    assert torch.equal(server.global_vector, module.global_vector)
    assert not torch.equal(server.global_vector, initial)


def test_a_killed_script_resumes_exactly(tmp_path):
    """FedBCGD+ (c, c_i on disk, block momentum): one round, save, a new server loads it, one more round."""
    algorithm = FedBCGDPlus(num_blocks=2)
    module, data, start = fit_run(L, algorithm)
    model = make_net(L)()
    model.load_state_dict(start)
    shards = shards_of(data)
    options = dict(algorithm=copy.deepcopy(algorithm), clients=M, per_round=S, seed=0, directory=str(tmp_path / "s"))
    first = InProcessServer(model, **options)
    script_rounds(L, first, model, shards, rounds=1)
    first.save(str(tmp_path / "server.pt"))
    del first
    again = InProcessServer(make_net(L)(), **options).load(str(tmp_path / "server.pt"))
    script_rounds(L, again, model, shards, rounds=1)
    assert again.round_idx == 2
    assert torch.equal(again.global_vector, module.global_vector)


def test_every_client_side_hook_runs_in_the_users_trainer():
    """SCAFFOLD's c_i reaches the client store, the download counts c beside x^r, FedBCGD's upload is one block."""
    model = make_net(L)()
    data = FederatedDataModule("digits", num_clients=M, dirichlet_rho=0.5)
    data.setup("fit")
    server = InProcessServer(model, algorithm=FedBCGDPlus(num_blocks=2), clients=M, per_round=S, seed=0)
    jobs = server.start_round()
    shard = shards_of(data)[jobs[0].client_id]
    user_trainer(L, callbacks=[jobs[0].callback]).fit(model, DataLoader(shard, batch_size=B))
    client = jobs[0].result[0]
    d = server.flat.num_params
    assert client.steps == -(-len(shard) // B)
    assert client.download.nbytes == 4 * (server.flat.numel + d)  # x^r and c
    uploaded = sum(stop - start for start, stop in client.upload_ranges)
    assert uploaded < server.flat.numel and client.upload.nbytes == 4 * (uploaded + min(uploaded, d))
    server.end_round()  # the second job never trained: that client did not report
    table = server.client_state.tables["control_variate"]
    assert table.has(jobs[0].client_id) and not table.has(jobs[1].client_id)


# -- bad use, one line each -------------------------------------------------------------------------------
def one_job(algorithm="fedavg", **options):
    model = make_net(L)()
    server = InProcessServer(model, algorithm=algorithm, clients=M, per_round=S, seed=0, **options)
    shard = TensorDataset(torch.rand(20, 1, 8, 8), torch.randint(0, 10, (20,)))
    return server, model, server.start_round()[0], DataLoader(shard, batch_size=10)


def test_a_client_expecting_another_algorithm_is_refused():
    _, _, job, _ = one_job("fedavg")
    with pytest.raises(FLUserError, match=r"^FederatedClient\(algorithm=...\): this client runs scaffold but the "
                                          r"server runs fedavg"):
        FederatedClient(job, algorithm="scaffold")


def test_a_job_of_an_earlier_round_is_refused():
    server, model, job, loader = one_job()
    server.end_round()
    server.start_round()
    with pytest.raises(FLUserError, match=r"^ClientJob: this job is round 1's of run .* the server is at round 2"):
        user_trainer(L, callbacks=[job.callback]).fit(model, loader)


def test_a_client_that_trains_no_step_is_refused():
    _, model, job, loader = one_job()
    with pytest.raises(FLUserError, match=r"^FederatedClient: client \d+ trained no optimizer step"):
        user_trainer(L, callbacks=[job.callback], limit_train_batches=0).fit(model, loader)


def test_fednova_on_accumulated_batches_is_refused():
    _, model, job, loader = one_job("fednova")
    with pytest.raises(FLUserError, match=r"^Trainer\(accumulate_grad_batches=...\): FedNova normalises"):
        user_trainer(L, callbacks=[job.callback], accumulate_grad_batches=2).fit(model, loader)


def test_another_model_and_pooled_training_are_refused():
    _, _, job, loader = one_job()
    other = make_net(L)()
    other.net[1] = nn.Linear(64, 8)
    with pytest.raises(FLUserError, match=r"^FederatedClient: the module trained is not the server's model: "
                                          r"net.1.weight \(16, 64\) on the server, shape \(8, 64\) here"):
        user_trainer(L, callbacks=[job.callback]).fit(other, loader)
    with pytest.raises(FLUserError, match=r"^InProcessServer\(algorithm=...\): centralized trains one model on "
                                          r"every client's data pooled"):
        InProcessServer(make_net(L)(), algorithm="centralized", clients=M)


def test_a_refusal_in_a_script_is_one_line_and_exit_code_2(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import sys; sys.path.insert(0, %r)
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from tests.test_lightning_client import make_net, user_trainer, M, S
        import lightning.pytorch as L
        from fl_lightning.assembly.outside import InProcessServer
        model = make_net(L)()
        server = InProcessServer(model, algorithm="fednova", clients=M, per_round=S)
        job = server.start_round()[0]
        data = DataLoader(TensorDataset(torch.rand(20, 1, 8, 8), torch.randint(0, 10, (20,))), batch_size=10)
        user_trainer(L, callbacks=[job.callback], accumulate_grad_batches=2).fit(model, data)
    """ % str(REPO)))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("fl-lightning: error: Trainer(accumulate_grad_batches=...)")


REPO = __import__("pathlib").Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("args", [
    ["--algorithm", "fedbcgd", "--algorithm.num_blocks", "2"],
    ["--aggregator", "centered_clip", "--aggregator.momentum", "0.9", "--aggregator.tau", "0.5", "--attack", "alie",
     "--attack.fraction", "0.5"],
])
def test_the_example_prints_the_fit_command_that_gives_its_numbers(args, tmp_path, monkeypatch, capsys):
    """examples/federate_a_lightning_script.py --algorithm fedbcgd --algorithm.num_blocks 2 --rounds 2 --save PATH
    (and with a robust rule under attack), then the command it prints: the fit's last checkpoint holds the saved
    global model, bit for bit."""
    import importlib.util
    import glob
    import shlex

    from fl_lightning.cli import main as cli

    spec = importlib.util.spec_from_file_location("federate_a_lightning_script",
                                                  REPO / "examples" / "federate_a_lightning_script.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    options = example.parse([*args, "--rounds", "2", "--save", str(tmp_path / "global.pt")])
    assert 0.0 <= example.main(**options) <= 1.0
    command = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("same numbers:"))
    args = shlex.split(command.split("fl-lightning ", 1)[1])
    monkeypatch.syspath_prepend(str(REPO / "examples"))
    assert cli(args + ["--trainer.enable_progress_bar", "false"]) == 0
    (checkpoint,) = glob.glob("runs/**/*.ckpt", recursive=True)
    fitted = torch.load(checkpoint, weights_only=True, map_location="cpu")["state_dict"]
    for name, value in torch.load(tmp_path / "global.pt").items():
        assert torch.equal(fitted[f"net.{name}"], value), name


def load_example():
    import importlib.util

    spec = importlib.util.spec_from_file_location("federate_a_lightning_script",
                                                  REPO / "examples" / "federate_a_lightning_script.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def test_the_example_runs_every_registered_algorithm_with_its_defaults(capsys):
    """One round each: every algorithm trains, with the cohort it can serve (FedBCGD's default 5 blocks: 5 clients a
    round, said); the two that cannot run on a user's Trainer with this network refuse in one line."""
    from fl_lightning.algorithms.base import REGISTRY

    import logging

    example = load_example()
    levels = [logging.getLogger(name).level for name in ("lightning.pytorch", "pytorch_lightning")]
    refused = {}
    for name in REGISTRY:
        try:
            assert 0.0 <= example.main(**example.parse(["--algorithm", name, "--rounds", "1"])) <= 1.0
        except FLUserError as error:
            refused[name] = str(error).split(":")[0]
    assert refused == {"fedbn": "model.algorithm", "centralized": "InProcessServer(algorithm=...)"}
    out = capsys.readouterr().out
    assert "fedbcgd: 5 clients a round (one per block), 5 clients" in out
    assert "GPU available" not in out and "Tip" not in out
    assert [logging.getLogger(name).level for name in ("lightning.pytorch", "pytorch_lightning")] == levels


@pytest.mark.parametrize("args, line", [
    (["--rounds", "0"], "--rounds: got 0; needs at least 1 round"),
    (["--rounds", "-2"], "--rounds: got -2; needs at least 1 round"),
    (["--save", "/no/such/folder/global.pt"], "--save: the folder /no/such/folder does not exist; give a path in a "
                                               "writable folder"),
])
def test_the_example_refuses_bad_options_before_training(args, line, capsys):
    with pytest.raises(SystemExit) as exit_:
        load_example().parse(args)
    assert exit_.value.code == 2 and capsys.readouterr().err.strip().splitlines()[-1].endswith(f"error: {line}")


def test_an_algorithm_option_of_the_wrong_type_is_one_line_from_the_server_before_training():
    """The server reads the options (InProcessServer, as AlgorithmStrategy): the example adds no check of its own."""
    example = load_example()
    with pytest.raises(FLUserError, match=r"^InProcessServer\(algorithm=...\): fedbcgd's num_blocks takes a number, "
                                          r"got 'abc'$"):
        example.main(**example.parse(["--algorithm", "fedbcgd", "--algorithm.num_blocks", "abc"]))


def test_the_readmes_example_command_runs_as_written_quietly(tmp_path):
    """README's tour, item 5: `python examples/federate_a_lightning_script.py --algorithm fedbcgd` (its 5 rounds)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(REPO / "examples" / "federate_a_lightning_script.py"), "--algorithm",
                           "fedbcgd"], capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "fedbcgd: 5 clients a round (one per block), 5 clients" and lines[-1].startswith("val_acc ")
    assert len(lines) == 3 and "--model.clients_per_round 5" in lines[1] and done.stderr.strip() == ""


def test_a_comm_meter_prints_what_it_counts():
    from fl_lightning.federation.messages import CommMeter

    meter = CommMeter(100)
    meter.add_round([400, 400, 0], [400, 400, 400], clients_dropped=1)
    assert repr(meter) == ("CommMeter(upload_d=0.6667, upload_bytes=800, download_bytes=1,200, last round: 2 reported, "
                           "1 dropped)")


def test_an_in_process_server_takes_fits_aggregator_and_attack_and_refuses_at_construction():
    from fl_lightning.assembly.outside import InProcessServer

    model = nn.Linear(4, 2)
    server = InProcessServer(model, clients=6, per_round=5, aggregator="krum",
                             attack={"class_path": "sign_flip", "init_args": {"clients": [1, 4]}})
    assert server.robust.malicious == {1, 4} and server.state_dict()["attack"]["init_args"] == {"clients": [1, 4],
                                                                                               "factor": 1.0}
    for kwargs, line in [
        ({"aggregator": "krum", "per_round": 4}, "InProcessServer(aggregator=...): krum(f=1) needs at least 5 uploads "
                                                 "per group, but a round of S=4 uploads has 4"),
        ({"attack": "label_flip"}, "InProcessServer(attack=...): label_flip changes the clients' data"),
        ({"aggregator": {"class_path": "median", "init_args": {"betta": 1}}},
         "InProcessServer(aggregator=...): median has no option 'betta'; its options: bucket, momentum"),
        ({"attack": {"class_path": "ipm", "init_args": {"clients": [9]}}},
         "InProcessServer(attack=...): ids [9] are not clients 0..5"),
    ]:
        with pytest.raises(FLUserError) as error:
            InProcessServer(model, **{"clients": 6, "per_round": 5, **kwargs})
        assert str(error.value).startswith(line), str(error.value)


def test_an_in_process_server_with_fewer_clients_a_round_than_blocks_is_refused_at_construction():
    from fl_lightning.assembly.outside import InProcessServer

    with pytest.raises(FLUserError, match=r"^InProcessServer\(per_round=...\): S=2 < N=3 blocks: every block needs a "
                                          r"client each round"):
        InProcessServer(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)),
                        algorithm=FedBCGD(num_blocks=3), clients=4, per_round=2)



def test_an_in_process_server_refuses_no_clients_a_round_a_model_without_parameters_and_another_models_save(tmp_path):
    """What reached users late or as tracebacks: per_round=0 (not "all"), a module with nothing to train, a load() of
    another network's save or of a file that is no save — each one line, at construction or at the load."""
    from fl_lightning.assembly.outside import InProcessServer

    for build, line in [
        (lambda: InProcessServer(nn.Linear(4, 2), clients=4, per_round=0),
         "InProcessServer(per_round=...): needs 1 ≤ per_round ≤ clients = 4, got 0"),
        (lambda: InProcessServer(nn.ReLU(), clients=4),
         "InProcessServer(model=...): ReLU has no trainable parameters, so there is nothing to federate"),
    ]:
        with pytest.raises(FLUserError) as error:
            build()
        assert str(error.value).startswith(line), str(error.value)
    InProcessServer(nn.Linear(4, 2), clients=4).save(str(tmp_path / "server.pt"))
    torch.save({"round": 3}, tmp_path / "other.pt")
    for model, path, line in [
        (nn.Linear(5, 2), "server.pt", "InProcessServer.load: the saved server's model has 10 values, this one 12"),
        (nn.Linear(4, 2), "other.pt", "InProcessServer.load: is not a saved InProcessServer"),
    ]:
        with pytest.raises(FLUserError) as error:
            InProcessServer(model, clients=4).load(str(tmp_path / path))
        assert str(error.value).startswith(line), str(error.value)

def test_an_in_process_server_takes_fits_sampler_and_refuses_privacy_at_construction():
    """Poisson sampling (``--model.sampler poisson``: each client joins with q = S/M): the user's script ends with the
    fit's global model bit for bit; what the sampler or privacy cannot serve is one line at construction."""
    from fl_lightning.assembly.outside import InProcessServer

    pl.seed_everything(0, verbose=False)
    net = make_net(L)()
    start = copy.deepcopy(net.state_dict())
    module = FederatedModule(net, algorithm="scaffold", sampler="poisson", clients_per_round=S, local_epochs=1,
                             batch_size=B, lr=LR, lr_decay=1.0, weight_decay=0.0)
    module.prints_summary = False
    data = FederatedDataModule("digits", num_clients=M, dirichlet_rho=0.5)
    make_trainer(3).fit(module, data)
    model = make_net(L)()
    model.load_state_dict(start)
    server = InProcessServer(model, algorithm="scaffold", clients=M, per_round=S, seed=0, sampler="poisson")
    sizes = []
    for _ in range(3):
        jobs = server.start_round()
        sizes.append(len(jobs))
        for job in jobs:
            shard = shards_of(data)[job.client_id]
            user_trainer(L, callbacks=[job.callback]).fit(model, DataLoader(shard, batch_size=B,
                                                                            sampler=job.sampler(shard)))
        server.end_round()
    assert sizes != [S] * 3 and torch.equal(server.global_vector, module.global_vector), sizes
    assert server.state_dict()["sampler"] == {"class_path": "fl_lightning.federation.seams.PoissonSampler",
                                              "init_args": {}}
    for kwargs, line in [
        ({"sampler": "poison"}, "InProcessServer(sampler=...): unknown sampler 'poison'"),
        ({"sampler": "poisson", "num_samples": None, "clients": 4, "per_round": 2, "privacy": {"clip": 1.0}},
         "InProcessServer(privacy=...): client-level DP clips every update on its client"),
    ]:
        with pytest.raises(FLUserError) as error:
            InProcessServer(nn.Linear(4, 2), **{"clients": 6, "per_round": 5, **kwargs})
        assert str(error.value).startswith(line), str(error.value)
