"""The round's seams (docs/architecture.md, "The round's seams"): a sampler, a runner and a schedule written from
the docs alone, run on ToyFederation's real loop, with hand-checked clients and updates."""
import torch
from torch import nn

from fl_lightning.algorithms import FedAvg
from fl_lightning.assembly.toy import ToyFederation
from fl_lightning.federation.seams import RoundSchedule, Sampler, SerialRunner


class RoundRobin(Sampler):
    """Clients in turn, ``per_round`` at a time, skipping those held out of training; its cursor is its state."""

    def __init__(self, num_clients: int, per_round: int, excluded=()):
        self.order = [c for c in range(num_clients) if c not in set(excluded)]
        self.per_round, self.next = per_round, 0

    def sample(self, round_idx, rng):
        chosen = [self.order[(self.next + i) % len(self.order)] for i in range(self.per_round)]
        self.next = (self.next + self.per_round) % len(self.order)
        return sorted(chosen)

    def state_dict(self):
        return {"next": self.next}

    def load_state_dict(self, state):
        self.next = state["next"]

    def metrics(self):
        return {"sampler/next": float(self.next)}


class Recording(SerialRunner):
    """The serial runner, recording which clients it trained (with their uploads) and which reported."""

    def __init__(self, trainer):
        super().__init__(trainer)
        self.trained, self.reports = [], []

    def run(self, positions, plan):
        for position, result in super().run(positions, plan):
            self.trained.append((plan.round, result[0].client_id, result[0].upload.parts[0].values().clone()))
            yield position, result

    def reported(self, client):
        self.reports.append((client.round, client.client_id))
        super().reported(client)


class LastOneLate(RoundSchedule):
    """Synchronous rounds whose last planned client always arrives too late to be aggregated."""

    def arrived(self, trained, plan):
        for position, result in trained:
            if position == len(plan.clients) - 1:
                plan.clients[position].lost = True
            yield position, result


def clients(m=5, n=4):
    torch.manual_seed(1)
    return [(torch.randn(n, 3), torch.randint(0, 2, (n,))) for _ in range(m)]


def toy(tmp_path, **parts):
    torch.manual_seed(0)
    return ToyFederation(nn.Linear(3, 2), FedAvg(), clients(), str(tmp_path), lr=0.1, batch_size=4,
                         clients_per_round=2, **parts)


def test_round_robin_sampler_recording_runner_and_a_late_client_schedule(tmp_path):
    fed = toy(tmp_path, sampler=RoundRobin(5, 3), runner=Recording, schedule=LastOneLate())
    x = fed.global_params.clone()
    fed.run_round(0)
    runner = fed.loop.runner
    assert [(r, c) for r, c, _ in runner.trained] == [(0, 0), (0, 1), (0, 2)]
    assert runner.reports == [(0, 0), (0, 1)]  # client 2 came late: trained, never aggregated
    deltas = {c: d for _, c, d in runner.trained}
    torch.testing.assert_close(fed.global_params, x + (deltas[0] + deltas[1]) / 2, rtol=0, atol=1e-7)
    assert fed.loop.comm.clients_reported == 2 and fed.loop.comm.clients_dropped == 1
    fed.run_round(1)
    fed.run_round(2)
    assert [c for r, c, _ in runner.trained if r == 1] == [0, 3, 4]  # 3, 4, then 0 again: sorted
    assert [c for r, c, _ in runner.trained if r == 2] == [1, 2, 3]
    assert runner.reports[2:] == [(1, 0), (1, 3), (2, 1), (2, 2)]
    assert fed.loop.metrics() == {"sampler/next": 4.0}
    assert fed.loop.state_dict() == {"sampler": {"next": 4}}


