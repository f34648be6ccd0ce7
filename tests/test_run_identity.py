"""A run's identity: callbacks that change numbers are part of it, paths are not, W&B resumes
the same run, and the kept runs under docs/runs/ carry the ids their configs give."""
import csv
import glob
import importlib.util
import os
import shutil
from pathlib import Path

import yaml

from fl_lightning.cli import main
from fl_lightning.runs.identity import ID_LINE, read_run_id, run_id, run_label
from tests.test_images import make_folder
from tests.wandb_records import history_rows, read_records

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")
QUIET = ["--trainer.enable_progress_bar", "false"]
PROXIMAL = ["--trainer.callbacks+=fl_lightning.callbacks.Proximal", "--trainer.callbacks.mu", "0.1"]


def fit(*args) -> int:
    return main(["fit", "--config", QUICKSTART, "--model.algorithm", "fedavg", *QUIET, *args])


def test_a_numeric_callback_makes_another_run_resumed_and_reported_apart(capsys):
    assert fit("--trainer.max_epochs", "2") == 0
    assert fit("--trainer.max_epochs", "2", *PROXIMAL) == 0
    plain, proximal = Path("runs/quickstart/fedavg,seed=0"), Path("runs/quickstart/fedavg+proximal,mu=0.1,seed=0")
    ids = [read_run_id(run / "version_0" / "config.yaml") for run in (plain, proximal)]
    assert None not in ids and ids[0] != ids[1]
    capsys.readouterr()
    assert fit("--trainer.max_epochs", "3", "--ckpt_path", "last") == 0
    assert f"resuming from {plain}/version_0/checkpoints/" in capsys.readouterr().out
    assert fit("--trainer.max_epochs", "3", "--ckpt_path", "last", *PROXIMAL) == 0
    assert f"resuming from {proximal}/version_0/checkpoints/" in capsys.readouterr().out
    assert read_run_id(proximal / "version_0" / "config.yaml") == ids[1]  # resumed in its checkpoint's folder
    assert not (plain / "version_1").exists() and not (proximal / "version_1").exists()
    assert main(["report", "runs/quickstart", "--target", "0.2", "--out", "table"]) == 0
    assert "2 runs in 2 groups" in capsys.readouterr().out
    rows = Path("table.csv").read_text().splitlines()
    assert any("callbacks=Proximal(mu=0.1)" in row for row in rows)


def identity_config(**data) -> dict:
    return {"seed_everything": 0, "model": {"algorithm": {"class_path": "fl_lightning.algorithms.FedBCGD",
                                                          "init_args": {"num_blocks": 2}}, "lr": 0.1},
            "data": {"dataset": "mnist", "root": "/a/data", "cache_dir": "~/.cache", **data},
            "trainer": {"max_epochs": 5, "precision": None, "callbacks": None}}


def test_paths_and_module_paths_are_not_identity_but_arithmetic_is():
    base = identity_config()
    moved = identity_config(root="/elsewhere", cache_dir=None, download=True)
    assert run_id(base) == run_id(moved)
    full_path = identity_config()
    full_path["model"]["algorithm"]["class_path"] = "fl_lightning.algorithms.fedbcgd.FedBCGD"
    assert run_id(full_path) == run_id(base)
    checkpointing = identity_config()
    checkpointing["trainer"]["callbacks"] = [{"class_path": "pytorch_lightning.callbacks.ModelCheckpoint",
                                              "init_args": {"every_n_epochs": 5}}]
    checkpointing["trainer"]["max_epochs"] = 50
    assert run_id(checkpointing) == run_id(base)  # when and how often: not identity
    for trainer in ({"precision": "bf16-mixed"}, {"gradient_clip_val": 1.0}, {"accumulate_grad_batches": 2},
                    {"callbacks": [{"class_path": "fl_lightning.callbacks.Proximal", "init_args": {"mu": 0.1}}]},
                    {"callbacks": [{"class_path": "my_project.callbacks.Unknown", "init_args": {}}]}):
        changed = identity_config()
        changed["trainer"].update(trainer)
        assert run_id(changed) != run_id(base), trainer
    labelled = run_label(moved, "fedbcgd", ["--data.root", "/elsewhere", "--model.lr", "0.1"])
    assert labelled == "fedbcgd,lr=0.1,seed=0"


