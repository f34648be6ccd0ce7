#!/usr/bin/env bash
# Issue 31 item 5: MNIST logistic regression split into K = 1,000 clients of 60 samples, a fixed cohort of
# M = 50 per round, 40 rounds; FedAvg, FedAvgM, FedBCGD (5 blocks) at target ε ∈ {1, 4, 8} (δ = 1/K^1.1, RDP,
# replace-one) and without DP; clip C = 0.5; seeds 0, 1, 2; two runs at a time, one thread each.
# FedBCGD+ under DP: its control-variate upload Δc clipped to C_c = 2.5 and noised, the budget split evenly.
# Then FedBCGD+ without DP and FedAvg run for 8 rounds (8 d) at each ε. Run from the repository root:
#   bash docs/privacy/run.sh OUT_DIR; python docs/privacy/summarise.py OUT_DIR
set -u
out=${1:-runs_privacy}
mkdir -p "$out"
one() {  # algo eps seed [rounds]
  algo=$1; eps=$2; seed=$3; rounds=${4:-40}
  case $algo in
    fedavg|fedavg8r) extra="--model.algorithm fedavg" ;;
    fedbcgd_plus) extra="--model.algorithm fedbcgd_plus --model.algorithm.num_blocks 5 --model.algorithm.block_division balanced --model.algorithm.server_momentum 0.0" ;;
    fedavgm) extra="--model.algorithm fedavgm --model.algorithm.server_momentum 0.5" ;;
    fedbcgd) extra="--model.algorithm.num_blocks 5 --model.algorithm.block_division balanced --model.algorithm.server_momentum 0.0" ;;
  esac
  dp=""; [ "$eps" != none ] && dp="--model.privacy.target_epsilon $eps --model.privacy.clip 0.5"
  [ "$eps" != none ] && [ "$algo" = fedbcgd_plus ] && dp="$dp --model.privacy.control_clip 2.5"  # C_c = C/(Tη)
  .venv/bin/fl-lightning fit --config configs/experiments/convex_mnist_logreg.yaml $extra $dp --seed_everything "$seed" \
    --data.num_clients 1000 --data.samples_per_client 60 --model.clients_per_round 50 --threads 1 \
    --trainer.max_epochs "$rounds" --model.max_upload_d null --model.eval_train_objective false \
    --trainer.enable_progress_bar false --trainer.logger.init_args.save_dir "$out" \
    --trainer.logger.init_args.name "${algo}_eps${eps}_seed${seed}" > "$out/${algo}_eps${eps}_seed${seed}.log" 2>&1
}
export -f one
export out
for seed in 0 1 2; do for algo in fedavg fedavgm fedbcgd; do for eps in none 8 4 1; do
  echo "$algo $eps $seed"; done; done; done | xargs -P 2 -n 3 bash -c 'one "$@"' _
# FedBCGD+ (C_c = 2.5 under DP); FedAvg calibrated for 8 rounds (8 d, FedBCGD's 40-round upload)
for seed in 0 1 2; do for eps in none 8 4 1; do echo "fedbcgd_plus $eps $seed"; done; for eps in 8 4 1; do echo "fedavg8r $eps $seed 8"; done; done |
  xargs -P 2 -L 1 bash -c 'one "$@"' _
