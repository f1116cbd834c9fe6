/// Text read from bytes, as the file parsers (CSV, JSON) need it.
enum UTF8Text {
    /// `bytes` as a string, or `nil` when they are not valid UTF-8. ASCII bytes — most of what an import file holds —
    /// are always valid and skip the validating decoder, which costs several hundred instructions a call.
    @inline(__always)
    static func string(_ bytes: ArraySlice<UInt8>) -> String? {
        if bytes.allSatisfy({ $0 < 0x80 }) { return String(decoding: bytes, as: UTF8.self) }
        return String(validating: bytes, as: UTF8.self)
    }
}
