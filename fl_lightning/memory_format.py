"""How local training uses the CPU (README, "Speed"): image batches in ``channels_last`` for
convolutional networks, and the check that ``bf16-mixed`` on a CPU has native bf16 instructions.

The flat parameter vector stays the source of truth: only the network's 4-d input is laid out
channels-last (oneDNN then runs convolutions and pooling in NHWC; the parameters stay views of the
vector). Measured here (LeNet-5, batch 50, one thread, AVX2 EPYC): 1.17× a training step
(docs/benchmarks.md, "Memory format and precision"). Deterministic: the same numbers run to run at a
fixed thread count, though not bit-equal to the contiguous layout (a different summation order).
"""
from __future__ import annotations

import warnings
import weakref
from typing import Optional

import torch
from torch import nn


def wants_channels_last(network: nn.Module, device: torch.device, choice: Optional[bool]) -> bool:
    """``choice`` None (auto): on for a network with a 2-d convolution trained on the CPU, where it is
    faster; True/False force it."""
    if choice is not None:
        return choice
    return device.type == "cpu" and any(isinstance(m, nn.Conv2d) for m in network.modules())


_HOOKS: "weakref.WeakKeyDictionary[nn.Module, object]" = weakref.WeakKeyDictionary()


def _to_channels_last(module: nn.Module, args: tuple) -> tuple:
    if args and isinstance(args[0], torch.Tensor) and args[0].dim() == 4:
        return (args[0].contiguous(memory_format=torch.channels_last), *args[1:])
    return args


def set_channels_last(network: nn.Module, on: bool) -> None:
    """Lays every 4-d input of ``network`` out channels-last (a forward pre-hook; copies of the network
    made after this keep it), or stops doing so."""
    if network in _HOOKS and not on:
        _HOOKS.pop(network).remove()
    elif network not in _HOOKS and on:
        _HOOKS[network] = network.register_forward_pre_hook(_to_channels_last)


def cpu_has_native_bf16() -> bool:
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def check_cpu_precision(precision: str, device: torch.device) -> None:
    """bf16 autocast on a CPU without native bf16 (AVX512-BF16 or AMX) is emulated: one warning."""
    if device.type == "cpu" and str(precision).startswith("bf16") and not cpu_has_native_bf16():
        warnings.warn("trainer.precision bf16-mixed: this CPU has no native bf16 instructions (AVX512-BF16 or "
                      "AMX), so bf16 is emulated and ~10× slower here; use 32-true", stacklevel=2)


def set_input_layout(network: nn.Module, trainer, channels_last: Optional[bool]) -> None:
    """At a module's setup: channels_last as chosen for its device, and the bf16 check."""
    device = trainer.strategy.root_device
    set_channels_last(network, wants_channels_last(network, device, channels_last))
    check_cpu_precision(trainer.precision, device)
