"""``ClientDP``: client-level DP as an FLCallback (fl_lightning.privacy.clipping, .mechanism, .accountant).

Runs after the algorithm's callbacks and before the codec (``FederatedModule.configure_callbacks``):

    configure_round     n_k per coordinate: the plan's (fixed cohort), or its expectation (Poisson)
    on_client_end       clip the client's whole upload to ‖u‖ ≤ C (before any codec); Δc to ‖Δc‖ ≤ C_c
    on_client_reported  add b_i = 1[‖u‖ ≤ C] to the count channel (one bit, not counted in comm/)
    on_server_update    update ← (Σ u_i + N(0, z_Δ²C²)) / n_k; adaptive C from the noised count
    on_round_end        ε after the rounds so far (dp-accounting), for privacy/epsilon
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from fl_lightning.callbacks.base import FLCallback
from fl_lightning.errors import ConfigError
from fl_lightning.privacy import accountant
from fl_lightning.privacy.clipping import adapted_clip, clip_upload, update_noise_multiplier
from fl_lightning.privacy.mechanism import COUNT_NOISE, MECHANISMS, expected_counts, noised_mean, planned_counts
from fl_lightning.privacy.options import PrivacyOptions

COUNT = "privacy_unclipped"
CONTROL_CLIPPED = "privacy_control_clipped"  # how many Δc were clipped (a diagnostic, as the clipped fraction)


class ClientDP(FLCallback):
    """Clips every client upload to C and noises every released sum; logs ε.

    Args:
        options: the PrivacyOptions.
        rounds: R, the rounds the fit runs (to calibrate target_epsilon); from trainer.max_epochs in a fit.
        controls: the algorithm also uploads control variates Δc (SCAFFOLD, FedBCGD+): they are clipped to
            control_clip and noised by privacy.control.NoisedControlSum; Δ and Δc share z equally.
    """

    thread_safe = True  # client hooks touch only client.upload and client.scratch

    def __init__(self, options: PrivacyOptions, rounds: Optional[int] = None, controls: bool = False):
        self.options = options
        self.mechanism = MECHANISMS[options.mechanism]()  # the noise on every release (and its DpEvent)
        self.controls = controls
        self.control_clip = options.control_clip if options.control_clip is not None else options.clip
        self.rounds = rounds
        self.clip = options.clip
        self.noise_multiplier: Optional[float] = options.noise_multiplier
        self.population = self.cohort = None
        self.epsilon = 0.0
        self.clipped = self.reported = self.control_clipped = 0
        self.noise_to_signal = 0.0
        self._counts, self._released = None, 1

    # -- set-up -------------------------------------------------------------------------------
    def prepare(self, population: int, cohort: int, rounds: Optional[int] = None) -> None:
        """K, M and R known: calibrate z for target_epsilon; refuse a budget that round 1 would pass."""
        self.population, self.cohort = population, cohort
        self.rounds = rounds if rounds is not None else self.rounds
        opts = self.options
        accountant.check(cohort, population, opts.sampling, opts.accountant, self.delta)
        if opts.target_epsilon is not None:
            if not self.rounds or self.rounds < 1:
                raise ConfigError("model.privacy.target_epsilon", "needs the number of rounds: set trainer.max_epochs")
            self.noise_multiplier = accountant.noise_multiplier_for(opts.target_epsilon, self.rounds, cohort,
                                                                    population, self.delta, opts.sampling,
                                                                    opts.accountant, opts.mechanism)
        if opts.adaptive_quantile is not None:
            update_noise_multiplier(self.noise_multiplier, self.count_noise)  # σ_b too small: one line now
        first = self.epsilon_after(1)  # also computes (once) the round's event, which every later round reuses
        note = accountant.DROPPED_ORDERS.note()  # dp-accounting's warnings: one line at most
        if note:
            print(note)
        if opts.epsilon_budget is not None and first > opts.epsilon_budget:
            raise ConfigError("model.privacy.epsilon_budget", f"one round already spends ε = "
                              f"{first:.3g} > {opts.epsilon_budget:g}; raise the budget or the noise")

    def on_train_start(self, trainer, pl_module) -> None:
        if pl_module.flat.numel != pl_module.flat.num_params:
            raise ConfigError("model.privacy", "the network has floating buffers (e.g. BatchNorm running stats) "
                              "whose mean the server would release without noise; use GroupNorm or no buffers")
        self.prepare(trainer.datamodule.num_clients, pl_module.hparams.clients_per_round, trainer.max_epochs)

    @property
    def delta(self) -> float:
        return self.options.delta if self.options.delta is not None else accountant.default_delta(self.population)

    @property
    def count_noise(self) -> float:
        return self.options.count_noise if self.options.count_noise is not None else self.cohort / 20

    @property
    def update_noise_multiplier(self) -> float:
        """z_Δ (= z_c, the control variates' own, when there are any): the shares of z (clipping.py)."""
        adaptive = self.options.adaptive_quantile is not None
        if not adaptive and not self.controls:
            return self.noise_multiplier
        return update_noise_multiplier(self.noise_multiplier, self.count_noise if adaptive else None,
                                       2 if self.controls else 1)

    def epsilon_after(self, rounds: int) -> float:
        return accountant.epsilon(self.noise_multiplier, rounds, self.cohort, self.population, self.delta,
                                  self.options.sampling, self.options.accountant, self.options.mechanism)

    def stops_before(self, round_idx: int) -> bool:
        """The next round (``round_idx`` rounds done) would pass ``epsilon_budget``."""
        budget = self.options.epsilon_budget
        return budget is not None and self.epsilon_after(round_idx + 1) > budget

    # -- the round --------------------------------------------------------------------------------
    def configure_round(self, round):
        if round.numel != round.num_params:
            raise ConfigError("model.privacy", "the network has floating buffers (e.g. BatchNorm running stats) "
                              "whose mean the server would release without noise; use GroupNorm or no buffers")
        if self.population is None:  # outside a fit: M is the plan's, or qK under Poisson sampling
            self.prepare(round.num_clients, len(round.clients) if round.poisson_rate is None
                         else int(round.poisson_rate * round.num_clients + 0.5))
        poisson = self.options.sampling == "poisson"
        if (not poisson and len(round.clients) != self.cohort) or round.num_clients != self.population:
            raise ConfigError("model.privacy", f"the accountant was set up for M={self.cohort} of K={self.population}, "
                              f"the round samples {len(round.clients)} of {round.num_clients}")
        round.channels[COUNT] = 1
        if self.controls:
            round.channels[CONTROL_CLIPPED] = 1
        # poisson: expected counts qK·P(a joining client uploads k), whatever was drawn (round.upload_choices)
        self._counts = (expected_counts(round.upload_choices, float(self.cohort), round.num_params) if poisson
                        else planned_counts(round.clients, round.num_params))
        self._released = max(int((self._counts > 0).sum()), 1)  # coordinates whose noised sum is released
        self.clipped = self.reported = self.control_clipped = 0

    def on_client_end(self, client):
        extra = [channel for channel in client.upload.channels() if channel not in ("delta", "control")]
        if extra or ("control" in client.upload.channels() and not self.controls):
            extra = extra or ["control"]
            raise ConfigError("model.privacy", f"the upload has a channel {extra[0]!r} besides delta, which the "
                              "clip and noise do not cover; use an algorithm that uploads only its model update")
        _, clipped = clip_upload(client.upload, self.clip)
        _, control_clipped = clip_upload(client.upload, self.control_clip, "control")  # the client keeps its c_i⁺
        client.scratch[self] = clipped, control_clipped

    def on_client_reported(self, client):
        clipped, control_clipped = client.scratch.get(self, (False, False))
        client.received.add_sum(COUNT, torch.tensor([0.0 if clipped else 1.0]))
        if self.controls:
            client.received.add_sum(CONTROL_CLIPPED, torch.tensor([1.0 if control_clipped else 0.0]))

    def on_server_update(self, server):
        received, d = server.received, server.update.numel()
        std = self.update_noise_multiplier * self.clip
        total = received.sum("delta")[:d]
        signal = float(total.double().norm()) / self._released ** 0.5  # RMS of the clipped sum per coordinate
        self.noise_to_signal = std / signal if signal > 0 else math.inf
        mean = noised_mean(total, self._counts, std, server.round, self.mechanism)
        server.update.copy_(mean.to(server.update.dtype))
        self.reported = int(received.weight(COUNT)[0])
        self.clipped = self.reported - int(received.sum(COUNT)[0])
        if self.controls:
            self.control_clipped = int(received.sum(CONTROL_CLIPPED)[0])
        if self.options.adaptive_quantile is not None:
            centred = received.sum(COUNT)[0].item() - self.reported / 2
            noised = centred + float(self.mechanism.noise(1, self.count_noise, server.round, COUNT_NOISE)[0])
            self.clip = adapted_clip(self.clip, noised, self.cohort, self.options.adaptive_quantile,
                                     self.options.clip_lr)

    def on_round_end(self, round):
        self.epsilon = self.epsilon_after(round.round + 1)

    def metrics(self) -> dict[str, float]:
        """privacy/*: ε at δ so far, the clipped fraction of this round's reported uploads (exact: a diagnostic
        outside the guarantee), the clip C in force next round, z, the noise-to-signal per coordinate (noise std over
        the RMS of the clipped sum, also a diagnostic), poisson 1 / fixed 0; with control variates Δc's clipped
        fraction."""
        row = {"privacy/epsilon": self.epsilon, "privacy/delta": self.delta,
               "privacy/clipped_fraction": self.clipped / self.reported if self.reported else 0.0,
               "privacy/clip": self.clip, "privacy/noise_multiplier": self.noise_multiplier,
               "privacy/noise_to_signal": self.noise_to_signal,
               "privacy/poisson": float(self.options.sampling == "poisson")}
        if self.controls:
            row["privacy/control_clipped_fraction"] = self.control_clipped / self.reported if self.reported else 0.0
        return row

    def summary(self, accuracy: Optional[float], loss: Optional[float], classes: int) -> str:
        """The DP part of a fit's summary line; when it ended near chance (accuracy < 1.5/classes) or with a loss
        above 2·ln(classes), the diagnostics of the last round and a hint."""
        text = f", privacy ε {self.epsilon:.4g} at δ {self.delta:.3g} ({self.options.sampling} sampling)"
        chance = classes > 1 and ((accuracy is not None and accuracy < 1.5 / classes) or
                                  (loss is not None and not loss < 2 * math.log(classes)))
        if chance:
            fraction = self.clipped / self.reported if self.reported else 0.0
            text += (f" — near chance: {100 * fraction:.0f} % of uploads clipped, noise-to-signal "
                     f"{self.noise_to_signal:.3g} per coordinate; raise model.privacy.clip, lower the noise (a larger "
                     "target_epsilon) or sample more clients per round")
        return text

    # -- checkpoints ------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"clip": self.clip, "epsilon": self.epsilon, "noise_multiplier": self.noise_multiplier,
                "accounting": accountant.ACCOUNTING}

    def load_state_dict(self, state_dict: dict) -> None:
        check_accounting(state_dict)
        self.clip, self.epsilon = float(state_dict["clip"]), float(state_dict["epsilon"])
        saved = state_dict.get("noise_multiplier")
        if saved is not None and self.noise_multiplier is not None and abs(saved - self.noise_multiplier) > 1e-12:
            raise ConfigError("model.privacy.noise_multiplier", f"is {self.noise_multiplier} now but {saved} in the "
                              "checkpoint; resume with the same privacy options")


