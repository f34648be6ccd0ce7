"""Block divisions, the `blocks` command, FedBCGD's exact communication, N=1 ≡ FedAvgM, resume."""
import csv

import pytest
import timm
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger

from fl_lightning import FederatedDataModule
from fl_lightning.federation.blocks import build_partition
from fl_lightning.cli import main
from fl_lightning.data import DataSplit
from fl_lightning.errors import ConfigError
from fl_lightning.federation.flat import FlatModel
from fl_lightning.models import MLP, LeNet5, LogisticRegression, create_model
from tests.conftest import fl_module, make_trainer

LENET_BLOCKS = [3 * 64 * 25 + 64, 64 * 64 * 25 + 64, 1600 * 384 + 384, 384 * 192 + 192]
LENET_SHARED = 192 * 10 + 10
LENET_D = sum(LENET_BLOCKS) + LENET_SHARED


def assert_exact_cover(partition, net):
    """Every parameter and buffer coordinate is in exactly one block."""
    numel = FlatModel(net, order=partition.order).numel
    covered = torch.zeros(numel, dtype=torch.int32)
    for block in partition.blocks + ([partition.shared] if partition.shared else []):
        for start, stop in block.ranges:
            covered[start:stop] += 1
    assert bool((covered == 1).all())


def test_lenet5_paper_preset():
    net = LeNet5()
    partition = build_partition(net)
    assert [b.num_params for b in partition.blocks] == LENET_BLOCKS
    assert partition.shared.num_params == LENET_SHARED and partition.num_params == LENET_D
    assert [b.layers for b in partition.blocks] == [["conv1"], ["conv2"], ["fc1"], ["fc2"]]
    starts = [b.ranges[0][0] for b in partition.blocks] + [partition.shared.ranges[0][0]]
    assert starts == [0, 4864, 4864 + 102464, 4864 + 102464 + 614784, LENET_D - LENET_SHARED]
    assert_exact_cover(partition, net)
    no_shared = build_partition(net, shared_block=False)
    assert no_shared.shared is None and no_shared.blocks[-1].num_params == LENET_BLOCKS[-1] + LENET_SHARED


@pytest.mark.parametrize("name", ["vgg11", "vgg19", "resnet18"])
def test_paper_presets_cover_every_parameter_and_buffer(name):
    net = create_model(name, num_classes=100)
    partition = build_partition(net)
    assert partition.num_blocks == 5 and partition.shared is not None
    assert_exact_cover(partition, net)


def test_resnet18_batchnorm_buffers_travel_with_their_block():
    net = create_model("resnet18", norm="bn")
    partition = build_partition(net)
    flat = FlatModel(net, order=partition.order)
    where = {s.name: (s.start, s.stop) for s in flat.segments}
    start, stop = where["layer2.0.bn1.running_mean"]
    assert any(a <= start and stop <= b for a, b in partition.blocks[1].ranges)
    assert build_partition(create_model("resnet18", norm="gn")).blocks[3].layers == ["layer4.0"]


def test_vit_six_blocks_embeddings_first_norm_last_head_shared():
    net = timm.create_model("vit_tiny_patch16_224", pretrained=False, num_classes=10, img_size=32, patch_size=4)
    partition = build_partition(net)
    assert partition.num_blocks == 6 and partition.shared.layers == ["head"]
    assert partition.blocks[0].layers[:3] == ["cls_token", "pos_embed", "patch_embed"]
    assert partition.blocks[-1].layers[-1] == "norm"
    assert_exact_cover(partition, net)
    assert build_partition(net, num_blocks=4).num_blocks == 4


def test_balanced_divider():
    net = MLP(64, 10, hidden=[50, 50])
    partition = build_partition(net, "balanced", num_blocks=3)
    body = 64 * 50 + 50 + 50 * 50 + 50
    assert [b.num_params for b in partition.blocks] == [round(body / 3), round(2 * body / 3) - round(body / 3),
                                                        body - round(2 * body / 3)]
    assert partition.shared.layers == ["head"]
    assert_exact_cover(partition, net)
    # a head that is the whole model (logistic regression) shares only its bias
    logistic = build_partition(LogisticRegression(784, 10), "balanced", num_blocks=4)
    assert logistic.shared.num_params == 10 and [b.num_params for b in logistic.blocks] == [1960] * 4


def test_bad_divisions_name_the_parameters():
    net = LeNet5()
    with pytest.raises(ConfigError, match=r"in no block: fc2.weight, fc2.bias; in several blocks: conv2.weight"):
        build_partition(net, {"blocks": [["conv*"], ["fc1", "conv2"]], "shared": ["fc3"]})
    with pytest.raises(ConfigError, match="model.algorithm.num_blocks: the paper's LeNet5 division has 4 blocks"):
        build_partition(net, num_blocks=3)
    with pytest.raises(ConfigError, match="model.algorithm.block_division: unknown division 'lenet7'"):
        build_partition(net, "lenet7")
    assert build_partition(net, "lenet5").source == "paper preset for LeNet5"


