"""Robust aggregation and attacks (docs/robustness.md): each rule equals Flower's own aggregate functions (or a plain
re-implementation from its paper), per block of uploads; each attack's upload equals its formula; the defences hold
where their theory says and the attacks break the mean."""
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from fl_lightning.aggregation import (AGGREGATORS, Bulyan, CenteredClip, Krum, Median, MultiKrum, NormBound,
                                      RobustServer, TrimmedMean, resolve_aggregator)
from fl_lightning.aggregation.received import ReceivedUploads, coverage_groups
from fl_lightning.aggregation.server import BUCKET_STREAM
from fl_lightning.attacks import ALIE, IPM, Gaussian, Scale, SignFlip
from fl_lightning.attacks.alie import z_max
from fl_lightning.attacks.base import NOISE_STREAM
from fl_lightning.errors import ConfigError
from fl_lightning.federation.messages import Payload, ReceivedSums
from fl_lightning.federation.seeding import derive_seed, generator

try:
    from flwr.server.strategy import aggregate as flower
except ImportError:  # the [flower] extra
    flower = None
needs_flower = pytest.mark.skipif(flower is None, reason="flwr is absent: pip install '.[flower]' for the oracle")


def layers(row: np.ndarray) -> list[np.ndarray]:
    """A flat upload as Flower's NDArrays (two 'layers')."""
    return [row[:7].reshape(7), row[7:].reshape(3, 5)]


def flat(arrays) -> np.ndarray:
    return np.concatenate([a.ravel() for a in arrays])


def draws(n=11, m=22, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, m)).astype(np.float32)
    w = rng.integers(1, 50, size=n)
    return x, w


@needs_flower
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_rule_equals_flowers_aggregate(seed):
    x, w = draws(seed=seed)
    results = [(layers(row), int(n)) for row, n in zip(x, w)]
    xt, wt = torch.from_numpy(x), torch.from_numpy(w).double()
    for ours, theirs in [
        (Median(), flower.aggregate_median(results)),
        (TrimmedMean(beta=0.2), flower.aggregate_trimmed_avg(results, 0.2)),
        (Krum(f=2), flower.aggregate_krum(results, num_malicious=2, to_keep=0)),
        (MultiKrum(f=2, m=5), flower.aggregate_krum(results, num_malicious=2, to_keep=5)),
        (Bulyan(f=2), flower.aggregate_bulyan(list(results), num_malicious=2,
                                              aggregation_rule=flower.aggregate_krum, to_keep=0)),
    ]:
        np.testing.assert_allclose(ours.aggregate(xt, wt).numpy(), flat(theirs), atol=1e-6, err_msg=ours.name)
    # an even count: the median is the mean of the two middle values, as numpy's
    results = results[:10]
    np.testing.assert_allclose(Median().aggregate(xt[:10], wt[:10]).numpy(), flat(flower.aggregate_median(results)),
                               atol=1e-6)


def centered_clip_by_hand(x, w, tau, iterations, v):
    """Karimireddy et al. 2021, Algorithm (CenteredClip), in plain Python loops."""
    v = [float(a) for a in v]
    total = float(sum(w))
    for _ in range(iterations):
        step = [0.0] * len(v)
        for row, weight in zip(x.tolist(), w.tolist()):
            diff = [a - b for a, b in zip(row, v)]
            norm = sum(d * d for d in diff) ** 0.5
            scale = min(1.0, tau / norm)
            step = [s + weight / total * scale * d for s, d in zip(step, diff)]
        v = [a + s for a, s in zip(v, step)]
    return torch.tensor(v, dtype=torch.float64)


def test_centered_clip_and_norm_bound_equal_their_formulas():
    x, w = draws(n=7, m=5, seed=3)
    x[0] *= 40  # one far-away upload: clipped
    xt, wt = torch.from_numpy(x).double(), torch.from_numpy(w).double()
    start = torch.full((5,), 0.25, dtype=torch.float64)
    got = CenteredClip(tau=0.7, iterations=4).aggregate(xt, wt, start)
    torch.testing.assert_close(got, centered_clip_by_hand(x.astype(np.float64), w, 0.7, 4, start).double(),
                               atol=1e-9, rtol=0)
    norms = np.linalg.norm(x.astype(np.float64), axis=1, keepdims=True)
    bounded = (x * np.minimum(1, 1.5 / norms) * w[:, None]).sum(0) / w.sum()
    np.testing.assert_allclose(NormBound(max_norm=1.5).aggregate(xt, wt).numpy(), bounded, atol=1e-9)


