// kafkalake's Protobuf decoder for Spark: a record of a schema registry's Protobuf wire format
// (message indexes, then the message) to its message type's full name and its values as JSON text,
// the JSON byte for byte what the Python decoder writes (kafkalake.kafka.protobuf_schema.decode:
// json.dumps of plain()), so the parsed path reads either with the same from_json.
//
// Why: the Python decoder runs in a pandas UDF, whose records cross to a Python worker and back
// (bench --format protobuf: 0.56x the JSON parsed path). Here they stay in the JVM.
//
// Given the table's row type, a message type whose fields all have columns of their own Spark type
// (protobuf_schema.spark_type's) is decoded straight into that row (ProtobufRows): no JSON is
// written and read again. Its values are what from_json of the JSON text gives, value for value
// (tests/integration/test_protobuf_decode.py); the other message types keep the JSON.
//
// What it mirrors, and where it stops: protobuf-java's DynamicMessage parses as upb does (unknown
// fields and fields of another wire type skipped, a closed enum's unknown number an unknown field);
// the JSON is Python's json.dumps (", " and ": ", ASCII only with \u escapes, floats as repr, NaN and
// infinities quoted as Spark's JSON reader spells them) of plain()'s values. Of Google's well-known types only Timestamp
// is written (as ToJsonString); the Python side sends a batch whose writers' messages hold any other
// to the Python decoder (kafkalake.spark.protobuf_parser). The reasons are the Python decoder's; the
// detail of a payload protobuf-java refuses is upb's two texts, "Wire format was corrupt" and
// "String field had bad UTF-8", by the kind of refusal.
//
// Built at set-up against the pyspark jars and protobuf-java (kafkalake.launch.jvm_extension).
package org.apache.spark.sql.kafkalake

import java.util.{Base64, HashMap => JHashMap}

import scala.jdk.CollectionConverters._
import scala.util.control.NonFatal

import com.google.protobuf.{ByteString, CodedInputStream, DescriptorProtos, Descriptors, DynamicMessage, InvalidProtocolBufferException}
import com.google.protobuf.Descriptors.{Descriptor, EnumValueDescriptor, FieldDescriptor, FileDescriptor}
import com.google.protobuf.Descriptors.FieldDescriptor.JavaType

import org.apache.spark.sql.catalyst.InternalRow
import org.apache.spark.sql.catalyst.expressions.{Expression, GenericInternalRow}
import org.apache.spark.sql.catalyst.expressions.codegen.{CodegenContext, ExprCode, FalseLiteral}
import org.apache.spark.sql.catalyst.expressions.codegen.Block._
import org.apache.spark.sql.catalyst.util.{ArrayBasedMapData, GenericArrayData}
import org.apache.spark.sql.types._
import org.apache.spark.unsafe.types.UTF8String

/** A record the Python decoder would not decode: its reason and detail (the dead letter's). */
final class NotDecoded(val reason: String, val detail: String) extends Exception(detail, null, false, false)

/** What the Python decoder writes of a value (protobuf_schema.plain, then json.dumps). */
object PythonJson {
  final val Timestamp = "google.protobuf.Timestamp"

  /** json.dumps' string: ASCII, `\"`, `\\`, the five short escapes, \u00xx lowercase for the rest. */
  def string(out: java.lang.StringBuilder, s: String): Unit = {
    out.append('"')
    var i = 0
    while (i < s.length) {
      val c = s.charAt(i)
      c match {
        case '"' => out.append("\\\"")
        case '\\' => out.append("\\\\")
        case '\n' => out.append("\\n")
        case '\r' => out.append("\\r")
        case '\t' => out.append("\\t")
        case '\b' => out.append("\\b")
        case '\f' => out.append("\\f")
        case _ if c >= ' ' && c <= '~' => out.append(c)
        case _ =>
          val hex = Integer.toHexString(c)
          out.append("\\u")
          var pad = 4 - hex.length
          while (pad > 0) { out.append('0'); pad -= 1 }
          out.append(hex)
      }
      i += 1
    }
    out.append('"')
  }

