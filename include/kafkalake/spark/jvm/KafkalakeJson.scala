// kafkalake's JSON functions for Spark: Spark's own from_json, reading a record's UTF-8 bytes with
// Jackson's byte-based parser, and the same parse counting the record's top-level keys as it reads
// them (what size(json_object_keys(...)) gives, without a second parse); and the UTF-8 check of the
// bytes they read, word at a time where the bytes are ASCII.
//
// Why: both Spark functions build a Reader-based Jackson parser per record
// (CreateJacksonParser.utf8String: an InputStreamReader with a fresh 8 KiB buffer and a charset
// decoder), which cost about as much as the parse itself on ~300-byte events (Java Flight
// Recorder of the parsed write: json_object_keys 21% of the samples, from_json's set-up 15%).
// Jackson's byte-based parser takes the bytes as they are, with recycled buffers.
//
// The results are Spark's, record for record: the same JacksonParser, options, failure handling
// and corrupt-record rule as from_json (JsonToStructsEvaluator). One addition: the keyed function's
// count is -1 where more than whitespace or NUL bytes follows the object (KeyCount.trailing), which
// Spark's parse drops unseen. Where the two parsers could read the bytes
// differently, the record goes to Spark's reader-based parser: invalid UTF-8 (the reader replaces
// it with U+FFFD, the byte parser stops), a byte-order mark or a zero byte in the first four (the
// byte parser would take the record for UTF-16 or UTF-32, or skip the mark), and any record the
// byte parser refuses (it is stricter at the edges: an unescaped control character in a
// single-quoted string). tests/integration/test_json_functions.py compares the two on odd bytes.
//
// In package org.apache.spark.sql so that it may use Spark's JSON parser classes, which are
// private[sql]. Built at set-up against the pyspark jars (kafkalake.launch.jvm_extension).
package org.apache.spark.sql.kafkalake

import scala.util.control.NonFatal

import com.fasterxml.jackson.core.{JsonFactory, JsonParser, JsonToken}
import com.fasterxml.jackson.core.util.JsonParserDelegate

import org.apache.spark.sql.SparkSessionExtensions
import org.apache.spark.sql.catalyst.{FunctionIdentifier, InternalRow}
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow
import org.apache.spark.sql.catalyst.expressions.{ExpectsInputTypes, Expression, ExpressionInfo, ExprUtils, TimeZoneAwareExpression, UnaryExpression}
import org.apache.spark.sql.catalyst.expressions.codegen.{CodeGenerator, CodegenContext, ExprCode}
import org.apache.spark.sql.catalyst.json.{CreateJacksonParser, JacksonParser, JSONOptions}
import org.apache.spark.sql.catalyst.util.{FailFastMode, FailureSafeParser, PermissiveMode}
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.{AbstractDataType, ArrayType, BinaryType, DataType, IntegerType, LongType, MapType, StringType, StructField, StructType}
import org.apache.spark.unsafe.Platform
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
    isValid(record)
  }

  /** Whether every byte of the string is below 0x80, read eight at a time: ASCII is valid UTF-8. */
  def asciiOnly(record: UTF8String): Boolean = {
    val base = record.getBaseObject
    val offset = record.getBaseOffset
    val n = record.numBytes
    var i = 0
    while (i + 8 <= n) {
      if ((Platform.getLong(base, offset + i) & 0x8080808080808080L) != 0) return false
      i += 8
    }
    while (i < n) {
      if (Platform.getByte(base, offset + i) < 0) return false
      i += 1
    }
    true
  }

  /** UTF8String.isValid's answer. Spark's check reads one byte at a time and was 6% of a parsed
   *  batch's samples (Java Flight Recorder, bench --parsed); a JSON record is mostly ASCII, which
   *  the word-at-a-time scan answers, and only a record with another byte gets Spark's check. */
  def isValid(record: UTF8String): Boolean = asciiOnly(record) || record.isValid()

  /** The bytes as a string where they are valid UTF-8, null where they are not: what
   *  try_validate_utf8(cast(bytes AS STRING)) gives. */
  def text(bytes: Array[Byte]): UTF8String = {
    val record = UTF8String.fromBytes(bytes)
    if (isValid(record)) record else null
  }
}