def test_each_attack_uploads_its_formula():
    true = torch.tensor([[1.0, -2.0, 3.0]])
    honest = torch.tensor([[1.0, 0.0, 2.0], [3.0, 4.0, 2.0], [2.0, 2.0, 2.0]])
    gens = [generator(7)]
    assert SignFlip(factor=3).forge(true, honest, gens).tolist() == [[-3.0, 6.0, -9.0]]
    assert Scale(factor=10).forge(true, honest, gens).tolist() == [[10.0, -20.0, 30.0]]
    torch.testing.assert_close(Gaussian(std=0.5).forge(true, honest, [generator(7)]),
                               0.5 * torch.randn(3, generator=generator(7))[None])
    assert IPM(epsilon=0.5).forge(true, honest, gens).tolist() == [[-1.0, -1.0, -1.0]]
    std = torch.tensor([(2 / 3) ** 0.5, (8 / 3) ** 0.5, 0.0])  # population std of the honest columns
    torch.testing.assert_close(ALIE(z=1.5).forge(true, honest, gens)[0], torch.tensor([2.0, 2.0, 2.0]) - 1.5 * std)
    # the paper's z_max: n = 50, k = 12: s = 26 − 12 = 14, z = Φ⁻¹(36/50) ≈ 0.5828
    assert z_max(50, 12) == pytest.approx(0.58284, abs=1e-4)
    # z fixed once per run from n = S and the expected attackers k = S·m/M, not from the group's own n and k:
    # S = 10 of M = 20, 4 malicious: k = 2, s = 6 − 2 = 4, z = Φ⁻¹(6/10) ≈ 0.2533 — also in this group of 4 with 1
    alie = ALIE(fraction=0.2)
    alie.prepare(20, 10)
    assert alie.used_z == pytest.approx(0.253347, abs=1e-6) and alie.metrics() == {"attack/alie_z": alie.used_z}
    assert alie.forge(true, honest, gens)[0].tolist() == pytest.approx(
        (torch.tensor([2.0, 2.0, 2.0]) - 0.253347 * std).tolist(), abs=1e-5)
    fedavg_arm = ALIE(fraction=0.2)
    fedavg_arm.prepare(20, 5)  # S = 5: k = 1, s = 3 − 1 = 2, z = Φ⁻¹(3/5): the same z at the same share
    assert fedavg_arm.used_z == pytest.approx(alie.used_z)
    with pytest.raises(ConfigError, match="alie's z is infinite with 6 of S=10 clients a round malicious"):
        raise ALIE(fraction=0.6).refuse(SimpleNamespace(num_clients=20, per_round=10, label_counts=()))


def round_of(uploads, aggregator=None, attack=None, malicious=(), weights=None, blocks=None, round_idx=0):
    """Adds ``uploads`` ([(client id, [(start, values)])]) to a RobustServer's received uploads, as the loop does."""
    server = RobustServer(aggregator, attack, blocks)
    server.malicious = set(malicious)
    server.configure_round(SimpleNamespace(round=round_idx, clients=[SimpleNamespace(client_id=c) for c, _ in uploads]))
    size = max(start + len(v) for _, parts in uploads for start, v in parts)
    received = server.received_sums({"delta": size}, torch.device("cpu"))
    for position, (_, parts) in enumerate(uploads):
        payload = Payload()
        for start, values in parts:
            payload.add("delta", start, torch.tensor(values, dtype=torch.float32))
        received.position = position
        received.add(payload, delta_weight=1.0 if weights is None else weights[position])
    return server, received


def test_groups_are_blocks_and_the_shared_block():
    # clients 0, 1 upload block A = [0, 3) and the shared block [6, 8); clients 2, 3, 4 block B = [3, 6) and it too
    groups = coverage_groups([[(0, 3), (6, 8)], [(0, 3), (6, 8)], [(3, 6), (6, 8)], [(3, 6), (6, 8)], [(3, 6), (6, 8)]])
    assert groups == {(0, 1): [(0, 3)], (2, 3, 4): [(3, 6)], (0, 1, 2, 3, 4): [(6, 8)]}
    a, b = [[1, 2, 3], [5, 6, 7]], [[0, 0, 0], [9, 9, 9], [4, 4, 4]]
    shared = [[1, 1], [2, 2], [3, 3], [4, 4], [100, -100]]
    uploads = [(c, [(0, a[c]), (6, shared[c])]) for c in range(2)] + \
              [(c, [(3, b[c - 2]), (6, shared[c])]) for c in range(2, 5)]
    _, received = round_of(uploads, Median())
    # block A: the median of 2 uploads (their mean), block B: of 3, the shared block: of all 5
    assert received.mean("delta").tolist() == [3, 4, 5, 4, 4, 4, 3, 2]
    assert received.weight("delta").tolist() == [2, 2, 2, 3, 3, 3, 5, 5]


