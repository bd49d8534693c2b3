"""A signer turns payload bytes into the annotations of one signature layer, for one scheme."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from signing import cosign_format, sm2, sm2_format
from signing.cosign_keys import CosignPrivateKey
from signing.sm2_keys import Sm2PrivateKey


class Signer(Protocol):
    @property
    def scheme(self) -> str: ...

    @property
    def key_id(self) -> str: ...

    def sign(self, payload: bytes) -> dict[str, str]:
        """Layer annotations that carry a fresh signature of `payload`."""
        ...

    def has_signed(self, payload: bytes, annotations: Mapping[str, str]) -> bool:
        """True when these annotations already hold a valid signature of `payload` by this key."""
        ...

    def signature(self, data: bytes) -> bytes:
        """The raw signature of `data` (DSSE signs PAE bytes, not a layer payload)."""
        ...

    def verifies(self, data: bytes, signature: bytes) -> bool:
        """True when `signature` over `data` is this key's."""
        ...


@dataclass(frozen=True)
class Sm2Signer:
    key: Sm2PrivateKey
    dist_id: bytes = sm2.DEFAULT_DIST_ID
    scheme: str = sm2_format.SCHEME

    @property
    def key_id(self) -> str:
        return self.key.key_id

    def sign(self, payload: bytes) -> dict[str, str]:
        signature = self.key.sign(payload, dist_id=self.dist_id)
        return sm2_format.layer_annotations(signature, key_id=self.key_id, dist_id=self.dist_id)

    def has_signed(self, payload: bytes, annotations: Mapping[str, str]) -> bool:
        signature = sm2_format.signature_from(annotations)
        if signature is None or sm2_format.dist_id_from(annotations) != self.dist_id:
            return False
        return self.verifies(payload, signature)

    def signature(self, data: bytes) -> bytes:
        return self.key.sign(data, dist_id=self.dist_id)

    def verifies(self, data: bytes, signature: bytes) -> bool:
        return self.key.public_key.verify(data, signature, dist_id=self.dist_id)


@dataclass(frozen=True)
class CosignSigner:
    key: CosignPrivateKey
    scheme: str = cosign_format.SCHEME

    @property
    def key_id(self) -> str:
        return self.key.key_id

    def sign(self, payload: bytes) -> dict[str, str]:
        return cosign_format.layer_annotations(self.key.sign(payload))

    def has_signed(self, payload: bytes, annotations: Mapping[str, str]) -> bool:
        signature = cosign_format.signature_from(annotations)
        return signature is not None and self.verifies(payload, signature)

    def signature(self, data: bytes) -> bytes:
        return self.key.sign(data)

    def verifies(self, data: bytes, signature: bytes) -> bool:
        return self.key.public_key.verify(data, signature)
