#!/usr/bin/env bash
# Re-measures docs/reproduction.md: every claim's runs, three seeds each (SEEDS= below), as fl-lightning sweeps
# (finished and kept runs are skipped, so a killed script resumes). Usage:
#   benchmarks/reproduce.sh convex        # claims (a)-(d), (h): the comparison set on the convex problem
#   benchmarks/reproduce.sh blocks        # claim (e): number of blocks N
#   benchmarks/reproduce.sh momentum      # claim (f): server momentum λ
#   benchmarks/reproduce.sh ablations     # claim (g): Fig. 5's ablations
#   benchmarks/reproduce.sh beyond        # "Beyond the paper": EF-signSGD, PowerSGD, EDEN, alone and on blocks
#   benchmarks/reproduce.sh cifar_beyond  # "Beyond the paper" on CIFAR-10: 11 methods, 10 d or 40 rounds, 3 seeds
#   benchmarks/reproduce.sh cifar_lr      # lr ∈ {0.01, 0.03, 0.05, 0.1, 0.2} per algorithm, 5 d, seed 0
# and, each algorithm at the lr that search chose (own_lr below; refused until its search is kept), 10 d:
#   benchmarks/reproduce.sh cifar_claims     # claims (a)-(c): FedAvg, FedAvgM, SCAFFOLD, FedBCGD, FedBCGD+
#   benchmarks/reproduce.sh cifar_blocks     # claim (e): FedBCGD with N = 1, 2, 5, 10 blocks
#   benchmarks/reproduce.sh cifar_momentum   # claim (f): FedBCGD with λ = 0.4, 0.6, 0.8, 0.9
#   benchmarks/reproduce.sh cifar_ablations  # claim (g): freezing, no shared block, no momentum (against
#                                            # cifar_claims' FedBCGD runs: FedBCGD as configured)
#   benchmarks/reproduce.sh cifar_rho01      # Table 4: ρ = 0.1 for FedAvg, FedAvgM, FedBCGD, FedBCGD+
# Every sweep keeps each finished run's metrics.csv and config.yaml in docs/runs/<name>/ and skips the
# runs kept there: a fresh clone runs only what is missing (add --print after the target to list it).
# ALGORITHMS=fedavg,fedbcgd restricts cifar_claims and cifar_rho01 to those algorithms; SEEDS=0 (or 0,1) sets the
# seeds of every CIFAR-10 target but cifar_lr (one seed): e.g. one seed of everything first, or two sittings at once.
# FL= and PYTHON= replace .venv/bin/fl-lightning and .venv/bin/python.
# then: fl-lightning report docs/runs/<name> --target 0.88 --out docs/reproduction/<name> (docs/reproduction.md
# gives each table's command; the CIFAR-10 ablations' report also reads docs/runs/cifar_claims/algorithm=fedbcgd,*)
set -euo pipefail
cd "$(dirname "$0")/.."
FL=${FL:-.venv/bin/fl-lightning}
PYTHON=${PYTHON:-.venv/bin/python}
SEEDS=${SEEDS:-0,1,2}
CONVEX=(--config configs/experiments/convex_mnist_logreg.yaml --model.lr 0.03 --model.eval_every_d 1
        --trainer.enable_progress_bar false --grid seed_everything=0,1,2 --jobs "${JOBS:-2}" --threads "${THREADS:-1}")
