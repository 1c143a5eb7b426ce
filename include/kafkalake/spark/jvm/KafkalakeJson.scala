// kafkalake's JSON functions for Spark: Spark's own from_json and json_object_keys, reading a
// record's UTF-8 bytes with Jackson's byte-based parser.
//
// Why: both Spark functions build a Reader-based Jackson parser per record
// (CreateJacksonParser.utf8String: an InputStreamReader with a fresh 8 KiB buffer and a charset
// decoder), which cost about as much as the parse itself on ~300-byte events (Java Flight
// Recorder of the parsed write: json_object_keys 21% of the samples, from_json's set-up 15%).
// Jackson's byte-based parser takes the bytes as they are, with recycled buffers.
//
// The results are Spark's, record for record: the same JacksonParser, options, failure handling
// and corrupt-record rule as from_json (JsonToStructsEvaluator), the same key walk as
// json_object_keys (JsonExpressionUtils.jsonObjectKeys). Where the two parsers could read the bytes
// differently, the record goes to Spark's reader-based parser: invalid UTF-8 (the reader replaces
// it with U+FFFD, the byte parser stops), a byte-order mark or a zero byte in the first four (the
// byte parser would take the record for UTF-16 or UTF-32, or skip the mark), and any record the
// byte parser refuses (it is stricter at the edges: an unescaped control character in a
// single-quoted string). tests/integration/test_json_functions.py compares the two on odd bytes.
//
// In package org.apache.spark.sql so that it may use Spark's JSON parser classes, which are
// private[sql]. Built at set-up against the pyspark jars (kafkalake.core.jvm_extension).
package org.apache.spark.sql.kafkalake

import java.io.IOException

import scala.util.control.NonFatal

import com.fasterxml.jackson.core.{JsonFactory, JsonParser, JsonToken}

import org.apache.spark.sql.SparkSessionExtensions
import org.apache.spark.sql.catalyst.{FunctionIdentifier, InternalRow}
import org.apache.spark.sql.catalyst.expressions.{ExpectsInputTypes, Expression, ExpressionInfo, ExprUtils, TimeZoneAwareExpression, UnaryExpression}
import org.apache.spark.sql.catalyst.expressions.codegen.{CodeGenerator, CodegenContext, ExprCode}
import org.apache.spark.sql.catalyst.json.{CreateJacksonParser, JacksonParser, JSONOptions}
import org.apache.spark.sql.catalyst.util.{FailFastMode, FailureSafeParser, PermissiveMode}
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.{AbstractDataType, ArrayType, DataType, IntegerType, MapType, StringType, StructField, StructType}
import org.apache.spark.unsafe.types.UTF8String

object Utf8Bytes {
  /** A parser of the record: over its bytes where that reads as Spark's reader-based parser. */
  def parser(factory: JsonFactory, record: UTF8String): JsonParser = {
    if (!byteParserReadsAsReader(record)) return CreateJacksonParser.utf8String(factory, record)
    val bytes = record.getByteBuffer
    factory.createParser(bytes.array(), bytes.arrayOffset() + bytes.position(), bytes.remaining())
  }

  /** `read` with parsers over the record's bytes; where that fails, `read` again with Spark's own
   *  reader-based parsers. The two parsers differ at the edges (the byte parser refuses an
   *  unescaped control character in a single-quoted string), and a record Spark's parser takes
   *  must not become a null here. A record neither takes fails as Spark's does. */
  def read[T](read: ((JsonFactory, UTF8String) => JsonParser) => T): T =
    try read(parser)
    catch { case NonFatal(_) => read(CreateJacksonParser.utf8String) }

  /** Whether Jackson's byte parser reads the record as UTF-8, char for char as the reader does. */
  def byteParserReadsAsReader(record: UTF8String): Boolean = {
    val n = record.numBytes
    if (n > 0) {
      val first = record.getByte(0) & 0xff
      // A UTF-8 byte-order mark the byte parser skips; UTF-16/32 marks it decodes by.
      if (first == 0xef || first == 0xfe || first == 0xff) return false
    }
    var i = 0
    // Jackson guesses UTF-16 or UTF-32 from zero bytes among the first four.
    while (i < 4 && i < n) {
      if (record.getByte(i) == 0) return false
      i += 1
    }
    record.isValid()
  }
}

