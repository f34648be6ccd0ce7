"""flower-app: a Flower app (as ``flwr new`` makes them) federating a Lightning module with fl-lightning's algorithms.

Run a copy (``flwr run`` rewrites the pyproject's federations): ``cp -r examples/flower_app my-app``, then on a
SuperLink with one SuperNode per partition ``flwr run my-app local-deployment --stream``, or in Flower's simulation
(needs Ray: ``pip install 'flwr[simulation]'``; ``FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1``, as this environment
has the dependencies) ``flwr run my-app local-simulation --stream``; docs/callbacks_outside_fl_lightning.md.
"""
