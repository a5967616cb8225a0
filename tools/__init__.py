"""Developer tools: test-data converters and helpers (importable by the tests)."""
