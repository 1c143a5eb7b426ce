// Hadoop's local file system, as both its APIs reach it (FileSystem: Parquet's writes, Delta's
// reads; FileContext: Delta's log store, the stream's checkpoint), without a process per call.
//
// Why: without Hadoop's native library (pyspark ships none), RawLocalFileSystem sets a permission
// by running `chmod` (every file it creates with one: each data file and its checksum, each Delta
// commit, each checkpoint file) and reads a link by running `readlink` (every FileContext rename:
// each Delta commit and checkpoint file, twice). Measured in the test suite's session JVM over
// test_parsed_tables (strace): ~1,780 processes in two minutes, 8.8 CPU-s in those processes
// alone, ~5 ms each, on top of the JVM's own cost of starting and reaping them.
//
// What changes: the same two answers, from java.nio in the JVM. A permission with a special bit
// (setuid, setgid, sticky) asked for or already on the file still goes to `chmod`, which treats
// those bits as Hadoop always had it; so does a file system without POSIX permissions. The link's
// target is read as `readlink` printed it (Hadoop reads it of the path's string, scheme and all,
// so for a qualified path both find no link). Everything else is Hadoop's own code.
//
// Named by spark.hadoop.fs.file.impl and spark.hadoop.fs.AbstractFileSystem.file.impl
// (kafkalake.launch.spark_conf), only with kafkalake's JVM extension on. Its package goes into a jar
// of its own, on the driver's class path from the JVM's start (spark-submit reads the jars it is
// given through this file system before it loads them): it depends on Hadoop alone, where the
// extension's other classes need Delta's jars beside them (kafkalake.launch.jvm_extension).
package kafkalake.hadoop

import java.io.File
import java.net.URI
import java.nio.file.{Files, InvalidPathException}
import java.nio.file.attribute.PosixFilePermission

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{
  ChecksumFs,
  DelegateToFileSystem,
  FileStatus,
  FsConstants,
  FsServerDefaults,
  FSLinkResolver,
  LocalFileSystem,
  Path,
  RawLocalFileSystem
}
import org.apache.hadoop.fs.local.LocalConfigKeys
import org.apache.hadoop.fs.permission.FsPermission

object LocalFileSystems {
  private val SpecialBits = 0xe00 // 07000: setuid, setgid, sticky
  private val Bits = Seq(
    0x100 -> PosixFilePermission.OWNER_READ,
    0x80 -> PosixFilePermission.OWNER_WRITE,
    0x40 -> PosixFilePermission.OWNER_EXECUTE,
    0x20 -> PosixFilePermission.GROUP_READ,
    0x10 -> PosixFilePermission.GROUP_WRITE,
    0x8 -> PosixFilePermission.GROUP_EXECUTE,
    0x4 -> PosixFilePermission.OTHERS_READ,
    0x2 -> PosixFilePermission.OTHERS_WRITE,
    0x1 -> PosixFilePermission.OTHERS_EXECUTE
  )

  def posixPermissions(mode: Int): java.util.Set[PosixFilePermission] = {
    val set = java.util.EnumSet.noneOf(classOf[PosixFilePermission])
    Bits.foreach { case (bit, permission) => if ((mode & bit) != 0) set.add(permission) }
    set
  }

  /** Sets `mode` (rwx bits only) on `file` in the JVM; false where `chmod` must do it instead. */
  def setMode(file: File, mode: Int): Boolean = {
    if ((mode & SpecialBits) != 0) return false
    try {
      val current = Files.getAttribute(file.toPath, "unix:mode").asInstanceOf[Int]
      if ((current & SpecialBits) != 0) return false
      Files.setPosixFilePermissions(file.toPath, posixPermissions(mode))
      true
    } catch {
      case _: UnsupportedOperationException | _: IllegalArgumentException | _: InvalidPathException => false
    }
  }

  /** What `readlink PATH` printed, trimmed as Hadoop's FileUtil.readLink has it; "" for no link. */
  def readLink(file: File): String =
    try {
      val path = file.toPath
      if (Files.isSymbolicLink(path)) Files.readSymbolicLink(path).toString.trim else ""
    } catch {
      case NonFatal(_) => ""
    }
}

/** RawLocalFileSystem with setPermission and the link look-ups in the JVM (see the file's head). */
class KafkalakeRawLocalFileSystem extends RawLocalFileSystem {
  override def setPermission(p: Path, permission: FsPermission): Unit = {
    if (!LocalFileSystems.setMode(pathToFile(p), permission.toShort.toInt)) {
      super.setPermission(p, permission)
    }
  }

  // As RawLocalFileSystem's (deprecated, the one it uses) link status, with the link read in the JVM.
  private def linkStatus(f: Path): FileStatus = {
    val target = LocalFileSystems.readLink(new File(f.toString))
    try {
      val status = getFileStatus(f)
      if (target.isEmpty) status
      else {
        new FileStatus(
          status.getLen, false, status.getReplication, status.getBlockSize, status.getModificationTime,
          status.getAccessTime, status.getPermission, status.getOwner, status.getGroup, new Path(target), f
        )
      }
    } catch {
      case missing: java.io.FileNotFoundException =>
        if (target.isEmpty) throw missing
        new FileStatus(0, false, 0, 0, 0, 0, FsPermission.getDefault, "", "", new Path(target), f)
    }
  }

  override def getFileLinkStatus(f: Path): FileStatus = {
    val status = linkStatus(f)
    if (status.isSymlink) {
      status.setSymlink(FSLinkResolver.qualifySymlinkTarget(getUri, status.getPath, status.getSymlink))
    }
    status
  }

  override def getLinkTarget(f: Path): Path = linkStatus(f).getSymlink
}

/** LocalFileSystem (checksums, as Hadoop's) over [[KafkalakeRawLocalFileSystem]]: fs.file.impl. */
class KafkalakeLocalFileSystem extends LocalFileSystem(new KafkalakeRawLocalFileSystem)

/** Hadoop's RawLocalFs (FileContext's local file system) over [[KafkalakeRawLocalFileSystem]]. */
class KafkalakeRawLocalFs(uri: URI, conf: Configuration)
    extends DelegateToFileSystem(uri, new KafkalakeRawLocalFileSystem, conf, FsConstants.LOCAL_FS_URI.getScheme, false) {
  def this(conf: Configuration) = this(FsConstants.LOCAL_FS_URI, conf)
  override def getUriDefaultPort: Int = -1
  override def getServerDefaults(f: Path): FsServerDefaults = LocalConfigKeys.getServerDefaults
  @deprecated("as AbstractFileSystem's", "")
  override def getServerDefaults: FsServerDefaults = LocalConfigKeys.getServerDefaults
  override def isValidName(src: String): Boolean = true
}

/** Hadoop's LocalFs (checksums) over [[KafkalakeRawLocalFs]]: fs.AbstractFileSystem.file.impl. */
class KafkalakeLocalFs(uri: URI, conf: Configuration) extends ChecksumFs(new KafkalakeRawLocalFs(uri, conf)) {
  def this(conf: Configuration) = this(FsConstants.LOCAL_FS_URI, conf)
}
