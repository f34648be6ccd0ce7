"""Federated-learning callbacks, importable as ``fl_lightning.callbacks``."""
from fl_lightning.callbacks.base import FLCallback
from fl_lightning.callbacks.block_upload import BlockUploadMask
from fl_lightning.callbacks.compression import CompressedUpload
from fl_lightning.callbacks.control_variates import ControlVariates
from fl_lightning.callbacks.drift_correction import DriftCorrection
from fl_lightning.callbacks.pooled import PooledTraining
from fl_lightning.callbacks.proximal import Proximal
from fl_lightning.callbacks.variance_reduction import VarianceReduction

__all__ = ["FLCallback", "BlockUploadMask", "CompressedUpload", "ControlVariates", "DriftCorrection", "PooledTraining", "Proximal",
           "VarianceReduction"]
