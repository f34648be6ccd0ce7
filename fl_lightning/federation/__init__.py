"""The round's core: the loop (``loop.py``), what hooks see (``contexts.py``), local training, clients in
parallel, flat vectors, block divisions, the client-state store, seeding, collectives, evaluation of the
global model, the round's log row, server optimizers, thread layouts, and ``ToyFederation`` (rounds
without a Trainer). docs/architecture.md draws one round through these files."""
