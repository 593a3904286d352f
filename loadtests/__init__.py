"""Seeded load tests against modelc or any OpenAI-compatible server (never run by CI as a benchmark)."""