def check_accounting(state_dict: dict) -> None:
    """A checkpoint whose ε was accounted by another version (accountant.ACCOUNTING) is refused in one line."""
    version = state_dict.get("accounting", 1)
    if version != accountant.ACCOUNTING:
        raise ConfigError("ckpt_path", f"its ε was accounted by privacy accounting version {version}, which "
                          "under-reported ε (a fixed cohort's sum has sensitivity 2C, not C); this version is "
                          f"{accountant.ACCOUNTING}: start the fit afresh (its logged ε would be wrong)")


def check_checkpoint(checkpoint: dict) -> None:
    """Before anything is built: a DP checkpoint's accounting version (check_accounting)."""
    if (checkpoint.get("hyper_parameters") or {}).get("privacy") is None:
        return
    for key, state in (checkpoint.get("callbacks") or {}).items():
        if str(key).startswith(ClientDP.__qualname__):
            check_accounting(state)


def check_before_fit(options: PrivacyOptions, population: int, cohort: int, rounds: Optional[int]) -> None:
    """Everything ClientDP.prepare refuses (δ ≥ 1/K, an unreachable target ε, a budget one round passes, σ_b too
    small), before the fit writes anything."""
    ClientDP(options, rounds if rounds is not None and rounds > 0 else None).prepare(population, cohort)
