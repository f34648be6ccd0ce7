"""Memory and time over a long run (issue: "Runs that survive", load): the quickstart for 1,000
rounds, peak RSS and time per round at rounds 50, 250, 500 and 1,000.

    .venv/bin/python benchmarks/bench_memory.py [--rounds 1000]
"""
import argparse
import resource
import time

from fl_lightning.callbacks import FLCallback
from fl_lightning.cli import FederatedCLI

MARKS = (50, 250, 500, 1000)


class Probe(FLCallback):
    def __init__(self):
        self.start, self.last_mark, self.rows = None, None, []

    def on_round_end(self, round):
        now = time.perf_counter()
        if self.start is None:
            self.start = self.last_mark = now
        rounds = round.round + 1
        if rounds in MARKS:
            peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            previous = max([m for m in MARKS if m < rounds] or [1])
            per_round = (now - self.last_mark) / (rounds - previous)
            self.rows.append((rounds, peak_mib, per_round))
            self.last_mark = now
            print(f"round {rounds:5d}: peak RSS {peak_mib:8.1f} MiB, {per_round * 1000:6.1f} ms/round "
                  f"(since round {previous})", flush=True)


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--rounds", type=int, default=1000)
args = parser.parse_args()
probe = Probe()
cli = FederatedCLI(args=["--config", "configs/quickstart.yaml", "--trainer.max_epochs", str(args.rounds),
                         "--trainer.logger", "false", "--trainer.enable_checkpointing", "false",
                         "--trainer.enable_progress_bar", "false", "--trainer.check_val_every_n_epoch", "10"], run=False)
cli.trainer.callbacks.append(probe)
cli.trainer.fit(cli.model, cli.datamodule)
first, last = probe.rows[0], probe.rows[-1]
print(f"peak RSS round {last[0]} / round {first[0]}: {last[1] / first[1]:.3f}; "
      f"time per round {last[2] * 1000:.1f} ms vs {first[2] * 1000:.1f} ms")
