"""Block division of a model: N blocks plus one shared block (spec, "Notation", "Block divisions").

Every parameter and floating buffer is in exactly one block; buffers follow the module that
owns them. The flat vector (``fl_lightning.federation.flat``) is laid out block by block, so a block is
one or two contiguous slices (its parameters, and its buffers after all parameters).

Three ways to get a division (``FederatedModule(block_division=...)``):
  * ``"auto"``: the paper's preset for the model (Tables 7–11) when one is registered,
    otherwise the balanced divider;
  * a paper preset by name: ``lenet5``, ``vgg11``, ``vgg19``, ``resnet18``, ``vit``;
  * ``"balanced"``: N contiguous blocks of equal parameter count in module order (cuts may
    fall inside a tensor), the classifier head shared — timm's ``get_classifier()``, else the
    last ``nn.Linear``. A head that holds most of the model (logistic regression) shares
    only its bias;
  * ``{"blocks": [[pattern, ...], ...], "shared": [pattern, ...]}``: module-name patterns
    (fnmatch; a pattern also matches everything below it, ``layer1`` ⊃ ``layer1.0.conv1``).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Callable, Optional, Union

from torch import nn

from fl_lightning.errors import ConfigError
from fl_lightning.federation.flat import Segment, tensor_layout

Ranges = list[tuple[int, int]]
DivisionSpec = Union[str, dict]


@dataclass
class Block:
    name: str
    ranges: Ranges  # slices of the flat vector: parameters (and buffers)
    layers: list[str]  # module names, for display
    num_params: int


@dataclass
class BlockPartition:
    order: list[str]  # tensor names in flat-layout order
    blocks: list[Block]
    shared: Optional[Block]
    num_params: int  # d
    source: str  # "paper preset for LeNet5", "balanced", "explicit"

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    def upload_ranges(self, block: int) -> Ranges:
        """What a client responsible for ``block`` sends: its block and the shared block."""
        return self.blocks[block].ranges + (self.shared.ranges if self.shared else [])

    def table(self) -> str:
        """The division as in the paper's Tables 7–11."""
        rows = [(b.name, ", ".join(b.layers), b.num_params) for b in self.blocks]
        if self.shared:
            rows.append((self.shared.name, ", ".join(self.shared.layers), self.shared.num_params))
        width = max(len(r[1]) for r in rows)
        lines = [f"Block division ({self.source}): N = {self.num_blocks}, d = {self.num_params:,}",
                 f"{'block':<8} {'layers':<{width}} {'#params':>12} {'share of d':>10}"]
        lines += [f"{name:<8} {layers:<{width}} {n:>12,} {n / self.num_params:>10.2%}" for name, layers, n in rows]
        return "\n".join(lines)


