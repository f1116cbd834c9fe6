import Foundation
import ObjectGraph

/// A row as stored: the entity, the version and the values by field number (the entity layout's `fields` order),
/// with to-one references as (entity tag, key).
struct StoredRow: Equatable {
    struct Reference: Equatable, Hashable, Sendable {
        var entityTag: UInt16
        var key: UInt64
    }

    var entityTag: UInt16
    var version: UInt64
    /// One value per field of the entity; `nil` is NULL (or no target).
    var fields: ContiguousArray<RowField?>

    init(entityTag: UInt16, version: UInt64, fields: ContiguousArray<RowField?>) {
        self.entityTag = entityTag
        self.version = version
        self.fields = fields
    }

    /// The attribute value in field `id`, `nil` for NULL (or a field that holds a reference).
    func attribute(_ id: Int) -> AttributeValue? {
        if case .attribute(let value)? = fields[id] { value } else { nil }
    }

    /// The reference in field `id`, `nil` for none (or a field that holds an attribute).
    func reference(_ id: Int) -> Reference? {
        if case .reference(let reference)? = fields[id] { reference } else { nil }
    }

    /// How many fields hold a value.
    var valueCount: Int { fields.reduce(0) { $0 + ($1 == nil ? 0 : 1) } }
}

/// Why a row blob could not be read.
struct RowDecodingError: Error, CustomStringConvertible {
    let reason: String
    var description: String { reason }
}

/// The row blob (specified in `Docs/FORMAT.md`): a short header, a field table, the values, and a CRC-32C of
/// everything before it.
///
/// Row format 3 (written since file format 6): row format (u8), flags (u8: the width of the field table's offsets),
/// entity tag (u16 BE), row version (varint), field count N (varint); then one type byte per field number (0: NULL),
/// one offset per field number into the values (1, 2 or 4 bytes BE, the narrowest that holds the last one), then
/// the values in field order — any field is found without reading the others. Rows of the older row formats are
/// read too: both start with a 22-byte header (format, flags, tag, a u64 version, the first 8 bytes of the model's
/// version hash, a u16 field count); row format 2 (file formats 4–5) follows it with the same field table, its
/// offsets 2 or 4 bytes wide, and row format 1 (file formats 1–3) with the present fields as (u16 number, u8 type,
/// value).
enum RowCodec {
    /// The row format this LMDBStore writes.
    static let formatVersion: UInt8 = 3
    /// The header of row formats 1 and 2 (read, no longer written).
    static let legacyHeaderSize = 22
    /// The fewest bytes a row of row format 3 takes: format, flags, entity tag, a one-byte version and field count,
    /// and the checksum.
    static let minimumSize = 10
    /// Row format 2, flag bit 0: the field table's offsets are four bytes wide (else two).
    static let wideOffsetsFlag: UInt8 = 1

    /// Row format 3: the flags byte that says how wide the field table's offsets are (the flags hold nothing else).
    @inline(__always)
    static func offsetWidthFlags(_ width: Int) -> UInt8 {
        width == 1 ? 0 : width == 2 ? 1 : 2
    }

    enum ValueType {
        static let null: UInt8 = 0
        static let integer: UInt8 = 1
        static let double: UInt8 = 2
        static let float: UInt8 = 3
        static let decimal: UInt8 = 4
        static let string: UInt8 = 5
        static let falseValue: UInt8 = 6
        static let trueValue: UInt8 = 7
        static let date: UInt8 = 8
        static let data: UInt8 = 9
        static let uuid: UInt8 = 10
        static let uri: UInt8 = 11
        static let reference: UInt8 = 12