def test_a_moved_data_folder_resumes_and_other_data_under_its_name_is_refused(tmp_path, capsys):
    make_folder(tmp_path / "pets")
    data = ["--data.dataset", "imagefolder", "--data.num_clients", "3", "--data.partition", "iid",
            "--data.cache_dir", "null", "--model.network", "fl_lightning.models.MLP", "--model.clients_per_round", "3"]
    assert fit(*data, "--data.root", str(tmp_path / "pets"), "--trainer.max_epochs", "1") == 0
    (run,) = glob.glob("runs/quickstart/*")
    assert "root" not in os.path.basename(run) and "cache_dir" not in os.path.basename(run)
    shutil.move(tmp_path / "pets", tmp_path / "moved")
    capsys.readouterr()
    assert fit(*data, "--data.root", str(tmp_path / "moved"), "--trainer.max_epochs", "2", "--ckpt_path", "last") == 0
    assert "resuming from" in capsys.readouterr().out and not os.path.isdir(os.path.join(run, "version_1"))
    shutil.copyfile(tmp_path / "moved" / "train" / "dog" / "0000.png", tmp_path / "moved" / "train" / "cat" / "0000.png")
    capsys.readouterr()
    code = fit(*data, "--data.root", str(tmp_path / "moved"), "--trainer.max_epochs", "3", "--ckpt_path", "last")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "the clients' data differ from the checkpoint's" in err[0]
    assert not os.path.isdir(os.path.join(run, "version_2"))


def test_wandb_resume_continues_the_same_run_in_the_run_folder(capsys):
    import wandb as wandb_sdk

    try:
        check_wandb_resume(capsys)
    finally:
        wandb_sdk.teardown()  # its settings (the run folder's root) must not outlive this test


def check_wandb_resume(capsys):
    wandb = ["--trainer.logger", "pytorch_lightning.loggers.WandbLogger", "--trainer.logger.project", "p",
             "--trainer.logger.save_dir", "wb"]
    assert fit(*wandb, "--trainer.max_epochs", "2") == 0
    first = capsys.readouterr().out
    (folder,) = glob.glob("wb/p/*")
    assert first.strip().splitlines()[-1].endswith(f"run dir {os.path.abspath(folder)}")
    assert fit(*wandb, "--trainer.max_epochs", "3", "--ckpt_path", "last") == 0
    assert f"resuming from {folder}/checkpoints/" in capsys.readouterr().out
    assert glob.glob("wb/p/*") == [folder]  # checkpoints, config.yaml and partition.csv in one run folder
    assert {"config.yaml", "partition.csv", "checkpoints"} <= set(os.listdir(folder))
    identity = read_run_id(Path(folder) / "config.yaml")
    pieces = sorted(glob.glob("wb/wandb/offline-run-*"))
    assert len(pieces) == 2 and {p.rsplit("-", 1)[-1] for p in pieces} == {os.path.basename(folder)}
    from tests.test_wandb import wait_for_records
    rounds, tags = [], set()
    for piece in pieces:
        records = wait_for_records(piece)
        run = next(r.run for r in records if r.WhichOneof("record_type") == "run")
        tags |= set(run.tags)
        rounds += [int(row["round"]) for row in history_rows(records) if "round" in row]
    assert rounds == [1, 2, 3] and tags == {f"run-id:{identity}"}


def test_keeping_a_checkpoint_every_k_rounds():
    every = ["--trainer.callbacks+=ModelCheckpoint", "--trainer.callbacks.every_n_epochs", "2",
             "--trainer.callbacks.save_top_k", "-1", "--trainer.callbacks.save_last", "true"]
    assert fit("--trainer.max_epochs", "4", *every) == 0
    (run,) = glob.glob("runs/quickstart/*")
    assert os.path.basename(run) == "fedavg,seed=0"  # ModelCheckpoint changes no number: not in the name or id
    assert sorted(os.listdir(f"{run}/version_0/checkpoints")) == ["epoch=1-step=2.ckpt", "epoch=3-step=4.ckpt",
                                                                 "last.ckpt"]


def test_every_kept_run_carries_the_id_of_its_settings():
    """docs/runs/ configs were migrated once to today's identity: report and sweep --keep
    recognise each by the id at its top, which must equal the id of the settings below it."""
    configs = sorted((ROOT / "docs").rglob("config.yaml"))
    assert len(configs) >= 200
    for path in configs:
        text = path.read_text()
        assert text.startswith(ID_LINE), path
        assert read_run_id(path) == run_id(yaml.safe_load(text) or {}), path



def test_a_part_named_without_its_options_has_one_id_in_its_config_yaml():
    """``--model.aggregator median``: config.yaml holds only the options given (none), the run was named by the part's
    whole recorded form; reading the file back gives the id at its top (report and sweep --keep find it)."""
    assert fit("--trainer.max_epochs", "1", "--model.aggregator", "median", "--model.attack", "sign_flip") == 0
    [path] = Path("runs/quickstart").glob("*aggregator=Median*/version_0/config.yaml")
    config = yaml.safe_load(path.read_text())
    assert "init_args" not in config["model"]["aggregator"]  # as jsonargparse writes it: the options given
    assert read_run_id(path) == run_id(config)