def test_a_part_state_resumes_exactly(tmp_path):
    whole = toy(tmp_path / "a", sampler=RoundRobin(5, 2), runner=Recording)
    for r in range(3):
        whole.run_round(r)
    half = toy(tmp_path / "b", sampler=RoundRobin(5, 2), runner=Recording)
    for r in range(2):
        half.run_round(r)
    resumed = toy(tmp_path / "c", sampler=RoundRobin(5, 2), runner=Recording)
    resumed.loop.load_state_dict(half.loop.state_dict())
    resumed.global_vector.copy_(half.global_vector)
    resumed.flat.load(resumed.global_vector)
    resumed.run_round(2)
    assert [c for _, c, _ in resumed.loop.runner.trained] == [0, 4]  # clients 4, 0 after 0, 1 and 2, 3
    assert torch.equal(resumed.global_vector, whole.global_vector)


def test_default_parts_are_uniform_serial_synchronous(tmp_path):
    fed = toy(tmp_path)
    assert [type(p).__name__ for p in fed.loop.parts().values()] == ["UniformSampler", "SerialRunner",
                                                                     "RoundSchedule"]
    assert fed.loop.sample_clients(0) == fed.loop.sample_clients(0) and len(fed.loop.sample_clients(0)) == 2
    assert fed.loop.metrics() == {} and fed.loop.state_dict() == {}


