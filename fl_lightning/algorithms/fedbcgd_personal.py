"""FedBCGD with personal blocks: block-coordinate personalisation.

Some blocks of the division are declared personal (default: ``shared``, which in every paper division
is the classifier). Each client keeps them (its row of the client-state store,
fl_lightning.personalization.personal.PersonalPart): they are trained with the rest, never uploaded,
never averaged. The other blocks are FedBCGD's: each round the sampled clients, in the seeded order
of BlockUploadMask, are assigned the non-personal blocks in turn (client p of the shuffle: the p mod
N'-th of the N' non-personal blocks) and upload it and the shared block unless the shared block is
personal. So the upload per client falls from |x_j| + |x_s| to |x_j| (or |x_j| + |x_s| without
the personal blocks' share).
"""
from __future__ import annotations

from typing import Optional, Union

from fl_lightning.algorithms.base import register
from fl_lightning.algorithms.fedbcgd import FedBCGD
from fl_lightning.callbacks import BlockUploadMask
from fl_lightning.callbacks.block_upload import assign_blocks
from fl_lightning.errors import ConfigError
from fl_lightning.federation.blocks import partition_for
from fl_lightning.personalization.personal import PersonalPart


def personal_block_ranges(blocks, names: list[str]):
    ranges = []
    for name in names:
        if name == "shared":
            if blocks.shared is None:
                raise ConfigError("FedBCGDPersonal(personal_blocks=...)", "the division has no shared block; name "
                                  "blocks by number (1..N) or keep shared_block true")
            ranges += blocks.shared.ranges
        else:
            ranges += blocks.blocks[int(name) - 1].ranges
    return ranges


class PersonalBlockUpload(BlockUploadMask):
    """BlockUploadMask over the non-personal blocks only."""

    def __init__(self, personal: list[str]):
        super().__init__(freeze_other_blocks=False)
        self.personal = personal

    def configure_round(self, round):
        blocks = round.blocks
        self.block_of = assign_blocks(round, [j for j in range(blocks.num_blocks) if str(j + 1) not in self.personal])
        for client in round.clients:
            client.upload_ranges = blocks.upload_ranges(self.block_of[client.client_id])


@register("fedbcgd_personal")
class FedBCGDPersonal(FedBCGD):
    """FedBCGD with personal blocks: blocks each client keeps, never uploaded; the rest as FedBCGD (its options).

    Args:
        personal_blocks: the blocks each client keeps: ``shared`` (the classifier in the paper's divisions)
            and/or block numbers 1..N; default [shared].
    """

    summary = "FedBCGD with personal blocks kept on each client (personal_blocks; default the classifier)"
    upload = "|x_j| ≈ d/N"

    def __init__(self, num_blocks: Optional[int] = None, block_division: Union[str, dict] = "auto",
                 shared_block: bool = True, server_lr: float = 1.0, server_momentum: float = 0.8,
                 personal_blocks: Optional[list[Union[str, int]]] = None):
        super().__init__(num_blocks, block_division, shared_block, server_lr, server_momentum)
        names = [str(b) for b in (personal_blocks or ["shared"])]
        bad = [b for b in names if b != "shared" and not (b.isdigit() and int(b) >= 1)]
        if bad:
            raise ConfigError("FedBCGDPersonal(personal_blocks=...)", f"unknown block {bad[0]!r}; give shared "
                              "and/or block numbers 1..N")
        self.personal_blocks = personal_blocks
        self._names = names

    def check_network(self, network):
        blocks = partition_for(network, self)
        too_big = [b for b in self._names if b != "shared" and int(b) > blocks.num_blocks]
        if too_big:
            raise ConfigError("FedBCGDPersonal(personal_blocks=...)", f"block {too_big[0]} of a division with "
                              f"{blocks.num_blocks} blocks; give shared and/or numbers 1..{blocks.num_blocks}")
        personal_block_ranges(blocks, self._names)
        if all(str(j + 1) in self._names for j in range(blocks.num_blocks)):
            raise ConfigError("FedBCGDPersonal(personal_blocks=...)", f"all {blocks.num_blocks} blocks are personal: "
                              "nothing would be federated; declare fewer blocks personal")

    def callbacks(self):
        return [PersonalBlockUpload(self._names),
                PersonalPart(lambda round: personal_block_ranges(round.blocks, self._names),
                             f"fedbcgd personal blocks {self._names}")]
