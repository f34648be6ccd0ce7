#!/usr/bin/env bash
# Client-level DP at equal floats, each arm with its own clip C (docs/privacy/README.md). MNIST logistic
# regression, K = 1,000 clients of 54 samples (10 % of the training data held out first as the validation
# split that selects C), Poisson sampling with q = 50/1000 (the recommended mode, add/remove-one), RDP at
# δ = min(1e-5, 1/K^1.1) = 1e-5. Equal floats, 8 d per client: FedAvg and FedAvgM (server momentum 0.5)
# for 8 rounds, FedBCGD (5 balanced blocks + shared, no server momentum) for 40 rounds. ε ∈ {8, 4, 1}, each
# calibrated for the arm's rounds (target_epsilon), and no DP.
#   1. grid: each (algorithm, ε) at C ∈ {0.1, 0.3, 1, 3} on the selection seed 100; pick_clip.py picks the
#      C of best final val/acc and, while that C is an end of the grid, the grid grows one ×3 step beyond it
#      (at most 3 times), so the chosen optimum lies inside its grid;
#   2. seeds 0, 1, 2 at the chosen C (test/acc is reported; C never saw the test set nor these seeds).
# Scale: 48 grid runs (+ extensions) and 36 final runs, two at a time with one thread each: about 30 minutes
# on 2 CPU cores. Run from the repository root:
#   bash docs/privacy/run.sh OUT_DIR; python docs/privacy/summarise.py OUT_DIR
set -u
out=${1:-runs_privacy}
mkdir -p "$out/grid"
one() {  # algo eps seed clip dir name
  algo=$1; eps=$2; seed=$3; clip=$4; dir=$5; name=$6
  case $algo in
    fedavg) extra="--model.algorithm fedavg"; rounds=8 ;;
    fedavgm) extra="--model.algorithm fedavgm --model.algorithm.server_momentum 0.5"; rounds=8 ;;
    fedbcgd) extra="--model.algorithm.num_blocks 5 --model.algorithm.block_division balanced --model.algorithm.server_momentum 0.0"; rounds=40 ;;
  esac
  dp=""; [ "$eps" != none ] && dp="--model.privacy.target_epsilon $eps --model.privacy.clip $clip --model.privacy.sampling poisson"
  .venv/bin/fl-lightning fit --config configs/experiments/convex_mnist_logreg.yaml $extra $dp --seed_everything "$seed" \
    --data.num_clients 1000 --data.samples_per_client 54 --data.val_fraction 0.1 --model.clients_per_round 50 \
    --threads 1 --trainer.max_epochs "$rounds" --model.max_upload_d null --model.eval_train_objective false \
    --trainer.enable_progress_bar false --trainer.logger.init_args.save_dir "$dir" \
    --trainer.logger.init_args.name "$name" > "$dir/$name.log" 2>&1 || echo "failed: $dir/$name (see its .log)"
}
export -f one
export out
# 1. the grid of C per (algorithm, ε), on the selection seed
for algo in fedbcgd fedavg fedavgm; do for eps in 8 4 1; do for clip in 0.1 0.3 1 3; do
  echo "$algo $eps 100 $clip $out/grid ${algo}_eps${eps}_C${clip}"; done; done; done | xargs -P 2 -L 1 bash -c 'one "$@"' _
for attempt in 1 2 3; do
  extensions=$(.venv/bin/python docs/privacy/pick_clip.py "$out/grid" | awk '$1 == "extend" {print $2, $3, 100, $4}')
  [ -z "$extensions" ] && break
  echo "$extensions" | while read -r algo eps seed clip; do echo "$algo $eps $seed $clip $out/grid ${algo}_eps${eps}_C${clip}"; done |
    xargs -P 2 -L 1 bash -c 'one "$@"' _
done
.venv/bin/python docs/privacy/pick_clip.py "$out/grid" | tee "$out/grid/chosen.txt"
# 2. three seeds per arm at its chosen C (no DP: no clip)
for seed in 0 1 2; do
  for algo in fedbcgd fedavg fedavgm; do
    echo "$algo none $seed 0 $out ${algo}_epsnone_seed${seed}"
    awk -v a="$algo" -v s="$seed" -v o="$out" '$1 == "pick" && $2 == a {print a, $3, s, $4, o, a "_eps" $3 "_seed" s}' "$out/grid/chosen.txt"
  done
done | xargs -P 2 -L 1 bash -c 'one "$@"' _
grep -q '^extend' "$out/grid/chosen.txt" && echo "warning: an optimum is still at the edge of its grid (grid/chosen.txt)"
