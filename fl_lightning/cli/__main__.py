"""``python -m fl_lightning.cli``: the same as the ``fl-lightning`` command."""
from fl_lightning.cli import main

raise SystemExit(main())
