"""Deployment on Flower: the same algorithms, with clients on real, separate SuperNodes.

The server runs the usual fit (``FederatedModule`` in a Lightning Trainer, the ``FederatedLoop``: sampling,
block assignment, aggregation, the server optimizer, accounting); only where a sampled client trains differs.
Each client's task goes in a Flower message to the SuperNode that holds its partition, which runs the same
``LocalTrainer.run_client`` on its own data and keeps the client's state (c_i, residuals) on its own disk.

- ``server_app``: the Flower ServerApp (``fl_lightning.deploy.server_app:app``); ``remote``: the server's side
  of a round (tasks out, replies in, in plan order); ``join``: which node holds which partition, checked.
- ``client_app``: the Flower ClientApp (light: no torch), forwarding to the node's warm ``worker`` process,
  which holds a ``node.NodeSession`` (the data, the working model, the client-state store).
- ``wire``: what a task and a reply carry, as bytes (loaded with ``weights_only``: no pickled code).
- ``local``: ``fl-lightning flower-local``: SuperLink, SuperNodes and the run on loopback, in one command.
- ``strategy``, ``client_helper``: any algorithm in a user's own Flower app — ``AlgorithmStrategy`` (a Flower
  ``Strategy`` on ``InProcessServer``) and ``fit_reply`` for their ClientApp; ``inline_grid``: a ``Grid`` of
  in-process nodes (tests, debugging without Ray).

Nothing here is imported by a simulation: ``import fl_lightning`` and ``fl-lightning fit`` never import flwr.
"""