        /// The value types a field may hold, as bits (`1 << type`): a reference for a to-one (`nil`), else the types
        /// values of the attribute's type are written as (integers of every width as integers, a transformable's
        /// bytes as data, an object ID as its URI; none for an undefined, transient-only, type).
        static func allowed(for type: AttributeType?) -> UInt32 {
            func bits(_ types: UInt8...) -> UInt32 { types.reduce(0) { $0 | 1 << UInt32($1) } }
            guard let type else { return bits(reference) }
            switch type {
            case .integer16, .integer32, .integer64: return bits(integer)
            case .decimal: return bits(decimal)
            case .double: return bits(double)
            case .float: return bits(float)
            case .string: return bits(string)
            case .boolean: return bits(falseValue, trueValue)
            case .date: return bits(date)
            case .binaryData, .transformable: return bits(data)
            case .uuid: return bits(uuid)
            case .uri, .objectID: return bits(uri)
            case .undefined: return 0
            }
        }

        /// What a value of `type` is, for an error: "an integer", "a reference".
        static func phrase(_ type: UInt8) -> String {
            switch type {
            case integer: "an integer"
            case double: "a double"
            case float: "a float"
            case decimal: "a decimal"
            case string: "a string"
            case falseValue, trueValue: "a Boolean"
            case date: "a date"
            case data: "binary data"
            case uuid: "a UUID"
            case uri: "a URI"
            case reference: "a reference"
            default: "a value of the unknown type \(type)"
            }
        }

        /// Whether `allowed` (``allowed(for:)``) takes `type`.
        @inline(__always)
        static func fits(_ type: UInt8, _ allowed: UInt32) -> Bool {
            type < 32 && allowed & 1 << UInt32(type) != 0
        }
    }

    /// The row in row format 3: header, the type and offset of each field up to the last one that holds a value
    /// (trailing NULLs take no room), the values.
    static func encode(_ row: StoredRow) -> [UInt8] {
        let size = encodedSize(row)
        return [UInt8](unsafeUninitializedCapacity: size.bytes) { buffer, count in
            write(row, size: size, into: UnsafeMutableRawBufferPointer(buffer))
            count = size.bytes
        }
    }

    /// How many bytes ``write(_:size:into:)`` writes for a row, and how it lays them out.
    struct EncodedSize {
        /// The whole blob, checksum included.
        var bytes: Int
        /// Field numbers given a type and an offset: up to the last field that holds a value.
        var fields: Int
        /// How many bytes each offset of the field table takes: 1, 2 or 4, the fewest that hold the last value's.
        var offsetWidth: Int
    }

    /// Measures a row before ``write(_:size:into:)``: the blob is made in one buffer of the exact size (or straight
    /// into LMDB's page, `MDB_RESERVE`), with no growth, bounds checks or uniqueness checks per byte.
    static func encodedSize(_ row: StoredRow) -> EncodedSize {
        let (fields, values, lastStart) = measure(row)
        // Offsets only grow along the table, so the last one decides how wide they all are.
        let width = lastStart <= Int(UInt8.max) ? 1 : lastStart <= Int(UInt16.max) ? 2 : 4
        let header = 4 + varintSize(row.version) + varintSize(UInt64(fields))
        return EncodedSize(bytes: header + fields * (1 + width) + values + 4, fields: fields, offsetWidth: width)
    }

    /// One walk over a row's fields: how many the field table covers (up to the last that holds a value), the
    /// values' bytes and where the last value starts among them.
    private static func measure(_ row: StoredRow) -> (fields: Int, values: Int, lastStart: Int) {
        var fields = 0, values = 0, lastStart = 0
        for id in row.fields.indices {
            let start = values
            switch row.fields[id] {
            case nil: continue
            case .attribute(let value)?: values += valueSize(value)
            case .reference(let reference)?: values += 2 + varintSize(reference.key)
            }
            fields = id + 1
            lastStart = start
        }
        return (fields, values, lastStart)
    }

    /// Writes the row in row format 3 into `buffer`, which holds exactly `size.bytes` bytes.
    static func write(_ row: StoredRow, size: EncodedSize, into buffer: UnsafeMutableRawBufferPointer) {
        precondition(buffer.count == size.bytes, "a row blob's buffer must have the measured size")
        var writer = RawWriter(buffer.baseAddress!)
        writer.byte(formatVersion)
        writer.byte(offsetWidthFlags(size.offsetWidth))
        writer.bigEndian(row.entityTag)
        writer.varint(row.version)
        writer.varint(UInt64(size.fields))
        writeFieldTable(row, fields: size.fields, offsetWidth: size.offsetWidth, at: writer.position, into: buffer)
    }