  /** repr(float) of a finite double: its shortest round-trip digits, fixed where the decimal point
   *  falls within -4 < decpt <= 16 (with ".0" for a whole number), else d[.ddd]e+XX. Java 17's
   *  Double.toString is not always shortest (JDK-4511638): its digit count is a start, and one digit
   *  fewer is tried on the exact value. */
  def double(out: java.lang.StringBuilder, d: Double): Unit = {
    if (d == 0.0) { out.append(if (1.0 / d < 0) "-0.0" else "0.0"); return }
    if (d < 0) out.append('-')
    val exact = new java.math.BigDecimal(math.abs(d))
    val shortish = new java.math.BigDecimal(java.lang.Double.toString(math.abs(d))).stripTrailingZeros
    var digits = shortish.precision
    var best = exact.round(new java.math.MathContext(digits, java.math.RoundingMode.HALF_EVEN))
    var shorter = true
    while (shorter && digits > 1) {
      val candidate = exact.round(new java.math.MathContext(digits - 1, java.math.RoundingMode.HALF_EVEN))
      if (candidate.doubleValue == math.abs(d)) { best = candidate; digits -= 1 } else shorter = false
    }
    best = best.stripTrailingZeros
    val text = best.unscaledValue.toString
    val decpt = text.length - best.scale
    if (decpt > -4 && decpt <= 16) {
      if (decpt <= 0) {
        out.append("0.")
        var z = -decpt
        while (z > 0) { out.append('0'); z -= 1 }
        out.append(text)
      } else if (decpt >= text.length) {
        out.append(text)
        var z = decpt - text.length
        while (z > 0) { out.append('0'); z -= 1 }
        out.append(".0")
      } else {
        out.append(text, 0, decpt).append('.').append(text, decpt, text.length)
      }
    } else {
      out.append(text.charAt(0))
      if (text.length > 1) out.append('.').append(text, 1, text.length)
      val e = decpt - 1
      out.append(if (e < 0) "e-" else "e+")
      if (math.abs(e) < 10) out.append('0')
      out.append(math.abs(e))
    }
  }

  private def float(out: java.lang.StringBuilder, d: Double): Unit =
    if (d.isNaN) out.append("\"NaN\"")
    else if (d.isInfinite) out.append(if (d > 0) "\"Infinity\"" else "\"-Infinity\"")
    else double(out, d)

  /** A Timestamp's seconds and nanos, within ToJsonString's range checks (their ValueError texts). */
  def timestampParts(message: DynamicMessage): (Long, Int) = {
    val kind = message.getDescriptorForType
    val seconds = message.getField(kind.findFieldByName("seconds")).asInstanceOf[java.lang.Long].longValue
    val nanos = message.getField(kind.findFieldByName("nanos")).asInstanceOf[java.lang.Integer].intValue
    if (seconds < -62135596800L || seconds > 253402300799L) throw new NotDecoded("undecodable",
      s"Timestamp is not valid: Seconds $seconds must be in range [-62135596800, 253402300799].")
    if (nanos < 0 || nanos >= 1000000000) throw new NotDecoded("undecodable",
      s"Timestamp is not valid: Nanos $nanos must be in a range [0, 999999].")
    (seconds, nanos)
  }

  /** Timestamp.ToJsonString, with its range checks. */
  def timestamp(out: java.lang.StringBuilder, message: DynamicMessage): Unit = {
    val (seconds, nanos) = timestampParts(message)
    val t = java.time.LocalDateTime.ofEpochSecond(seconds, 0, java.time.ZoneOffset.UTC)
    out.append('"')
    out.append(f"${t.getYear}%04d-${t.getMonthValue}%02d-${t.getDayOfMonth}%02dT")
    out.append(f"${t.getHour}%02d:${t.getMinute}%02d:${t.getSecond}%02d")
    if (nanos % 1000000 == 0) { if (nanos != 0) out.append(f".${nanos / 1000000}%03d") }
    else if (nanos % 1000 == 0) out.append(f".${nanos / 1000}%06d")
    else out.append(f".$nanos%09d")
    out.append("Z\"")
  }

