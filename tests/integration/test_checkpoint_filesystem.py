"""The consumers' local file system on the real Spark JVM: checkpoint files written with their
permissions set through Java, not by a ``chmod`` process each as Hadoop's own does."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

from spark_consumers.session import FORKLESS_FS_CLASS


def reaped_ticks(pid: int) -> int:
    """The CPU ticks of the children ``pid`` started and reaped (cutime + cstime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[13]) + int(fields[14])


def write_files(jvm: Any, fs: Any, folder: Path, count: int) -> None:
    for n in range(count):
        out = fs.create(jvm.org.apache.hadoop.fs.Path(f"file://{folder}/{n}"), True)
        out.write(b"v1\n{}")
        out.close()


def test_checkpoint_files_are_written_without_a_process_each(spark: Any, tmp_path: Path) -> None:
    jvm = spark._jvm  # type: ignore[attr-defined]
    conf = spark._jsc.hadoopConfiguration()  # type: ignore[attr-defined]
    uri = jvm.java.net.URI("file:///")
    ours = jvm.org.apache.hadoop.fs.FileSystem.get(uri, conf)
    assert ours.getClass().getName() == FORKLESS_FS_CLASS
    hadoops = jvm.org.apache.hadoop.fs.LocalFileSystem()
    hadoops.initialize(uri, conf)
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    count = 40

    before = reaped_ticks(pid)
    write_files(jvm, hadoops, tmp_path / "hadoop", count)
    # Hadoop's own starts a chmod for each file (milliseconds of CPU each, counted once reaped):
    # what the measurement below would see if ours did.
    assert reaped_ticks(pid) - before >= 4

    before = reaped_ticks(pid)
    write_files(jvm, ours, tmp_path / "ours", count)
    assert reaped_ticks(pid) - before <= 1

    # The same files, with the same permissions (0666 less Hadoop's umask, 022), and their
    # checksums beside them.
    for name in ("hadoop", "ours"):
        files = sorted(p.name for p in (tmp_path / name).iterdir())
        assert files == sorted([str(n) for n in range(count)] + [f".{n}.crc" for n in range(count)])
        assert stat.S_IMODE((tmp_path / name / "0").stat().st_mode) == 0o644, name
    # A directory made with a permission gets it, as chmod would set it.
    permission = jvm.org.apache.hadoop.fs.permission.FsPermission.createImmutable(0o750)
    ours.mkdirs(jvm.org.apache.hadoop.fs.Path(f"file://{tmp_path}/ours/a/b"), permission)
    assert stat.S_IMODE((tmp_path / "ours" / "a" / "b").stat().st_mode) == 0o750
