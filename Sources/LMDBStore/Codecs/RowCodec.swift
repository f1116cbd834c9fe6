import Foundation
import ObjectGraph

/// A row as stored: the entity, the version and the values, with to-one references as (entity tag, key).
struct StoredRow: Equatable {
    struct Reference: Equatable, Hashable {
        var entityTag: UInt16
        var key: UInt64
    }

    var entityTag: UInt16
    var version: UInt64
    var attributes: [String: AttributeValue]
    var toOne: [String: Reference]
}

/// Why a row blob could not be read.
struct RowDecodingError: Error, CustomStringConvertible {
    let reason: String
    var description: String { reason }
}

/// The row blob (specified in `Docs/FORMAT.md`): a fixed header, the present fields as (number, type, value), and
/// a CRC-32C of everything before it.
///
/// Header: format version (u8), flags (u8), entity tag (u16 BE), row version (u64 BE), the first 8 bytes of the
/// model's version hash, field count (u16 BE).
enum RowCodec {
    static let formatVersion: UInt8 = 1
    static let headerSize = 22

    enum ValueType {
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
    }

    static func encode(_ row: StoredRow, entity: StoreLayout.EntityLayout, modelHash: UInt64) -> [UInt8] {
        var bytes: [UInt8] = [formatVersion, 0]
        bytes.reserveCapacity(64)
        TupleEncoding.appendBigEndian(row.entityTag, to: &bytes)
        TupleEncoding.appendBigEndian(row.version, to: &bytes)
        TupleEncoding.appendBigEndian(modelHash, to: &bytes)
        let countOffset = bytes.count
        bytes += [0, 0]
        var count: UInt16 = 0
        for field in entity.fields {
            switch field.kind {
            case .attribute:
                guard let value = row.attributes[field.name] else { continue }
                TupleEncoding.appendBigEndian(field.id, to: &bytes)
                appendValue(value, to: &bytes)
            case .toOne:
                guard let reference = row.toOne[field.name] else { continue }
                TupleEncoding.appendBigEndian(field.id, to: &bytes)
                bytes.append(ValueType.reference)
                TupleEncoding.appendBigEndian(reference.entityTag, to: &bytes)
                appendVarint(reference.key, to: &bytes)
            }
            count += 1
        }
        bytes[countOffset] = UInt8(count >> 8)
        bytes[countOffset + 1] = UInt8(count & 0xFF)
        let crc = bytes.withUnsafeBytes { CRC32C.checksum($0) }
        withUnsafeBytes(of: crc.bigEndian) { bytes.append(contentsOf: $0) }
        return bytes
    }

    private static func appendValue(_ value: AttributeValue, to bytes: inout [UInt8]) {
        switch value {
        case .integer(let v):
            bytes.append(ValueType.integer)
            appendVarint(UInt64(bitPattern: (v << 1) ^ (v >> 63)), to: &bytes)
        case .double(let v):
            bytes.append(ValueType.double)
            TupleEncoding.appendBigEndian(v.bitPattern, to: &bytes)
        case .float(let v):
            bytes.append(ValueType.float)
            withUnsafeBytes(of: v.bitPattern.bigEndian) { bytes.append(contentsOf: $0) }
        case .decimal(let v):
            bytes.append(ValueType.decimal)
            appendLengthPrefixed(Array("\(v)".utf8), to: &bytes)
        case .string(let v):
            bytes.append(ValueType.string)
            appendLengthPrefixed(Array(v.utf8), to: &bytes)
        case .boolean(let v):
            bytes.append(v ? ValueType.trueValue : ValueType.falseValue)
        case .date(let v):
            bytes.append(ValueType.date)
            TupleEncoding.appendBigEndian(v.timeIntervalSinceReferenceDate.bitPattern, to: &bytes)
        case .data(let v):
            bytes.append(ValueType.data)
            appendLengthPrefixed(Array(v), to: &bytes)
        case .uuid(let v):
            bytes.append(ValueType.uuid)
            withUnsafeBytes(of: v.uuid) { bytes.append(contentsOf: $0) }
        case .uri(let v):
            bytes.append(ValueType.uri)
            appendLengthPrefixed(Array(v.absoluteString.utf8), to: &bytes)
        }
    }

    static func appendVarint(_ value: UInt64, to bytes: inout [UInt8]) {
        var remaining = value
        while remaining >= 0x80 {
            bytes.append(UInt8(remaining & 0x7F) | 0x80)
            remaining >>= 7
        }
        bytes.append(UInt8(remaining))
    }

    private static func appendLengthPrefixed(_ payload: [UInt8], to bytes: inout [UInt8]) {
        appendVarint(UInt64(payload.count), to: &bytes)
        bytes += payload
    }

    /// Reads the entity tag of a row without decoding it.
    static func entityTag(_ bytes: UnsafeRawBufferPointer) -> UInt16? {
        guard bytes.count >= headerSize + 4 else { return nil }
        return UInt16(bytes[2]) << 8 | UInt16(bytes[3])
    }

