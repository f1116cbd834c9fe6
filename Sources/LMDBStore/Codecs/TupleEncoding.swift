import Foundation
import ObjectGraph

/// The order-preserving key encoding (specified in `Docs/FORMAT.md`): each element is a type tag and a body such
/// that comparing two encodings byte by byte orders them as their values order. NULL sorts first.
enum TupleEncoding {
    enum Tag {
        static let null: UInt8 = 0x00
        static let integer: UInt8 = 0x20
        static let double: UInt8 = 0x21
        static let decimal: UInt8 = 0x23
        static let string: UInt8 = 0x30
        static let date: UInt8 = 0x40
        static let data: UInt8 = 0x50
        static let uuid: UInt8 = 0x60
        static let uri: UInt8 = 0x70
        static let boolean: UInt8 = 0x18
    }

    /// Appends one element.
    static func append(_ value: AttributeValue?, to key: inout [UInt8]) {
        guard let value else { key.append(Tag.null); return }
        switch value {
        case .integer(let v):
            key.append(Tag.integer)
            appendBigEndian(UInt64(bitPattern: v) ^ (1 << 63), to: &key)
        case .boolean(let v):
            key.append(Tag.boolean)
            key.append(v ? 1 : 0)
        case .double(let v):
            key.append(Tag.double)
            appendSortableDouble(v, to: &key)
        case .float(let v):
            key.append(Tag.double)
            appendSortableDouble(Double(v), to: &key)
        case .decimal(let v):
            key.append(Tag.decimal)
            appendDecimal(v, to: &key)
        case .string(let v):
            key.append(Tag.string)
            var composed = StringFolding.composed(v)
            composed.withUTF8 { appendEscaped(UnsafeRawBufferPointer($0), to: &key) }
        case .date(let v):
            key.append(Tag.date)
            appendSortableDouble(v.timeIntervalSinceReferenceDate, to: &key)
        case .data(let v):
            key.append(Tag.data)
            v.withUnsafeBytes { appendEscaped($0, to: &key) }
        case .uuid(let v):
            key.append(Tag.uuid)
            withUnsafeBytes(of: v.uuid) { key.append(contentsOf: $0) }
        case .uri(let v):
            key.append(Tag.uri)
            var text = v.absoluteString
            text.withUTF8 { appendEscaped(UnsafeRawBufferPointer($0), to: &key) }
        }
    }

    /// The value of a key that is exactly one element of `type` (NULL is `.some(nil)`); `nil` when the bytes are
    /// not one whole element of that type — a different tag, trailing bytes, an element cut to fit the key limit,
    /// invalid UTF-8 — or the type is not decoded here (decimals, data, URIs, object IDs, transformables). Strings
    /// come back as stored: precomposed (NFC).
    static func decodeElement(_ key: UnsafeRawBufferPointer, as type: AttributeType) -> AttributeValue?? {
        guard let (value, end) = decodeElement(key, at: 0, as: type), end == key.count else { return nil }
        return .some(value)
    }

    /// The element of `type` that starts at `start` (its bytes inverted when `inverted`, as a descending index
    /// element stores them) and the offset just past it; `nil` as for ``decodeElement(_:as:)``. A cut element (its
    /// prefix, then 0x00 0x02 and a digest) does not decode: 0x02 is no element's tag.
    static func decodeElement(_ key: UnsafeRawBufferPointer, at start: Int, as type: AttributeType, inverted: Bool = false)
        -> (value: AttributeValue?, end: Int)?
    {
        let mask: UInt8 = inverted ? 0xFF : 0
        @inline(__always) func byte(_ offset: Int) -> UInt8 { key[offset] ^ mask }
        func u64(_ offset: Int) -> UInt64 {
            var value: UInt64 = 0
            for index in offset..<offset + 8 { value = value << 8 | UInt64(byte(index)) }
            return value
        }
        func double(_ offset: Int) -> Double {
            let bits = u64(offset)
            return Double(bitPattern: bits & (1 << 63) != 0 ? bits ^ (1 << 63) : ~bits)
        }
        guard start < key.count else { return nil }
        let tag = byte(start)
        let body = start + 1
        let fixed = key.count - body
        switch tag {
        case Tag.null:
            return (nil, body)
        case Tag.integer where type.isInteger && fixed >= 8:
            return (.integer(Int64(bitPattern: u64(body) ^ (1 << 63))), body + 8)
        case Tag.double where type == .double && fixed >= 8:
            return (.double(double(body)), body + 8)
        case Tag.double where type == .float && fixed >= 8:
            return (.float(Float(double(body))), body + 8)
        case Tag.date where type == .date && fixed >= 8:
            return (.date(Date(timeIntervalSinceReferenceDate: double(body))), body + 8)
        case Tag.boolean where type == .boolean && fixed >= 1 && byte(body) <= 1:
            return (.boolean(byte(body) == 1), body + 1)
        case Tag.uuid where type == .uuid && fixed >= 16:
            var bytes = [UInt8](repeating: 0, count: 16)
            for index in 0..<16 { bytes[index] = byte(body + index) }
            return (.uuid(bytes.withUnsafeBytes { UUID(uuid: $0.loadUnaligned(as: uuid_t.self)) }), body + 16)
        case Tag.string where type == .string:
            var bytes: [UInt8] = []
            var position = body
            while position < key.count {
                // A cut element's prefix is followed by 0x00 0x02 as stored (never inverted): no string ends there.
                if key[position] == 0, position + 1 < key.count, key[position + 1] == 0x02 { return nil }
                let current = byte(position)
                if current == 0 {
                    if position + 1 < key.count, byte(position + 1) == 0xFF {
                        bytes.append(0)
                        position += 2
                        continue
                    }
                    guard let text = String(validating: bytes, as: UTF8.self) else { return nil }
                    return (.string(text), position + 1)
                }
                bytes.append(current)
                position += 1
            }
            return nil
        default:
            return nil
        }
    }

