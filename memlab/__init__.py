"""memlab: a research framework in PyTorch for long-term memory of LLM agents."""

__version__ = "0.1.0"
