// An idempotent append to a Delta table, as df.write.format("delta").mode("append")
// .option("txnAppId", ...).option("txnVersion", ...).save(path) does it, with a cheaper look-up of
// the (appId, version) the table has committed.
//
// Why: Delta 4.4 answers "has this app committed this version?" (OptimisticTransaction.txnVersion)
// from Snapshot.transactions, which is the snapshot's full state reconstruction: three Spark jobs
// per table per write, whatever the table's size (an ingest drain: 12 of its 20 jobs, ~1 CPU-s of
// driver and executors per write on 2 cores). Yet every commit that Delta makes with incremental
// checksums on (the default) writes the table's SetTransactions into its version's .crc
// (setTransactionsInCrc.writeOnCommit, up to setTransactionsInCrc.maxAllowed of them), and the
// snapshot holds that checksum already. This write reads the version from there.
//
// Nothing else changes: the same WriteIntoDelta builds the commit (schema checks, mergeSchema,
// userMetadata, the SetTransaction action from the options), the same transaction commits it, and
// the app id is registered as read, so a concurrent commit of the same app id (a driver that lost
// its lease and wrote the batch meanwhile) still fails this commit with Delta's
// ConcurrentTransactionException, as the plain write's look-up does. Where the checksum does not
// hold the transactions (no .crc for the version, a writer that leaves them out, more than the
// maximum), or the registration cannot be made, the transaction's own look-up answers, as before.
//
// In a package under org.apache.spark.sql.delta so that it may use Delta's private[delta] parts.
// Built at set-up against pyspark's and Delta's jars (kafkalake.launch.jvm_extension).
package org.apache.spark.sql.delta.kafkalake

import java.util.concurrent.atomic.AtomicBoolean

import scala.collection.mutable.ArrayBuffer
import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import org.apache.hadoop.fs.Path

import org.apache.spark.sql.{Row, SaveMode}
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.classic.{DataFrame, SparkSession}
import org.apache.spark.sql.delta.{DeltaConfigs, DeltaLog, DeltaOperations, DeltaOptions, OptimisticTransaction}
import org.apache.spark.sql.delta.commands.WriteIntoDelta
import org.apache.spark.sql.execution.SQLExecution
import org.apache.spark.sql.execution.command.LeafRunnableCommand

object IdempotentAppend {

  /** Where the version came from in the last write of this JVM (for tests): "checksum" or "state". */
  @volatile var lastLookup: String = ""

  /**
   * Append `data` to the Delta table at `path` unless the table has committed `txnVersion` (or a
   * later one) of `txnAppId`, both given in `options` like the writer's other options. True when
   * this call committed the rows, false when it skipped them.
   */
  def save(data: DataFrame, path: String, options: java.util.Map[String, String]): Boolean = {
    val spark = data.sparkSession
    val parameters = options.asScala.toMap + ("path" -> path)
    val deltaOptions = new DeltaOptions(parameters, spark.sessionState.conf)
    require(
      deltaOptions.txnAppId.isDefined && deltaOptions.txnVersion.isDefined,
      "an idempotent append needs both txnAppId and txnVersion")
    val write = WriteIntoDelta(
      deltaLog = DeltaLog.forTable(spark, new Path(path), parameters),
      mode = SaveMode.Append,
      options = deltaOptions,
      partitionColumns = Nil,
      configuration = DeltaConfigs.validateConfigurations(
        parameters.filter { case (key, _) => key.startsWith("delta.") }),
      data = data,
      catalogTableOpt = None)
    // Planning may copy the command; the flag is shared by the copies.
    val committed = new AtomicBoolean(false)
    val execution = spark.sessionState.executePlan(IdempotentAppendCommand(write, committed))
    SQLExecution.withNewExecutionId(execution, Some("kafkalake idempotent append"))(execution.toRdd)
    committed.get
  }

  /** The version of `appId` the transaction's snapshot holds (-1: none), registered as read. */
  private[kafkalake] def committedVersion(txn: OptimisticTransaction, appId: String): Long = {
    val fromChecksum = txn.snapshot.checksumOpt.flatMap(_.setTransactions)
    fromChecksum match {
      case Some(transactions) if registerRead(txn, appId) =>
        lastLookup = "checksum"
        transactions.filter(_.appId == appId).map(_.version).maxOption.getOrElse(-1L)
      case _ =>
        lastLookup = "state"
        txn.txnVersion(appId)
    }
  }

  // What txnVersion does besides the look-up: the commit then conflicts with any concurrent
  // commit that carries the same app id. The buffer is protected in Scala, public in bytecode.
  private def registerRead(txn: OptimisticTransaction, appId: String): Boolean =
    try {
      val read = txn.getClass.getMethod("readTxn").invoke(txn).asInstanceOf[ArrayBuffer[String]]
      read += appId
      true
    } catch {
      case NonFatal(_) => false
    }
}

/** WriteIntoDelta.run with IdempotentAppend.committedVersion for the has-it-been-done check. */
case class IdempotentAppendCommand(write: WriteIntoDelta, committed: AtomicBoolean)
  extends LeafRunnableCommand {

  override def output: Seq[Attribute] = Nil

  override def run(sparkSession: org.apache.spark.sql.SparkSession): Seq[Row] = {
    val options = write.options
    val appId = options.txnAppId.get
    val version = options.txnVersion.get
    write.deltaLog.withNewTransaction(None) { txn =>
      if (IdempotentAppend.committedVersion(txn, appId) >= version) {
        logInfo(s"Already completed batch $version in application $appId; skipped.")
      } else {
        val commitData = write.writeAndReturnCommitData(txn, sparkSession.asInstanceOf[SparkSession])
        val operation = DeltaOperations.Write(
          mode = SaveMode.Append,
          partitionBy = Some(Nil),
          userMetadata = options.userMetadata,
          canMergeSchema = if (options.canMergeSchema) Some(true) else None)
        txn.commitIfNeeded(commitData.actions, operation, tags = commitData.stringTags)
        committed.set(true)
      }
    }
    Seq.empty
  }
}
