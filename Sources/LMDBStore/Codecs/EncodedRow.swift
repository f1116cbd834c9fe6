import Foundation
import ObjectGraph

/// A row blob whose checksum, header and field layout are checked, read one field at a time: a predicate or a sort
/// that names two attributes decodes those two values and nothing else. The bytes are borrowed (from LMDB's map,
/// for the rest of a read transaction); the row must not outlive them.
struct EncodedRow {
    /// The row without its checksum.
    let body: UnsafeRawBufferPointer
    /// Not retained: a row lives within a read or write transaction of its store, whose layout (which holds every
    /// entity layout) outlives it. So a row is copied as plain bytes — a scan passes each one through the filter and
    /// the evaluator without a reference count changing.
    unowned(unsafe) let entity: StoreLayout.EntityLayout
    let version: UInt64
    /// Row format 1: how many fields the row holds. Row formats 2 and 3: how many field numbers its field table
    /// covers.
    private let fieldCount: Int
    /// Row formats 2 and 3: where the values start, after the field table; 0 for a row of format 1.
    private let valuesOffset: Int
    /// Where the field table starts, after the header (row format 1: where the fields start).
    private let typesOffset: Int
    /// Row formats 2 and 3: how many bytes an offset in the field table takes (1, 2 or 4).
    private let offsetWidth: Int

    var entityTag: UInt16 { entity.tag }

