# Set-up is automatic: every target creates .venv and installs the package if needed.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.fl-lightning-installed

.PHONY: install run test bench bench-memory bench-distributed clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@echo "fl-lightning: installing into $(VENV) (torch, Lightning and their dependencies: a few minutes the first time)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check --progress-bar on -e '.[dev,flower,simulation]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/fl-lightning fit --config configs/quickstart.yaml

test: $(STAMP)
	WANDB_MODE=offline $(BIN)/python -m pytest -q -n 2 --dist worksteal --durations=15

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_loop.py
	$(BIN)/python benchmarks/bench_parallel.py
	$(BIN)/python benchmarks/bench_cpu_limit.py
	$(BIN)/python benchmarks/bench_systems.py
	$(BIN)/python benchmarks/bench_trainer_path.py
	$(BIN)/python benchmarks/bench_sgd_step.py

bench-memory: $(STAMP)
	$(BIN)/python benchmarks/bench_memory.py

bench-distributed: $(STAMP)
	$(BIN)/python benchmarks/bench_distributed.py

clean:
	rm -rf $(VENV) runs lightning_logs wandb .fl_cache
