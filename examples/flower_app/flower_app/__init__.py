"""flower-app: a Flower app (as ``flwr new`` makes them) federating a Lightning module with fl-lightning's algorithms."""