    /// Checks the checksum, the header and (unless the caller decodes every field next, which checks them too) that
    /// every field is well-formed, so reading one later fails only on a value its type cannot hold, such as a
    /// malformed decimal.
    init(_ bytes: UnsafeRawBufferPointer, layout: borrowing StoreLayout, checkingFields: Bool = true) throws(RowDecodingError) {
        guard bytes.count >= RowCodec.minimumSize else { throw RowDecodingError(reason: "the row is \(bytes.count) bytes, shorter than a row header") }
        let body = UnsafeRawBufferPointer(rebasing: bytes[..<(bytes.count - 4)])
        let stored = UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: bytes.count - 4, as: UInt32.self))
        guard CRC32C.checksum(body) == stored else { throw RowDecodingError(reason: "the row's checksum does not match its bytes") }
        let format = bytes[0], flags = bytes[1]
        guard format >= 1, format <= RowCodec.formatVersion else {
            throw RowDecodingError(reason: "the row has format version \(format); this LMDBStore reads 1 to \(RowCodec.formatVersion)")
        }
        let tag = UInt16(bytes[2]) << 8 | UInt16(bytes[3])
        guard let entity = layout.entity(tag: tag) else {
            throw RowDecodingError(reason: "the row names the unknown entity tag \(tag)")
        }
        self.body = body
        self.entity = entity
        let fieldCount: Int, width: Int, typesOffset: Int
        if format == 3 {
            // Varints: the version, then the field count — for almost every row one byte each (the body holds at
            // least six bytes).
            let count: UInt64
            if body[4] < 0x80, body[5] < 0x80 {
                self.version = UInt64(body[4])
                count = UInt64(body[5])
                typesOffset = 6
            } else {
                var reader = ByteReader(bytes: body, offset: 4)
                self.version = try reader.varint()
                count = try reader.varint()
                typesOffset = reader.offset
            }
            guard flags <= 2 else { throw RowDecodingError(reason: "the row has flags \(flags), which this LMDBStore does not know") }
            guard count <= UInt64(entity.fields.count) else {
                throw RowDecodingError(reason: "the row has \(count) fields; \(entity.name) has \(entity.fields.count)")
            }
            fieldCount = Int(count)
            width = 1 << Int(flags)
        } else {
            var reader = ByteReader(bytes: body, offset: 4)
            guard body.count >= RowCodec.legacyHeaderSize else { throw RowDecodingError(reason: "the row is \(bytes.count) bytes, shorter than a row header") }
            self.version = try reader.uint64()
            _ = try reader.uint64()  // row formats 1 and 2: the model hash's prefix, which nothing reads
            fieldCount = Int(try reader.uint16())
            if format == 2 {
                guard flags & ~RowCodec.wideOffsetsFlag == 0 else { throw RowDecodingError(reason: "the row has flags \(flags), which this LMDBStore does not know") }
                guard fieldCount <= entity.fields.count else {
                    throw RowDecodingError(reason: "the row has \(fieldCount) fields; \(entity.name) has \(entity.fields.count)")
                }
                width = flags & RowCodec.wideOffsetsFlag != 0 ? 4 : 2
            } else {
                width = 0
            }
            typesOffset = reader.offset
        }
        self.fieldCount = fieldCount
        self.typesOffset = typesOffset
        offsetWidth = width
        if format == 1 {
            valuesOffset = 0
        } else {
            guard typesOffset + fieldCount * (1 + width) <= body.count else { throw RowDecodingError(reason: "the row's field table runs past its end") }
            valuesOffset = typesOffset + fieldCount * (1 + width)
        }
        guard checkingFields else { return }
        try forEachField { id, type, reader throws(RowDecodingError) in try Self.skip(type, field: entity.fields[id].name, &reader) }
    }

    /// What reading a field needs besides the bytes, to read a checked row again from a copy of its body
    /// (``LoadedRows``) without checking it again.
    struct Shape {
        let version: UInt64
        let fieldCount: Int32
        let valuesOffset: Int32
        let typesOffset: Int32
        let offsetWidth: Int32
    }

    var shape: Shape {
        Shape(version: version, fieldCount: Int32(fieldCount), valuesOffset: Int32(valuesOffset), typesOffset: Int32(typesOffset),
              offsetWidth: Int32(offsetWidth))
    }

    /// A row read from `body` (a row without its checksum) whose checksum, header and fields were checked when it
    /// was read with ``init(_:layout:checkingFields:)``, giving `shape`; `entity` must outlive it.
    init(checkedBody body: UnsafeRawBufferPointer, entity: StoreLayout.EntityLayout, shape: Shape) {
        self.body = body
        self.entity = entity
        version = shape.version
        fieldCount = Int(shape.fieldCount)
        valuesOffset = Int(shape.valuesOffset)
        typesOffset = Int(shape.typesOffset)
        offsetWidth = Int(shape.offsetWidth)
    }

    /// Checks every field as ``init(_:layout:checkingFields:)`` does with `checkingFields` (extents, kinds, UTF-8),
    /// and the values whose type can still refuse them (decimals, URIs), so that reading any field afterwards cannot
    /// fail: what a row an object reads a value at a time must be.
    func checkEveryValue() throws(RowDecodingError) {
        // A sound row of format 2 or 3 passes the quick walk; anything it does not vouch for (a damaged row, a
        // decimal or URI to parse, row format 1) is walked again by the checker that names what is wrong.
        if valuesOffset != 0, valuesAreSound() { return }
        try forEachField { id, type, reader throws(RowDecodingError) in
            if type == RowCodec.ValueType.decimal || type == RowCodec.ValueType.uri {
                _ = try Self.readValue(type, field: entity.fields[id].name, &reader)
            } else {
                try Self.skip(type, field: entity.fields[id].name, &reader)
            }
        }
    }

    /// Row formats 2 and 3: whether every field's kind, table offset and extent agree and its strings are UTF-8 — the
    /// checks of ``checkEveryValue()`` in one tight loop over the bytes, with no error to build. `false` also for a row
    /// holding a decimal or a URI (they are parsed by the full check) and for anything unexpected.
    private func valuesAreSound() -> Bool {
        typealias ValueType = RowCodec.ValueType
        let allowed = entity.fieldValueTypes
        let count = body.count
        var offset = valuesOffset
        // A varint's end at `start`, or nil past the row's end or beyond ten bytes.
        @inline(__always) func varintEnd(_ start: Int) -> (value: UInt64, end: Int)? {
            var value: UInt64 = 0, shift: UInt64 = 0, at = start
            while at < count, shift < 70 {
                let byte = body[at]
                value |= UInt64(byte & 0x7F) << shift
                at += 1
                if byte & 0x80 == 0 { return shift < 64 ? (value, at) : nil }
                shift += 7
            }
            return nil
        }
        for id in 0..<fieldCount {
            let type = body[typesOffset + id]
            if type == ValueType.null { continue }
            guard ValueType.fits(type, allowed[id]), valuesOffset + valueStart(id) == offset else { return false }
            switch type {
            case ValueType.integer:
                guard let end = varintEnd(offset)?.end else { return false }
                offset = end
            case ValueType.double, ValueType.date: offset += 8
            case ValueType.float: offset += 4
            case ValueType.falseValue, ValueType.trueValue: break
            case ValueType.uuid: offset += 16
            case ValueType.string, ValueType.data:
                guard let (length, start) = varintEnd(offset), length <= UInt64(count - start) else { return false }
                offset = start + Int(length)
                if type == ValueType.string, !Self.isUTF8(UnsafeRawBufferPointer(rebasing: body[start..<offset])) { return false }
            case ValueType.reference:
                guard offset + 2 <= count, let end = varintEnd(offset + 2)?.end else { return false }
                offset = end
            default:
                return false  // decimals and URIs are parsed by the full check; unknown types refused by it
            }
            guard offset <= count else { return false }
        }
        return offset == count
    }

    /// The attribute value in field `id` (`nil` for NULL); the row's fields must have been checked.
    func attributeValue(_ id: Int) throws(RowDecodingError) -> AttributeValue? {
        guard let located = try locate(id), located.type != RowCodec.ValueType.reference else { return nil }
        var reader = located.reader
        return try Self.readValue(located.type, field: entity.fields[id].name, &reader)
    }

    /// The reference in field `id` (`nil` for none); the row's fields must have been checked.
    func reference(_ id: Int) throws(RowDecodingError) -> StoredRow.Reference? {
        guard let located = try locate(id), located.type == RowCodec.ValueType.reference else { return nil }
        var reader = located.reader
        return try Self.readReference(&reader)
    }

    /// Row formats 2 and 3: where field `id`'s value starts, from the start of the values (`id` < ``fieldCount``).
    @inline(__always)
    private func valueStart(_ id: Int) -> Int {
        let at = typesOffset + fieldCount + id * offsetWidth
        switch offsetWidth {
        case 1: return Int(body[at])
        case 2: return Int(UInt16(bigEndian: body.loadUnaligned(fromByteOffset: at, as: UInt16.self)))
        default: return Int(UInt32(bigEndian: body.loadUnaligned(fromByteOffset: at, as: UInt32.self)))
        }
    }

    /// A reader at the value of field `id` and the value's type, or `nil` when the row does not hold the field.
    /// Row formats 2 and 3 find it in the field table; row format 1 steps over the fields before it by their extent only
    /// (a string passed over is not read, so not validated).
    @inline(__always)
    private func locate(_ id: Int) throws(RowDecodingError) -> (type: UInt8, reader: ByteReader)? {
        if valuesOffset != 0 {
            guard id < fieldCount else { return nil }
            let type = body[typesOffset + id]
            guard type != RowCodec.ValueType.null else { return nil }
            guard RowCodec.ValueType.fits(type, entity.fieldValueTypes[id]) else { throw wrongType(id, type) }
            let start = valuesOffset + valueStart(id)
            guard start <= body.count else { throw RowDecodingError(reason: "\(entity.fields[id].name)'s value starts past the row's end") }
            return (type, ByteReader(bytes: body, offset: start))
        }
        return try locateWalking(id)
    }

    private func locateWalking(_ id: Int) throws(RowDecodingError) -> (type: UInt8, reader: ByteReader)? {
        var reader = ByteReader(bytes: body, offset: typesOffset)
        let fields = entity.fields.count
        for _ in 0..<fieldCount {
            let fieldID = Int(try reader.uint16())
            let type = try reader.byte()
            guard fieldID < fields else { throw RowDecodingError(reason: "the row has field \(fieldID); \(entity.name) has \(fields)") }
            if fieldID == id {
                guard RowCodec.ValueType.fits(type, entity.fieldValueTypes[id]) else { throw wrongType(id, type) }
                return (type, reader)
            }
            guard try Self.step(over: type, &reader) else {
                throw RowDecodingError(reason: "\(entity.fields[fieldID].name) has the unknown value type \(type)")
            }
        }
        return nil
    }

    /// Moves past one value by its extent; `false` for a type no row holds.
    @inline(__always)
    private static func step(over type: UInt8, _ reader: inout ByteReader) throws(RowDecodingError) -> Bool {
        typealias ValueType = RowCodec.ValueType
        switch type {
        case ValueType.integer: try reader.skipVarint()
        case ValueType.double, ValueType.date: try reader.skip(8)
        case ValueType.float: try reader.skip(4)
        case ValueType.falseValue, ValueType.trueValue: break
        case ValueType.uuid: try reader.skip(16)
        case ValueType.decimal, ValueType.string, ValueType.uri, ValueType.data: _ = try reader.lengthPrefixed()
        case ValueType.reference:
            try reader.skip(2)
            try reader.skipVarint()
        default: return false
        }
        return true
    }

    /// The value of field `id`, or `nil` when the row does not hold it (NULL, or no to-one target).
    func field(_ id: Int) throws(RowDecodingError) -> RowField? {
        guard let located = try locate(id) else { return nil }
        var reader = located.reader
        return try Self.read(located.type, field: entity.fields[id].name, &reader)
    }

    /// Whether the row holds a value (not NULL) in field `id`; nothing is decoded.
    func holdsField(_ id: Int) throws(RowDecodingError) -> Bool {
        try locate(id) != nil
    }

    /// The value of field `id` without decoding it (numbers read, strings as their bytes, a to-one's target as its
    /// reference), or `nil` when the row does not hold it.
    func rawField(_ id: Int) throws(RowDecodingError) -> RawField? {
        guard let located = try locate(id) else { return nil }
        var reader = located.reader
        switch located.type {
        case RowCodec.ValueType.integer:
            let raw = try reader.varint()
            return .integer(Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1))
        case RowCodec.ValueType.double: return .double(Double(bitPattern: try reader.uint64()))
        case RowCodec.ValueType.float: return .double(Double(Float(bitPattern: try reader.uint32())))
        case RowCodec.ValueType.string: return .string(try reader.lengthPrefixed())
        case RowCodec.ValueType.date: return .date(Double(bitPattern: try reader.uint64()))
        case RowCodec.ValueType.falseValue: return .boolean(false)
        case RowCodec.ValueType.trueValue: return .boolean(true)
        case RowCodec.ValueType.reference: return .reference(try Self.readReference(&reader))
        default: return .other
        }
    }

    /// Every field, decoded.
    func decoded() throws(RowDecodingError) -> StoredRow {
        var row = StoredRow(entityTag: entity.tag, version: version, fields: entity.newFields())
        try forEachField { id, type, reader throws(RowDecodingError) in
            row.fields[id] = type == RowCodec.ValueType.reference
                ? .reference(try Self.readReference(&reader))
                : .attribute(try Self.readValue(type, field: entity.fields[id].name, &reader))
        }
        return row
    }

    /// Every field, decoded into what a node holds: attribute values and to-ones (made into object IDs by
    /// `objectID`) in the slot positions of the entity's model handle — no ``StoredRow``, no ``RowField`` and no
    /// name in between.
    func decodedValues(objectID: (StoredRow.Reference) -> ManagedObjectID) throws(RowDecodingError)
        -> (attributes: AttributeSlots, toOne: ToOneSlots)
    {
        let handle = entity.handle, positions = entity.slotPositions
        var attributes = handle.newAttributes()
        var toOne = handle.newToOne()
        try forEachField { id, type, reader throws(RowDecodingError) in
            let position = positions[id]
            if type == RowCodec.ValueType.reference {
                let reference = try Self.readReference(&reader)
                if position >= 0 { toOne[position] = objectID(reference) }
            } else {
                let value = try Self.readValue(type, field: entity.fields[id].name, &reader)
                if position >= 0 { attributes[position] = value }
            }
        }
        return (attributes, toOne)
    }

    /// Walks the fields in order, handing each field's number and value type to `read` with the reader at its
    /// value (which `read` must consume); checks that each field holds what its kind does (a value in an
    /// attribute's field, a reference in a to-one's), that a format-2 or -3 row's field table points at each value, and
    /// that nothing follows the last.
    @inline(__always)
    private func forEachField(_ read: (Int, UInt8, inout ByteReader) throws(RowDecodingError) -> Void) throws(RowDecodingError) {
        let allowed = entity.fieldValueTypes
        if valuesOffset != 0 {
            var reader = ByteReader(bytes: body, offset: valuesOffset)
            for id in 0..<fieldCount {
                let type = body[typesOffset + id]
                guard type != RowCodec.ValueType.null else { continue }
                try checkKind(id, type, allowed)
                guard valuesOffset + valueStart(id) == reader.offset else {
                    throw RowDecodingError(reason: "the row's field table does not point at the value of \(entity.fields[id].name)")
                }
                try read(id, type, &reader)
            }
            guard reader.offset == body.count else { throw RowDecodingError(reason: "the row has \(body.count - reader.offset) bytes after its last field") }
            return
        }
        var reader = ByteReader(bytes: body, offset: typesOffset)
        var previous = -1
        for _ in 0..<fieldCount {
            let id = Int(try reader.uint16())
            let type = try reader.byte()
            guard id < entity.fields.count else { throw RowDecodingError(reason: "the row has field \(id); \(entity.name) has \(entity.fields.count)") }
            // Format 1 holds each field at most once, in ascending order: a repeated field would read one way
            // alone and another in the whole row.
            guard id > previous else { throw RowDecodingError(reason: "the row holds field \(id) after field \(previous); fields must ascend") }
            previous = id
            try checkKind(id, type, allowed)
            try read(id, type, &reader)
        }
        guard reader.offset == body.count else { throw RowDecodingError(reason: "the row has \(body.count - reader.offset) bytes after its last field") }
    }

    /// Refuses a value of a type its field's property is never written as: a reference in an attribute's field, a
    /// value in a to-one's, an integer in a string attribute's (`allowed`: ``StoreLayout/EntityLayout/fieldValueTypes``).
    @inline(__always)
    private func checkKind(_ id: Int, _ type: UInt8, _ allowed: UnsafeBufferPointer<UInt32>) throws(RowDecodingError) {
        guard RowCodec.ValueType.fits(type, allowed[id]) else { throw wrongType(id, type) }
    }

    /// The error for field `id` holding a value of `type`, which its property is never written as.
    @inline(never)
    private func wrongType(_ id: Int, _ type: UInt8) -> RowDecodingError {
        let field = entity.fields[id]
        guard type >= 1, type <= RowCodec.ValueType.reference else { return RowDecodingError(reason: "\(field.name) has the unknown value type \(type)") }
        let what = field.attributeType.map { "its type is \($0.coreDataName)" } ?? "it is a to-one relationship"
        return RowDecodingError(reason: "the row's field \(field.name) holds \(RowCodec.ValueType.phrase(type)), which \(entity.name).\(field.name) cannot hold (\(what))")
    }

    private static func read(_ type: UInt8, field: @autoclosure () -> String, _ reader: inout ByteReader) throws(RowDecodingError) -> RowField {
        type == RowCodec.ValueType.reference ? .reference(try readReference(&reader)) : .attribute(try readValue(type, field: field(), &reader))
    }

    /// A to-one reference: the destination's entity tag and row key.
    @inline(__always)
    private static func readReference(_ reader: inout ByteReader) throws(RowDecodingError) -> StoredRow.Reference {
        StoredRow.Reference(entityTag: try reader.uint16(), key: try reader.varint())
    }

    /// An attribute value of any type but a reference.
    private static func readValue(_ type: UInt8, field: @autoclosure () -> String, _ reader: inout ByteReader) throws(RowDecodingError) -> AttributeValue {
        typealias ValueType = RowCodec.ValueType
        switch type {
        case ValueType.integer:
            let raw = try reader.varint()
            return .integer(Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1))
        case ValueType.double: return .double(Double(bitPattern: try reader.uint64()))
        case ValueType.float: return .float(Float(bitPattern: try reader.uint32()))
        case ValueType.decimal:
            guard let value = Decimal(string: try reader.string()) else { throw RowDecodingError(reason: "\(field()) holds a malformed decimal") }
            return .decimal(value)
        case ValueType.string: return .string(try reader.string())
        case ValueType.falseValue: return .boolean(false)
        case ValueType.trueValue: return .boolean(true)
        case ValueType.date: return .date(Date(timeIntervalSinceReferenceDate: Double(bitPattern: try reader.uint64())))
        case ValueType.data: return .data(Data(try reader.lengthPrefixed()))
        case ValueType.uuid:
            let raw = try reader.bytes(16)
            return .uuid(UUID(uuid: raw.loadUnaligned(as: uuid_t.self)))
        case ValueType.uri:
            guard let url = URL(string: try reader.string()) else { throw RowDecodingError(reason: "\(field()) holds a malformed URI") }
            return .uri(url)
        default:
            throw RowDecodingError(reason: "\(field()) has the unknown value type \(type)")
        }
    }

    /// Moves past one value, checking only its extent (and that strings are UTF-8, which reading relies on).
    private static func skip(_ type: UInt8, field: @autoclosure () -> String, _ reader: inout ByteReader) throws(RowDecodingError) {
        typealias ValueType = RowCodec.ValueType
        switch type {
        case ValueType.integer: _ = try reader.varint()
        case ValueType.double, ValueType.date: _ = try reader.bytes(8)
        case ValueType.float: _ = try reader.bytes(4)
        case ValueType.falseValue, ValueType.trueValue: break
        case ValueType.uuid: _ = try reader.bytes(16)
        case ValueType.decimal, ValueType.string, ValueType.uri:
            let raw = try reader.lengthPrefixed()
            guard Self.isUTF8(raw) else { throw RowDecodingError(reason: "a string in the row is not UTF-8") }
        case ValueType.data: _ = try reader.lengthPrefixed()
        case ValueType.reference:
            _ = try reader.uint16()
            _ = try reader.varint()
        default:
            throw RowDecodingError(reason: "\(field()) has the unknown value type \(type)")
        }
    }

    /// Whether `bytes` are valid UTF-8, without making a string (ASCII, the common case, is checked 8 bytes at a time).
    private static func isUTF8(_ bytes: UnsafeRawBufferPointer) -> Bool {
        if UTF8Text.isASCII(bytes) { return true }
        var decoder = Unicode.UTF8.ForwardParser()
        var iterator = bytes.makeIterator()
        while true {
            switch decoder.parseScalar(from: &iterator) {
            case .valid: continue
            case .emptyInput: return true
            case .error: return false
            }
        }
    }
}

/// One field's value as it lies in the row, for comparisons that need no decoded value.
enum RawField {
    case integer(Int64)
    case double(Double)
    /// UTF-8 bytes, borrowed from the row.
    case string(UnsafeRawBufferPointer)
    /// Seconds since the reference date.
    case date(Double)
    case boolean(Bool)
    /// A to-one's target: its entity tag and row key.
    case reference(StoredRow.Reference)
    case other
}
