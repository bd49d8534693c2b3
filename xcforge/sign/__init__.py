"""Stage 7, sign: build results → SM2 and cosign signatures and attestations (through signing/)."""
