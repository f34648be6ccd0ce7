"""The registered client runners (fl_lightning.federation.seams): ``model.client_runner NAME`` from ``RUNNERS`` —
serial (``model.parallel_clients`` K > 1: K at a time, as threads), threads (``ClientPool``), batched and
batched_compiled (B = ``model.cohort_size`` clients as one batched model: ``BatchedRunner``), or a runner of your own
registered with ``@RUNNERS.register("name")`` or given by class path; fl_lightning.assembly.connector chooses one;
docs/scale_out.md."""
from fl_lightning.federation import batched, parallel  # noqa: F401  (they register "batched" and "threads")
from fl_lightning.federation.seams import RUNNERS

__all__ = ["RUNNERS"]
