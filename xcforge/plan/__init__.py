"""Stage 2, plan: typed matrix + site + options → build plans, rendered Dockerfiles, locks, verification levels."""