def test_blocks_command_prints_the_table(capsys, tmp_path):
    config = tmp_path / "lenet.yaml"
    config.write_text("model:\n  algorithm: fedbcgd\n  network: {class_path: fl_lightning.models.LeNet5, "
                      "init_args: {in_channels: 3, image_size: 32}}\n")  # CIFAR's shape, not the digits'"
    assert main(["blocks", "--config", str(config)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Block division (paper preset for LeNet5): N = 4, d = 797,962"
    assert out[-1].split() == ["shared", "fc3", "1,930", "0.24%"]


def lenet_round(algorithm, clients_per_round=10, **hp):
    x = torch.randn(20, 3, 32, 32)
    y = torch.arange(20) % 10
    parts = [torch.arange(2 * i, 2 * i + 2) for i in range(10)]
    data = FederatedDataModule.from_tensors(DataSplit(x, y, x[:2], y[:2], 10), parts)
    module = fl_module(LeNet5(), algorithm=algorithm, clients_per_round=clients_per_round, batch_size=2, **hp)
    make_trainer(1).fit(module, data)
    return module.loop.comm


def test_lenet5_communication_is_exact():
    # S = 10 shuffled clients, N = 4: blocks 1, 2 get three clients, blocks 3, 4 two; all send the shared block.
    block_floats = 3 * LENET_BLOCKS[0] + 3 * LENET_BLOCKS[1] + 2 * LENET_BLOCKS[2] + 2 * LENET_BLOCKS[3]
    up = block_floats + 10 * LENET_SHARED
    fedbcgd = lenet_round("fedbcgd")
    assert fedbcgd.upload_bytes == 4 * up and fedbcgd.download_bytes == 4 * 10 * LENET_D
    assert fedbcgd.upload_d == up / 10 / LENET_D
    plus = lenet_round("fedbcgd_plus", variance_reduction=False)  # Δx and Δc over the same slices; x and c down
    assert plus.upload_bytes == 2 * 4 * up and plus.download_bytes == 2 * 4 * 10 * LENET_D
    scaffold = lenet_round("scaffold", clients_per_round=3)
    assert scaffold.upload_bytes == 2 * 4 * 3 * LENET_D and scaffold.download_bytes == 2 * 4 * 3 * LENET_D
    assert scaffold.upload_d == 2.0


def test_too_few_clients_for_the_blocks():
    with pytest.raises(ConfigError, match="S=3 < N=4 blocks"):
        lenet_round("fedbcgd", clients_per_round=3)


def digits_run(algorithm, rounds, name, ckpt_path=None, callbacks=(), **hp):
    torch.manual_seed(0)
    settings = dict(clients_per_round=4, batch_size=16, lr=0.1, server_momentum=0.5)
    module = fl_module(MLP(64, 10, hidden=[32]), algorithm=algorithm, **{**settings, **hp})
    logger = CSVLogger("runs", name=name)
    trainer = make_trainer(rounds, logger=logger, callbacks=list(callbacks), enable_checkpointing=bool(callbacks))
    trainer.fit(module, FederatedDataModule("digits", num_clients=8), ckpt_path=ckpt_path)
    return module, [{k: v for k, v in row.items() if not k.startswith("time/")}
                    for row in csv.DictReader(open(f"{logger.log_dir}/metrics.csv"))]


def test_fedbcgd_with_one_block_is_fedavgm():
    fedavgm, rows_m = digits_run("fedavgm", 3, "m")
    fedbcgd, rows_b = digits_run("fedbcgd", 3, "b", block_division="balanced", num_blocks=1)
    for key, value in fedavgm.net.state_dict().items():
        assert torch.equal(value, fedbcgd.net.state_dict()[key]), key
    assert rows_m == rows_b


def test_fedbcgd_plus_resume_is_exact():
    every_round = ModelCheckpoint(dirpath="ckpts", filename="{epoch}", save_top_k=-1, every_n_epochs=1)
    _, full = digits_run("fedbcgd_plus", 4, "full", callbacks=[every_round], num_blocks=2, block_division="balanced")
    _, resumed = digits_run("fedbcgd_plus", 4, "resumed", ckpt_path="ckpts/epoch=1.ckpt", num_blocks=2,
                            block_division="balanced")
    assert [r["round"] for r in resumed] == ["3.0", "4.0"]
    assert resumed == full[2:]
    ckpt = torch.load("ckpts/epoch=1.ckpt", weights_only=True)
    slots = ckpt["federated"]["client_state"]["tables"]["control_variate"]["slot_of"]
    assert int((slots >= 0).sum()) >= 4  # the checkpoint holds where the c_i rows are, not the rows


def test_blocks_of_a_pretrained_config_loads_no_weights(monkeypatch, capsys):
    import fl_lightning.models.timm_models as timm_models

    def no_network(*args, **kwargs):
        raise AssertionError("blocks must not look for pretrained weights")

    monkeypatch.setattr(timm_models, "_hub_reachable", no_network)
    config = __import__("pathlib").Path(__file__).resolve().parents[1] / "configs" / "vit_tiny.yaml"
    assert main(["blocks", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "N = 6" in out and "shared   head" in out