def test_class_paths_of_moved_modules_still_resolve(capsys):
    """Configs and kept runs written before the package layout name fl_lightning.powersgd.PowerSGD:
    it parses, and it is the same run as the codec's new path."""
    old = ["--model.compression", "fl_lightning.powersgd.PowerSGD", "--print_config"]
    try:
        main(["fit", "--config", QUICKSTART, *old])
    except SystemExit as done:
        assert done.code in (0, None)
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["compression"]["class_path"] == "fl_lightning.compression.powersgd.PowerSGD"
    config = identity_config()
    config["model"]["compression"] = {"class_path": "fl_lightning.powersgd.PowerSGD", "init_args": {"rank": 2}}
    moved = identity_config()
    moved["model"]["compression"] = {"class_path": "fl_lightning.compression.powersgd.PowerSGD", "init_args": {"rank": 2}}
    assert run_id(config) == run_id(moved)


def test_a_label_names_a_policy_by_its_kind_and_a_deployed_run_apart(capsys):
    assert fit("--trainer.max_epochs", "1", "--model.system", "uniform", "--model.round_policy", "deadline",
               "--model.round_policy.deadline_s", "30") == 0
    assert os.listdir("runs/quickstart") == ["fedavg,system=uniform,round_policy=deadline,deadline_s=30.0,seed=0"]
    config = yaml.safe_load(Path(glob.glob("runs/quickstart/*/version_0/config.yaml")[0]).read_text())
    flower = {**config, "trainer": {**config["trainer"], "callbacks": [
        {"class_path": "fl_lightning.deploy.remote.FlowerClients"}]}}
    if importlib.util.find_spec("flwr") is not None:  # the callback a deployed run's ServerApp adds
        assert run_label(flower, "fedavg", ["--model.lr", "0.1"]) == "fedavg,lr=0.1,seed=0,deployed=flower"
        from fl_lightning.deploy.remote import FlowerClients, RemoteClients

        given = {**config, "trainer": {**config["trainer"], "callbacks": [FlowerClients(RemoteClients(None, 1.0))]}}
        assert run_label(given, "fedavg", []) == "fedavg,seed=0,deployed=flower"  # as the ServerApp's fit gets it
    assert run_label(config, "fedavg", ["--model.lr", "0.1"]) == "fedavg,lr=0.1,seed=0"
    assert run_id(flower) == run_id(config)  # the same numbers: one run, resumable either way, in two folders


def test_a_label_of_many_options_is_capped_and_keeps_the_seed_and_the_run_id():
    config = {"model": {"algorithm": "fedbcgd", "lr": 0.05, "batch_size": 32, "local_epochs": 3, "weight_decay": 0.0001,
                        "client_momentum": 0.9, "clients_per_round": 7},
              "data": {"dirichlet_rho": 0.1, "num_clients": 40}, "seed_everything": 2}
    args = ["--model.lr", "0.05", "--model.batch_size", "32", "--model.local_epochs", "3", "--model.weight_decay",
            "0.0001", "--model.client_momentum", "0.9", "--model.clients_per_round", "7", "--data.dirichlet_rho", "0.1",
            "--data.num_clients", "40"]
    label = run_label(config, "fedbcgd", args)
    assert label == f"fedbcgd,dirichlet_rho=0.1,num_clients=40,lr=0.05,seed=2,{run_id(config)}" and len(label) <= 80
    assert run_label(config, "fedbcgd", args[:4]) == "fedbcgd,lr=0.05,batch_size=32,seed=2"  # short: as it was


def test_a_cut_label_keeps_the_algorithms_and_the_partitions_options_before_the_networks():
    """The docs' ViT command on a quantity partition: the network's options, given first, are the ones cut."""
    config = {"model": {"algorithm": {"class_path": "fl_lightning.algorithms.FedBCGD", "init_args": {"num_blocks": 2}},
                        "network": {"class_path": "fl_lightning.models.TimmModel",
                                    "init_args": {"name": "vit_tiny_patch16_224", "pretrained": False, "num_classes": 10,
                                                  "img_size": 32, "patch_size": 4}}},
              "data": {"dataset": "imagefolder", "partition": "quantity", "num_clients": 20}, "seed_everything": 0}
    args = ["--model.network.init_args.pretrained", "false", "--model.network.init_args.num_classes", "10",
            "--model.network.init_args.img_size", "32", "--model.network.init_args.patch_size", "4",
            "--data.dataset", "imagefolder", "--model.algorithm.num_blocks", "2", "--data.partition", "quantity"]
    label = run_label(config, "fedbcgd", args)
    assert label == f"fedbcgd,num_blocks=2,dataset=imagefolder,partition=quantity,seed=0,{run_id(config)}"
    assert len(label) == 79  # the next option (pretrained=False) would pass 80