def test_median_keeps_each_coordinate_within_the_honest_range_and_sign_flip_breaks_the_mean():
    rng = np.random.default_rng(4)
    honest = rng.normal(1.0, 0.3, size=(6, 10)).tolist()
    uploads = [(c, [(0, row)]) for c, row in enumerate(honest)] + [(6 + c, [(0, honest[c])]) for c in range(5)]
    attack, bad = SignFlip(factor=20), range(6, 11)  # 5 of 11 flip: f < n/2
    _, received = round_of(uploads, Median(), attack, bad)
    robust, low, high = received.mean("delta"), torch.tensor(honest).min(0).values, torch.tensor(honest).max(0).values
    assert bool(((robust >= low) & (robust <= high)).all())
    _, plain = round_of(uploads, None, attack, bad)
    assert bool((plain.mean("delta") < 0).all())  # the mean is pulled below zero on every coordinate


@pytest.mark.parametrize("rule", ["trimmed_mean", "krum", "multi_krum", "bulyan", "centered_clip", "norm_bound"])
@pytest.mark.parametrize("attack", [SignFlip(factor=20), Scale(factor=50), Gaussian(std=30), IPM(epsilon=20),
                                    ALIE(z=3.0)])
def test_each_defence_holds_where_each_attack_breaks_the_mean(rule, attack):
    """11 uploads, 2 malicious (Bulyan's n ≥ 4f + 3 with f = 2): the defence stays within 1 of the honest mean,
    the mean does not (ALIE moves the mean by only z·σ per coordinate: held to within 3σ·√m instead)."""
    rng = np.random.default_rng(5)
    honest = rng.normal(1.0, 0.1, size=(9, 30))
    uploads = [(c, [(0, row.tolist())]) for c, row in enumerate(honest)] + [(9, [(0, honest[0].tolist())]),
                                                                            (10, [(0, honest[1].tolist())])]
    options = {"trimmed_mean": {"beta": 0.2}, "krum": {"f": 2}, "multi_krum": {"f": 2}, "bulyan": {"f": 2},
               "centered_clip": {"tau": 1.0, "iterations": 30}, "norm_bound": {"max_norm": 0.6}}[rule]
    truth = torch.tensor(honest.mean(0), dtype=torch.float32)
    _, received = round_of(uploads, AGGREGATORS[rule](**options), attack, {9, 10})
    _, plain = round_of(uploads, None, attack, {9, 10})
    err, plain_err = (received.mean("delta") - truth).norm(), (plain.mean("delta") - truth).norm()
    if rule == "norm_bound":  # bounded, not removed: the honest uploads are shrunk too (‖Δ‖ ≈ 5.5 > 0.6)
        assert err < truth.norm() and (isinstance(attack, ALIE) or plain_err > 2 * truth.norm())
    elif isinstance(attack, ALIE):
        assert err < 3 * 0.1 * 30 ** 0.5 and plain_err > 0.1
    else:
        assert err < 1.0 < plain_err


def test_colluders_see_only_the_honest_uploads_of_their_block():
    """IPM in a FedBCGD round: block A's attacker forges −ε · block A's honest mean, the shared block's attacker
    −ε · the shared block's honest mean (its block's honest clients and the other block's)."""
    uploads = [(0, [(0, [2.0, 4.0]), (4, [1.0])]), (1, [(0, [9.0, 9.0]), (4, [9.0])]),
               (2, [(2, [6.0, 8.0]), (4, [3.0])]), (3, [(2, [1.0, 1.0]), (4, [5.0])])]
    _, received = round_of(uploads, None, IPM(epsilon=1.0), {1})
    # block A: (2 + (−2)) / 2, (4 + (−4)) / 2; block B untouched; shared: (1 − 3 + 3 + 5) / 4, −3 = −mean(1, 3, 5)
    assert received.mean("delta").tolist() == [0.0, 0.0, 3.5, 4.5, 1.5]


