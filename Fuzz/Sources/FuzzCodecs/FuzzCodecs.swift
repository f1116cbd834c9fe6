import Foundation
import FuzzSupport
@testable import LMDBStore
import ObjectGraph

// The row and key codecs, over bytes as a damaged file would hand them over. The first byte picks the codec; the
// rest is its input.
//
// Rows: the input is a row body and the harness appends its CRC-32C, so the fuzzer reaches past the checksum to
// the header, field table and values. A row either is refused with a `RowDecodingError` or decodes; one that decodes
// answers every field one at a time without a trap, agrees with its whole decoding, and encodes to bytes that
// decode and encode to the same bytes.
//
// Keys: any bytes, read as one tuple element of each attribute type, ascending and descending; an element that
// decodes encodes to bytes that decode and encode the same again.

private let layout = StoreLayout(model: fuzzModel)

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzCodecs(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    guard count > 0 else { return 0 }
    let input = UnsafeRawBufferPointer(start: start, count: count)
    let rest = Array(input.dropFirst())
    switch input[0] % 3 {
    case 0: checkRow(rest)
    case 1: checkKey(rest)
    default: checkEntries(rest)
    }
    return 0
}

private func checkRow(_ body: [UInt8]) {
    var bytes = body
    let crc = body.withUnsafeBytes { CRC32C.checksum($0) }
    withUnsafeBytes(of: crc.bigEndian) { bytes.append(contentsOf: $0) }
    bytes.withUnsafeBytes { raw in
        guard let row = try? EncodedRow(raw, layout: layout) else { return }
        var fields = ContiguousArray<RowField?>()
        for id in row.entity.fields.indices {
            do {
                fields.append(try row.field(id))
                _ = try row.rawField(id)
                _ = try row.attributeValue(id)
                _ = try row.reference(id)
            } catch {
                // A value its type cannot hold (a malformed decimal) is found only when read.
                return
            }
        }
        let whole: StoredRow
        do {
            whole = try RowCodec.decode(raw, layout: layout)
        } catch {
            finding("a row whose every field reads does not decode whole (\(error)): \(body)")
        }
        guard fields.count == whole.fields.count, zip(fields, whole.fields).allSatisfy({ same($0, $1) }) else {
            finding("a row read field by field differs from the row decoded whole: \(body)")
        }
        let encoded = RowCodec.encode(whole)
        let again = encoded.withUnsafeBytes { try? RowCodec.decode($0, layout: layout) }
        guard let again else { finding("a decoded row encodes to bytes that do not decode: \(body) → \(encoded)") }
        guard RowCodec.encode(again) == encoded else {
            finding("a decoded row does not encode the same twice: \(body)")
        }
    }
}

/// Field equality with NaNs equal to themselves (a stored NaN is a value like any other).
private func same(_ lhs: RowField?, _ rhs: RowField?) -> Bool {
    String(describing: lhs) == String(describing: rhs)
}

private func checkKey(_ key: [UInt8]) {
    key.withUnsafeBytes { raw in
        for type in AttributeType.allCases {
            _ = TupleEncoding.decodeElement(raw, as: type)
            for inverted in [false, true] {
                guard let (value, end) = TupleEncoding.decodeElement(raw, at: 0, as: type, inverted: inverted) else { continue }
                guard end > 0, end <= raw.count else { finding("a \(type) element of \(key) ends at \(end)") }
                var encoded: [UInt8] = []
                TupleEncoding.append(value, to: &encoded)
                guard let (again, againEnd) = encoded.withUnsafeBytes({ TupleEncoding.decodeElement($0, at: 0, as: type) }),
                      againEnd == encoded.count
                else { finding("a \(type) element of \(key) encodes to \(encoded), which does not decode") }
                var reencoded: [UInt8] = []
                TupleEncoding.append(again, to: &reencoded)
                guard reencoded == encoded else { finding("a \(type) element of \(key) does not encode the same twice") }
            }
        }
    }
}

private func checkEntries(_ bytes: [UInt8]) {
    bytes.withUnsafeBytes { raw in
        _ = EntryBytes.integer(raw)
        _ = EntryBytes.reference(raw)
        _ = RowCodec.entityTag(raw)
    }
}