    /// Writes the field table of `fields` fields at `types` (types, then offsets `offsetWidth` bytes wide), the
    /// values after it and the checksum of everything, which must end exactly at the buffer's end.
    private static func writeFieldTable(_ row: StoredRow, fields: Int, offsetWidth: Int, at types: Int,
                                        into buffer: UnsafeMutableRawBufferPointer) {
        let base = buffer.baseAddress!
        let offsets = types + fields
        var values = RawWriter(base, at: offsets + fields * offsetWidth)
        let valuesStart = values.position
        for id in 0..<fields {
            // A NULL field's offset is 0 (`Docs/FORMAT.md`); a value's is where it starts among the values.
            let start = values.position - valuesStart
            let type: UInt8
            switch row.fields[id] {
            case nil:
                type = ValueType.null
            case .attribute(let value)?:
                type = writeValue(value, to: &values)
            case .reference(let reference)?:
                type = ValueType.reference
                values.bigEndian(reference.entityTag)
                values.varint(reference.key)
            }
            let offset = type == ValueType.null ? 0 : start
            switch offsetWidth {
            case 1: base.storeBytes(of: UInt8(offset), toByteOffset: offsets + id, as: UInt8.self)
            case 2: (base + offsets + 2 * id).storeBytes(of: UInt16(offset).bigEndian, as: UInt16.self)
            default: (base + offsets + 4 * id).storeBytes(of: UInt32(offset).bigEndian, as: UInt32.self)
            }
            buffer[types + id] = type
        }
        let body = UnsafeRawBufferPointer(rebasing: buffer[..<values.position])
        values.bigEndian(CRC32C.checksum(body))
        assert(values.position == buffer.count, "a row blob's measured size must match what was written")
    }

