"""modelc.build: ship a model: container files, single-file zipapps, a static file server for registries."""
