"""The local broker's pure parts."""

from __future__ import annotations

import base64

from kafkalake.dev.broker import new_cluster_id


def test_cluster_id_is_16_bytes_of_unpadded_base64url():
    cluster_id = new_cluster_id(lambda: bytes(range(16)))
    assert cluster_id == base64.urlsafe_b64encode(bytes(range(16))).rstrip(b"=").decode()
    assert len(cluster_id) == 22


def test_cluster_id_never_starts_with_a_dash():
    # 0xF8 encodes to '-' as the first base64url character: the storage tool would read it as an option.
    draws = iter([b"\xf8" + bytes(15), b"\xf9" + bytes(15), bytes(16)])
    cluster_id = new_cluster_id(lambda: next(draws))
    assert cluster_id == "AAAAAAAAAAAAAAAAAAAAAA"
    assert base64.urlsafe_b64encode(b"\xf8" + bytes(15)).decode().startswith("-")
