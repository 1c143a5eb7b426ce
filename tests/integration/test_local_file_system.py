"""The local file system of kafkalake's JVM extension (``kafkalake.hadoop``, LocalFileSystems.scala)
against Hadoop's own: the same permissions and link answers, without a process per call.

Hadoop's RawLocalFileSystem is the oracle: each case is done to two twin paths, one through each,
and what lands on disk (the mode, special bits included) and what each answers (a link's status,
its target, a missing path's error) must be the same. Real JVM, real files; the shared session's."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from kafkalake.launch.spark_conf import LOCAL_FS_SETTINGS
from kafkalake.spark import extension

pytestmark = pytest.mark.integration

#: Odd names too: spaces, a percent sign, non-ASCII, a leading dash, a colon (what Path parses).
NAMES = ["plain", "with space", "100% done", "zoë-ñ-日本", "-dash", "a:colon"]


@pytest.fixture(scope="module")
def jvm(spark: Any) -> Any:
    if not extension.loaded(spark):
        pytest.skip("this session runs without kafkalake's JVM extension (KAFKALAKE_JVM_EXTENSION=off)")
    return spark._jvm


@pytest.fixture(scope="module")
def file_systems(spark: Any, jvm: Any) -> tuple[Any, Any]:
    """(kafkalake's raw local file system, Hadoop's), initialized as a job's are."""
    conf = spark._jsc.hadoopConfiguration()
    ours = jvm.kafkalake.hadoop.KafkalakeRawLocalFileSystem()
    hadoops = jvm.org.apache.hadoop.fs.RawLocalFileSystem()
    for fs in (ours, hadoops):
        fs.initialize(jvm.java.net.URI("file:///"), conf)
    return ours, hadoops


def hadoop_path(jvm: Any, path: Path, qualified: bool) -> Any:
    # Through a URI, as Spark and Delta hand paths over: a name with a colon is no scheme then.
    return jvm.org.apache.hadoop.fs.Path(jvm.java.io.File(str(path)).toURI() if qualified else str(path))


def test_every_job_gets_it_through_both_of_hadoops_apis(spark, jvm):
    conf = spark._jsc.hadoopConfiguration()
    uri = jvm.java.net.URI("file:///")
    assert (
        jvm.org.apache.hadoop.fs.FileSystem.get(uri, conf).getClass().getName()
        == (LOCAL_FS_SETTINGS["spark.hadoop.fs.file.impl"])
    )
    context = jvm.org.apache.hadoop.fs.FileContext.getFileContext(uri, conf)
    assert (
        context.getDefaultFileSystem().getClass().getName()
        == (LOCAL_FS_SETTINGS["spark.hadoop.fs.AbstractFileSystem.file.impl"])
    )


@pytest.mark.parametrize(
    "before, asked",
    [
        (0o600, "644"),
        (0o644, "755"),
        (0o777, "000"),
        (0o000, "421"),
        (0o640, "777"),
        (0o755, "1777"),  # the sticky bit asked for: chmod's
        (0o2755, "755"),  # a set-group-id bit already there: chmod's (it keeps it on a directory)
        (0o4755, "700"),
    ],
)
@pytest.mark.parametrize("kind", ["file", "directory"])
def test_a_permission_lands_as_hadoops_does(file_systems, jvm, tmp_path, before, asked, kind):
    ours, hadoops = file_systems
    modes = []
    for fs, side in ((ours, "ours"), (hadoops, "hadoop")):
        for name in NAMES:
            target = tmp_path / side / name
            target.parent.mkdir(exist_ok=True)
            target.mkdir() if kind == "directory" else target.write_bytes(b"x")
            os.chmod(target, before)
            permission = jvm.org.apache.hadoop.fs.permission.FsPermission(asked)
            fs.setPermission(hadoop_path(jvm, target, qualified=True), permission)
            modes.append((name, stat.S_IMODE(os.stat(target).st_mode)))
    half = len(modes) // 2
    assert modes[:half] == modes[half:]
    if before & 0o7000 == 0 and len(asked) == 3:
        assert {mode for _, mode in modes[:half]} == {int(asked, 8)}


def test_a_permission_on_a_missing_path_fails_as_hadoops_does(file_systems, jvm, tmp_path):
    from py4j.protocol import Py4JJavaError

    io_error = jvm.java.lang.Class.forName("java.io.IOException")
    for fs in file_systems:
        with pytest.raises(Py4JJavaError) as caught:
            fs.setPermission(
                hadoop_path(jvm, tmp_path / "gone", True),
                jvm.org.apache.hadoop.fs.permission.FsPermission("644"),
            )
        assert io_error.isInstance(caught.value.java_exception), caught.value
        assert "gone" in str(caught.value)


def link_answers(fs: Any, path: Any) -> tuple[Any, ...]:
    """What a caller learns of a path through the link look-ups: status (or the error's class)."""
    try:
        status = fs.getFileLinkStatus(path)
    except Exception as err:  # py4j's error: the Java exception's class is in its text
        return ("error", "FileNotFoundException" in str(err))
    link = status.getSymlink().toString() if status.isSymlink() else None
    return (status.isSymlink(), status.isDirectory(), status.getLen(), link, status.getPath().toString())


@pytest.mark.parametrize("qualified", [True, False], ids=["file: URI", "bare path"])
def test_links_are_answered_as_hadoops_do(file_systems, jvm, tmp_path, qualified):
    ours, hadoops = file_systems
    for name in NAMES:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "file").write_bytes(b"12345")
        (folder / "dir").mkdir()
        (folder / "to-file").symlink_to(folder / "file")
        (folder / "to-dir").symlink_to("dir")  # relative
        (folder / "dangling").symlink_to(folder / "nowhere")
        for entry in ("file", "dir", "to-file", "to-dir", "dangling", "missing"):
            path = hadoop_path(jvm, folder / entry, qualified)
            assert link_answers(ours, path) == link_answers(hadoops, path), (name, entry)
            if entry in ("to-file", "to-dir", "dangling"):
                target = [None, None]
                for i, fs in enumerate((ours, hadoops)):
                    try:
                        found = fs.getLinkTarget(path)
                        target[i] = found.toString() if found is not None else None
                    except Exception as err:
                        target[i] = type(err).__name__
                assert target[0] == target[1], (name, entry)