  /** _plain_value of one value of `field` (an element of a repeated one). */
  def value(out: java.lang.StringBuilder, field: FieldDescriptor, v: Any): Unit = field.getJavaType match {
    case JavaType.MESSAGE =>
      val m = v.asInstanceOf[DynamicMessage]
      if (field.getMessageType.getFullName == Timestamp) timestamp(out, m) else message(out, m)
    case JavaType.ENUM => string(out, enumName(field, v))
    case JavaType.BYTE_STRING => string(out, Base64.getEncoder.encodeToString(v.asInstanceOf[ByteString].toByteArray))
    case JavaType.STRING => string(out, text(field, v))
    case JavaType.DOUBLE => float(out, v.asInstanceOf[java.lang.Double].doubleValue)
    case JavaType.FLOAT => float(out, v.asInstanceOf[java.lang.Float].doubleValue)
    case JavaType.BOOLEAN => out.append(if (v.asInstanceOf[java.lang.Boolean].booleanValue) "true" else "false")
    case JavaType.INT =>
      val i = v.asInstanceOf[java.lang.Integer].intValue
      if (unsigned(field)) out.append(Integer.toUnsignedString(i)) else out.append(i)
    case JavaType.LONG =>
      val l = v.asInstanceOf[java.lang.Long].longValue
      if (unsigned(field)) out.append(java.lang.Long.toUnsignedString(l)) else out.append(l)
  }

  /** A string field's value: a string field without UTF-8 checks (proto2) keeps its bytes, which
   *  upb hands Python as bytes, refused by plain(). */
  def text(field: FieldDescriptor, v: Any): String = v match {
    case s: String => s
    case b: ByteString =>
      if (!b.isValidUtf8) throw new NotDecoded("undecodable", s"string field ${field.getFullName} is not valid UTF-8")
      b.toStringUtf8
  }

  /** The enum value's name as plain() gives it: an open enum's number its writer knew no name for
   *  (protobuf-java makes up a descriptor) as its number. */
  def enumName(field: FieldDescriptor, v: Any): String = {
    val e = v.asInstanceOf[EnumValueDescriptor]
    val known = field.getEnumType.findValueByNumber(e.getNumber)
    if (known != null) known.getName else Integer.toString(e.getNumber)
  }

  /** A map field's entries as plain() writes them: a key given twice once, with its last value (a
   *  map's meaning), by key. */
  def mapEntries(field: FieldDescriptor, wire: Any): Seq[(Any, Any)] = {
    val entryType = field.getMessageType
    val keyField = entryType.findFieldByNumber(1)
    val valueField = entryType.findFieldByNumber(2)
    val entries = new java.util.LinkedHashMap[Any, Any]
    for (e <- wire.asInstanceOf[java.util.List[_]].asScala) {
      val entry = e.asInstanceOf[DynamicMessage]
      entries.put(entry.getField(keyField), entry.getField(valueField))
    }
    entries.keySet.asScala.toSeq.sorted(keyOrder(keyField)).map(k => k -> entries.get(k))
  }

  def unsigned(field: FieldDescriptor): Boolean = field.getType match {
    case FieldDescriptor.Type.UINT32 | FieldDescriptor.Type.FIXED32 | FieldDescriptor.Type.UINT64 |
        FieldDescriptor.Type.FIXED64 => true
    case _ => false
  }

  /** A map key as str() writes it (True/False for bools), and the order entries are written in:
   *  by key (numbers as numbers, unsigned ones unsigned, strings by code point), as plain() sorts. */
  def keyText(field: FieldDescriptor, k: Any): String = field.getJavaType match {
    case JavaType.BOOLEAN => if (k.asInstanceOf[java.lang.Boolean].booleanValue) "True" else "False"
    case JavaType.INT =>
      val i = k.asInstanceOf[java.lang.Integer].intValue
      if (unsigned(field)) Integer.toUnsignedString(i) else Integer.toString(i)
    case JavaType.LONG =>
      val l = k.asInstanceOf[java.lang.Long].longValue
      if (unsigned(field)) java.lang.Long.toUnsignedString(l) else java.lang.Long.toString(l)
    case _ => k.toString
  }

  def keyOrder(field: FieldDescriptor): Ordering[Any] = field.getJavaType match {
    case JavaType.BOOLEAN => Ordering.by((k: Any) => k.asInstanceOf[java.lang.Boolean].booleanValue)
    case JavaType.INT if unsigned(field) =>
      (a: Any, b: Any) => Integer.compareUnsigned(a.asInstanceOf[java.lang.Integer], b.asInstanceOf[java.lang.Integer])
    case JavaType.INT => Ordering.by((k: Any) => k.asInstanceOf[java.lang.Integer].intValue)
    case JavaType.LONG if unsigned(field) =>
      (a: Any, b: Any) => java.lang.Long.compareUnsigned(a.asInstanceOf[java.lang.Long], b.asInstanceOf[java.lang.Long])
    case JavaType.LONG => Ordering.by((k: Any) => k.asInstanceOf[java.lang.Long].longValue)
    case _ => (a: Any, b: Any) => codePointCompare(a.toString, b.toString)
  }