sweep() {  # sweep <name> [options...]
  local name=$1; shift
  $FL sweep "${CONVEX[@]}" --trainer.logger.init_args.name "reproduction/$name" --keep "docs/runs/$name" "$@" \
    ${EXTRA[@]+"${EXTRA[@]}"}
}
cifar_sweep() {  # cifar_sweep <name> [options...]: CIFAR-10 LeNet-5 (rho 0.6), evaluated every 0.5 d, kept in docs/runs/<name>
  local name=$1; shift
  $FL sweep --config configs/experiments/cifar10_lenet5.yaml --trainer.logger.init_args.name "reproduction/$name" \
    --model.eval_every_d 0.5 --trainer.check_val_every_n_epoch 1 --trainer.max_epochs 1000 \
    --trainer.enable_progress_bar false --keep "docs/runs/$name" --jobs "${JOBS:-1}" --threads "${THREADS:-1}" "$@" \
    ${EXTRA[@]+"${EXTRA[@]}"}
}
own_lr() {  # the lr the cifar_lr search chose for $1 (docs/reproduction.md, "Learning rates searched on CIFAR-10"),
  # read from the runs kept in docs/runs/cifar_lr; refused while that algorithm's search is unfinished
  local searched=$1
  [ "$searched" = fedbcgd_freezing ] && searched=fedbcgd  # the ablation keeps FedBCGD's lr
  "$PYTHON" benchmarks/lr_choice.py docs/runs/cifar_lr --chosen "$searched"  # among lr_choice.SEARCHED
}
algorithms() {  # algorithms <default list>: $ALGORITHMS (commas or spaces) or the default; each one's lr looked up
  # before the first sweep, so a typo or an unfinished search stops the target before it trains anything
  local list a
  list=$(echo "${ALGORITHMS:-$1}" | tr , ' ')
  for a in $list; do own_lr "$a" > /dev/null || exit 2; done  # (a command substitution ignores set -e)
  echo "$list"
}
cifar_own() {  # cifar_own <name> <algorithm> [options...]: SEEDS at the algorithm's own lr, 10 d
  local name=$1 algorithm=$2; shift 2
  local lr
  lr=$(own_lr "$algorithm")
  cifar_sweep "$name" --model.lr "$lr" --model.max_upload_d 10 \
    --grid "model.algorithm=$algorithm" --grid "seed_everything=$SEEDS" "$@"
}
target=${1:-}
shift || true
EXTRA=("$@")  # what follows the target goes to the CIFAR-10 sweeps (e.g. --print: list the runs not kept yet)
case "$target" in
  convex) sweep convex --model.max_upload_d 50 \
            --grid model.algorithm=fedavg,fedavgm,scaffold,fedbcgd,fedbcgd_plus,topk,fedpaq,fedbcgd_qsgd ;;
  blocks) sweep blocks --model.max_upload_d 50 --model.algorithm fedbcgd --grid model.algorithm.num_blocks=1,2,4,8 ;;
  momentum) sweep momentum --model.max_upload_d 25 --model.algorithm fedbcgd \
              --grid model.algorithm.server_momentum=0.4,0.6,0.8,0.9 ;;
  ablations)  # FedBCGD as configured (λ 0.5, shared block), then one change at a time
    sweep ablations/full --model.max_upload_d 25 --grid model.algorithm=fedbcgd,fedbcgd_freezing
    sweep ablations/no_shared_block --model.max_upload_d 25 --model.algorithm fedbcgd --model.algorithm.shared_block false
    sweep ablations/no_momentum --model.max_upload_d 25 --model.algorithm fedbcgd --model.algorithm.server_momentum 0 ;;
  beyond)  # docs/reproduction.md "Beyond the paper": 1-bit and low-rank uploads, alone and on FedBCGD's blocks
    sweep beyond --model.max_upload_d 10 --model.eval_every_d 0.5 --trainer.max_epochs 10000 \
      --grid model.algorithm=fedavg,topk,fedpaq,signsgd,powersgd,eden,fedbcgd,fedbcgd_qsgd,fedbcgd_sign,fedbcgd_powersgd,fedbcgd_eden ;;
  cifar_beyond) cifar_sweep cifar_beyond --model.max_upload_d 10 --trainer.max_epochs 40 --grid "seed_everything=$SEEDS" \
      --grid model.algorithm=fedavg,fedbcgd,signsgd,eden,powersgd,topk,fedpaq,fedbcgd_qsgd,fedbcgd_eden,fedbcgd_sign,fedbcgd_powersgd ;;
  cifar_lr) lrs=$("$PYTHON" -c 'import runpy; print(runpy.run_path("benchmarks/lr_choice.py")["SEARCHED"])')
    cifar_sweep cifar_lr --model.max_upload_d 5 --seed_everything 0 \
      --grid model.algorithm=fedavg,fedavgm,scaffold,fedbcgd,fedbcgd_plus --grid "model.lr=$lrs" ;;
  cifar_claims) list=$(algorithms "fedavg fedavgm scaffold fedbcgd fedbcgd_plus")
    for a in $list; do cifar_own cifar_claims "$a"; done ;;
  cifar_blocks) cifar_own cifar_blocks fedbcgd --model.algorithm.block_division balanced --grid model.algorithm.num_blocks=1,2,5,10 ;;
  cifar_momentum) cifar_own cifar_momentum fedbcgd --grid model.algorithm.server_momentum=0.4,0.6,0.8,0.9 ;;
  cifar_ablations)  # one change at a time to FedBCGD as configured (λ 0.5, shared block: cifar_claims' FedBCGD runs)
    cifar_own cifar_ablations/freezing fedbcgd_freezing
    cifar_own cifar_ablations/no_shared_block fedbcgd --model.algorithm.shared_block false
    cifar_own cifar_ablations/no_momentum fedbcgd --model.algorithm.server_momentum 0 ;;
  cifar_rho01) list=$(algorithms "fedavg fedavgm fedbcgd fedbcgd_plus")
    for a in $list; do cifar_own cifar_rho01 "$a" --data.dirichlet_rho 0.1; done ;;
  *) echo "usage: $0 convex|blocks|momentum|ablations|beyond|cifar_beyond|cifar_lr|cifar_claims|cifar_blocks|cifar_momentum|cifar_ablations|cifar_rho01" >&2
     exit 2 ;;
esac
