"""The multi-model daemon: the model manager, the Ollama-shaped API, the daemon state file and the
HTTP client the CLI uses to talk to a running daemon."""