  private def codePointCompare(a: String, b: String): Int = {
    var i = 0
    var j = 0
    while (i < a.length && j < b.length) {
      val x = a.codePointAt(i)
      val y = b.codePointAt(j)
      if (x != y) return Integer.compare(x, y)
      i += Character.charCount(x)
      j += Character.charCount(y)
    }
    Integer.compare(a.length - i, b.length - j)
  }

  /** The full name of the first string field, in plain()'s order, whose value holds U+FFFD (what
   *  protobuf-java's unchecked decoding puts for bytes that are not UTF-8). */
  def firstReplaced(kind: Descriptor, m: DynamicMessage): Option[String] = {
    def in(field: FieldDescriptor, v: Any): Option[String] = v match {
      case s: String if field.getJavaType == JavaType.STRING && s.indexOf('\uFFFD') >= 0 => Some(field.getFullName)
      case sub: DynamicMessage => firstReplaced(sub.getDescriptorForType, sub)
      case _ => None
    }
    kind.getFields.asScala.iterator.flatMap { field =>
      if (field.isMapField) m.getField(field).asInstanceOf[java.util.List[_]].asScala.iterator.flatMap { e =>
        val entry = e.asInstanceOf[DynamicMessage]
        entry.getDescriptorForType.getFields.asScala.iterator.flatMap(f => in(f, entry.getField(f)))
      }
      else if (field.isRepeated) (0 until m.getRepeatedFieldCount(field)).iterator.flatMap(i => in(field, m.getRepeatedField(field, i)))
      else if (field.hasPresence && !m.hasField(field)) Iterator.empty
      else in(field, m.getField(field))
    }.nextOption()
  }

  /** plain(message) as json.dumps writes it. */
  def message(out: java.lang.StringBuilder, m: DynamicMessage): Unit = {
    out.append('{')
    var first = true
    for (field <- m.getDescriptorForType.getFields.asScala) {
      if (!first) out.append(", ")
      first = false
      string(out, field.getName)
      out.append(": ")
      if (field.isMapField) {
        val keyField = field.getMessageType.findFieldByNumber(1)
        val valueField = field.getMessageType.findFieldByNumber(2)
        out.append('{')
        var firstEntry = true
        for ((k, v) <- mapEntries(field, m.getField(field))) {
          if (!firstEntry) out.append(", ")
          firstEntry = false
          string(out, keyText(keyField, k))
          out.append(": ")
          value(out, valueField, v)
        }
        out.append('}')
      } else if (field.isRepeated) {
        out.append('[')
        val n = m.getRepeatedFieldCount(field)
        var i = 0
        while (i < n) {
          if (i > 0) out.append(", ")
          value(out, field, m.getRepeatedField(field, i))
          i += 1
        }
        out.append(']')
      } else if (field.hasPresence && !m.hasField(field)) {
        out.append("null")
      } else {
        value(out, field, m.getField(field))
      }
    }
    out.append('}')
  }
}

/** A message's values straight into the table's row type, as from_json reads plain()'s JSON of them
 *  into it: where every field of the message type (and of each message type inside it) has a
 *  column of the Spark type protobuf_schema.spark_type gives it. A type that does not fit (a field
 *  without a column, a column of another type, a message written as JSON text: recursion, depth, a
 *  well-known type other than Timestamp) has no converter, and its records keep the JSON path.
 *  The checks plain() makes (a string's UTF-8, a Timestamp's range) are made in the same order,
 *  with the same texts. */
object ProtobufRows {
  type Convert = Any => Any

  /** The converter of messages of `kind` into rows of `target`, or None where it does not fit. */
  def message(kind: Descriptor, target: StructType): Option[DynamicMessage => InternalRow] = {
    val fields = kind.getFields.asScala.toArray
    val slots = fields.map(f => target.getFieldIndex(f.getName))
    if (slots.exists(_.isEmpty)) return None
    val converts = fields.zip(slots).map { case (f, slot) => field(f, target(slot.get).dataType) }
    if (converts.exists(_.isEmpty)) return None
    val at = slots.map(_.get)
    val convert = converts.map(_.get)
    val width = target.length
    Some { (m: DynamicMessage) =>
      val values = new Array[Any](width)
      var i = 0
      while (i < fields.length) {
        val f = fields(i)
        values(at(i)) = if (!f.isRepeated && f.hasPresence && !m.hasField(f)) null else convert(i)(m.getField(f))
        i += 1
      }
      new GenericInternalRow(values)
    }
  }

