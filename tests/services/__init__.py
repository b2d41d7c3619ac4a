"""Real services the tests start and stop themselves (no mocks where a real one can run)."""
