"""xcforge-engine: the launcher every xcforge image runs in front of vLLM's OpenAI server."""

__version__ = "0.1.0"