  /** A field's whole value (a list for a repeated one, a map's entries for a map) into `target`. */
  private def field(f: FieldDescriptor, target: DataType): Option[Convert] =
    if (f.isMapField) target match {
      case MapType(StringType, valueType, _) =>
        val keyField = f.getMessageType.findFieldByNumber(1)
        val valueField = f.getMessageType.findFieldByNumber(2)
        one(valueField, valueType).map { convert => (v: Any) =>
          val entries = PythonJson.mapEntries(f, v)
          val keys = new Array[Any](entries.length)
          val values = new Array[Any](entries.length)
          var i = 0
          for ((k, value) <- entries) {
            keys(i) = UTF8String.fromString(PythonJson.keyText(keyField, k))
            values(i) = convert(value)
            i += 1
          }
          new ArrayBasedMapData(new GenericArrayData(keys), new GenericArrayData(values))
        }
      case _ => None
    }
    else if (f.isRepeated) target match {
      case ArrayType(elementType, _) =>
        one(f, elementType).map { convert => (v: Any) =>
          val list = v.asInstanceOf[java.util.List[_]]
          val out = new Array[Any](list.size)
          var i = 0
          while (i < out.length) { out(i) = convert(list.get(i)); i += 1 }
          new GenericArrayData(out)
        }
      case _ => None
    }
    else one(f, target)

  /** One value of `f` (an element of a repeated one) into `target`. */
  private def one(f: FieldDescriptor, target: DataType): Option[Convert] = (f.getJavaType, target) match {
    case (JavaType.MESSAGE, TimestampType) if f.getMessageType.getFullName == PythonJson.Timestamp =>
      Some { (v: Any) =>
        val (seconds, nanos) = PythonJson.timestampParts(v.asInstanceOf[DynamicMessage])
        seconds * 1000000L + nanos / 1000
      }
    case (JavaType.MESSAGE, struct: StructType) if !f.getMessageType.getFullName.startsWith("google.protobuf.") =>
      message(f.getMessageType, struct).map(convert => (v: Any) => convert(v.asInstanceOf[DynamicMessage]))
    case (JavaType.ENUM, StringType) => Some((v: Any) => UTF8String.fromString(PythonJson.enumName(f, v)))
    case (JavaType.STRING, StringType) => Some((v: Any) => UTF8String.fromString(PythonJson.text(f, v)))
    case (JavaType.BYTE_STRING, BinaryType) => Some((v: Any) => v.asInstanceOf[ByteString].toByteArray)
    case (JavaType.DOUBLE, DoubleType) | (JavaType.FLOAT, FloatType) | (JavaType.BOOLEAN, BooleanType) =>
      Some((v: Any) => v)
    case (JavaType.INT, IntegerType) if !PythonJson.unsigned(f) => Some((v: Any) => v)
    case (JavaType.INT, LongType) if PythonJson.unsigned(f) =>
      Some((v: Any) => Integer.toUnsignedLong(v.asInstanceOf[java.lang.Integer].intValue))
    case (JavaType.LONG, LongType) if !PythonJson.unsigned(f) => Some((v: Any) => v)
    case (JavaType.LONG, DecimalType.Fixed(20, 0)) if PythonJson.unsigned(f) =>
      Some { (v: Any) =>
        val l = v.asInstanceOf[java.lang.Long].longValue
        if (l >= 0) Decimal(l, 20, 0)
        else Decimal(new java.math.BigDecimal(java.lang.Long.toUnsignedString(l)), 20, 0)
      }
    case _ => None
  }
}

/** The writer schemas of one plan: schema id -> FileDescriptorSet bytes (protobuf_schema.resolve's,
 *  the schema's own file last), each built once per task's decoder. With `target` (the table's
 *  row type), each result has a fifth field: the values in that type (ProtobufRows), where the
 *  record's message type fits it; its JSON is then null. */
final class ProtobufDecoder(writers: Map[Long, Array[Byte]], target: Option[StructType] = None) {
  private val width = if (target.isDefined) 5 else 4
  private val converters = new JHashMap[Descriptor, Option[DynamicMessage => InternalRow]]

  private def converter(kind: Descriptor): Option[DynamicMessage => InternalRow] = target.flatMap { t =>
    var found = converters.get(kind)
    if (found == null) {
      found = ProtobufRows.message(kind, t)
      converters.put(kind, found)
    }
    found
  }

