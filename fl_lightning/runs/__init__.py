"""What a run is and where it goes: its identity and id (``identity.py``), its folder and files
(``files.py``), safe checkpoints, ``sweep``, ``report``, runs kept as text (``kept.py``), figures and
plots, the round progress bar and the end-of-fit summary."""
