"""How local training uses the CPU (docs/how_it_works.md, "How it works"): image batches in
``channels_last`` for convolutional networks, and the check that ``bf16`` precision on a CPU has
native bf16 instructions.

The flat parameter vector stays the source of truth: only the network's 4-d input is laid out
channels-last (oneDNN then runs convolutions and pooling in NHWC; the parameters stay views of the
vector). Measured in docs/benchmarks.md ("Memory format and precision"). Deterministic: the same
numbers run to run at a fixed thread count, though not bit-equal to the contiguous layout.
"""
from __future__ import annotations

import warnings
from typing import Optional

import torch
from torch import nn

from fl_lightning.errors import ConfigError

HANDLE = "_fl_channels_last_hook"  # the hook's handle, an attribute of the network: copies and pickles keep both


def _to_channels_last(module: nn.Module, args: tuple) -> tuple:
    if args and isinstance(args[0], torch.Tensor) and args[0].dim() == 4:
        return (args[0].contiguous(memory_format=torch.channels_last), *args[1:])
    return args


def set_channels_last(network: nn.Module, on: bool) -> None:
    """Lays every 4-d input of ``network`` out channels-last (a forward pre-hook), or stops doing so."""
    handle = network.__dict__.get(HANDLE)
    if handle is not None and not on:
        handle.remove()
        del network.__dict__[HANDLE]
    elif handle is None and on:
        network.__dict__[HANDLE] = network.register_forward_pre_hook(_to_channels_last)


def forward_fails(network: nn.Module, batch: torch.Tensor) -> Optional[str]:
    """The first line of the error a forward in eval mode raises on ``batch``, or None (no RNG drawn,
    no BatchNorm statistics moved)."""
    was_training = network.training
    network.eval()
    try:
        with torch.no_grad():
            network(batch)
    except RuntimeError as err:
        return str(err).splitlines()[0]
    finally:
        network.train(was_training)
    return None


def set_input_layout(network: nn.Module, trainer, channels_last: Optional[bool]) -> None:
    """At the module's setup. ``channels_last`` None (auto): on for a network with a 2-d convolution on
    the CPU, where it is faster, unless its forward cannot take channels-last batches (e.g. ``x.view``
    after a convolution: one warning, contiguous); True/False force it. Then the bf16 check."""
    device = trainer.strategy.root_device
    on = channels_last if channels_last is not None else (
        device.type == "cpu" and any(isinstance(m, nn.Conv2d) for m in network.modules()))
    set_channels_last(network, on)
    clients, as_input = getattr(trainer.datamodule, "clients", None), getattr(trainer.datamodule, "eval_transform", None)
    if on and clients is not None and as_input is not None and clients.x.dim() == 4:
        failure = forward_fails(network, as_input(clients.x[:2]).to(device))  # the eval transform draws nothing
        if failure is not None and channels_last:
            raise ConfigError("model.channels_last", f"the network's forward fails on channels-last batches "
                              f"({failure}); use reshape instead of view after a convolution, or set it false")
        if failure is not None:
            set_channels_last(network, False)
            warnings.warn(f"model.channels_last: the network's forward fails on channels-last batches ({failure}); "
                          "training with contiguous batches (reshape instead of view would allow the faster "
                          "layout; set model.channels_last false to silence this)", stacklevel=2)
    check_cpu_precision(str(trainer.precision), device)


def cpu_has_native_bf16() -> bool:
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())  # no public query in torch 2.14


def check_cpu_precision(precision: str, device: torch.device) -> None:
    """bf16 on a CPU without native bf16 (AVX512-BF16 or AMX) is emulated, several times slower: one warning."""
    if device.type == "cpu" and precision.startswith("bf16") and not cpu_has_native_bf16():
        warnings.warn(f"trainer.precision {precision}: this CPU has no native bf16 instructions (AVX512-BF16 "
                      "or AMX), so bf16 is emulated and several times slower here; use 32-true", stacklevel=2)