/** The top-level keys of the record a parser reads, counted as the parse reads them. */
final class KeyCount {
  /** Whether the record's first token opened an object. */
  var objectRoot = false
  var keys = 0
  /** Whether the parse read the record to its end without a failure. */
  var whole = false
  /** Whether the record holds more than its JSON value: a second value (`{"a": 1} {"a": 2}`, two
   *  documents in one message) or other text after it. Spark's parse reads the first value and
   *  never looks further, so what follows would be in no parsed column, rescue or dead letter. */
  var trailing = false
  private var started = false

  def reset(): Unit = { objectRoot = false; keys = 0; whole = false; trailing = false; started = false }

  /** A parser that counts what `parser` reads, from zero. Spark's JacksonParser moves only by
   *  nextToken and skips what it does not need with skipChildren, which reads no key of the
   *  top-level object: so each top-level key passes here once, duplicates and keys outside the
   *  schema included, as json_object_keys (JsonExpressionUtils.jsonObjectKeys) lists them. */
  def counting(parser: JsonParser): JsonParser = {
    reset()
    new JsonParserDelegate(parser) {
      override def nextToken(): JsonToken = {
        val token = delegate.nextToken()
        if (!started) {
          started = true
          objectRoot = token == JsonToken.START_OBJECT
        } else if (token == JsonToken.FIELD_NAME) {
          val parent = delegate.getParsingContext.getParent
          if (parent != null && parent.inRoot()) keys += 1
        }
        token
      }

      // Spark's parse closes its parser when it has read the record's value (tryWithResource):
      // where that value is whole at the root, what the parser has not read yet is what follows.
      override def close(): Unit = {
        try {
          if (started && delegate.currentToken() != null && delegate.getParsingContext.inRoot()) {
            trailing = !blankRest(delegate)
          }
        } catch {
          case NonFatal(_) => () // cannot tell: the record reads as Spark reads it
        } finally {
          delegate.close()
        }
      }
    }
  }

  private val restBytes = new java.io.ByteArrayOutputStream(64)
  private val restChars = new java.io.CharArrayWriter(64)

  /** Whether what `parser` has not read is only JSON whitespace or NUL bytes (a C producer's
   *  string terminator, which Spark's parse never saw either). The byte parser holds the whole
   *  record; the reader-based one (Utf8Bytes' fallback) only its buffer, whose end is all it sees. */
  private def blankRest(parser: JsonParser): Boolean = {
    def blank(c: Int): Boolean = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == 0
    restBytes.reset()
    if (parser.releaseBuffered(restBytes) >= 0) return restBytes.size == 0 || restBytes.toByteArray.forall(b => blank(b))
    restChars.reset()
    if (parser.releaseBuffered(restChars) >= 0) return restChars.size == 0 || restChars.toCharArray.forall(c => blank(c))
    true
  }

  /** The count, where the parse read a JSON object whole: null for anything else (not an object,
   *  not JSON, a value the typed parse could not convert, a record it read only in part); -1 where
   *  the object is followed by more than whitespace (``trailing``). */
  def result: java.lang.Integer =
    if (whole && objectRoot) (if (trailing) -1 else keys) else null
}

/** from_json's evaluation (JsonToStructsEvaluator, Spark 4.2) of a struct, array or map, over bytes;
 *  with `countKeys`, the record's top-level keys counted as it reads them (evaluateKeyed). */