    /// The row in row format 2, as file formats 4 and 5 wrote every row (still read; written only to test that).
    static func encodeFormatTwo(_ row: StoredRow, modelHash: UInt64) -> [UInt8] {
        let (fields, values, _) = measure(row)
        let wide = values > Int(UInt16.max)
        let count = legacyHeaderSize + fields * (wide ? 5 : 3) + values + 4
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, written in
            var writer = RawWriter(UnsafeMutableRawPointer(buffer.baseAddress!))
            writer.byte(2)
            writer.byte(wide ? wideOffsetsFlag : 0)
            writer.bigEndian(row.entityTag)
            writer.bigEndian(row.version)
            writer.bigEndian(modelHash)
            writer.bigEndian(UInt16(fields))
            writeFieldTable(row, fields: fields, offsetWidth: wide ? 4 : 2, at: writer.position,
                            into: UnsafeMutableRawBufferPointer(buffer))
            written = count
        }
    }

    /// Bytes a value takes in the values part (its type is in the field table).
    private static func valueSize(_ value: AttributeValue) -> Int {
        switch value {
        case .integer(let v): varintSize(zigzag(v))
        case .double, .date: 8
        case .float: 4
        case .decimal(let v): lengthPrefixedSize("\(v)".utf8.count)
        case .string(let v): lengthPrefixedSize(v.utf8.count)
        case .boolean: 0
        case .data(let v): lengthPrefixedSize(v.count)
        case .uuid: 16
        case .uri(let v): lengthPrefixedSize(v.absoluteString.utf8.count)
        }
    }

    /// Writes the value's bytes (not its type) and returns its value type.
    private static func writeValue(_ value: AttributeValue, to writer: inout RawWriter) -> UInt8 {
        switch value {
        case .integer(let v):
            writer.varint(zigzag(v))
            return ValueType.integer
        case .double(let v):
            writer.bigEndian(v.bitPattern)
            return ValueType.double
        case .float(let v):
            writer.bigEndian(v.bitPattern)
            return ValueType.float
        case .decimal(let v):
            writer.lengthPrefixed("\(v)".utf8)
            return ValueType.decimal
        case .string(let v):
            writer.lengthPrefixed(v.utf8)
            return ValueType.string
        case .boolean(let v):
            return v ? ValueType.trueValue : ValueType.falseValue
        case .date(let v):
            writer.bigEndian(v.timeIntervalSinceReferenceDate.bitPattern)
            return ValueType.date
        case .data(let v):
            writer.lengthPrefixed(v)
            return ValueType.data
        case .uuid(let v):
            withUnsafeBytes(of: v.uuid) { writer.bytes($0) }
            return ValueType.uuid
        case .uri(let v):
            writer.lengthPrefixed(v.absoluteString.utf8)
            return ValueType.uri
        }
    }

    @inline(__always)
    private static func zigzag(_ value: Int64) -> UInt64 { UInt64(bitPattern: (value << 1) ^ (value >> 63)) }

    @inline(__always)
    static func varintSize(_ value: UInt64) -> Int { value == 0 ? 1 : (64 - value.leadingZeroBitCount + 6) / 7 }

    @inline(__always)
    private static func lengthPrefixedSize(_ count: Int) -> Int { varintSize(UInt64(count)) + count }

    /// The row in row format 1, as file formats 1–3 wrote every row (still read; written only to test that).
    static func encodeFormatOne(_ row: StoredRow, modelHash: UInt64) -> [UInt8] {
        let present = row.fields.reduce(0) { $0 + ($1 == nil ? 0 : 1) }
        var size = legacyHeaderSize + 4
        for field in row.fields {
            switch field {
            case nil: continue
            case .attribute(let value)?: size += 3 + valueSize(value)
            case .reference(let reference)?: size += 3 + 2 + varintSize(reference.key)
            }
        }
        return [UInt8](unsafeUninitializedCapacity: size) { buffer, count in
            var writer = RawWriter(UnsafeMutableRawPointer(buffer.baseAddress!))
            writer.byte(1)
            writer.byte(0)
            writer.bigEndian(row.entityTag)
            writer.bigEndian(row.version)
            writer.bigEndian(modelHash)
            writer.bigEndian(UInt16(present))
            for (id, field) in row.fields.enumerated() {
                guard let field else { continue }
                writer.bigEndian(UInt16(id))
                let typeAt = writer.position
                writer.byte(0)
                switch field {
                case .attribute(let value):
                    buffer[typeAt] = writeValue(value, to: &writer)
                case .reference(let reference):
                    buffer[typeAt] = ValueType.reference
                    writer.bigEndian(reference.entityTag)
                    writer.varint(reference.key)
                }
            }
            writer.bigEndian(CRC32C.checksum(UnsafeRawBufferPointer(start: buffer.baseAddress, count: writer.position)))
            count = writer.position
        }
    }

    /// Reads the entity tag of a row without decoding it.
    static func entityTag(_ bytes: UnsafeRawBufferPointer) -> UInt16? {
        guard bytes.count >= minimumSize else { return nil }
        return UInt16(bytes[2]) << 8 | UInt16(bytes[3])
    }

    static func decode(_ bytes: UnsafeRawBufferPointer, layout: StoreLayout) throws(RowDecodingError) -> StoredRow {
        try EncodedRow(bytes, layout: layout, checkingFields: false).decoded()
    }
}

/// Writes bytes at a position in a buffer measured beforehand (the row encoder's exact-size buffers): no growth and
/// no per-byte checks; the encoder asserts that what it wrote matches what it measured.
struct RawWriter {
    private let start: UnsafeMutableRawPointer
    /// Bytes written so far.
    private(set) var position = 0

    init(_ start: UnsafeMutableRawPointer, at position: Int = 0) {
        self.start = start
        self.position = position
    }

    @inline(__always)
    mutating func byte(_ value: UInt8) {
        start.storeBytes(of: value, toByteOffset: position, as: UInt8.self)
        position += 1
    }

    @inline(__always)
    mutating func bigEndian<T: FixedWidthInteger>(_ value: T) {
        (start + position).storeBytes(of: value.bigEndian, as: T.self)
        position += MemoryLayout<T>.size
    }

