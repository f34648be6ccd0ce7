#!/usr/bin/env bash
# Re-measures the experiments of docs/experiments.md. Usage:
#   benchmarks/run_experiments.sh convex     # MNIST logistic regression, 4 algorithms, 100 d each
#   benchmarks/run_experiments.sh cifar      # LeNet-5 on the CIFAR-10 JPEG copy, 4 algorithms
# Runs land in runs/<experiment>/<algorithm>/; benchmarks/report.py turns them into docs/.
set -euo pipefail
cd "$(dirname "$0")/.."
FL=${FL:-.venv/bin/fl-lightning}
case "${1:-}" in
  convex)  # the paper searches lr per algorithm; we try two
    for lr in 0.1 0.03; do
      for algorithm in fedavg scaffold fedbcgd fedbcgd_plus; do
        $FL fit --config configs/experiments/convex_mnist_logreg.yaml --model.algorithm $algorithm --model.lr $lr \
          --trainer.logger.init_args.name convex_mnist_logreg/${algorithm}_lr$lr "${@:2}"
      done
      $FL fit --config configs/experiments/convex_mnist_logreg.yaml --model.algorithm fedbcgd_plus --model.lr $lr \
        --model.control_variate option2 --trainer.logger.init_args.name convex_mnist_logreg/fedbcgd_plus_opt2_lr$lr "${@:2}"
    done ;;
  cifar)
    for algorithm in fedavg fedavgm fedbcgd fedbcgd_plus; do
      $FL fit --config configs/experiments/cifar10_lenet5.yaml --model.algorithm $algorithm \
        --trainer.logger.init_args.name cifar10_lenet5/$algorithm "${@:2}"
    done ;;
  *) echo "usage: $0 convex|cifar [extra fl-lightning options]" >&2; exit 2 ;;
esac
