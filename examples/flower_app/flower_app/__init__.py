"""flower-app: a Flower app (as ``flwr new`` makes them) federating a Lightning module with fl-lightning's algorithms.

Flower wants the app directory named with letters, digits and hyphens: ``cp -r examples/flower_app my-app`` then
``flwr run my-app`` (simulation needs Ray: ``pip install 'flwr[simulation]'``); docs/callbacks_outside_fl_lightning.md.
"""
