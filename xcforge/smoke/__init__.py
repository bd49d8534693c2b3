"""Stage 5, smoke: each signed image started the way operators start it, checked, removed."""