def test_gaussian_noise_is_seeded_by_round_client_and_group_and_independent_across_a_clients_groups():
    uploads = [(3, [(0, [0.0, 0.0])]), (8, [(0, [1.0, 1.0])])]
    _, received = round_of(uploads, None, Gaussian(std=2.0), {3}, round_idx=5)
    noise = 2.0 * torch.randn(2, generator=generator(derive_seed(NOISE_STREAM, 5, 3, 0)))
    torch.testing.assert_close(received.mean("delta"), (noise + 1.0) / 2)
    # a FedBCGD client's block [0, 400) and shared block [400, 800): two groups, two independent noise streams
    uploads = [(3, [(0, [0.0] * 400), (400, [0.0] * 400)]), (8, [(0, [0.0] * 400), (400, [0.0] * 400)]),
               (9, [(400, [0.0] * 400)])]
    _, received = round_of(uploads, None, Gaussian(std=1.0), {3}, round_idx=0)
    mean = received.mean("delta")
    block, shared = mean[:400] * 2, mean[400:] * 3  # the attacker's noise, undone from the means
    assert abs(float(torch.corrcoef(torch.stack([block, shared]))[0, 1])) < 0.15


def test_a_group_the_rule_cannot_serve_keeps_its_coordinates_and_is_counted():
    """Drops leave block A with 2 uploads, below Krum's 5: its coordinates get weight 0 (the server keeps them),
    block B (5 uploads) is aggregated; aggregation/skipped_groups counts the one skipped group."""
    a = [(c, [(0, [float(c), 1.0])]) for c in range(2)]
    b = [(c, [(2, [float(c), -1.0])]) for c in range(2, 7)]
    server, received = round_of(a + b, Krum(f=1))
    assert received.weight("delta").tolist() == [0, 0, 5, 5]
    assert received.mean("delta").tolist()[:2] == [0.0, 0.0]
    assert server.metrics() == {"aggregation/skipped_groups": 1.0}
    assert Krum(f=1).group_refusal(4, "a round of S=4 uploads").args[0] == (
        "model.aggregator: krum(f=1) needs at least 5 uploads per group, but a round of S=4 uploads has 4; raise "
        "model.clients_per_round, use fewer blocks or lower its f")


def test_centered_clip_starts_from_its_last_output_where_the_block_was_uploaded():
    server, received = round_of([(0, [(0, [1.0, 1.0])]), (1, [(0, [3.0, 3.0])])], CenteredClip(tau=100, iterations=1))
    assert received.mean("delta").tolist() == [2.0, 2.0]
    state = server.state_dict()
    again = RobustServer(CenteredClip(tau=0.5, iterations=1), None)
    again.load_state_dict(state)
    again.configure_round(SimpleNamespace(round=1, clients=[SimpleNamespace(client_id=0)]))
    received = again.received_sums({"delta": 2}, torch.device("cpu"))
    payload = Payload()
    payload.add("delta", 0, torch.tensor([2.0, 12.0]))
    received.add(payload)
    # v = (2, 2) + (0, 10) · 0.5 / 10
    assert received.mean("delta").tolist() == [2.0, 2.5]


def test_several_ranks_keep_the_uploads_of_one_process():
    """``combine`` (DDP): two ranks' recorded uploads, exchanged in plan order, aggregate as on one process."""
    uploads = [(c, [(0, [float(c), float(-c), 2.0 * c])]) for c in range(5)]

    def rank(share):
        server = RobustServer(TrimmedMean(beta=0.2), None)
        server.configure_round(SimpleNamespace(round=0, clients=[SimpleNamespace(client_id=c) for c, _ in uploads]))
        received = server.received_sums({"delta": 3}, torch.device("cpu"), ordered=True)
        for position in share:
            payload = Payload()
            payload.add("delta", 0, torch.tensor(uploads[position][1][0][1]))
            received.position = position
            received.add(payload)
        return received

    ranks = [rank([0, 3, 4]), rank([1, 2])]
    records = [[(r[0], r[1], r[2], r[3], r[4].numel()) for r in received._records] for received in ranks]
    values = [torch.cat([r[4] for r in received._records]) for received in ranks]

    class TwoRanks:  # what Collective does with two processes: everyone's objects, everyone's values concatenated
        def gather_objects(self, mine):
            return records

        def concat(self, mine):
            return torch.cat(values)

    ranks[1].combine(TwoRanks())
    _, one = round_of(uploads, TrimmedMean(beta=0.2))
    assert ranks[1].mean("delta").tolist() == one.mean("delta").tolist() == [2.0, -2.0, 4.0]
    assert [u.position for u in ranks[1].uploads] == [0, 1, 2, 3, 4]


