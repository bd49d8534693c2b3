"""The OCI core every stage and signing/ share: typed errors with stable exit codes, media types,
image references, the registry client, OCI layouts (archives) and pushing them.

It imports nothing from xcforge or signing: both depend on it, never the other way.
"""

from importlib import metadata

try:
    __version__ = metadata.version("xcforge")  # one distribution ships xcforge, signing and ocicore
except metadata.PackageNotFoundError:  # a checkout without `pip install -e .`
    __version__ = "0.0.0"
