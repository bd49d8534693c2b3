"""Carrying signed images into a network without internet (内网): `bundle` writes one signed transfer
of images, their signatures and attestations; `import` checks it whole and publishes it to an inner
registry (or a docker engine) by digest. See docs/airgap.md.

archive.py   the transfer's bytes: a tar stream, optionally split into chunks, read back seekable
manifest.py  the bundle manifest (every digest and file hash), its SM2 and cosign signatures
collect.py   what to carry: image trees and their signature/attestation/SBOM tags from a registry
bundle.py    `build.py bundle`: collect → manifest → signed tar (+ chunks, + delta against a base)
importer.py  `build.py import`: verify everything, then publish (registry or docker), or nothing
"""
