"""The front door: `Engine` (api/engine.py: synchronous, one request at a time) and `AsyncEngine`
(api/async_engine.py: the actor tree, what the server serves). Both open a model by path or store name
with modelc.source.open_model; `modelc.Engine` / `modelc.AsyncEngine` name them too."""
