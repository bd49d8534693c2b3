"""Stage 6, publish: pushed build results → further variants of the same image in the registry
(the zstd-compressed variant, xcforge/publish/zstd.py), between build and sign so that the sign
stage signs every variant's digests with the gzip ones."""