def test_a_logger_name_given_keeps_the_label_level_resumes_there_and_reports(capsys):
    """``--trainer.logger.init_args.name X``: ``runs/X/<label>/version_0``, as without it; ``--ckpt_path last`` finds
    it there; report reads it; a version given names the run's folder itself (``runs/X/V``)."""
    mine = ["--trainer.logger.init_args.name", "mine"]
    assert fit("--trainer.max_epochs", "2", *mine) == 0
    assert fit("--trainer.max_epochs", "2", "--model.lr", "0.05", *mine) == 0
    assert sorted(os.listdir("runs/mine")) == ["fedavg,lr=0.05,seed=0", "fedavg,seed=0"]
    capsys.readouterr()
    assert fit("--trainer.max_epochs", "3", "--ckpt_path", "last", *mine) == 0
    assert "resuming from runs/mine/fedavg,seed=0/version_0/checkpoints/epoch=1-" in capsys.readouterr().out
    assert os.listdir("runs/mine/fedavg,seed=0") == ["version_0"]
    with open("runs/mine/fedavg,seed=0/version_0/metrics.csv") as f:
        assert [row["round"] for row in csv.DictReader(f)] == ["1.0", "2.0", "3.0"]
    assert main(["report", "runs/mine", "--target", "0.05", "--out", "table"]) == 0
    assert "2 runs in 2 groups" in capsys.readouterr().out
    assert fit("--trainer.max_epochs", "1", *mine, "--trainer.logger.init_args.version", "first") == 0
    assert os.path.isfile("runs/mine/first/metrics.csv")


def test_an_aggregator_or_attack_is_labelled_by_its_record_however_it_was_written():
    record = {"class_path": "fl_lightning.attacks.sign_flip.SignFlip", "init_args": {"fraction": 0.3, "factor": 1.0}}
    config = {"seed_everything": 0, "model": {"attack": record, "aggregator": None}}
    by_options = ["--model.attack", "fl_lightning.attacks.sign_flip.SignFlip", "--model.attack.fraction", "0.3",
                  "--model.aggregator", "mean"]
    as_json = ["--model.attack", '{"class_path": "sign_flip", "init_args": {"fraction": 0.3}}']
    assert run_label(config, "fedavg", by_options) == run_label(config, "fedavg", as_json) == \
        "fedavg,attack=SignFlip,fraction=0.3,seed=0"
    config["model"]["aggregator"] = {"class_path": "fl_lightning.aggregation.krum.Krum",
                                     "init_args": {"f": 1, "bucket": 2}}
    assert run_label(config, "fedavg", ["--model.aggregator", "krum", "--model.aggregator.bucket", "2"]) == \
        "fedavg,aggregator=Krum,bucket=2,seed=0"


def test_a_config_without_an_algorithm_is_the_fedavg_run_and_resumes_as_the_unbroken_fit():
    """``model.algorithm`` left out is FedAvg: the same run id as ``--model.algorithm fedavg`` (it used to get
    another), and ``--ckpt_path last`` resumes it (it used to stop with "model.algorithm: is None now but FedAvg in
    the checkpoint") to the unbroken fit's numbers."""
    config = yaml.safe_load(Path(QUICKSTART).read_text())
    del config["model"]["algorithm"]
    Path("plain.yaml").write_text(yaml.safe_dump(config))

    def rows(run: str) -> list[dict]:
        """Every logged value but the wall times and test/* (the first piece also tested, when it stopped)."""
        with open(f"runs/quickstart/fedavg,seed=0/{run}/metrics.csv") as f:
            kept = [{k: v for k, v in row.items() if v and not k.startswith(("time/", "test/"))}
                    for row in csv.DictReader(f)]
        return [row for row in kept if set(row) - {"epoch", "step"}]

    plain = ["fit", "--config", "plain.yaml", *QUIET]
    assert main([*plain, "--trainer.max_epochs", "2"]) == 0
    assert main([*plain, "--trainer.max_epochs", "3", "--ckpt_path", "last"]) == 0
    assert main([*plain, "--trainer.max_epochs", "3", "--model.algorithm", "fedavg"]) == 0  # unbroken, named
    assert rows("version_0") == rows("version_1") and len(rows("version_1")) >= 3
    ids = {read_run_id(Path(f"runs/quickstart/fedavg,seed=0/{run}/config.yaml")) for run in ("version_0", "version_1")}
    assert len(ids) == 1 and None not in ids
