"""``FederatedModule``: the LightningModule that owns the global model and runs rounds.

One Lightning epoch is one communication round: the training "data loader" yields a
single item per epoch and ``training_step`` runs the whole round through the
``FederatedLoop``. So ``max_epochs`` counts rounds and Lightning's own callbacks,
loggers, progress bar, validation schedule and ``ckpt_path`` resume work unchanged.
Validation evaluates the global model on the global test split.
"""
from __future__ import annotations

import math
import pickle
import time
import warnings
from typing import Optional, Union

import pytorch_lightning as pl
import torch
from pytorch_lightning.cli import OptimizerCallable
from pytorch_lightning.utilities import rank_zero_warn
import torch.nn.functional as F
from torch import nn

from fl_lightning.aggregation import Aggregator, settle_robustness
from fl_lightning.algorithms import REGISTRY, Algorithm
from fl_lightning.assembly import check_before_fit, fit_callbacks, start_rounds
from fl_lightning.attacks import Attack
from fl_lightning.compression import Codec
from fl_lightning.errors import ConfigError, DivergenceError, check_unchanged
from fl_lightning.federation import (ClientThreads, Collective, FLCallback, FlatModel, GlobalEvaluation, LoggedValues,
                                     RoundLog, is_lightning, loss_logged_once, network_optimizer, overrides,
                                     partition_for, run_seed, test_metrics, train_objective)
from fl_lightning.module_options import check_compatible, check_trainer, settle_options
from fl_lightning.privacy import PrivacyOptions
from fl_lightning.runs import (append_rows, checkpoint_refusal, define_round_keys, keep_metrics_csv, load_weights_only,
                               prepare, refuse_before_algorithm_objects, run_dirs, steps_word, summary, wandb_id,
                               write_curve, write_start_files)
from fl_lightning.systems import Asynchronous, RoundPolicy, SystemModel


