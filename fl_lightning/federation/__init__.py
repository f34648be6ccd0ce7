"""The round's core: the loop (``loop.py``), what hooks see (``contexts.py``), local training, clients in
parallel, flat vectors, block divisions, the client-state store, seeding, collectives, evaluation of the
global model, the round's log row, server optimizers, thread layouts, and ``ToyFederation`` (rounds
without a Trainer). docs/architecture.md draws one round through these files."""
from fl_lightning.federation.blocks import partition_for
from fl_lightning.federation.distributed import Collective
from fl_lightning.federation.evaluation import GlobalEvaluation, test_metrics, train_objective
from fl_lightning.federation.flat import FlatModel
from fl_lightning.federation.hooks import FLCallback
from fl_lightning.federation.parallel import ClientThreads
from fl_lightning.federation.round_log import RoundLog
from fl_lightning.federation.seeding import run_seed
from fl_lightning.federation.user_module import LoggedValues, is_lightning, loss_logged_once, network_optimizer, overrides

__all__ = ["ClientThreads", "Collective", "FLCallback", "FlatModel", "GlobalEvaluation", "LoggedValues", "RoundLog",
           "is_lightning", "loss_logged_once", "network_optimizer", "overrides", "partition_for", "run_seed",
           "test_metrics", "train_objective"]
