#!/usr/bin/env python3
"""Entry point: `python build.py --target ascend`. The work lives in the xcforge package."""

import os
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent
_VENV_PYTHON = _ROOT / ".venv" / "bin" / "python"

# A checkout set up by scripts/provision.sh has its dependencies in .venv: always run under it, so
# `python3 build.py` behaves the same whichever interpreter the user typed.
if _VENV_PYTHON.exists() and Path(sys.prefix).resolve() != (_ROOT / ".venv").resolve():
    os.execv(str(_VENV_PYTHON), [str(_VENV_PYTHON), str(Path(__file__).resolve()), *sys.argv[1:]])

try:
    from xcforge.cli import main
except ModuleNotFoundError as exc:
    sys.stderr.write(
        f"error: missing Python dependency ({exc.name}); run `scripts/provision.sh` or `pip install -e .` first\n"
    )
    sys.exit(3)

if __name__ == "__main__":
    code = main()
    # Everything is written and cleaned up by now (main's stages close their files and remove their
    # temporary directories themselves). Skip the interpreter's teardown: freeing the SBOM
    # validator's compiled grammars alone takes 0.4 s, a twentieth of a cached build.
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # `build.py ... | head`: the reader left; not an error of ours
        code = code or 141
    os._exit(code)