# -- building a partition from tensor-name groups --------------------------------------------
def _matches(tensor_name: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(tensor_name, pattern) or fnmatch.fnmatchcase(tensor_name, pattern + ".*")


def _merge(ranges: Ranges) -> Ranges:
    merged: Ranges = []
    for start, stop in sorted(ranges):
        if merged and merged[-1][1] == start:
            merged[-1] = (merged[-1][0], stop)
        else:
            merged.append((start, stop))
    return merged


def _layers(segments: list[Segment]) -> list[str]:
    """Display names: modules (or top-level tensors) cut to two name levels, in order."""
    seen: list[str] = []
    for seg in segments:
        label = ".".join((seg.module or seg.name).split(".")[:2])
        if seg.is_param and label not in seen:
            seen.append(label)
    return seen


def from_patterns(net: nn.Module, blocks: list[list[str]], shared: list[str], source: str = "explicit",
                  field: str = "model.algorithm.block_division") -> BlockPartition:
    groups = [*blocks, shared]
    layout = tensor_layout(net)
    owner: dict[str, int] = {}
    missing, doubled = [], []
    for seg, _ in layout:
        hits = [g for g, patterns in enumerate(groups) if any(_matches(seg.name, p) for p in patterns)]
        if not hits:
            missing.append(seg.name)
        elif len(hits) > 1:
            doubled.append(seg.name)
        else:
            owner[seg.name] = hits[0]
    if missing or doubled:
        def show(names):
            return ", ".join(names[:6]) + (f" (+{len(names) - 6} more)" if len(names) > 6 else "")
        problem = "; ".join(filter(None, [missing and f"in no block: {show(missing)}",
                                          doubled and f"in several blocks: {show(doubled)}"]))
        raise ConfigError(field, f"every parameter must be in exactly one block — {problem}")
    order = [seg.name for seg, _ in sorted(layout, key=lambda item: owner[item[0].name])]
    placed = tensor_layout(net, order)
    built = []
    for g in range(len(groups)):
        segs = [seg for seg, _ in placed if owner[seg.name] == g]
        name = "shared" if g == len(blocks) else f"block {g + 1}"
        built.append(Block(name, _merge([(s.start, s.stop) for s in segs]), list(groups[g]),
                           sum(s.numel for s in segs if s.is_param)))
    d = sum(b.num_params for b in built)
    shared_block = built[-1] if built[-1].ranges else None
    return BlockPartition(order, built[:-1], shared_block, d, source)


def classifier_head(net: nn.Module) -> Optional[str]:
    """Module name of the classifier: ``get_classifier()`` if the model has it, else the last Linear."""
    modules = dict(net.named_modules())
    if hasattr(net, "get_classifier"):
        head = net.get_classifier()
        for name, module in modules.items():
            if module is head:
                return name
    linears = [name for name, m in modules.items() if isinstance(m, nn.Linear)]
    return linears[-1] if linears else None


def balanced(net: nn.Module, num_blocks: int, shared_block: bool = True) -> BlockPartition:
    """N contiguous blocks of equal parameter count in module order; the head shared."""
    layout = tensor_layout(net)
    d = sum(seg.numel for seg, _ in layout if seg.is_param)
    head = classifier_head(net) if shared_block else None
    shared_names = [seg.name for seg, _ in layout if head is not None and _matches(seg.name, head)]
    if shared_names and sum(s.numel for s, _ in layout if s.name in shared_names and s.is_param) > d / 2:
        shared_names = [n for n in shared_names if n.endswith("bias")]  # a head that is the model
    order = [seg.name for seg, _ in layout if seg.name not in shared_names] + shared_names
    placed = [seg for seg, _ in tensor_layout(net, order)]
    body = sum(s.numel for s in placed if s.is_param and s.name not in shared_names)
    if num_blocks > body:
        raise ConfigError("model.algorithm.num_blocks", f"{num_blocks} blocks for {body} parameters; choose fewer blocks")
    cuts = [round(k * body / num_blocks) for k in range(num_blocks + 1)]

    def block_at(coordinate: int) -> int:
        return max(j for j in range(num_blocks) if cuts[j] <= coordinate)

    first_param = {}  # a module's buffers go to the block of its first parameter (else the last block)
    for s in placed:
        if s.is_param and s.name not in shared_names:
            first_param.setdefault(s.module, block_at(s.start))
    blocks = []
    for j in range(num_blocks):
        a, b = cuts[j], cuts[j + 1]
        params = [s for s in placed if s.is_param and s.start < b and s.stop > a and s.name not in shared_names]
        buffers = [s for s in placed if not s.is_param and s.name not in shared_names
                   and first_param.get(s.module, num_blocks - 1) == j]
        blocks.append(Block(f"block {j + 1}", _merge([(a, b)] + [(s.start, s.stop) for s in buffers]),
                            _layers(params), b - a))
    shared = None
    if shared_names:
        segs = [s for s in placed if s.name in shared_names]
        shared = Block("shared", _merge([(s.start, s.stop) for s in segs]), _layers(segs),
                       sum(s.numel for s in segs if s.is_param))
    return BlockPartition(order, blocks, shared, d, "balanced")


# -- the paper's divisions (Appendix 12.6, Tables 7–11), keyed by model class name -------------
def _lenet5(net, num_blocks):
    return [["conv1"], ["conv2"], ["fc1"], ["fc2"]], ["fc3"]


def _vgg(net, num_blocks):
    convs = len(net.convs)
    if convs == 8:  # VGG-11 (Table 8)
        groups = [[0, 1], [2, 3], [4, 5], [6, 7]]
        return [[f"convs.{i}" for i in g] for g in groups] + [["fc1", "fc2"]], ["classifier"]
    # VGG-19 (Table 10): first 8 convs | 2 | 2 | 2 | last 2 convs + 2 fc
    groups = [range(0, 8), range(8, 10), range(10, 12), range(12, 14)]
    return [[f"convs.{i}" for i in g] for g in groups] + [["convs.14", "convs.15", "fc1", "fc2"]], ["classifier"]


def _resnet18(net, num_blocks):  # Table 9
    return [["conv1", "bn1", "layer1"], ["layer2"], ["layer3"], ["layer4.0"], ["layer4.1"]], ["linear"]


def _vit(net, num_blocks):  # Table 11: consecutive transformer blocks, embeddings first, final norm last
    n = num_blocks or 6
    depth = len(net.blocks)
    if not 1 <= n <= depth:
        raise ConfigError("model.algorithm.num_blocks", f"ViT has {depth} transformer blocks; choose 1 ≤ N ≤ {depth}")
    cuts = [round(k * depth / n) for k in range(n + 1)]
    groups = [[f"blocks.{i}" for i in range(cuts[j], cuts[j + 1])] for j in range(n)]
    groups[0] = ["cls_token", "reg_token", "pos_embed", "patch_embed", "norm_pre", *groups[0]]
    groups[-1] += ["norm", "fc_norm", "attn_pool", "head_drop"]
    return groups, ["head"]


PRESETS: dict[str, tuple[Callable, Optional[int]]] = {  # class name → (patterns, fixed N or None)
    "LeNet5": (_lenet5, 4),
    "VGG": (_vgg, 5),
    "ResNet18": (_resnet18, 5),
    "VisionTransformer": (_vit, None),
}
PRESET_NAMES = {"lenet5": "LeNet5", "vgg11": "VGG", "vgg19": "VGG", "resnet18": "ResNet18", "vit": "VisionTransformer"}


def build_partition(net: nn.Module, division: DivisionSpec = "auto", num_blocks: Optional[int] = None,
                    shared_block: bool = True) -> BlockPartition:
    """The block division a FedBCGD run uses (see the module docstring)."""
    if num_blocks is not None and num_blocks < 1:
        raise ConfigError("model.algorithm.num_blocks", f"must be ≥ 1, got {num_blocks}")
    if isinstance(division, dict):
        unknown = set(division) - {"blocks", "shared"}
        if unknown or not division.get("blocks"):
            raise ConfigError("model.algorithm.block_division", "give {blocks: [[patterns], ...], shared: [patterns]}")
        blocks, shared = [list(b) for b in division["blocks"]], list(division.get("shared", []))
        if not shared_block:
            blocks[-1] += shared
            shared = []
        return from_patterns(net, blocks, shared)
    name = type(net).__name__
    if division in PRESET_NAMES:  # a paper preset asked for by name
        name, division = PRESET_NAMES[division], "auto"
    if division == "auto" and name in PRESETS:
        preset, fixed = PRESETS[name]
        if fixed is not None and num_blocks not in (None, fixed):
            raise ConfigError("model.algorithm.num_blocks", f"the paper's {name} division has {fixed} blocks + shared; "
                              f"use block_division: balanced for N={num_blocks}")
        blocks, shared = preset(net, num_blocks)
        if not shared_block:
            blocks[-1] = blocks[-1] + shared
            shared = []
        blocks = [[p for p in group if _present(net, p)] for group in blocks]
        shared = [p for p in shared if _present(net, p)]
        return from_patterns(net, blocks, shared, source=f"paper preset for {name}")
    if division in ("auto", "balanced"):
        return balanced(net, num_blocks or 5, shared_block)
    raise ConfigError("model.algorithm.block_division", f"unknown division {division!r}; use auto, balanced, a paper preset "
                      f"({', '.join(PRESET_NAMES)}) or {{blocks: [[patterns], ...], shared: [patterns]}}")


def _present(net: nn.Module, pattern: str) -> bool:
    """Presets list optional parts (e.g. ViT's reg_token); keep only those this model has."""
    return any(_matches(seg.name, pattern) for seg, _ in tensor_layout(net))


def partition_for(net: nn.Module, algorithm, always: bool = False) -> Optional[BlockPartition]:
    """The block division ``algorithm`` trains with (its num_blocks, block_division, shared_block), or
    None for an algorithm without blocks — the default division then, with ``always`` (``fl-lightning
    blocks``). The one place fit, the CLI's checks and the blocks command get a division from."""
    if getattr(algorithm, "uses_blocks", False):
        return build_partition(net, algorithm.block_division, algorithm.num_blocks, algorithm.shared_block)
    return build_partition(net) if always else None
