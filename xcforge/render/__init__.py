"""Stage 3, render: typed matrix + locks → the committed images/<target>/Dockerfile (dockerfile.py,
from templates/), and the digest of everything they are rendered from (inputs.py), which lets a
build skip the drift check when nothing changed."""
