"""The baselines ``fl-lightning report`` puts beside any pval/* table: the label prior and Local.

* ``label_prior_acc_mean`` / ``_p10``: each client predicts the majority class of its own training
  share (fl_lightning.personalization.prior), computed from the run's config.yaml — data set, partition
  and held-out split are re-made from its data section and seed, nothing is trained.
* ``local_pval_acc_mean``: final pval/acc_mean of the ``local`` runs (each client alone) in the same
  report with the same data settings — the one of the same seed, else their mean over seeds.
* ``pval_gain``: final pval/acc_mean − the better of the two (of the same seed): what a method adds over
  what no federation (or no learning) gives.
"""
from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Optional

import yaml

from fl_lightning.errors import ConfigError
from fl_lightning.federation.seeding import run_seed_set

PRIOR_KEYS = ("label_prior_acc_mean", "label_prior_acc_p10")
LOCAL_KEYS = ("local_pval_acc_mean", "pval_gain")


def _init_args(section) -> dict:
    section = section or {}
    return dict(section.get("init_args") or {}) if "class_path" in section else dict(section)


def prior_of_config(config: dict) -> Optional[dict]:
    """The label prior of a run's config (a fit's config.yaml, loaded); None without data.personal_fraction."""
    from fl_lightning.data.datamodule import FederatedDataModule
    from fl_lightning.personalization.evaluation import evaluated_clients, new_client_ids
    from fl_lightning.personalization.prior import label_prior

    data, model = _init_args(config.get("data")), _init_args(config.get("model"))
    if data.get("personal_fraction") is None:
        return None
    with run_seed_set(int(config.get("seed_everything") or 0)):
        datamodule = FederatedDataModule(**data)
        datamodule.setup()
        new = new_client_ids(datamodule.num_clients, model.get("personal_new_clients"))
        ids = evaluated_clients(len(datamodule.personal), model.get("personal_eval_clients"), new)
        return label_prior(datamodule.clients, datamodule.personal, ids)


def _data_key(settings: Optional[dict]) -> str:
    return json.dumps({k: v for k, v in (settings or {}).items() if k.startswith("data.")}, sort_keys=True,
                      default=str)


def _is_local(settings: Optional[dict]) -> bool:
    return (settings or {}).get("model.algorithm.class_path") in ("Local", "local")


def add_baselines(groups: dict[str, list[tuple[list[Path], Optional[dict]]]], summaries: dict[str, list[dict]]
                  ) -> list[str]:
    """Adds PRIOR_KEYS (and LOCAL_KEYS where local runs are present) to every run summary with pval/*;
    ``groups``: per group, each run's (versions, settings) in the order of ``summaries``. Lines to print."""
    priors: dict[str, Optional[dict]] = {}
    local: dict[str, dict] = {}
    for label, members in groups.items():
        for (_, settings), summary in zip(members, summaries[label]):
            if _is_local(settings) and "final_pval_acc_mean" in summary:
                local.setdefault(_data_key(settings), {})[(settings or {}).get("seed_everything")] = \
                    summary["final_pval_acc_mean"]
    for label, members in groups.items():
        for (versions, settings), summary in zip(members, summaries[label]):
            if "final_pval_acc_mean" not in summary:
                continue
            config_path = next((v / "config.yaml" for v in reversed(versions) if (v / "config.yaml").is_file()), None)
            if config_path is None:
                return [f"label prior: {versions[-1]} has no config.yaml to re-make its partition from; column left out"]
            config = yaml.safe_load(config_path.read_text()) or {}
            key = json.dumps([config.get("data"), config.get("seed_everything"),
                              _init_args(config.get("model")).get("personal_eval_clients"),
                              _init_args(config.get("model")).get("personal_new_clients")], sort_keys=True, default=str)
            if key not in priors:
                try:
                    priors[key] = prior_of_config(config)
                except (ConfigError, OSError) as err:
                    return [f"label prior: cannot re-make the data of {config_path} ({err}); column left out"]
            prior = priors[key]
            if prior is None:
                continue
            summary["label_prior_acc_mean"], summary["label_prior_acc_p10"] = prior["acc_mean"], prior["acc_p10"]
            seeds = local.get(_data_key(settings))
            if seeds:
                own = seeds.get((settings or {}).get("seed_everything"))
                summary["local_pval_acc_mean"] = own if own is not None else statistics.fmean(seeds.values())
                summary["pval_gain"] = summary["final_pval_acc_mean"] - max(prior["acc_mean"],
                                                                            summary["local_pval_acc_mean"])
    return []