class FederatedModule(pl.LightningModule):
    """The global model and the round loop: one Lightning epoch = one communication round.

    Args:
        network: the model to federate (any ``nn.Module``, or a ``LightningModule`` whose
            ``training_step`` then defines the local loss).
        algorithm: the algorithm with its options (fl_lightning.algorithms; default FedAvg): on the command
            line ``--model.algorithm NAME --model.algorithm.OPTION V``, NAME one of — {algorithms}.
            ``fl-lightning algorithms NAME`` lists its options.
        clients_per_round: S, clients sampled each round (paper: 10 of 100).
        local_epochs: E, local epochs per round (paper: 5).
        batch_size: B, local minibatch size (paper: 50).
        lr: η, local learning rate (paper searches 0.01–0.3); decayed by ``lr_decay`` per round.
        lr_decay: per-round multiplicative lr decay (paper: 0.998).
        weight_decay: local SGD weight decay (paper: 1e-3).
        client_momentum: local SGD momentum (reset for every client; paper: 0).
        local_optimizer: ``sgd`` (lr, weight_decay, client_momentum above) or ``network``: the optimizer the
            network's own ``configure_optimizers`` returns (a LightningModule), its lr decayed by lr_decay.
        server_optimizer: any torch.optim class (path) with its init args, stepped on the pseudo-gradient −Δ̄
            each round; replaces the algorithm's (then leave the algorithm's server_lr/server_momentum unset).
        weighted_aggregation: weight client updates Δ by sample count instead of a plain mean.
        compression: a codec for every upload: ``topk``, ``randk``, ``qsgd`` (options
            ``--model.compression.k``, ``.levels``, ``.bucket_size``, ``.error_feedback``) or ``none``;
            the names topk, fedpaq, fedbcgd_qsgd and fedbcgd_plus_qsgd choose one themselves.
        grad_clip: clip each local gradient to this norm (default: none; 10 with rule authors).
        client_dropout: p, the probability that a sampled client fails to report (seeded per round): it
            trains, but its upload never arrives. Updates with NaN/inf are dropped too. The server
            aggregates what arrived; a round where nobody reports changes nothing.
        max_upload_d: stop once ``comm/upload_d`` reaches this budget (paper: 1000).
        target_accuracy: log ``comm/upload_d_at_target`` when val/acc first reaches it.
        target_metric, target_mode, target: the same for any logged metric (e.g. val/loss, min) reaching ``target``.
        test_every_n_rounds: also log test/* (the test set) every n rounds; it is always logged after the last.
        eval_every_d: evaluate val/* only when comm/upload_d crosses a multiple of this (and after the last
            round): every algorithm evaluated at the same spacing in floats uploaded (needs
            trainer.check_val_every_n_epoch 1; centralized, which uploads nothing, every round).
        eval_train_objective: at each validation also log ``train/objective``, the global
            training objective f(x) + (weight_decay/2)‖x‖² over all clients' data (convex plots).
        parallel_clients: K, clients trained at the same time in this process (each rank under DDP), the
            intra-op threads split between them; the same numbers as K = 1 at that many threads per client.
        client_runner: ``serial`` (one client at a time; K at a time with parallel_clients), ``threads`` (the same),
            or ``batched``: B clients as one batched model (fl_lightning.federation.batched; for GPUs); or a class
            path / ``{{class_path, init_args}}`` of your own ClientRunner (fl_lightning.assembly.connector).
        cohort_size: B, clients per batched step with client_runner batched; unset: chosen from memory.
        sampler: who is asked each round, by its registered name (fl_lightning.federation.seams.SAMPLERS):
            ``uniform`` (S of M without replacement; the default) or ``poisson`` (each client with probability
            S/M), or one of your own (``@SAMPLERS.register("name")``, a class path or ``{{class_path, init_args}}``:
            it is built by its ``from_fit(fit)`` and may read the clients' sizes and labels); with model.system the available clients
            and with model.privacy's sampling its own are sampled instead, so leave it unset there.
        schedule: when the server steps, by its registered name (fl_lightning.federation.seams.SCHEDULES):
            ``synchronous``, ``simulated`` (rounds on model.system's clock, model.round_policy), ``fedbuff`` (as
            model.asynchronous fedbuff), or one of your own (``@SCHEDULES.register("name")`` or a class path); unset: the one the
            system options imply (synchronous without model.system).
        channels_last: lay image batches out channels-last (fl_lightning.federation.memory_format); None: for conv networks
            on the CPU, where it is faster.
        system: simulate clients' compute, network and availability on a virtual clock (fl_lightning.systems):
            a profile name (uniform, mobile, slow_uplink, slow_compute), a .csv trace, or a SystemModel; None: off.
        round_policy: with a system: wait_for_all (default), deadline, over_selection, or a RoundPolicy
            (``--model.round_policy.deadline_s``, ``.beta``).
        asynchronous: with a system: ``fedbuff`` (``--model.asynchronous.buffer_size K``, ``.concurrency C``): buffered
            asynchronous training, one server step per epoch (fl_lightning.systems.fedbuff); None: synchronous rounds.
        privacy: client-level DP (fl_lightning.privacy.PrivacyOptions): ``--model.privacy.noise_multiplier Z``
            (or ``.target_epsilon``), ``.clip C``, ``.adaptive_quantile``, ``.epsilon_budget``, ``.delta``; None: off.
        local_trainer: pl.Trainer options (callbacks, precision, accumulate_grad_batches, ...): each client's local
            epochs run in such a Trainer (fl_lightning.federation.trainer_path); None: the fast path.
        personal_eval_every: with data.personal_fraction: log pval/* (each client's personalised model on its
            held-out data, fl_lightning.personalization) every n rounds; unset: after the last round only.
        personal_eval_clients: evaluate pval/* on this many clients (a sample fixed by the seed); unset: all.
        personal_new_clients: hold this many clients (a sample fixed by the seed) out of training and log
            pval_new/*: x^r fine-tuned for local_epochs on each one's data, on its held-out data.
        aggregator: the server's rule per block (fl_lightning.aggregation, docs/robustness.md): mean (default), median,
            trimmed_mean, krum, multi_krum, bulyan, centered_clip, norm_bound, a class path, or its {{class_path, init_args}}.
        attack: malicious clients (fl_lightning.attacks): sign_flip, gaussian, scale, alie, ipm, label_flip, with
            ``--model.attack.fraction`` or ``.clients`` and its options; None: every client is honest.
    """

    runs_federated_rounds = True  # what FLCallback.setup looks for

    def __init__(self, network: nn.Module, algorithm: Optional[Algorithm] = None, clients_per_round: int = 10,
                 local_epochs: int = 1, batch_size: int = 50, lr: float = 0.1, lr_decay: float = 0.998,
                 weight_decay: float = 1e-3, client_momentum: float = 0.0, local_optimizer: str = "sgd",
                 server_optimizer: Optional[OptimizerCallable] = None, weighted_aggregation: bool = False,
                 compression: Optional[Codec] = None, grad_clip: Optional[float] = None, client_dropout: float = 0.0,
                 max_upload_d: Optional[float] = None, target_accuracy: Optional[float] = None,
                 target_metric: Optional[str] = None, target_mode: Optional[str] = None, target: Optional[float] = None,
                 test_every_n_rounds: Optional[int] = None, eval_every_d: Optional[float] = None,
                 eval_train_objective: bool = False, parallel_clients: int = 1, channels_last: Optional[bool] = None,
                 system: Union[SystemModel, str, None] = None,
                 round_policy: Union[RoundPolicy, str, None] = None, privacy: Optional[PrivacyOptions] = None,
                 local_trainer: Optional[dict] = None, personal_eval_every: Optional[int] = None,
                 personal_eval_clients: Optional[int] = None, personal_new_clients: Optional[int] = None,
                 asynchronous: Union[Asynchronous, str, None] = None,
                 client_runner: Union[str, dict, None] = "serial", cohort_size: Optional[int] = None,
                 sampler: Union[str, dict, None] = None, schedule: Union[str, dict, None] = None,
                 aggregator: Union[Aggregator, str, dict, None] = None, attack: Union[Attack, str, dict, None] = None):
        super().__init__()
        self.save_hyperparameters(ignore=["network", "server_optimizer", "algorithm", "compression", "system",
                                          "round_policy", "privacy", "local_trainer", "asynchronous"])
        settle_options(self, network, algorithm, compression, system, round_policy, privacy, server_optimizer,
                       local_trainer, asynchronous)  # resolved and checked (fl_lightning.module_options); hparams record them
        self.server_optimizer = server_optimizer
        self.automatic_optimization = False
        self.net = network
        self.blocks = partition_for(network, self.algorithm)
        self.robust = settle_robustness(self, aggregator, attack)  # RobustServer or None (fl_lightning.aggregation)
        self.flat = FlatModel(network, order=self.blocks.order if self.blocks else None)
        self.global_vector: Optional[torch.Tensor] = None  # x^r, made with the server optimizer
        self.loop = None  # the round loop (fl_lightning.federation.loop), made when training starts
        self.client_state = None  # c_i, h_i, e_i of every client, on disk (fl_lightning.federation.client_state)
        self.round_evaluations: list = []  # evaluations logged after rounds, set by the assembly (e.g. pval/*)
        self.rounds = RoundLog(target_accuracy, target_metric, target_mode, target)  # rows, curve, upload at the target
        self.run_id: Optional[str] = None  # set by the CLI (fl_lightning.runs.identity); in every checkpoint
        self.prints_summary = True  # the one-line summary at the end of a Python-API fit (the CLI prints its own)
        self._restored: Optional[dict] = None
        self.evaluation = GlobalEvaluation(eval_every_d)  # val/*, test/* and eval_every_d's schedule
        self._validated = False  # this round's validation has ended
        self._round_seconds, self._wall_seconds = 0.0, 0.0  # this round's and all rounds' training wall time
        self._train_logs = LoggedValues()  # the network's own self.log calls in training_step
        self._eval_threads = ClientThreads()  # K clients at a time: evaluate at threads // K too

    # -- wiring ---------------------------------------------------------------------------
    def _apply(self, fn, *args, **kwargs):
        super()._apply(fn, *args, **kwargs)
        self.flat.rebind()  # a device/dtype move gives parameters new storage
        return self

    def setup(self, stage: str) -> None:
        prepare(self.trainer, self)  # safe checkpoints, input layout, the round bar (fl_lightning.runs.python_api)

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path, map_location=None, hparams_file=None, strict=None,
                             weights_only: bool = True, **kwargs):
        """Lightning's, always with ``weights_only=True`` (pass ``network=`` your model: it is not pickled)."""
        if weights_only is not True:
            raise ConfigError("weights_only", "fl-lightning loads checkpoints with weights_only=True only")
        try:
            refuse_before_algorithm_objects(load_weights_only(checkpoint_path, map_location="cpu", mmap=True),
                                            checkpoint_path)
            return super().load_from_checkpoint(checkpoint_path, map_location, hparams_file, strict, True, **kwargs)
        except pickle.UnpicklingError as err:
            raise checkpoint_refusal(checkpoint_path, err) from None

    def configure_callbacks(self):
        """The algorithm's hooks, then those the options add (fl_lightning.assembly.connector)."""
        return fit_callbacks(self)

    @property
    def fl_callbacks(self) -> list[FLCallback]:
        return [cb for cb in self.trainer.callbacks if isinstance(cb, FLCallback)]

    def configure_optimizers(self):
        """[server optimizer over x^r's parameters, local SGD over the working model]; the local lr
        schedule (η decayed per round) is the one lr scheduler."""
        hp = self.hparams
        self.global_vector = self.flat.vector.detach().clone()
        server_params = [self.global_vector[:self.flat.num_params]]
        if self.server_optimizer is not None:
            server = self.server_optimizer(server_params)
        else:
            server = self.algorithm.server_optimizer(server_params)
        if hp.local_optimizer == "network":
            local = network_optimizer(self.net, [self.flat.params])
        else:
            if overrides(self.net, "configure_optimizers"):
                rank_zero_warn(f"{type(self.net).__name__}.configure_optimizers() is not used: clients train with "
                               "SGD(model.lr, model.weight_decay, model.client_momentum); set model.local_optimizer: "
                               "network to train them with yours")
            local = torch.optim.SGD([self.flat.params], lr=hp.lr, momentum=hp.client_momentum,
                                    weight_decay=hp.weight_decay)
        schedule = torch.optim.lr_scheduler.ExponentialLR(local, gamma=hp.lr_decay)
        return [server, local], [{"scheduler": schedule, "interval": "epoch"}]

    @staticmethod
    def local_loss(net: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The minibatch loss of ``net`` (the working model training the client)."""
        if is_lightning(net):
            out = net.training_step((x, y), 0)
            loss = out["loss"] if isinstance(out, dict) else out
            loss_logged_once(net, loss)
            return loss
        return F.cross_entropy(net(x), y)

    def check_compatible(self, datamodule, trainer=None, runner=None) -> None:
        """Fail fast on settings that only clash once model and data meet (fl_lightning.module_options); ``trainer``:
        the one that will fit them, before the module is attached to it (the command line's check); ``runner``: the
        ClientRunner class that will train the clients, if not the options' (the ServerApp's: the nodes)."""
        check_compatible(self, datamodule, trainer, runner)
        self.algorithm.check_fit(self, datamodule)  # e.g. Local without held-out data (fl_lightning.algorithms)

    # -- training: one epoch = one round ------------------------------------------------------
    def on_fit_start(self):
        datamodule = self.trainer.datamodule
        self.check_compatible(datamodule)
        check_trainer(self.hparams, self.trainer)
        check_before_fit(self, datamodule.num_clients)  # e.g. DP's δ, target ε and budget: before any run file
        if not self.trainer.is_global_zero:
            return
        write_start_files(self.trainer, datamodule, dict(self.net.hparams) if is_lightning(self.net) else {})

    def on_train_end(self):
        """Every fit leaves accuracy_vs_upload_d.png in its run directory (and, from Python, its summary line)."""
        line = summary(self.trainer, self) if self.prints_summary else None  # its run folder: a collective, every rank
        if not self.trainer.is_global_zero:
            return
        if line is not None:
            print(line)
        datamodule = self.trainer.datamodule
        write_curve(self.trainer, self.rounds.curve, f"{self.algorithm.name}, {datamodule.dataset}, "
                    f"{self.current_epoch} {steps_word(self)}", val_is_test=datamodule.split.val_x is None,
                    metric=self.rounds.plotted)

    def on_train_start(self):
        start_rounds(self)  # client-state store, round loop, simulator, per-client evaluation (fl_lightning.assembly.session)

    @property
    def collective(self) -> Collective:
        """This process among the run's ranks (one process: rank 0 of 1)."""
        return Collective(self.trainer.strategy)

    def teardown(self, stage: str) -> None:
        if self.loop is not None:
            self.loop.close()  # the parts' threads, connections; the next fit makes new ones
        if self.client_state is not None:
            self.client_state.close()  # file handles; a later read or checkpoint reopens them

    def training_step(self, batch, batch_idx):
        round_idx, started = self.current_epoch, time.perf_counter()
        self.evaluation.metrics, self._validated = {}, False
        self.rounds.start_round()
        self.net.train()
        lr = self.loop.optimizer.param_groups[0]["lr"]  # the round's lr: the local lr schedule's
        loss = self.loop.run_round(round_idx)
        self._train_loss, self._lr = None if loss is None else float(loss), lr  # None: nobody reported
        if not (loss is None or math.isfinite(self._train_loss)) or not self.loop.is_finite():
            raise DivergenceError(f"round {round_idx + 1}: the training loss or the global model became NaN/inf "
                                  f"(train/loss={self._train_loss}); lower model.lr or model.server_lr")
        with warnings.catch_warnings():  # a runner that steps stacked rows (batched) never calls optimizer.step()
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler\.step\(\)` before")
            self.lr_schedulers().step()
        self._round_seconds = time.perf_counter() - started
        self._wall_seconds += self._round_seconds
        comm = self.loop.comm
        self.log_dict({"round": float(round_idx + 1), "comm/upload_d": comm.upload_d},
                      prog_bar=True, logger=False, on_step=True, on_epoch=False)
        budget = self.hparams.max_upload_d
        if budget is not None and comm.upload_d >= budget - 1e-9:
            self.trainer.should_stop = True
        if any(cb.stops_before(round_idx + 1) for cb in self.fl_callbacks):  # e.g. an ε budget
            self.trainer.should_stop = True

    def on_train_epoch_end(self):
        self.log_dict({k: torch.tensor(v, dtype=torch.float64) for k, v in self._write_round_row().items()},
                      on_step=False, on_epoch=True, logger=False)  # the bar and summary; the loggers have it

    def _write_round_row(self) -> dict:
        """The round's row (progress, communication, its validation), written once (fl_lightning.federation.round_log)."""
        if self.rounds.row is not None:
            return self.rounds.row
        row = {**self._train_logs.pop_means(self.collective), "round": float(self.current_epoch + 1), "lr": self._lr,
               **self.loop.comm.metrics(), **self.evaluation.metrics,
               "time/round_s": self._round_seconds, "time/wall_s": self._wall_seconds,  # the rounds' wall time
               **self.loop.metrics()}  # what the round's parts log (e.g. time/sim_s)
        if self._train_loss is not None:
            row["train/loss"] = self._train_loss
        for callback in self.fl_callbacks:  # what the hooks log (e.g. privacy/epsilon)
            row.update(callback.metrics())
        rounds, every, max_rounds = self.current_epoch + 1, self.hparams.test_every_n_rounds, self.trainer.max_epochs
        last = self.trainer.should_stop or (max_rounds is not None and 0 <= max_rounds <= rounds)
        if last or (every and rounds % every == 0):
            self._eval_threads.enter(self.loop.runner)
            row.update(test_metrics(self.net, self.trainer))
            self._eval_threads.exit()
        for evaluation in self.round_evaluations:  # evaluations the assembly added (e.g. pval/*): due(), run()
            if evaluation.due(rounds, last):
                row.update(evaluation.run(self.global_vector, self.current_epoch, self._lr,
                                          self.trainer.log_dir if self.trainer.is_global_zero else None))
        if self.trainer.is_global_zero:  # the parts' and hooks' own files (e.g. the clients' time line, clients.csv)
            for part in [*self.loop.parts().values(), *self.fl_callbacks]:
                for name, columns, rows in part.files():
                    append_rows(run_dirs(self.trainer), name, columns, rows)
        if self.trainer.is_global_zero:
            define_round_keys(self.trainer.loggers, {**row, "comm/upload_d_at_target": None})  # W&B's x-axis
        row = self.rounds.write(row, self.loop.comm.upload_d, self.current_epoch, self.trainer.loggers,
                                evaluated=bool(self.evaluation.metrics))
        if self.trainer.is_global_zero:
            keep_metrics_csv(self.trainer, row, self.current_epoch)  # a fit without a CSVLogger (W&B) too
        return row

    # -- evaluation of the global model ------------------------------------------------------
    def on_validation_epoch_start(self):
        self.evaluation.start(self.trainer, self.loop.comm.upload_d if self.loop is not None else None)
        self._eval_threads.enter(self.loop.runner if self.loop is not None else None)  # a client's threads

    def _eval_step(self, batch, batch_idx: int, own_hook: str):
        if self.evaluation.skip:
            return
        x, y = batch
        if not len(y):  # a rank's stand-in when the evaluation set has fewer batches than ranks
            return
        self.evaluation.step(self.net, self.trainer.datamodule.eval_transform(x), y, batch_idx, own_hook)

    def _eval_epoch_end(self, prefix: str):
        self._eval_threads.exit()
        metrics = self.evaluation.end(prefix, self.net, self.collective)
        if metrics is None:
            return
        fitting = self.trainer.state.fn == "fit"
        if fitting and self.hparams.eval_train_objective and self.loop is not None:
            metrics["train/objective"] = train_objective(self.net, self.loop.clients, self.trainer.datamodule,
                                                         self.flat.params, self.hparams.weight_decay)
        if fitting and not self.trainer.sanity_checking:
            self.evaluation.metrics = metrics
        self.log_dict(metrics, prog_bar=True, logger=not fitting)

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, batch_idx, "validation_step")

    def on_validation_epoch_end(self):
        self._eval_epoch_end("val")
        self._validated = not self.trainer.sanity_checking  # the round's row is complete

    def test_step(self, batch, batch_idx):
        self._eval_step(batch, batch_idx, "test_step")

    def on_test_epoch_end(self):
        self._eval_epoch_end("test")

    # -- checkpoints ---------------------------------------------------------------------------
    # The global model is the network's own state_dict (the working model holds x^r between
    # rounds); algorithm state lives in the FLCallbacks' state_dict(), sampling and batch order
    # are derived from (seed, round, client), the partition is in the datamodule's state.
    def on_save_checkpoint(self, checkpoint):
        if self.trainer.state.fn == "fit" and self._validated:  # saved after the round's validation:
            self._write_round_row()  # its row reaches the loggers first, its curve point this checkpoint
        checkpoint["federated"] = {"comm": self.loop.comm.state_dict() if self.loop else None, **self.rounds.state_dict(),
                                   "seed": run_seed(), "eval_mark": self.evaluation.mark, "run_id": self.run_id,
                                   "wall_s": self._wall_seconds, "wandb_id": wandb_id(self.trainer),
                                   "parts": self.loop.state_dict() if self.loop else {},
                                   "client_state": self.client_state.state_dict() if self.client_state else None}

    def on_load_checkpoint(self, checkpoint):
        """Every random draw of a round derives from the run seed: a resume under another seed
        would silently become a different run, so it stops here."""
        state = checkpoint.get("federated")
        check_unchanged("seed_everything", run_seed(), (state or {}).get("seed"))
        if state is not None and state["comm"] is not None:
            self._restored = state
            self.evaluation.mark = state.get("eval_mark", 0)
            self._wall_seconds = state.get("wall_s", 0.0)
            self.rounds.load_state_dict(state)


FederatedModule.__doc__ = FederatedModule.__doc__.format(
    algorithms="; ".join(f"{name}: {entry.summary}" for name, entry in REGISTRY.items()))
