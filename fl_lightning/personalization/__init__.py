"""Personalised federated learning: each client's held-out share of its own data
(``split``), the personalised evaluation pval/* (``evaluation``), and the callback that keeps part of
the model on each client, in the client-state store, never uploaded (``personal``)."""