class FromJsonEvaluator(
    schema: DataType,
    corruptRecord: String,
    timeZoneId: Option[String],
    countKeys: Boolean = false)
    extends Serializable {

  @transient private lazy val count = new KeyCount

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
      input => {
        val rows = Utf8Bytes.read { create =>
          // Only the keyed function pays for the counting parser's extra call per token.
          val counted =
            if (countKeys) (f: JsonFactory, r: UTF8String) => count.counting(create(f, r)) else create
          raw.parse(input, counted, identity[UTF8String])
        }
        // JacksonParser's result is built before parse returns: here the record was read whole.
        if (countKeys) count.whole = true
        rows
      },
      mode,
      parserSchema,
      options.columnNameOfCorruptRecord)
  }

  final def evaluate(json: UTF8String): Any = converter(parser.parse(json))

  /** The parse of a struct schema and the record's top-level key count (KeyCount.result), as a row;
   *  for an evaluator made with `countKeys`. */
  final def evaluateKeyed(json: UTF8String): InternalRow = {
    val parsed = evaluate(json)
    new GenericInternalRow(Array[Any](parsed, count.result))
  }
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

/** kafkalake_from_json_keyed(text, schema): a struct of `value`, from_json(text, schema) of a
 *  struct schema, and `keys`, the number of the record's top-level keys that parse read, where it
 *  read a JSON object whole (null where it did not). One parse gives both: where `keys` is not null
 *  it is size(json_object_keys(text)). */
case class KafkalakeFromJsonKeyed(child: Expression, schema: StructType, timeZoneId: Option[String] = None)
    extends UnaryExpression with TimeZoneAwareExpression with ExpectsInputTypes {

  private lazy val nullableSchema: StructType = schema.asNullable

  override def dataType: DataType =
    StructType(Seq(StructField("value", nullableSchema), StructField("keys", IntegerType)))
  override def nullable: Boolean = true
  override def inputTypes: Seq[AbstractDataType] = Seq(StringType)
  override def withTimeZone(timeZoneId: String): KafkalakeFromJsonKeyed = copy(timeZoneId = Some(timeZoneId))

  @transient private lazy val evaluator =
    new FromJsonEvaluator(nullableSchema, SQLConf.get.columnNameOfCorruptRecord, timeZoneId, countKeys = true)

  override protected def nullSafeEval(json: Any): Any = evaluator.evaluateKeyed(json.asInstanceOf[UTF8String])

  override protected def doGenCode(ctx: CodegenContext, ev: ExprCode): ExprCode = {
    val ref = ctx.addReferenceObj("evaluator", evaluator, classOf[FromJsonEvaluator].getName)
    nullSafeCodeGen(ctx, ev, json => s"${ev.value} = $ref.evaluateKeyed($json);")
  }

  override protected def withNewChildInternal(newChild: Expression): KafkalakeFromJsonKeyed =
    copy(child = newChild)
}

/** kafkalake_utf8_text(bytes): the bytes as a string where they are valid UTF-8, null where they
 *  are not, as try_validate_utf8(cast(bytes AS STRING)) (Utf8Bytes.text). The string keeps no
 *  cached answer, so the JSON functions check it again (Utf8Bytes.isValid): on ASCII, one more
 *  word-at-a-time scan. */
case class KafkalakeUtf8Text(child: Expression) extends UnaryExpression with ExpectsInputTypes {
  override def dataType: DataType = StringType
  override def nullable: Boolean = true
  override def inputTypes: Seq[AbstractDataType] = Seq(BinaryType)

  override protected def nullSafeEval(bytes: Any): Any = Utf8Bytes.text(bytes.asInstanceOf[Array[Byte]])

  override protected def doGenCode(ctx: CodegenContext, ev: ExprCode): ExprCode = {
    val utf8 = Utf8Bytes.getClass.getName.stripSuffix("$")
    nullSafeCodeGen(ctx, ev, bytes =>
      s"""${ev.value} = $utf8.text($bytes);
         |${ev.isNull} = ${ev.value} == null;""".stripMargin)
  }

  override protected def withNewChildInternal(newChild: Expression): KafkalakeUtf8Text =
    copy(child = newChild)
}

