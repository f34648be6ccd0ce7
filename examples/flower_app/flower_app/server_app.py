"""flower-app's ServerApp: Flower's own ``strategy.start`` loop, with an fl-lightning algorithm as the strategy."""
import json

import lightning.pytorch as L
import torch
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp

from fl_lightning.deploy.strategy import AlgorithmStrategy  # + FL
from flower_app.task import LitDigits

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    config = context.run_config
    L.seed_everything(int(config["seed"]), verbose=False)
    model = LitDigits()
    algorithm = {"name": config["algorithm"], **json.loads(config["algorithm-options"])}  # + FL
    strategy = AlgorithmStrategy(algorithm, model=model, num_clients=int(config["num-clients"]),  # + FL: was FedAvg
                                 per_round=int(config["per-round"]), seed=int(config["seed"]),  # + FL
                                 fraction_evaluate=float(config["fraction-evaluate"]),
                                 checkpoint=str(config["checkpoint"]) or None)  # + FL: resume a killed ServerApp
    result = strategy.start(grid=grid, initial_arrays=ArrayRecord(model.state_dict()),
                            num_rounds=int(config["num-server-rounds"]))
    print(f"uploaded {strategy.comm.upload_d:.3f} d per client (counted as fl-lightning fit counts it)")  # + FL
    if result.evaluate_metrics_clientapp:  # 3 rounds (the pyproject's) are a smoke test: ≈ 0.16; 30 rounds ≈ 0.95
        last = max(result.evaluate_metrics_clientapp)
        print(f"eval_acc after round {last}: {float(result.evaluate_metrics_clientapp[last]['eval_acc']):.4f}")
    torch.save(result.arrays.to_torch_state_dict(), str(config["save"]))
