#!/usr/bin/env bash
# Issue 31 item 5: MNIST logistic regression split into K = 1,000 clients of 60 samples, a fixed cohort of
# M = 50 per round, 80 rounds (ROUNDS=40 for the README's earlier table); FedAvg, FedAvgM, FedBCGD and FedBCGD+ (5 blocks) at target ε ∈ {1, 4, 8}
# (δ = 1/K^1.1, RDP, replace-one) and without DP; clip C = 0.5, FedBCGD+'s Δc clip C_c = C/(Tη) = 2.5 (T = 2
# steps of η = 0.1); seeds 0, 1, 2 (SEEDS): 48 runs, two at a time, one thread each. A run costs about 13 s of
# CPU to start and 0.45 s per round: 48 × 50 s / 2 cores ≈ 20 minutes on 2 idle cores (about 30 with margin).
# Run from the repository root:  bash docs/privacy/run.sh OUT_DIR
set -u
out=${1:-runs_privacy}
mkdir -p "$out"
one() {  # algo eps seed
  algo=$1; eps=$2; seed=$3
  case $algo in
    fedavg) extra="--model.algorithm fedavg" ;;
    fedavgm) extra="--model.algorithm fedavgm --model.algorithm.server_momentum 0.5" ;;
    fedbcgd) extra="--model.algorithm.num_blocks 5 --model.algorithm.block_division balanced --model.algorithm.server_momentum 0.0" ;;
    fedbcgd_plus) extra="--model.algorithm fedbcgd_plus --model.algorithm.num_blocks 5 --model.algorithm.block_division balanced --model.algorithm.server_momentum 0.0" ;;
  esac
  dp=""; [ "$eps" != none ] && dp="--model.privacy.target_epsilon $eps --model.privacy.clip 0.5"
  [ "$eps" != none ] && [ "$algo" = fedbcgd_plus ] && dp="$dp --model.privacy.control_clip 2.5"
  .venv/bin/fl-lightning fit --config configs/experiments/convex_mnist_logreg.yaml $extra $dp --seed_everything "$seed" \
    --data.num_clients 1000 --data.samples_per_client 60 --model.clients_per_round 50 --threads 1 \
    --trainer.max_epochs ${ROUNDS:-80} --model.max_upload_d null --model.eval_train_objective false \
    --trainer.enable_progress_bar false --trainer.logger.init_args.save_dir "$out" \
    --trainer.logger.init_args.name "${algo}_eps${eps}_seed${seed}" > "$out/${algo}_eps${eps}_seed${seed}.log" 2>&1
}
export -f one
export out
for seed in ${SEEDS:-0 1 2}; do for algo in fedavg fedavgm fedbcgd fedbcgd_plus; do for eps in none 8 4 1; do
  echo "$algo $eps $seed"; done; done; done | xargs -P 2 -n 3 bash -c 'one "$@"' _
