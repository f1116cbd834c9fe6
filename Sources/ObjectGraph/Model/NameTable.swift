/// Names to positions: an entity's property names, for the key-based API (`value(forKey:)`, `setValue(_:forKey:)`),
/// and a model's entity names, for `insertNewObject(forEntityName:)` — looked up on every call.
///
/// A `[String: Int]` hashes the name with SipHash (≈ 400 instructions a lookup in a profile of a bulk insert, a fifth
/// of `setValue(_:forKey:)`); names are short and an entity has few of them, so this table hashes the UTF-8 bytes a
/// word at a time with a multiply-and-fold mix, probes an open-addressed table of positions, and compares the bytes
/// of the one candidate. Names come from the model, not from an adversary, so a cheap hash is enough (a name the
/// model does not have still costs one probe sequence, which ends at the first empty bucket).
struct NameTable: Sendable {
    private struct Bucket {
        /// The name's position, or -1 for an empty bucket.
        var position: Int32 = -1
        /// The name's UTF-8 bytes in ``NameTable/bytes``.
        var start: Int32 = 0
        var count: Int32 = 0
        /// The full hash, compared before the bytes.
        var hash: UInt64 = 0
    }

    private let buckets: [Bucket]
    /// Every name's UTF-8 bytes, one after the other.
    private let bytes: [UInt8]
    private let mask: Int

    /// A table of `positions` (a name to its position).
    init(_ positions: [String: Int]) {
        var capacity = 4
        while capacity < positions.count * 2 { capacity *= 2 }
        var buckets = [Bucket](repeating: Bucket(), count: capacity)
        var bytes: [UInt8] = []
        for (name, position) in positions {
            let utf8 = Array(name.utf8)
            let hash = utf8.withUnsafeBytes(Self.hash)
            var bucket = Int(truncatingIfNeeded: hash) & (capacity - 1)
            while buckets[bucket].position >= 0 { bucket = (bucket + 1) & (capacity - 1) }
            buckets[bucket] = Bucket(position: Int32(position), start: Int32(bytes.count), count: Int32(utf8.count), hash: hash)
            bytes += utf8
        }
        self.buckets = buckets
        self.bytes = bytes
        self.mask = capacity - 1
    }

    /// The position of `name`, or `nil`.
    func position(of name: String) -> Int? {
        if let found = name.utf8.withContiguousStorageIfAvailable({ position(ofUTF8: UnsafeRawBufferPointer($0)) }) { return found }
        // Only a string not stored as UTF-8 (bridged from another representation) has no contiguous bytes.
        return Array(name.utf8).withUnsafeBytes { position(ofUTF8: $0) }
    }

    private func position(ofUTF8 name: UnsafeRawBufferPointer) -> Int? {
        let hash = Self.hash(name)
        return buckets.withUnsafeBufferPointer { buckets in
            bytes.withUnsafeBufferPointer { bytes in
                var index = Int(truncatingIfNeeded: hash) & mask
                while true {
                    let bucket = buckets[index]
                    if bucket.position < 0 { return nil }
                    if bucket.hash == hash, Int(bucket.count) == name.count,
                       (0..<name.count).allSatisfy({ bytes[Int(bucket.start) + $0] == name[$0] }) {
                        return Int(bucket.position)
                    }
                    index = (index + 1) & mask
                }
            }
        }
    }

    /// A word-at-a-time multiply-and-fold hash of the bytes (seeded with their count).
    private static func hash(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
        var hash = UInt64(bytes.count) &* 0x9E37_79B9_7F4A_7C15
        var offset = 0
        while bytes.count - offset >= 8 {
            hash = mix(hash ^ bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
            offset += 8
        }
        if offset < bytes.count {
            var tail: UInt64 = 0
            for index in offset..<bytes.count { tail |= UInt64(bytes[index]) << (8 * UInt64(index - offset)) }
            hash = mix(hash ^ tail)
        }
        return hash
    }

    @inline(__always)
    private static func mix(_ value: UInt64) -> UInt64 {
        let product = value &* 0xFF51_AFD7_ED55_8CCD
        return product ^ (product >> 29)
    }
}
