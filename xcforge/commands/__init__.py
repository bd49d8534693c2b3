"""CLI command modules; each exposes register(subparsers, common)."""