/** from_json's evaluation (JsonToStructsEvaluator, Spark 4.2) of a struct, array or map, over bytes. */
class FromJsonEvaluator(schema: DataType, corruptRecord: String, timeZoneId: Option[String])
    extends Serializable {

  @transient private lazy val converter: Iterator[InternalRow] => Any = schema match {
    case _: StructType => rows => if (rows.hasNext) rows.next() else null
    case _: ArrayType => rows => if (rows.hasNext) rows.next().getArray(0) else null
    case _: MapType => rows => if (rows.hasNext) rows.next().getMap(0) else null
  }

  @transient private lazy val parser = {
    val options = new JSONOptions(Map.empty[String, String], timeZoneId.get, corruptRecord)
    val mode = options.parseMode
    require(mode == PermissiveMode || mode == FailFastMode, s"parse mode $mode")
    val (parserSchema, actualSchema) = schema match {
      case s: StructType =>
        ExprUtils.verifyColumnNameOfCorruptRecord(s, options.columnNameOfCorruptRecord)
        (s, StructType(s.filterNot(_.name == options.columnNameOfCorruptRecord)))
      case other => (StructType(Array(StructField("value", other))), other)
    }
    // Spark's exact-string parsing (a string field keeps a nested value's own text) works only on
    // a parser over bytes or chars in memory, so Spark's reader-based one never takes it and writes
    // such a value out compactly: off here, so the text is Spark's, `{"b":1}` not `{"b": 1}`.
    // (A copy by its settings: a task's own conf is read-only and refuses clone.)
    val conf = new SQLConf
    SQLConf.get.getAllConfs.foreach { case (key, value) => conf.setConfString(key, value) }
    conf.setConf(SQLConf.JSON_EXACT_STRING_PARSING, false)
    val raw = SQLConf.withExistingConf(conf) {
      new JacksonParser(actualSchema, options, allowArrayAsStructs = false)
    }
    new FailureSafeParser[UTF8String](
      input => Utf8Bytes.read(create => raw.parse(input, create, identity[UTF8String])),
      mode,
      parserSchema,
      options.columnNameOfCorruptRecord)
  }

  final def evaluate(json: UTF8String): Any = converter(parser.parse(json))
}

/** kafkalake_from_json(text, schema): from_json(text, schema); the schema as JSON or DDL text. */
case class KafkalakeFromJson(child: Expression, schema: DataType, timeZoneId: Option[String] = None)
    extends UnaryExpression with TimeZoneAwareExpression with ExpectsInputTypes {

  require(
    schema.isInstanceOf[StructType] || schema.isInstanceOf[ArrayType] || schema.isInstanceOf[MapType],
    s"kafkalake_from_json reads into a struct, an array or a map, not ${schema.simpleString}")

  // As from_json (spark.sql.legacy.json.allowEmptyString... aside): every field may be null.
  private lazy val nullableSchema: DataType = schema.asNullable

  override def dataType: DataType = nullableSchema
  override def nullable: Boolean = true
  override def inputTypes: Seq[AbstractDataType] = Seq(StringType)
  override def withTimeZone(timeZoneId: String): KafkalakeFromJson = copy(timeZoneId = Some(timeZoneId))

  @transient private lazy val evaluator =
    new FromJsonEvaluator(nullableSchema, SQLConf.get.columnNameOfCorruptRecord, timeZoneId)

  override protected def nullSafeEval(json: Any): Any = evaluator.evaluate(json.asInstanceOf[UTF8String])

  override protected def doGenCode(ctx: CodegenContext, ev: ExprCode): ExprCode = {
    val ref = ctx.addReferenceObj("evaluator", evaluator, classOf[FromJsonEvaluator].getName)
    val javaType = CodeGenerator.javaType(dataType)
    nullSafeCodeGen(ctx, ev, json => {
      val parsed = ctx.freshName("parsed")
      s"""Object $parsed = $ref.evaluate($json);
         |if ($parsed == null) { ${ev.isNull} = true; } else { ${ev.value} = ($javaType) $parsed; }""".stripMargin
    })
  }

  override protected def withNewChildInternal(newChild: Expression): KafkalakeFromJson =
    copy(child = newChild)
}

