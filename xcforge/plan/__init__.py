"""Stage 4, plan: typed matrix + site + options → one build plan per target (build_plan.py) and the
verification level each platform can reach (verification.py)."""
