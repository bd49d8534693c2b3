import sys

from xcforge_engine.cli import main

sys.exit(main())