def test_the_default_keeps_the_streamed_sums_and_names_resolve():
    assert resolve_aggregator(None) is None and resolve_aggregator("none") is None
    assert isinstance(resolve_aggregator("trimmed_mean"), TrimmedMean)
    got = resolve_aggregator({"class_path": "trimmed_mean", "init_args": {"beta": 0.3}})
    assert got.beta == 0.3
    got = resolve_aggregator({"class_path": "fl_lightning.aggregation.krum.Krum", "init_args": {"f": 2}})
    assert got.f == 2
    with pytest.raises(ConfigError, match="unknown aggregator 'medain'; did you mean median\? choose one of mean, median"):
        resolve_aggregator("medain")
    with pytest.raises(ConfigError, match="model.aggregator.beta"):
        TrimmedMean(beta=0.5)
    assert ReceivedSums is not ReceivedUploads


def test_the_docs_name_every_aggregator_and_attack():
    from pathlib import Path

    from fl_lightning.attacks import ATTACKS

    page = (Path(__file__).resolve().parents[1] / "docs" / "robustness.md").read_text()
    assert [n for n in [*AGGREGATORS, *ATTACKS] if f"`{n}`" not in page] == []


def test_bucketing_and_client_momentum_equal_a_plain_reimplementation_over_three_rounds():
    """Centered clipping with client momentum β = 0.9 and buckets of 2 (Karimireddy et al. 2021/2022), 5 clients of
    which client 4 flips its sign, over 3 rounds with a different cohort each round, against plain Python lists:
    m_i ← β m_i + (1 − β) Δ_i for each reporting client, the attacker forges from its momentum, the uploads shuffled
    (the server's seeded permutation) into buckets whose means the rule clips around its last output."""
    rng = np.random.default_rng(7)
    cohorts = [[0, 1, 2, 3, 4], [0, 2, 4], [1, 3, 4, 0]]
    deltas = [{c: rng.normal(0.5, 1.0, size=4).tolist() for c in cohort} for cohort in cohorts]
    rule = CenteredClip(tau=0.7, iterations=2, bucket=2, momentum=0.9)
    server = RobustServer(rule, SignFlip(factor=3.0, clients=[4]))
    server.malicious = {4}
    momenta, v = {}, [0.0] * 4
    for r, cohort in enumerate(cohorts):
        server.configure_round(SimpleNamespace(round=r, clients=[SimpleNamespace(client_id=c) for c in cohort]))
        received = server.received_sums({"delta": 4}, torch.device("cpu"))
        for position, c in enumerate(cohort):
            payload = Payload()
            payload.add("delta", 0, torch.tensor(deltas[r][c]))
            received.position = position
            received.add(payload)
        got = received.mean("delta")
        rows = []
        for c in cohort:  # by hand
            old = momenta.get(c, [0.0] * 4)
            momenta[c] = [0.9 * o + 0.1 * d for o, d in zip(old, deltas[r][c])]
            rows.append([-3.0 * m for m in momenta[c]] if c == 4 else list(momenta[c]))
        order = torch.randperm(len(cohort), generator=generator(derive_seed(BUCKET_STREAM, r, 0))).tolist()
        buckets = [order[i:i + 2] for i in range(0, len(order), 2)]
        means = [[sum(rows[i][k] for i in b) / len(b) for k in range(4)] for b in buckets]
        weights = [len(b) / len(cohort) for b in buckets]
        for _ in range(2):
            step = [0.0] * 4
            for w, mean in zip(weights, means):
                diff = [m - c for m, c in zip(mean, v)]
                scale = min(1.0, 0.7 / sum(d * d for d in diff) ** 0.5)
                step = [s + w * scale * d for s, d in zip(step, diff)]
            v = [c + s for c, s in zip(v, step)]
        torch.testing.assert_close(got, torch.tensor(v), atol=1e-6, rtol=0)
    assert set(server.state_dict()["momenta"]) == {0, 1, 2, 3, 4}


def test_bucketing_needs_enough_bucket_means_for_the_rule():
    assert Krum(f=1, bucket=2).inputs(9) == 5 and Krum(f=1, bucket=2).serves(9)
    with pytest.raises(ConfigError, match="model.aggregator.bucket: got 1; needs an integer ≥ 2"):
        Krum(bucket=1)
    assert Krum(f=1, bucket=2).group_refusal(8, "a round of S=8 uploads").args[0] == (
        "model.aggregator: krum(f=1, bucket=2) needs at least 5 inputs (bucket means of 2) per group, but a round of "
        "S=8 uploads has 4; raise model.clients_per_round, use fewer blocks or lower its f")
    assert resolve_aggregator({"class_path": "mean", "init_args": {"bucket": 2}}) is not None  # not the plain mean
    assert resolve_aggregator("mean") is None