    /// An unsigned LEB128 varint: seven bits per byte, low bits first.
    @inline(__always)
    mutating func varint(_ value: UInt64) {
        var remaining = value
        while remaining >= 0x80 {
            byte(UInt8(truncatingIfNeeded: remaining) | 0x80)
            remaining >>= 7
        }
        byte(UInt8(remaining))
    }

    mutating func bytes(_ source: UnsafeRawBufferPointer) {
        guard let base = source.baseAddress, !source.isEmpty else { return }
        (start + position).copyMemory(from: base, byteCount: source.count)
        position += source.count
    }

    /// The payload's length as a varint, then the payload.
    mutating func lengthPrefixed(_ payload: some Collection<UInt8>) {
        varint(UInt64(payload.count))
        let copied: Void? = payload.withContiguousStorageIfAvailable { bytes(UnsafeRawBufferPointer($0)) }
        if copied == nil { for value in payload { byte(value) } }
    }
}

/// What one field of a row holds.
enum RowField: Equatable {
    case attribute(AttributeValue)
    case reference(StoredRow.Reference)
}

/// Reads a row blob front to back without copying, throwing when it runs out.
struct ByteReader {
    let bytes: UnsafeRawBufferPointer
    var offset: Int

    @inline(__always)
    private mutating func take(_ count: Int) throws(RowDecodingError) -> Int {
        guard count >= 0, offset + count <= bytes.count else { throw RowDecodingError(reason: "the row ends in the middle of a field") }
        defer { offset += count }
        return offset
    }

    @inline(__always)
    mutating func byte() throws(RowDecodingError) -> UInt8 {
        bytes[try take(1)]
    }

    @inline(__always)
    mutating func bytes(_ count: Int) throws(RowDecodingError) -> UnsafeRawBufferPointer {
        let start = try take(count)
        return UnsafeRawBufferPointer(rebasing: bytes[start..<start + count])
    }

    @inline(__always)
    mutating func uint16() throws(RowDecodingError) -> UInt16 {
        UInt16(bigEndian: bytes.loadUnaligned(fromByteOffset: try take(2), as: UInt16.self))
    }

    @inline(__always)
    mutating func uint32() throws(RowDecodingError) -> UInt32 {
        UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: try take(4), as: UInt32.self))
    }

    @inline(__always)
    mutating func uint64() throws(RowDecodingError) -> UInt64 {
        UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: try take(8), as: UInt64.self))
    }

    /// Moves `count` bytes on.
    @inline(__always)
    mutating func skip(_ count: Int) throws(RowDecodingError) {
        _ = try take(count)
    }

    /// Moves past a varint (at most ten bytes, the last without its high bit).
    @inline(__always)
    mutating func skipVarint() throws(RowDecodingError) {
        var length = 0
        while true {
            guard offset < bytes.count, length < 10 else { throw RowDecodingError(reason: offset < bytes.count ? "a number in the row is too long" : "the row ends in the middle of a field") }
            let byte = bytes[offset]
            offset += 1
            length += 1
            if byte & 0x80 == 0 { return }
        }
    }

    @inline(__always)
    mutating func varint() throws(RowDecodingError) -> UInt64 {
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            let byte = try self.byte()
            guard shift < 64 else { throw RowDecodingError(reason: "a number in the row is too long") }
            result |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 { return result }
            shift += 7
        }
    }

    @inline(__always)
    mutating func lengthPrefixed() throws(RowDecodingError) -> UnsafeRawBufferPointer {
        let length = try varint()
        guard length <= UInt64(bytes.count) else { throw RowDecodingError(reason: "a length in the row runs past its end") }
        return try bytes(Int(length))
    }

    mutating func string() throws(RowDecodingError) -> String {
        // ASCII (almost every stored string) skips the validating initializer (`UTF8Text`).
        guard let text = UTF8Text.string(try lengthPrefixed()) else {
            throw RowDecodingError(reason: "a string in the row is not UTF-8")
        }
        return text
    }
}
