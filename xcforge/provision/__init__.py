"""Machine set-up helpers: stand-in bases for vendor images, progress lines for long steps."""