  private val files = new JHashMap[java.lang.Long, Either[String, FileDescriptor]]
  private val uncheckedFiles = new JHashMap[java.lang.Long, Either[String, FileDescriptor]]
  private val types = new JHashMap[(Long, Seq[BigInt]), Descriptor]

  private lazy val wellKnown: Map[String, FileDescriptor] = Seq(
    com.google.protobuf.AnyProto.getDescriptor,
    com.google.protobuf.DurationProto.getDescriptor,
    com.google.protobuf.EmptyProto.getDescriptor,
    com.google.protobuf.FieldMaskProto.getDescriptor,
    com.google.protobuf.StructProto.getDescriptor,
    com.google.protobuf.TimestampProto.getDescriptor,
    com.google.protobuf.WrappersProto.getDescriptor).map(f => f.getName -> f).toMap

  /** The schema's own file, built from the set; `checked`: every string field checked for UTF-8
   *  as it is parsed (java_string_check_utf8 on each file), proto2's too, which upb leaves to
   *  plain() (and protobuf-java would decode lossily). */
  private def build(bytes: Array[Byte], checked: Boolean): FileDescriptor = {
    val set = DescriptorProtos.FileDescriptorSet.parseFrom(bytes)
    var built = wellKnown
    var last: FileDescriptor = null
    for (given <- set.getFileList.asScala) {
      val proto =
        if (!checked) given
        else given.toBuilder.setOptions(given.getOptions.toBuilder.setJavaStringCheckUtf8(true)).build()
      val deps = proto.getDependencyList.asScala.map(built).toArray
      last = FileDescriptor.buildFrom(proto, deps)
      built += proto.getName -> last
    }
    if (last == null) throw new IllegalArgumentException("no file")
    last
  }

  private def file(sid: Long, checked: Boolean = true): FileDescriptor = {
    val cache = if (checked) files else uncheckedFiles
    var found = cache.get(sid)
    if (found == null) {
      found = try Right(build(writers(sid), checked)) catch {
        case NonFatal(err) => Left(s"the registry's Protobuf schema does not build: $err")
      }
      cache.put(sid, found)
    }
    found match {
      case Right(f) => f
      case Left(problem) => throw new NotDecoded("undecodable", problem)
    }
  }

  /** The message type of that name in the schema's files as given (strings unchecked). */
  private def unchecked(sid: Long, name: String): Descriptor = {
    def find(kinds: java.util.List[Descriptor]): Descriptor = kinds.asScala.iterator.map { k =>
      if (k.getFullName == name) k else if (name.startsWith(k.getFullName + ".")) find(k.getNestedTypes) else null
    }.find(_ != null).orNull
    def inFile(f: FileDescriptor, seen: Set[String]): Descriptor =
      if (seen(f.getName)) null
      else Option(find(f.getMessageTypes)).getOrElse(
        f.getDependencies.asScala.iterator.map(inFile(_, seen + f.getName)).find(_ != null).orNull)
    inFile(file(sid, checked = false), Set.empty)
  }

  /** Where the checked parse refused a string: parsed again unchecked, the first string field
   *  (in plain()'s order) that the lossy decoding changed names the field as plain() would; where
   *  the unchecked parse fails too, a proto3 string was refused, as upb refuses it. */
  private def badString(sid: Long, kind: Descriptor, payload: Array[Byte], start: Int): NotDecoded = {
    val lenient = unchecked(sid, kind.getFullName)
    val corrupt = new NotDecoded("undecodable",
      s"Error parsing message with type '${kind.getFullName}': String field had bad UTF-8")
    if (lenient == null) return corrupt
    try {
      PythonJson.firstReplaced(lenient, DynamicMessage.parseFrom(lenient,
        CodedInputStream.newInstance(payload, start, payload.length - start))) match {
        case Some(field) => new NotDecoded("undecodable", s"string field $field is not valid UTF-8")
        case None => corrupt
      }
    } catch { case NonFatal(_) => corrupt }
  }

