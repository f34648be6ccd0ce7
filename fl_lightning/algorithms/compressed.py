"""Names for algorithms whose uploads go through a codec (spec, "Compression baselines"; paper
Table 6). Any algorithm composes with any codec through ``model.compression``; these names fix the
pairing the paper compares."""
from __future__ import annotations

from fl_lightning.algorithms.base import register_preset
from fl_lightning.algorithms.fedavg import FedAvg
from fl_lightning.algorithms.fedbcgd import FedBCGD, FedBCGDPlus

register_preset("topk", FedAvg, "topk", "FedAvg uploading its k largest entries, with error feedback "
                "(Aji & Heafield 2017; model.compression.k)", "2k")
register_preset("fedpaq", FedAvg, "qsgd", "FedAvg with QSGD quantised uploads (Reisizadeh et al. 2020; "
                "model.compression.levels)", "≈ d(1 + ⌈log₂(s+1)⌉)/32")
register_preset("fedbcgd_qsgd", FedBCGD, "qsgd", "FedBCGD with its uploaded blocks QSGD quantised (paper Table 6)",
                "≈ FedBCGD·9/32")
register_preset("fedbcgd_plus_qsgd", FedBCGDPlus, "qsgd", "FedBCGD+ with its uploaded blocks (Δ and Δc) QSGD "
                "quantised (paper Table 6)", "≈ FedBCGD+·9/32")
register_preset("signsgd", FedAvg, "sign", "FedAvg uploading scaled signs with error feedback, one bit per entry "
                "(EF-signSGD, Karimireddy et al. 2019)", "≈ d/32")
register_preset("eden", FedAvg, "eden", "FedAvg uploading one bit per entry after a seeded random rotation, decoded "
                "unbiased (DRIVE/EDEN, Vargaftik et al. 2021/2022)", "≈ d'/32, d' = d padded to 2^m")
register_preset("powersgd", FedAvg, "powersgd", "FedAvg uploading rank-r factors of each weight matrix from one "
                "warm-started power-iteration step, with error feedback (PowerSGD, Vogels et al. 2019)",
                "Σ (rows + cols)·r over the matrices, + the rest")
register_preset("fedbcgd_sign", FedBCGD, "sign", "FedBCGD with its uploaded blocks as EF-signSGD scaled signs",
                "≈ FedBCGD/32")
register_preset("fedbcgd_eden", FedBCGD, "eden", "FedBCGD with its uploaded blocks DRIVE/EDEN-compressed",
                "≈ FedBCGD'/32 (padded)")
register_preset("fedbcgd_powersgd", FedBCGD, "powersgd", "FedBCGD with the matrices of its uploaded blocks as "
                "PowerSGD factors", "≈ FedBCGD's slices as factors")