object JsonKeyCount {
  // json_object_keys' own factory (its features decide what parses); private to Spark's package.
  private lazy val factory = Class
    .forName("org.apache.spark.sql.catalyst.expressions.json.SharedFactory")
    .getMethod("jsonFactory")
    .invoke(null)
    .asInstanceOf[JsonFactory]

  /** size(json_object_keys(json)), or null where that is null: not a JSON object, or not JSON. */
  def count(json: UTF8String): java.lang.Integer =
    try Utf8Bytes.read(create => countWith(create(factory, json)))
    catch { case _: IOException => null }

  /** Null where the text is not a JSON object; an IOException where it is not JSON. */
  private def countWith(parser: JsonParser): java.lang.Integer =
    try {
      if (parser.nextToken() == null || parser.currentToken() != JsonToken.START_OBJECT) return null
      var keys = 0
      while (parser.nextValue() != null && parser.currentName() != null) {
        keys += 1
        parser.skipChildren()
      }
      keys
    } finally parser.close()
}

/** kafkalake_json_key_count(text): the number of the top-level keys of a JSON object. */
case class KafkalakeJsonKeyCount(child: Expression) extends UnaryExpression with ExpectsInputTypes {
  override def dataType: DataType = IntegerType
  override def nullable: Boolean = true
  override def inputTypes: Seq[AbstractDataType] = Seq(StringType)

  override protected def nullSafeEval(json: Any): Any = JsonKeyCount.count(json.asInstanceOf[UTF8String])

  override protected def doGenCode(ctx: CodegenContext, ev: ExprCode): ExprCode = {
    nullSafeCodeGen(ctx, ev, json => {
      val keys = ctx.freshName("keys")
      s"""Integer $keys = ${JsonKeyCount.getClass.getName.stripSuffix("$")}.count($json);
         |if ($keys == null) { ${ev.isNull} = true; } else { ${ev.value} = $keys; }""".stripMargin
    })
  }

  override protected def withNewChildInternal(newChild: Expression): KafkalakeJsonKeyCount =
    copy(child = newChild)
}

/** Registers the functions: spark.sql.extensions=org.apache.spark.sql.kafkalake.KafkalakeExtensions */
class KafkalakeExtensions extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit = {
    extensions.injectFunction((
      FunctionIdentifier("kafkalake_from_json"),
      new ExpressionInfo(classOf[KafkalakeFromJson].getName, "kafkalake_from_json"),
      (args: Seq[Expression]) => args match {
        case Seq(text, schema) if schema.foldable && schema.dataType.isInstanceOf[StringType] =>
          KafkalakeFromJson(text, KafkalakeExtensions.schemaOf(schema.eval().toString))
        case _ => throw new IllegalArgumentException(
          "kafkalake_from_json takes two arguments: the JSON text and its schema as a string literal")
      }))
    extensions.injectFunction((
      FunctionIdentifier("kafkalake_json_key_count"),
      new ExpressionInfo(classOf[KafkalakeJsonKeyCount].getName, "kafkalake_json_key_count"),
      (args: Seq[Expression]) => args match {
        case Seq(text) => KafkalakeJsonKeyCount(text)
        case _ => throw new IllegalArgumentException("kafkalake_json_key_count takes one argument: the JSON text")
      }))
  }
}

object KafkalakeExtensions {
  /** A schema given as Spark's JSON form of a data type (what pyspark's DataType.json() writes) or as DDL. */
  def schemaOf(text: String): DataType =
    if (text.trim.startsWith("{")) DataType.fromJson(text) else DataType.fromDDL(text)
}