    // Byte by byte: `append(contentsOf:)` of a raw buffer goes through the generic sequence path, several times the
    // cost of these appends for a key or row being built.
    @inline(__always)
    static func appendBigEndian(_ value: UInt64, to key: inout [UInt8]) {
        appendBigEndian(UInt32(truncatingIfNeeded: value >> 32), to: &key)
        appendBigEndian(UInt32(truncatingIfNeeded: value), to: &key)
    }

    @inline(__always)
    static func appendBigEndian(_ value: UInt32, to key: inout [UInt8]) {
        key.append(UInt8(truncatingIfNeeded: value >> 24))
        key.append(UInt8(truncatingIfNeeded: value >> 16))
        key.append(UInt8(truncatingIfNeeded: value >> 8))
        key.append(UInt8(truncatingIfNeeded: value))
    }

    @inline(__always)
    static func appendBigEndian(_ value: UInt16, to key: inout [UInt8]) {
        key.append(UInt8(truncatingIfNeeded: value >> 8))
        key.append(UInt8(truncatingIfNeeded: value))
    }

    static func readBigEndianUInt64(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> UInt64 {
        UInt64(bigEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
    }

    /// IEEE-754 bits made sortable: positive numbers get the sign bit set, negative ones are inverted whole.
    /// -0.0 is stored as 0.0 so the two compare equal, as they do as numbers.
    static func appendSortableDouble(_ value: Double, to key: inout [UInt8]) {
        let bits = (value == 0 ? 0.0 : value).bitPattern
        appendBigEndian(bits & (1 << 63) != 0 ? ~bits : bits | (1 << 63), to: &key)
    }

    /// Bytes with 0x00 escaped as 0x00 0xFF, ended by 0x00: a shorter string sorts before its extensions.
    static func appendEscaped(_ bytes: UnsafeRawBufferPointer, to key: inout [UInt8]) {
        if !bytes.contains(0) {
            key.append(contentsOf: bytes)  // the usual case: one copy, no byte-by-byte appends
        } else {
            for byte in bytes {
                key.append(byte)
                if byte == 0 { key.append(0xFF) }
            }
        }
        key.append(0)
    }

    /// Decimals: a class byte (0x40 negative, 0x80 zero, 0xC0 positive), then for non-zero values the adjusted
    /// exponent (exponent + digit count) as a biased big-endian UInt16 and the significant digits (each digit + 1),
    /// ended by 0x00; negative values have every byte after the class inverted.
    static func appendDecimal(_ value: Decimal, to key: inout [UInt8]) {
        if value.isZero { key.append(0x80); return }
        let negative = value < 0
        // Decimal's text form is plain positional notation ("1234.5", "0.001"), never an exponent.
        let text = "\(negative ? -value : value)"
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        var digits = Array((parts[0] + (parts.count > 1 ? parts[1] : "")).utf8)
        var adjusted = parts[0].count
        while digits.first == UInt8(ascii: "0") { digits.removeFirst(); adjusted -= 1 }
        while digits.last == UInt8(ascii: "0") { digits.removeLast() }
        var body: [UInt8] = []
        appendBigEndian(UInt16(truncatingIfNeeded: adjusted + 0x8000), to: &body)
        for digit in digits { body.append(digit - UInt8(ascii: "0") + 1) }
        body.append(0)
        key.append(negative ? 0x40 : 0xC0)
        key.append(contentsOf: negative ? body.map { ~$0 } : body)
    }
}
