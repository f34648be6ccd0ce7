"""SVRG variance reduction in the local step (spec, "FedBCGD+", Eq. 4; Johnson & Zhang 2013).

    g ← ∇f_i(y; ζ) − ∇f_i(x^r; ζ) + ∇f_i(x^r)

∇f_i(x^r) is the client's full local gradient at the downloaded model, computed once per
round (``ClientContext.full_gradient``); ∇f_i(x^r; ζ) costs a second backward per step.
"""
from __future__ import annotations

from fl_lightning.callbacks.base import FLCallback


class VarianceReduction(FLCallback):
    replays_minibatch = True  # ∇f_i(x^r; ζ) needs ζ's dropout mask

    def on_client_start(self, client):
        client.full_gradient()  # while the working model is still x^r

    def on_local_gradient(self, client):
        grad = client.grad
        grad.sub_(client.gradient_at_global())
        grad.add_(client.full_gradient())
