#!/usr/bin/env bash
# Re-measures the experiments of docs/experiments.md. Usage:
#   benchmarks/run_experiments.sh convex     # MNIST logistic regression, lr 0.03, every algorithm, 100 d each
#   ROUNDS=30 benchmarks/run_experiments.sh cifar   # LeNet-5 on the CIFAR-10 JPEG copy, lr 0.1, every
#                                                   # algorithm ROUNDS rounds (default 100), centralised ROUNDS/10
#   BUDGET=5 benchmarks/run_experiments.sh table6   # paper Table 6 on the same setting: block upload vs
#                                                   # compression, every method to the same BUDGET d
# Extra arguments go to every fl-lightning call. Runs land in runs/<experiment>/<name>/;
# fl-lightning report turns them into docs/ (see docs/experiments.md for the exact lines).
set -euo pipefail
cd "$(dirname "$0")/.."
FL=${FL:-.venv/bin/fl-lightning}
run() {  # run <config> <name> [options...]
  local config=$1 name=$2; shift 2
  $FL fit --config "$config" --trainer.logger.init_args.name "$name" "$@"
}
case "${1:-}" in
  convex)
    C=configs/experiments/convex_mnist_logreg.yaml; E=convex_mnist_logreg
    for algorithm in fedbcgd fedbcgd_plus fedavg fedavgm fedadam fedprox feddc scaffold; do
      run $C $E/$algorithm --model.algorithm $algorithm --model.lr 0.03 "${@:2}"
    done
    run $C $E/fedbcgd_plus_paper --model.algorithm fedbcgd_plus --model.lr 0.03 \
      --model.algorithm.shared_coefficient paper "${@:2}"
    run $C $E/fedbcgd_plus_authors --model.algorithm fedbcgd_plus --model.lr 0.03 --model.algorithm.rule authors "${@:2}"
    run $C $E/centralized --model.algorithm centralized --model.lr 0.03 --trainer.max_epochs 50 "${@:2}" ;;
  cifar)
    C=configs/experiments/cifar10_lenet5.yaml; E=cifar10_lenet5
    R=${ROUNDS:-100}
    for algorithm in fedbcgd_plus fedbcgd fedavgm fedavg feddc fedprox fedadam scaffold; do
      run $C $E/$algorithm --model.algorithm $algorithm --trainer.max_epochs $R "${@:2}"
    done
    run $C $E/centralized --model.algorithm centralized --trainer.max_epochs $((R / 10)) "${@:2}" ;;
  table6)
    C=configs/experiments/cifar10_lenet5.yaml; E=cifar10_table6
    for algorithm in fedavg topk fedpaq fedbcgd fedbcgd_qsgd fedbcgd_plus fedbcgd_plus_qsgd; do
      run $C $E/$algorithm --model.algorithm $algorithm --model.max_upload_d "${BUDGET:-5}" \
        --trainer.max_epochs 1000 --trainer.check_val_every_n_epoch 1 "${@:2}"
    done ;;
  *) echo "usage: $0 convex|cifar|table6 [extra fl-lightning options]" >&2; exit 2 ;;
esac
