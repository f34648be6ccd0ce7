"""Client state at scale: FedBCGD+ on LeNet-5 (d = 797,962) with M = 1,000 clients of 50
CIFAR-10 images, 50 per round, batch 10. Prints peak RSS after R rounds, how many clients hold a
control variate, and the size of one checkpoint (the .ckpt file, and the client-state files on disk).

    .venv/bin/python benchmarks/bench_client_state.py [--rounds 40] [--out runs/bench_client_state]
"""
import argparse
import os
import resource
import time

from fl_lightning.cli import FederatedCLI


def disk_bytes(path: str) -> int:
    """Bytes a file or directory really occupies (sparse files count what is written)."""
    if os.path.isfile(path):
        return os.stat(path).st_blocks * 512
    return sum(os.stat(os.path.join(root, name)).st_blocks * 512
               for root, _, names in os.walk(path) for name in names)


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--rounds", type=int, default=40)
parser.add_argument("--out", default="runs/bench_client_state")
args = parser.parse_args()
cli = FederatedCLI(args=[
    "--config", "configs/experiments/cifar10_lenet5.yaml", "--model.algorithm", "fedbcgd_plus",
    "--data.num_clients", "1000", "--data.samples_per_client", "50", "--model.clients_per_round", "50",
    "--model.batch_size", "10", "--trainer.max_epochs", str(args.rounds), "--trainer.check_val_every_n_epoch", "1000",
    "--trainer.logger.init_args.save_dir", args.out, "--trainer.enable_checkpointing", "false",
    "--trainer.enable_progress_bar", "false"], run=False)
start = time.perf_counter()
cli.trainer.fit(cli.model, cli.datamodule)
seconds = time.perf_counter() - start
peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
checkpoint = os.path.join(cli.trainer.log_dir, "bench.ckpt")
start = time.perf_counter()
cli.trainer.save_checkpoint(checkpoint)
save_seconds = time.perf_counter() - start
state_dir = os.path.join(cli.trainer.log_dir, "client_state")
state_bytes = disk_bytes(state_dir) if os.path.isdir(state_dir) else 0
print(f"{args.rounds} rounds in {seconds:.0f} s; peak RSS {peak_mib:.0f} MiB; checkpoint {os.path.getsize(checkpoint) / 2**20:.1f} MiB "
      f"(saved in {save_seconds:.1f} s); client-state files on disk {state_bytes / 2**20:.1f} MiB")