    static func decode(_ bytes: UnsafeRawBufferPointer, layout: StoreLayout) throws(RowDecodingError) -> StoredRow {
        guard bytes.count >= headerSize + 4 else { throw RowDecodingError(reason: "the row is \(bytes.count) bytes, shorter than a row header") }
        let body = UnsafeRawBufferPointer(rebasing: bytes[..<(bytes.count - 4)])
        let stored = UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: bytes.count - 4, as: UInt32.self))
        guard CRC32C.checksum(body) == stored else { throw RowDecodingError(reason: "the row's checksum does not match its bytes") }
        guard bytes[0] <= formatVersion else {
            throw RowDecodingError(reason: "the row has format version \(bytes[0]); this LMDBStore reads up to \(formatVersion)")
        }
        let tag = UInt16(bytes[2]) << 8 | UInt16(bytes[3])
        guard let entity = layout.entity(tag: tag) else {
            throw RowDecodingError(reason: "the row names the unknown entity tag \(tag)")
        }
        let entityName = entity.name
        var reader = ByteReader(bytes: body, offset: 4)
        var row = StoredRow(entityTag: tag, version: try reader.uint64(), attributes: [:], toOne: [:])
        _ = try reader.uint64()  // model hash prefix, for migrations
        let count = try reader.uint16()
        row.attributes.reserveCapacity(Int(count))
        for _ in 0..<count {
            let id = Int(try reader.uint16())
            let type = try reader.byte()
            guard id < entity.fields.count else { throw RowDecodingError(reason: "the row has field \(id); \(entityName) has \(entity.fields.count)") }
            let field = entity.fields[id]
            switch type {
            case ValueType.integer:
                let raw = try reader.varint()
                row.attributes[field.name] = .integer(Int64(bitPattern: raw >> 1) ^ -Int64(bitPattern: raw & 1))
            case ValueType.double: row.attributes[field.name] = .double(Double(bitPattern: try reader.uint64()))
            case ValueType.float: row.attributes[field.name] = .float(Float(bitPattern: try reader.uint32()))
            case ValueType.decimal:
                guard let value = Decimal(string: try reader.string()) else { throw RowDecodingError(reason: "\(field.name) holds a malformed decimal") }
                row.attributes[field.name] = .decimal(value)
            case ValueType.string: row.attributes[field.name] = .string(try reader.string())
            case ValueType.falseValue: row.attributes[field.name] = .boolean(false)
            case ValueType.trueValue: row.attributes[field.name] = .boolean(true)
            case ValueType.date: row.attributes[field.name] = .date(Date(timeIntervalSinceReferenceDate: Double(bitPattern: try reader.uint64())))
            case ValueType.data: row.attributes[field.name] = .data(Data(try reader.lengthPrefixed()))
            case ValueType.uuid:
                let raw = try reader.bytes(16)
                row.attributes[field.name] = .uuid(UUID(uuid: raw.loadUnaligned(as: uuid_t.self)))
            case ValueType.uri:
                guard let url = URL(string: try reader.string()) else { throw RowDecodingError(reason: "\(field.name) holds a malformed URI") }
                row.attributes[field.name] = .uri(url)
            case ValueType.reference:
                row.toOne[field.name] = StoredRow.Reference(entityTag: try reader.uint16(), key: try reader.varint())
            default:
                throw RowDecodingError(reason: "\(field.name) has the unknown value type \(type)")
            }
        }
        guard reader.offset == body.count else { throw RowDecodingError(reason: "the row has \(body.count - reader.offset) bytes after its last field") }
        return row
    }
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

    mutating func byte() throws(RowDecodingError) -> UInt8 {
        bytes[try take(1)]
    }

    mutating func bytes(_ count: Int) throws(RowDecodingError) -> UnsafeRawBufferPointer {
        let start = try take(count)
        return UnsafeRawBufferPointer(rebasing: bytes[start..<start + count])
    }

    mutating func uint16() throws(RowDecodingError) -> UInt16 {
        UInt16(bigEndian: bytes.loadUnaligned(fromByteOffset: try take(2), as: UInt16.self))
    }

    mutating func uint32() throws(RowDecodingError) -> UInt32 {
        UInt32(bigEndian: bytes.loadUnaligned(fromByteOffset: try take(4), as: UInt32.self))
    }

    mutating func uint64() throws(RowDecodingError) -> UInt64 {
        UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: try take(8), as: UInt64.self))
    }

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

    mutating func lengthPrefixed() throws(RowDecodingError) -> UnsafeRawBufferPointer {
        let length = try varint()
        guard length <= UInt64(bytes.count) else { throw RowDecodingError(reason: "a length in the row runs past its end") }
        return try bytes(Int(length))
    }

    mutating func string() throws(RowDecodingError) -> String {
        let raw = try lengthPrefixed()
        guard let text = String(validating: raw, as: UTF8.self) else {
            throw RowDecodingError(reason: "a string in the row is not UTF-8")
        }
        return text
    }
}
