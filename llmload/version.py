"""The llmload version (one place; reported in results and the Prometheus info metric)."""

__all__ = ["__version__"]

__version__ = "0.1.0"
