"""mlacheck: checks that a serving engine's kernel warm-up covers what its runtime dispatches."""

__version__ = "0.1.0"
