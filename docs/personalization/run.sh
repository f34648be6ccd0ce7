#!/bin/bash
# The issue-33 experiment: 7 algorithms × 2 partitions × 3 seeds, two fits at a time, one thread each.
# Usage: [PARTS="shards2"] bash docs/personalization/run.sh   (runs land in /tmp/wt33exp/<partition>/<algorithm>,seed=S/)
cd "$(dirname "$0")/../.."
FL=${FL:-.venv/bin/fl-lightning}
for part in ${PARTS:-dirichlet0.1 shards2}; do
  if [ $part = shards2 ]; then P="--data.partition shards --data.classes_per_client 2 --data.samples_per_client 50"; else P="--data.dirichlet_rho 0.1"; fi
  for alg in fedavg fedavg_ft fedper fedrep ditto fedbcgd fedbcgd_personal; do
    for seed in 0 1 2; do
      echo "$FL fit --config docs/personalization/experiment.yaml --model.algorithm $alg $P --seed_everything $seed --trainer.logger.init_args.name $part --trainer.logger.init_args.version $alg,seed=$seed"
    done
  done
done | OMP_NUM_THREADS=1 xargs -P 2 -I{} sh -c "{} > /dev/null 2>&1 || echo FAILED: {}"
