"""Stage 2, lock: typed matrix → what each image installs, pinned. deps.py resolves every target's
requirement sets with uv (`build.py deps`) into the committed locks under images/<target>/locks/;
locks.py reads them (without loading the resolver); placeholders.py writes the empty wheels that
stand in for the vendor-only packages no index serves."""
