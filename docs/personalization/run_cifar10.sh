#!/bin/bash
# Issue 33 item 6 on CIFAR-10 LeNet-5 (cifar10_lenet5.yaml): 8 algorithms × 3 partitions × 3 seeds, two fits at a
# time, one thread each. FedBN runs LeNet-5 with BatchNorm after each conv (--model.network.norm bn).
# Usage (repository root): bash docs/personalization/run_cifar10.sh OUT   (runs in OUT/<partition>/<algorithm>,seed=S/)
# PARTS, ALGS, SEEDS (space-separated) and EXTRA (more fit options) narrow or shrink it, e.g. a 2-round check:
#   PARTS=dirichlet0.1 SEEDS=0 EXTRA="--trainer.max_epochs 2" bash docs/personalization/run_cifar10.sh /tmp/check33
cd "$(dirname "$0")/../.."
OUT=${1:-/tmp/exp33}
FL=${FL:-.venv/bin/fl-lightning}
for part in ${PARTS:-dirichlet0.1 dirichlet0.6 shards2}; do
  case $part in
    dirichlet0.1) P="--data.dirichlet_rho 0.1" ;;
    dirichlet0.6) P="--data.dirichlet_rho 0.6" ;;
    shards2) P="--data.partition shards --data.classes_per_client 2" ;;
  esac
  for alg in ${ALGS:-fedavg fedavg_ft fedbn fedper fedrep ditto fedbcgd fedbcgd_personal}; do
    N=""; [ $alg = fedbn ] && N="--model.network.norm bn"
    for seed in ${SEEDS:-0 1 2}; do
      echo "$FL fit --config docs/personalization/cifar10_lenet5.yaml --model.algorithm $alg $N $P --seed_everything $seed --threads 1 $EXTRA --trainer.logger.init_args.save_dir $OUT --trainer.logger.init_args.name $part --trainer.logger.init_args.version $alg,seed=$seed"
    done
  done
done | xargs -P 2 -I{} sh -c "{} > /dev/null 2>&1 || echo FAILED: {}"
