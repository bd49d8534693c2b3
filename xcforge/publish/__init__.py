"""Stage 6, publish: built images → the registry. push.py pushes each image built for a registry
by digest, tags it last and attaches its SBOMs (and, for `merge`, tags an index of platform
digests); zstd.py writes further variants of the pushed image (the zstd-compressed one), before
sign so that the sign stage signs every variant's digests with the gzip ones."""