def test_a_runner_registered_by_name_trains_a_real_fit(tmp_path, capsys):
    """``@RUNNERS.register("name")`` is all a runner needs to be ``--model.client_runner name`` in a fit; an unknown
    name is one line naming the registered ones."""
    import csv

    from fl_lightning.cli import main
    from fl_lightning.federation.seams import RUNNERS

    seen = []

    @RUNNERS.register("recording")
    class Named(SerialRunner):
        def run(self, positions, plan):
            for position, result in super().run(positions, plan):
                seen.append((plan.round, result[0].client_id))
                yield position, result

    args = ["fit", "--model.network", "fl_lightning.models.MLP", "--data.dataset", "digits", "--data.num_clients",
            "4", "--model.clients_per_round", "2", "--trainer.max_epochs", "2", "--trainer.enable_progress_bar",
            "false", "--trainer.logger.init_args.save_dir", str(tmp_path)]
    try:
        assert main([*args, "--model.client_runner", "recording", "--trainer.logger.init_args.name", "own"]) in (0, None)
        assert main([*args, "--trainer.logger.init_args.name", "serial"]) in (0, None)
    finally:
        del RUNNERS["recording"]
    assert [r for r, _ in seen] == [0, 0, 1, 1]
    rows = {name: list(csv.DictReader(open(next((tmp_path / name).rglob("metrics.csv")))))
            for name in ("own", "serial")}
    assert [r["train/loss"] for r in rows["own"]] == [r["train/loss"] for r in rows["serial"]]
    assert main([*args, "--model.client_runner", "recording"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "model.client_runner: unknown client runner 'recording'; choose one of serial, threads, batched, "
        "batched_compiled, or give a class path (my_package.module.MyClass)")


def test_a_sampler_registered_by_name_chooses_a_real_fits_clients(tmp_path, capsys):
    """``@SAMPLERS.register("name")`` makes ``--model.sampler name``: RoundRobin (above, written from the docs) picks
    clients 0-1, 2-3, 0-1 in a real fit; ``poisson`` by name draws cohorts of varying size with q = S/M; a sampler
    with a simulated system is one line, exit 2."""
    from fl_lightning.callbacks import FLCallback
    from fl_lightning.cli import main
    from fl_lightning.federation.seams import SAMPLERS

    class Cohorts(FLCallback):
        def __init__(self):
            self.rounds = []

        def configure_round(self, round):
            self.rounds.append([client.client_id for client in round.clients])

    SAMPLERS.register("round_robin")(RoundRobin)
    args = ["fit", "--model.network", "fl_lightning.models.MLP", "--data.dataset", "digits", "--data.num_clients",
            "4", "--model.clients_per_round", "2", "--trainer.enable_progress_bar", "false",
            "--trainer.logger.init_args.save_dir", str(tmp_path)]
    seen = {}
    try:
        for name, rounds in (("round_robin", 3), ("poisson", 12)):
            seen[name] = Cohorts()
            assert main([*args, "--model.sampler", name, "--trainer.max_epochs", str(rounds),
                         "--trainer.logger.init_args.name", name], callbacks=[seen[name]]) in (0, None)
    finally:
        del SAMPLERS["round_robin"]
    assert seen["round_robin"].rounds == [[0, 1], [2, 3], [0, 1]]
    sizes = [len(r) for r in seen["poisson"].rounds]
    assert len(set(sizes)) > 1 and all(r == sorted(set(r)) for r in seen["poisson"].rounds)
    assert main([*args, "--model.sampler", "poisson", "--model.system", "uniform"]) == 2
    assert capsys.readouterr().err.strip().endswith("model.sampler: model.system samples the available clients; "
                                                    "leave model.sampler unset")


def test_a_schedule_registered_by_name_steps_a_real_fit(tmp_path, capsys):
    """``@SCHEDULES.register("name")`` makes ``--model.schedule name``: LastOneLate (above, written from the docs)
    leaves the last planned client of every round out of a real fit's aggregate; ``fedbuff`` by name is
    ``--model.asynchronous fedbuff``, the same numbers; a schedule that times clients without model.system, or one
    that does not with it, is one line, exit 2."""
    import csv

    from fl_lightning.callbacks import FLCallback
    from fl_lightning.cli import main
    from fl_lightning.federation.seams import SCHEDULES

    class Reports(FLCallback):
        def __init__(self):
            self.planned, self.reported = [], []

        def configure_round(self, round):
            self.planned.append([client.client_id for client in round.clients])

        def on_client_reported(self, client):
            self.reported.append((client.round, client.client_id))

    SCHEDULES.register("last_one_late")(LastOneLate)
    args = ["fit", "--model.network", "fl_lightning.models.MLP", "--data.dataset", "digits", "--data.num_clients",
            "4", "--model.clients_per_round", "2", "--trainer.max_epochs", "2", "--trainer.enable_progress_bar",
            "false", "--trainer.logger.init_args.save_dir", str(tmp_path)]
    seen = Reports()
    try:
        assert main([*args, "--model.schedule", "last_one_late", "--trainer.logger.init_args.name", "late"],
                    callbacks=[seen]) in (0, None)
    finally:
        del SCHEDULES["last_one_late"]
    assert [len(planned) for planned in seen.planned] == [2, 2]
    assert seen.reported == [(r, planned[0]) for r, planned in enumerate(seen.planned)]
    for name, option in (("by_name", ["--model.schedule", "fedbuff"]), ("by_option", ["--model.asynchronous",
                                                                                       "fedbuff"])):
        assert main([*args, "--model.system", "uniform", *option, "--model.asynchronous.buffer_size", "2",
                     "--model.asynchronous.concurrency", "3", "--trainer.logger.init_args.name", name]) in (0, None)
    rows = {name: list(csv.DictReader(open(next((tmp_path / name).rglob("metrics.csv")))))
            for name in ("by_name", "by_option")}
    assert [r["train/loss"] for r in rows["by_name"]] == [r["train/loss"] for r in rows["by_option"]]
    assert any(r["train/loss"] for r in rows["by_name"])
    assert main([*args, "--model.schedule", "fedbuff"]) == 2
    assert capsys.readouterr().err.strip().endswith("model.schedule: fedbuff times clients on a simulated system: "
                                                    "give model.system (e.g. --model.system mobile)")
    assert main([*args, "--model.schedule", "synchronous", "--model.system", "uniform"]) == 2
    assert "model.schedule: synchronous does not time clients" in capsys.readouterr().err


LARGEST_FIRST = '''
from fl_lightning.federation.seams import Sampler


class LargestFirst(Sampler):
    """The S clients with the most training samples, every round (ties: the lower id)."""

    def __init__(self, samples, per_round):
        self.chosen = sorted(sorted(range(len(samples)), key=lambda c: -samples[c])[:per_round])

    @classmethod
    def from_fit(cls, fit):
        return cls(fit.samples, fit.per_round)

    def sample(self, round_idx, rng):
        return self.chosen
'''


def test_a_sampler_of_the_users_own_file_runs_by_class_path_and_reads_the_clients(tmp_path):
    """docs/architecture.md's LargestFirst, a file on PYTHONPATH, named on the command line of a real
    ``fl-lightning fit`` process (no wrapper script): every round samples the clients with the most data; the same
    class as ``{class_path, init_args}``, a typo of a built-in name and a class that is no Sampler are one line each."""
    import csv
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "my_samplers.py").write_text(LARGEST_FIRST + "\n\nclass NotASampler:\n    pass\n")
    cli = str(Path(sys.executable).with_name("fl-lightning"))
    base = [cli, "fit", "--model.network", "fl_lightning.models.MLP", "--data.dataset", "digits", "--data.num_clients",
            "5", "--data.partition", "quantity", "--model.clients_per_round", "2", "--trainer.max_epochs", "2",
            "--trainer.enable_progress_bar", "false", "--threads", "1"]
    env = {**__import__("os").environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run([*base, "--model.sampler", "my_samplers.LargestFirst",
                           "--trainer.callbacks+=tests.test_seams.CohortLog"], cwd=tmp_path, env={
                               **env, "PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parents[1]}"},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    sizes = [int(row["samples"]) for row in csv.DictReader(open(next(tmp_path.rglob("partition.csv"))))]
    largest = sorted(sorted(range(5), key=lambda c: -sizes[c])[:2])
    assert len(set(sizes)) > 2 and largest != [0, 1]  # quantity skew: unequal sizes, and not the first two
    assert (tmp_path / "cohorts.txt").read_text().split() == [",".join(map(str, largest))] * 2
    for option, line in (
            (["--model.sampler", "unifrom"], "model.sampler: unknown sampler 'unifrom'; did you mean uniform? choose one "
             "of uniform, poisson, or give a class path (my_package.module.MyClass)"),
            (["--model.sampler", "my_samplers.NotASampler"], "model.sampler: my_samplers.NotASampler is not a "
             "fl_lightning.federation.seams.Sampler; subclass it"),
            (["--model.sampler", '{"class_path": "my_samplers.LargestFirst", "init_args": {"k": 1}}'],
             "model.sampler: ")):
        refused = subprocess.run([*base, *option], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1].startswith(
            f"fl-lightning: error: {line}"), refused.stderr[-1500:]
        assert "Traceback" not in refused.stderr


class CohortLog(__import__("fl_lightning").callbacks.FLCallback):
    """Writes each round's sampled client ids to cohorts.txt (one round a line)."""

    def configure_round(self, round):
        with open("cohorts.txt", "a") as f:
            f.write(",".join(str(c.client_id) for c in round.clients) + "\n")


def test_algorithms_are_a_registry_that_refuses_a_name_twice():
    import pytest

    from fl_lightning.algorithms import REGISTRY, FedAvg, register

    with pytest.raises(ValueError, match="algorithm 'fedprox': registered twice"):
        register("fedprox")(FedAvg)
    assert REGISTRY["fedprox"].algorithm.__name__ == "FedProx"


def test_held_out_clients_under_poisson_sampling_are_refused_in_one_place(tmp_path, capsys):
    """``model.privacy.sampling poisson`` chooses the Poisson sampler, whose ``refuse(fit)`` is the one refusal of
    held-out clients under Poisson sampling: one line naming the option the user gave, nothing written."""
    from fl_lightning.cli import main

    config = __import__("pathlib").Path(__file__).resolve().parents[1] / "configs" / "quickstart.yaml"
    code = main(["fit", "--config", str(config), "--model.personal_new_clients", "2",
                 "--data.personal_fraction", "0.2", "--model.privacy",
                 '{"noise_multiplier": 1.0, "clip": 1.0, "sampling": "poisson"}', "--trainer.max_epochs", "1",
                 "--trainer.logger.init_args.save_dir", str(tmp_path / "runs")])
    assert code == 2 and not (tmp_path / "runs").exists()
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "fl-lightning: error: model.privacy.sampling: poisson may draw any client, so none can be held out of "
        "training; leave model.personal_new_clients unset, or use sampling fixed")
