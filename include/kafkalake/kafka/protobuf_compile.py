"""``.proto`` text → a ``FileDescriptorProto``, with protoc.

A registry hands a Protobuf schema back as ``.proto`` text when it was registered so (by Confluent's
Java serializer, by hand, or by any client to a registry that keeps what it was given, as Apicurio
does) and it is not asked for another form. protoc is the one compiler that reads every ``.proto``
as Google's tools do (options, extensions, ``edition``, nested and imported types); the pure-Python
parsers give a syntax tree, not descriptors, and would need resolving type names by hand.
``grpcio-tools`` ships protoc inside its wheel (``python -m grpc_tools.protoc``), so the workers
need no binary of their own. It runs in a subprocess, so that its error text (written by C++ to the
process's stderr) can be read and named, and in a private temp folder that is removed after.

Only the job's driver compiles (:class:`~kafkalake.kafka.schema_registry.WriterSchemas` resolves
a schema once a run and keeps the result): the executors get descriptors.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kafkalake.core.errors import UnusableSchemaError

#: Seconds protoc may take for one file (a schema is a few kB; this is a guard, not a budget).
TIMEOUT = 60.0


def compile_text(name: str, text: str, dependencies: Sequence[Any]) -> Any:
    """The ``FileDescriptorProto`` of the ``.proto`` ``text``, compiled as the file ``name``.

    Args:
        name: the file's name, as other files import it (``shop/customer.proto``).
        text: its ``.proto`` source.
        dependencies: the ``FileDescriptorProto`` of every file it imports, directly or not
            (Google's well-known types among them, when it imports them).

    Raises:
        UnusableSchemaError: the text does not compile (protoc's message), or protoc cannot run.
    """
    from google.protobuf import descriptor_pb2

    given = descriptor_pb2.FileDescriptorSet()
    given.file.extend(dependencies)
    with tempfile.TemporaryDirectory(prefix="kafkalake-protoc-") as folder:
        root = Path(folder)
        source = root / "src" / name
        if not source.resolve().is_relative_to((root / "src").resolve()):
            raise UnusableSchemaError(f"the file name {name!r} is not a relative path")
        source.parent.mkdir(parents=True, exist_ok=True)
        source.write_text(text)
        (root / "deps.pb").write_bytes(given.SerializeToString())
        command = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"--proto_path={root / 'src'}",
            f"--descriptor_set_in={root / 'deps.pb'}",
            f"--descriptor_set_out={root / 'out.pb'}",
            name,
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT, check=False)
        except (OSError, subprocess.TimeoutExpired) as err:
            raise UnusableSchemaError(f"protoc (grpcio-tools) did not run: {err}") from None
        if done.returncode != 0:
            message = (done.stderr or done.stdout).strip().replace(str(root / "src") + "/", "")
            if "No module named grpc_tools" in message:
                message = "grpcio-tools is not installed (requirements.txt)"
            raise UnusableSchemaError(f"the .proto text does not compile: {message[:1000]}")
        out = descriptor_pb2.FileDescriptorSet.FromString((root / "out.pb").read_bytes())
    return out.file[0]
