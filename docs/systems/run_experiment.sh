#!/bin/bash
# Issue 32 item 6: accuracy against simulated time under the slow_uplink profile (fl_lightning/systems/profiles.py:
# uplink log-normal, median 0.5 Mbit/s, σ 1.0; downlink median 10 Mbit/s; compute median 100 samples/s, σ 0.5;
# always online), for three ways of running rounds:
#   wait      every sampled client is waited for (10 per round)
#   deadline  over-selection: 13 sampled, the first 10 done within D aggregated (D ≈ FedAvg's median client time:
#             60 s for LeNet-5, d = 798 k; 6 s for the convex model, d = 7850)
#   fedbuff   FedBuff, buffer 10, 20 clients in flight, staleness 1/sqrt(1+τ) (100 server steps = 1000 updates,
#             as 100 rounds × 10); FedBCGD+ has per-client control variates: not run under FedBuff
# CIFAR-10 LeNet-5 (configs/experiments/cifar10_lenet5.yaml) and the convex MNIST model (convex_mnist_logreg.yaml),
# FedAvg, FedAvgM, FedBCGD, FedBCGD+, FedPAQ (FedAvg + QSGD), 3 seeds; two fits at a time, one thread each.
# Scale (2 CPU cores): CIFAR-10 clients hold 100 images (not 500) and run 30 rounds / FedBuff server steps,
# evaluated every 3;
# the convex model runs 150 rounds for every algorithm (max_upload_d lifted so FedAvg is not stopped at 100 d).
# CIFAR_ARGS / CONVEX_ARGS replace these (e.g. CIFAR_ARGS="" for the paper's clients and 100 rounds).
# Usage (repository root): bash docs/systems/run_experiment.sh OUT [ROUNDS [SEEDS]]   (check the commands: OUT 1 0)
# ONLY=PATTERN runs the commands that contain it. Then: fl-lightning report OUT/<setting>/<mode> --x sim_time --target T   (time to target, first and sustained)
cd "$(dirname "$0")/../.."
OUT=${1:-/tmp/exp32}
ROUNDS=${2:-}
SEEDS=${3:-0 1 2}
FL=${FL:-.venv/bin/fl-lightning}
CIFAR_ARGS=${CIFAR_ARGS-"--data.samples_per_client 100 --trainer.max_epochs 30 --trainer.check_val_every_n_epoch 3"}
CONVEX_ARGS=${CONVEX_ARGS-"--trainer.max_epochs 150 --model.max_upload_d 1000"}
for setting in cifar10_lenet5 convex_mnist_logreg; do
  D=60; S=$CIFAR_ARGS; [ $setting = convex_mnist_logreg ] && D=6 && S=$CONVEX_ARGS
  for mode in wait deadline fedbuff; do
    case $mode in
      wait) M="--model.system slow_uplink" ;;
      deadline) M="--model.system slow_uplink --model.round_policy over_selection --model.round_policy.beta 0.3 --model.round_policy.deadline_s $D" ;;
      fedbuff) M="--model.system slow_uplink --model.asynchronous fedbuff --model.asynchronous.buffer_size 10 --model.asynchronous.concurrency 20" ;;
    esac
    for alg in fedavg fedavgm fedbcgd fedbcgd_plus fedpaq; do
      [ $mode = fedbuff ] && [ $alg = fedbcgd_plus ] && continue
      R=""; [ -n "$ROUNDS" ] && R="--trainer.max_epochs $ROUNDS"
      for seed in $SEEDS; do
        echo "$FL fit --config configs/experiments/$setting.yaml --model.algorithm $alg $M $S $R --seed_everything $seed --threads 1 --trainer.logger.init_args.save_dir $OUT/$setting --trainer.logger.init_args.name $mode/$alg,seed=$seed"
      done
    done
  done
done | grep -e "${ONLY:-}" | xargs -P 2 -I{} sh -c "{} > /dev/null 2>&1 || echo FAILED: {}"
