"""The OCI core every stage and signing/ share: its own errors (a malformed reference, a registry
that failed), media types, image references, the registry client, OCI layouts (archives) and
pushing them.

It imports nothing from xcforge or signing: both depend on it, never the other way.
"""

# One distribution ships xcforge, signing and ocicore: the same version as pyproject.toml and
# xcforge/__init__.py (tests/foundation/test_architecture.py keeps the three equal). A constant, not
# importlib.metadata: that lookup costs every command 30 ms.
__version__ = "0.1.0"
