"""Stage 8, smoke: each signed image started the way operators start it, checked, removed."""
