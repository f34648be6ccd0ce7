"""The server's side with a robust aggregator or an attack: ``ReceivedUploads`` keeps every client's decoded upload
(per channel, with its slices) beside the running sums of ``ReceivedSums``, and a channel's ``mean`` is the
aggregator's, run per group of coordinates that the same clients uploaded (``coverage_groups``: with FedBCGD one
group per block, of its K_j uploads, and one for the shared block, of all S). Channels the server derives
(``add_sum``: FedDyn's, FedNova's) stay plain sums. Memory: every reporting client's upload, S × (upload floats)
× 4 bytes per round (FedAvg: S·d; FedBCGD: about S·(d/N + shared))."""
from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import torch

from fl_lightning.federation.messages import ReceivedSums

Ranges = list[tuple[int, int]]


@dataclass
class Upload:
    """One client's decoded upload: per channel, its parts as (slices, weight, values)."""

    position: int  # its place in the round's plan
    parts: dict[str, list[tuple[Ranges, float, torch.Tensor]]] = field(default_factory=dict)

    def segments(self, channel: str) -> list[tuple[int, int, torch.Tensor]]:
        """(start, stop, values) of every slice it sent of ``channel``, sorted by start."""
        out = []
        for ranges, _, values in self.parts[channel]:
            offset = 0
            for start, stop in ranges:
                out.append((start, stop, values[offset:offset + stop - start]))
                offset += stop - start
        return sorted(out, key=lambda s: s[0])

    def weight(self, channel: str) -> float:
        return self.parts[channel][0][1]


def coverage_groups(covered: list[Ranges]) -> dict[tuple[int, ...], Ranges]:
    """Members (indices into ``covered``) → the slices exactly those members uploaded, in order."""
    points = sorted({p for ranges in covered for r in ranges for p in r})
    groups: dict[tuple[int, ...], Ranges] = {}
    for a, b in zip(points, points[1:]):
        members = tuple(i for i, ranges in enumerate(covered) if any(s <= a and b <= e for s, e in ranges))
        if members:
            slices = groups.setdefault(members, [])
            if slices and slices[-1][1] == a:
                slices[-1] = (slices[-1][0], b)
            else:
                slices.append((a, b))
    return groups


def gather(segments: list[tuple[int, int, torch.Tensor]], slices: Ranges) -> torch.Tensor:
    """A client's values at ``slices`` (each inside one of its segments), concatenated."""
    starts = [s[0] for s in segments]
    out = []
    for a, b in slices:
        start, _, values = segments[bisect.bisect_right(starts, a) - 1]
        out.append(values[a - start:b - start])
    return torch.cat(out)


class ReceivedUploads(ReceivedSums):
    """``ReceivedSums`` that also keeps each upload (its ``on_added``); ``server``
    (fl_lightning.aggregation.server.RobustServer) attacks and aggregates them. Several ranks: the contributions
    arrive once every rank's are combined, in plan order, and the uploads are kept from those."""

    def __init__(self, sizes: dict[str, int], device: torch.device, ordered: bool = False, *, server):
        super().__init__(sizes, device, ordered)
        self.server = server
        self.uploads: list[Upload] = []
        self._derived: set[str] = set()
        self._means: dict[str, torch.Tensor] = {}
        self._skipped: dict[str, torch.Tensor] = {}  # coordinates of groups the rule could not serve this round

    def on_added(self, channel, ranges, weight, values) -> None:
        if ranges is None:  # a value the server derived: summed, never aggregated by the rule
            self._derived.add(channel)
            return
        if not self.uploads or self.uploads[-1].position != self.position:  # the next client's upload
            self.uploads.append(Upload(self.position))
        self.uploads[-1].parts.setdefault(channel, []).append((list(ranges), float(weight), values.detach().clone()))

    def robust(self, channel: str) -> bool:
        return channel not in self._derived and any(channel in u.parts for u in self.uploads)

    def mean(self, channel: str) -> torch.Tensor:
        """The aggregator's Δ̄ per coordinate (zero where nobody uploaded)."""
        if not self.robust(channel):
            return super().mean(channel)
        return self._aggregated(channel).clone()

    def _aggregated(self, channel: str) -> torch.Tensor:
        if channel not in self._means:  # the rule runs once per channel and round
            self._means[channel] = self.server.aggregate(channel, self)
        return self._means[channel]

    def skip(self, channel: str, index: torch.Tensor) -> None:
        """The rule could not serve the group at ``index``: those coordinates count as not reported this round."""
        mask = self._skipped.setdefault(channel, torch.zeros(self.sizes[channel], dtype=torch.bool, device=self.device))
        mask[index] = True

    def weight(self, channel: str) -> torch.Tensor:
        """The weight that reported each coordinate, 0 where the rule skipped its group."""
        weight = super().weight(channel)
        if self.robust(channel):
            self._aggregated(channel)  # the rule runs first: it decides what is skipped
            if channel in self._skipped:
                weight = weight.masked_fill(self._skipped[channel], 0)
        return weight

    def sum(self, channel: str) -> torch.Tensor:
        """The aggregate times the weight that uploaded each coordinate (so that sum / weight is the aggregate)."""
        if not self.robust(channel):
            return super().sum(channel)
        return self.mean(channel) * self.weight(channel)

    def groups(self, channel: str):
        """(uploads, slices, x [n, m], weights [n]) per group of coordinates that the same uploads covered."""
        uploads = [u for u in self.uploads if channel in u.parts]
        segments = [u.segments(channel) for u in uploads]
        covered = [[(s, e) for s, e, _ in segs] for segs in segments]
        for members, slices in coverage_groups(covered).items():
            x = torch.stack([gather(segments[i], slices) for i in members])
            weights = torch.tensor([uploads[i].weight(channel) for i in members], dtype=torch.float64,
                                   device=x.device)
            yield [uploads[i] for i in members], slices, x, weights
