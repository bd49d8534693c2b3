"""PEM armour (RFC 7468) shared by the SM2 and cosign key readers.

A key file may hold more than one block (`openssl ecparam -genkey` writes a PARAMETERS block
before the key) and legacy OpenSSL encryption headers (`Proc-Type: 4,ENCRYPTED`, `DEK-Info`), so
blocks are split here and each keeps its headers.
"""

from __future__ import annotations

import base64
import binascii
import re
import textwrap
from dataclasses import dataclass

from signing.errors import SigningError

_BLOCK = re.compile(
    rb"-----BEGIN (?P<label>[A-Z0-9 ]+)-----\r?\n(?P<body>.*?)-----END (?P=label)-----",
    re.DOTALL,
)


@dataclass(frozen=True)
class PemBlock:
    label: str
    headers: dict[str, str]
    der: bytes
    text: bytes  # the whole armoured block, for readers that want it back

    @property
    def legacy_encrypted(self) -> bool:
        return self.headers.get("Proc-Type", "").replace(" ", "") == "4,ENCRYPTED"


def is_pem(data: bytes) -> bool:
    return b"-----BEGIN " in data[:4096]


def read_blocks(data: bytes, *, what: str) -> list[PemBlock]:
    blocks: list[PemBlock] = []
    for match in _BLOCK.finditer(data):
        body = match.group("body").decode("ascii", "replace")
        headers: dict[str, str] = {}
        lines = body.splitlines()
        if any(":" in line for line in lines[:3]):
            while lines and ":" in lines[0]:
                key, _, value = lines.pop(0).partition(":")
                headers[key.strip()] = value.strip()
        try:
            der = base64.b64decode("".join(line.strip() for line in lines), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise SigningError(f"{what}: PEM block '{match.group('label').decode()}' is not base64") from exc
        blocks.append(PemBlock(match.group("label").decode("ascii"), headers, der, match.group(0)))
    if not blocks:
        raise SigningError(f"{what}: no PEM block found")
    return blocks


def armor(der: bytes, label: str) -> bytes:
    body = "\n".join(textwrap.wrap(base64.b64encode(der).decode("ascii"), 64))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----\n".encode("ascii")