/** kafkalake_schema_id(bytes): the schema id of a schema registry's frame, the magic byte 0 and the
 *  id (4 bytes, big-endian, unsigned) that start `bytes`; null where they are shorter than the frame
 *  or start with another byte. As conv(hex(substring(bytes, 2, 4)), 16, 10) under that check
 *  (kafkalake.spark.wire_format), without the text between: that conversion took ~8% of a
 *  Protobuf drain's task time, once for each pass over the batch. */
case class KafkalakeSchemaId(child: Expression) extends UnaryExpression with ExpectsInputTypes {
  override def dataType: DataType = LongType
  override def nullable: Boolean = true
  override def inputTypes: Seq[AbstractDataType] = Seq(BinaryType)

  override protected def nullSafeEval(bytes: Any): Any = {
    val b = bytes.asInstanceOf[Array[Byte]]
    if (b.length < 5 || b(0) != 0) null else KafkalakeSchemaId.id(b)
  }

  override protected def doGenCode(ctx: CodegenContext, ev: ExprCode): ExprCode = {
    val self = KafkalakeSchemaId.getClass.getName.stripSuffix("$")
    nullSafeCodeGen(ctx, ev, bytes =>
      s"""if ($bytes.length < 5 || $bytes[0] != 0) { ${ev.isNull} = true; }
         |else { ${ev.value} = $self.id($bytes); }""".stripMargin)
  }

  override protected def withNewChildInternal(newChild: Expression): KafkalakeSchemaId = copy(child = newChild)
}

object KafkalakeSchemaId {
  def id(b: Array[Byte]): Long =
    ((b(1) & 0xffL) << 24) | ((b(2) & 0xffL) << 16) | ((b(3) & 0xffL) << 8) | (b(4) & 0xffL)
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
      FunctionIdentifier("kafkalake_schema_id"),
      new ExpressionInfo(classOf[KafkalakeSchemaId].getName, "kafkalake_schema_id"),
      (args: Seq[Expression]) => args match {
        case Seq(bytes) => KafkalakeSchemaId(bytes)
        case _ => throw new IllegalArgumentException("kafkalake_schema_id takes one argument: the bytes")
      }))
    extensions.injectFunction((
      FunctionIdentifier("kafkalake_utf8_text"),
      new ExpressionInfo(classOf[KafkalakeUtf8Text].getName, "kafkalake_utf8_text"),
      (args: Seq[Expression]) => args match {
        case Seq(bytes) => KafkalakeUtf8Text(bytes)
        case _ => throw new IllegalArgumentException("kafkalake_utf8_text takes one argument: the bytes")
      }))
    extensions.injectFunction((
      FunctionIdentifier("kafkalake_from_json_keyed"),
      new ExpressionInfo(classOf[KafkalakeFromJsonKeyed].getName, "kafkalake_from_json_keyed"),
      (args: Seq[Expression]) => args match {
        case Seq(text, schema) if schema.foldable && schema.dataType.isInstanceOf[StringType] =>
          KafkalakeExtensions.schemaOf(schema.eval().toString) match {
            case struct: StructType => KafkalakeFromJsonKeyed(text, struct)
            case other => throw new IllegalArgumentException(
              s"kafkalake_from_json_keyed reads into a struct, not ${other.simpleString}")
          }
        case _ => throw new IllegalArgumentException(
          "kafkalake_from_json_keyed takes two arguments: the JSON text and its struct schema as a string literal")
      }))
    // KafkalakeProtobuf.scala: loaded on first use only, so a session without protobuf-java on its
    // classpath still has the other functions.
    extensions.injectFunction((
      FunctionIdentifier("kafkalake_protobuf_decode"),
      new ExpressionInfo("org.apache.spark.sql.kafkalake.KafkalakeProtobufDecode", "kafkalake_protobuf_decode"),
      (args: Seq[Expression]) => KafkalakeProtobufDecode(args)))
  }
}

object KafkalakeExtensions {
  /** A schema given as Spark's JSON form of a data type (what pyspark's DataType.json() writes) or as DDL. */
  def schemaOf(text: String): DataType =
    if (text.trim.startsWith("{")) DataType.fromJson(text) else DataType.fromDDL(text)
}
