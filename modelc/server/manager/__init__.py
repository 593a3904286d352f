"""The daemon's loaded-model manager: which models are loaded (models.py), one loaded model's view and
life (loaded.py), per-model load options (load_options.py) and request name -> store entry (lookup.py)."""
