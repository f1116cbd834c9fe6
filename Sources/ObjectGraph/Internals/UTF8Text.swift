/// Text read from bytes: a stored row's strings, the file parsers' (CSV, JSON) fields.
package enum UTF8Text {
    /// `bytes` as a string, or `nil` when they are not valid UTF-8. ASCII bytes — almost every stored string and most
    /// of what an import file holds — are always valid and skip the generic validating initializer, which costs more
    /// than the check.
    @inlinable @inline(__always)
    package static func string(_ bytes: UnsafeRawBufferPointer) -> String? {
        if isASCII(bytes) { return String(decoding: bytes, as: UTF8.self) }
        return String(validating: bytes, as: UTF8.self)
    }

    /// As ``string(_:)-(UnsafeRawBufferPointer)``, for bytes held in an array.
    @inlinable @inline(__always)
    package static func string(_ bytes: ArraySlice<UInt8>) -> String? {
        bytes.withUnsafeBytes { string($0) }
    }

    /// Whether every byte is below 0x80: eight bytes at a time, the last eight read overlapping what was checked
    /// (no byte-at-a-time tail), so a typical short string costs a few loads.
    @inlinable @inline(__always)
    package static func isASCII(_ bytes: UnsafeRawBufferPointer) -> Bool {
        let count = bytes.count
        guard count >= 8 else {
            for byte in bytes where byte >= 0x80 { return false }
            return true
        }
        var position = 0
        while position + 8 <= count {
            if bytes.loadUnaligned(fromByteOffset: position, as: UInt64.self) & 0x8080_8080_8080_8080 != 0 { return false }
            position += 8
        }
        return position == count || bytes.loadUnaligned(fromByteOffset: count - 8, as: UInt64.self) & 0x8080_8080_8080_8080 == 0
    }
}