  /** protobuf_schema.message_indexes: a zigzag varint count (0: the list [0]), then each index,
   *  as Python's unbounded ints. */
  private def indexes(payload: Array[Byte]): (Seq[BigInt], Int) = {
    if (payload.length > 0 && payload(0) == 0) return (First, 1)
    var position = 0
    def varint(): BigInt = {
      var shift = 0
      var result = BigInt(0)
      while (true) {
        if (position >= payload.length || shift > 63)
          throw new NotDecoded("unknown_message_index", "the message-index list is cut short")
        val byte = payload(position) & 0xff
        position += 1
        result |= BigInt(byte & 0x7f) << shift
        shift += 7
        if ((byte & 0x80) == 0) return (result >> 1) ^ -(result & 1)
      }
      throw new IllegalStateException
    }
    val count = varint()
    if (count == 0) return (First, position)
    if (count < 0 || count > 16) throw new NotDecoded("unknown_message_index",
      s"message-index count $count is not a path of message types")
    (Seq.fill(count.toInt)(varint()), position)
  }

  private val First = Seq(BigInt(0))

  /** Python's repr of a file name. */
  private def pythonRepr(s: String): String =
    if (s.contains('\'') && !s.contains('"')) "\"" + s + "\""
    else "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"

  private def messageType(sid: Long, path: Seq[BigInt]): Descriptor = {
    val key = (sid, path)
    var found = types.get(key)
    if (found == null) {
      val f = file(sid)
      var kinds: java.util.List[Descriptor] = f.getMessageTypes
      for (index <- path) {
        if (index < 0 || index >= kinds.size) throw new NotDecoded("unknown_message_index",
          s"message index ${path.mkString("[", ", ", "]")} names no message of ${pythonRepr(f.getName)}")
        found = kinds.get(index.toInt)
        kinds = found.getNestedTypes
      }
      types.put(key, found)
    }
    found
  }

  /** The full name of the record's message type; null where its indexes name none (or its schema
   *  does not build), as protobuf_parser.message_type_names gives it. */
  def name(sid: Long, payload: Array[Byte]): InternalRow = {
    val found = if (!writers.contains(sid)) null else try {
      UTF8String.fromString(messageType(sid, indexes(payload)._1).getFullName)
    } catch { case _: NotDecoded => null }
    row(found, null, null, null, null)
  }

  /** (name, json, reason, detail) of one record, as protobuf_parser._decode_one gives them (and
   *  its values, with a target). */
  def decode(sid: Long, payload: Array[Byte]): InternalRow = {
    if (!writers.contains(sid)) return empty
    try {
      val (path, start) = indexes(payload)
      val kind = messageType(sid, path)
      val message = try {
        val input = CodedInputStream.newInstance(payload, start, payload.length - start)
        DynamicMessage.parseFrom(kind, input)
      } catch {
        case e: InvalidProtocolBufferException if String.valueOf(e.getMessage).contains("UTF-8") =>
          throw badString(sid, kind, payload, start)
        case _: InvalidProtocolBufferException =>
          throw new NotDecoded("undecodable", s"Error parsing message with type '${kind.getFullName}': Wire format was corrupt")
      }
      val name = UTF8String.fromString(kind.getFullName)
      converter(kind) match {
        case Some(convert) => row(name, null, null, null, convert(message))
        case None =>
          val out = new java.lang.StringBuilder(256)
          PythonJson.message(out, message)
          row(name, UTF8String.fromString(out.toString), null, null, null)
      }
    } catch {
      case e: NotDecoded =>
        val detail = e.reason match {
          case "unknown_message_index" => s"schema id $sid: ${e.detail}"
          case _ => s"the payload does not decode with writer schema id $sid: ${e.detail}"
        }
        row(null, null, UTF8String.fromString(e.reason), UTF8String.fromString(detail), null)
      // Anything else this record makes the decoder throw is a dead letter of its own, never a
      // failed task: a failed task would fail every later run on the same record.
      case NonFatal(e) =>
        val detail = s"the payload does not decode with writer schema id $sid: ${e.getClass.getSimpleName}: ${e.getMessage}"
        row(null, null, UTF8String.fromString("undecodable"), UTF8String.fromString(detail), null)
    }
  }

  /** The result of a record with no schema id, payload or known writer: every field null. */
  def empty: InternalRow = new GenericInternalRow(width)

  /** The first four values, and the fifth with a target. */
  private def row(values: Any*): InternalRow = new GenericInternalRow(values.take(width).toArray)
}

/** kafkalake_protobuf_decode(schema_id, payload, writers[, names_only[, table_type]]): a struct of
 *  the record's message type (`name`), its values as JSON (`json`), or the `reason` and `detail` it
 *  did not decode; all null where the id is null, not among `writers` (a literal map of schema id to
 *  FileDescriptorSet bytes, handed from the driver), or the payload is null. With `names_only`
 *  (a literal true), only `name`, from the message indexes, the message left unread. With
 *  `table_type` (Spark's JSON of the table's struct type, a literal), a fifth field `values` of that
 *  type: the record's values where its message type fits the table (ProtobufRows), its `json` null. */
