#!/usr/bin/env bash
# Issue 31 item 5 (small): MNIST logistic regression split into 1,000 clients, 50 per round, 40 rounds,
# FedAvg vs FedBCGD (5 blocks) at ε ∈ {4, 8} (δ = 1/K^1.1) and without DP, seed 0, clip C = 0.5.
# Run from the repository root: bash docs/privacy/run.sh OUT_DIR (then metrics.csv + config.yaml of each run copied here)
set -u
out=${1:-runs_privacy}
for algo in fedavg fedbcgd; do
  extra=""; [ "$algo" = fedbcgd ] && extra="--model.algorithm.num_blocks 5 --model.algorithm.block_division balanced --model.algorithm.server_momentum 0.0"
  [ "$algo" = fedavg ] && extra="--model.algorithm fedavg"
  for eps in none 8 4; do
    dp=""; [ "$eps" != none ] && dp="--model.privacy.target_epsilon $eps --model.privacy.clip 0.5"
    nice .venv/bin/fl-lightning fit --config configs/experiments/convex_mnist_logreg.yaml $extra $dp \
      --data.num_clients 1000 --data.samples_per_client 60 --model.clients_per_round 50 \
      --trainer.max_epochs 40 --model.max_upload_d null --model.eval_train_objective false \
      --trainer.enable_progress_bar false \
      --trainer.logger.init_args.save_dir "$out" --trainer.logger.init_args.name "${algo}_eps${eps}"
  done
done
