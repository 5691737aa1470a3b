package io.outboxkit.hadoop;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;

import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;

/**
 * Hadoop's local file system (checksummed, as {@code file:} is by default) that sets a file's
 * permissions through Java instead of a {@code chmod} process.
 *
 * <p>Without Hadoop's native library (PySpark ships none), {@link RawLocalFileSystem} sets the
 * permissions of every file it creates, and of its checksum file, by running {@code chmod}: a
 * Spark driver writing a streaming query's offset and commit logs to a local folder starts
 * four processes per micro-batch. Where the native library is loaded, for a mode beyond rwxrwxrwx (the sticky
 * bit) or on a file system without POSIX modes, Hadoop's own call is kept.
 */
public class ForklessLocalFileSystem extends LocalFileSystem {

  public ForklessLocalFileSystem() {
    super(new Raw());
  }

  /** The raw file system under the checksums. */
  public static class Raw extends RawLocalFileSystem {
    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      short mode = permission.toShort();
      if (NativeIO.isAvailable() || (mode & ~0777) != 0) { // the sticky bit: chmod sets it
        super.setPermission(p, permission);
        return;
      }
      try {
        Files.setPosixFilePermissions(pathToFile(p).toPath(), posix(mode));
      } catch (UnsupportedOperationException notPosix) { // a file system without POSIX modes
        super.setPermission(p, permission);
      }
    }
  }

  /** The POSIX permissions of a mode's nine lowest bits (rwxrwxrwx). */
  static Set<PosixFilePermission> posix(short mode) {
    PosixFilePermission[] bits = {
      PosixFilePermission.OTHERS_EXECUTE, PosixFilePermission.OTHERS_WRITE,
      PosixFilePermission.OTHERS_READ, PosixFilePermission.GROUP_EXECUTE,
      PosixFilePermission.GROUP_WRITE, PosixFilePermission.GROUP_READ,
      PosixFilePermission.OWNER_EXECUTE, PosixFilePermission.OWNER_WRITE,
      PosixFilePermission.OWNER_READ,
    };
    Set<PosixFilePermission> found = EnumSet.noneOf(PosixFilePermission.class);
    for (int bit = 0; bit < bits.length; bit++) {
      if ((mode & (1 << bit)) != 0) {
        found.add(bits[bit]);
      }
    }
    return found;
  }
}