case class KafkalakeProtobufDecode(
    sid: Expression,
    payload: Expression,
    writers: Map[Long, Array[Byte]],
    namesOnly: Boolean = false,
    target: Option[StructType] = None)
    extends Expression {

  override def children: Seq[Expression] = Seq(sid, payload)
  override def nullable: Boolean = false
  override def dataType: DataType = target match {
    case Some(t) => KafkalakeProtobufDecode.Result.add(StructField("values", t))
    case None => KafkalakeProtobufDecode.Result
  }

  @transient private lazy val decoder = new ProtobufDecoder(writers, target)

  override def eval(input: InternalRow): Any = result(sid.eval(input), payload.eval(input))

  /** The struct of one record's schema id and payload (either may be null). */
  def result(id: Any, bytes: Any): InternalRow =
    if (id == null || bytes == null) decoder.empty
    else if (namesOnly) decoder.name(id.asInstanceOf[Number].longValue, bytes.asInstanceOf[Array[Byte]])
    else decoder.decode(id.asInstanceOf[Number].longValue, bytes.asInstanceOf[Array[Byte]])

  // The children compiled with the stage, the decode called: as CodegenFallback alone, the id and
  // payload (a CASE over the headers' filter, a substring) were interpreted for every record.
  override protected def doGenCode(ctx: CodegenContext, ev: ExprCode): ExprCode = {
    val self = ctx.addReferenceObj("decode", this, classOf[KafkalakeProtobufDecode].getName)
    val id = sid.genCode(ctx)
    val bytes = payload.genCode(ctx)
    val row = classOf[InternalRow].getName
    ev.copy(code = code"""
      ${id.code}
      ${bytes.code}
      $row ${ev.value} = $self.result(${id.isNull} ? null : (Object) ${id.value}, ${bytes.isNull} ? null : ${bytes.value});
      """, isNull = FalseLiteral)
  }

  override protected def withNewChildrenInternal(newChildren: IndexedSeq[Expression]): Expression =
    copy(sid = newChildren(0), payload = newChildren(1))

  // The plan's text names the schema ids, not their descriptors' bytes.
  override def toString: String = s"kafkalake_protobuf_decode($sid, $payload, ids ${writers.keys.toSeq.sorted.mkString(",")})"
}

object KafkalakeProtobufDecode {
  val Result: StructType = StructType(Seq("name", "json", "reason", "detail").map(StructField(_, StringType)))

  /** The writers argument: a foldable map<bigint, binary>, evaluated once where the plan is built. */
  def apply(args: Seq[Expression]): KafkalakeProtobufDecode = args match {
    case Seq(sid, payload, writers) => apply(Seq(sid, payload, writers, org.apache.spark.sql.catalyst.expressions.Literal(false)))
    case Seq(sid, payload, writers, namesOnly) if writers.foldable && namesOnly.foldable =>
      KafkalakeProtobufDecode(sid, payload, writerMap(writers), namesOnly.eval() == true)
    case Seq(sid, payload, writers, namesOnly, tableType)
        if writers.foldable && namesOnly.foldable && tableType.foldable && tableType.dataType == StringType =>
      val target = KafkalakeExtensions.schemaOf(tableType.eval().toString) match {
        case struct: StructType => struct
        case other => throw new IllegalArgumentException(
          s"kafkalake_protobuf_decode decodes into a struct, not ${other.simpleString}")
      }
      KafkalakeProtobufDecode(sid, payload, writerMap(writers), namesOnly.eval() == true, Some(target))
    case _ => throw new IllegalArgumentException(
      "kafkalake_protobuf_decode takes three to five arguments: the schema id, the payload, a literal map of schema id to FileDescriptorSet bytes, a literal boolean names_only, and the table's struct type as a string literal")
  }

  private def writerMap(writers: Expression): Map[Long, Array[Byte]] = {
    val data = writers.eval().asInstanceOf[org.apache.spark.sql.catalyst.util.MapData]
    val keys = data.keyArray()
    val values = data.valueArray()
    (0 until data.numElements()).map(i => keys.getLong(i) -> values.getBinary(i)).toMap
  }
}
