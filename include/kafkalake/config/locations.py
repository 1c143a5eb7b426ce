"""Which kinds of table location the project supports: local paths, ``file://`` and ``s3a://``.

Told from the location's scheme alone (no I/O), so the catalog refuses the rest when it loads.
"""

from __future__ import annotations

from urllib.parse import urlsplit

#: Object stores whose tables work end to end (Hadoop's S3A in the jobs; delta-rs and pyarrow
#: in the pre-flight and the lake's readers).
OBJECT_STORE_SCHEMES = frozenset({"s3a"})
#: Schemes that are plain local files.
LOCAL_SCHEMES = frozenset({"", "file"})


def scheme(location: str) -> str:
    """``s3a://b/t`` → ``s3a``; a local path → ``""``."""
    return urlsplit(location).scheme.lower() if "://" in location else ""


def is_object_store(location: str) -> bool:
    return scheme(location) in OBJECT_STORE_SCHEMES


def unsupported(location: str) -> str | None:
    """Why tables cannot live at ``location``; None when they can."""
    found = scheme(location)
    if found in LOCAL_SCHEMES or found in OBJECT_STORE_SCHEMES:
        if found in OBJECT_STORE_SCHEMES and not urlsplit(location).netloc:
            return f"{location!r} names no bucket: write {found}://<bucket>/<folder>"
        if found in OBJECT_STORE_SCHEMES and not urlsplit(location).path.strip("/"):
            # A table's folder holds only the table: its run history and its parsed tables go
            # beside it, which a bucket's root has no room for.
            return f"{location!r} is a bucket's root: write {found}://<bucket>/<folder>"
        return None
    return (
        f"tables on {found}:// are not supported yet: the pre-flight, the checkpoint and schema history "
        "readers work on local paths, file:// and s3a:// (S3 and S3-compatible stores); for S3 write "
        "s3a://<bucket>/<folder>"
    )
