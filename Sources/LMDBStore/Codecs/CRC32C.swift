import CChecksum

/// CRC-32C (Castagnoli), the checksum every row blob ends with, so flipped bytes surface as an error instead of
/// being read back silently (LMDB 0.9 has no checksums of its own).
///
/// Computed with the CPU's CRC-32C instruction where it has one (eight bytes per instruction; every row a fetch or a
/// fault reads is checked, so this is on the read path of everything). Otherwise eight bytes at a time ("slicing by
/// 8"): table `k` holds the CRC of a byte followed by `k` zero bytes, so one step folds eight input bytes with eight
/// table lookups instead of eight dependent steps.
enum CRC32C {
    /// `tables[k * 256 + b]`: the CRC contribution of byte `b` followed by `k` zero bytes.
    private static let tables: [UInt32] = {
        var tables = [UInt32](repeating: 0, count: 8 * 256)
        for index in 0..<256 {
            var crc = UInt32(index)
            for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
            tables[index] = crc
        }
        for index in 0..<256 {
            for slice in 1..<8 {
                let previous = tables[(slice - 1) * 256 + index]
                tables[slice * 256 + index] = (previous >> 8) ^ tables[Int(previous & 0xFF)]
            }
        }
        return tables
    }()

    /// Whether the CPU's CRC-32C instruction computes ``checksum(_:)`` (SSE 4.2 on x86-64, the CRC extension on
    /// 64-bit ARM); the table is the fallback, and the reference the tests hold the instruction to.
    /// (Asked of the C library, which found out once when it was loaded: a Swift `static let` would be checked with
    /// a `swift_once` call on every row.)
    static var usesHardware: Bool { lmdbstore_crc32c_uses_hardware() != 0 }

    static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard usesHardware, let base = bytes.baseAddress else { return softwareChecksum(bytes) }
        return ~lmdbstore_crc32c_update(0xFFFF_FFFF, base, bytes.count)
    }

    /// ``checksum(_:)`` computed with the tables. Never inlined: inside ``checksum(_:)`` its loop's registers would be
    /// saved and restored on every call, on CPUs that never take it.
    @inline(never)
    static func softwareChecksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        tables.withUnsafeBufferPointer { t in
            var offset = 0
            let count = bytes.count
            while count - offset >= 8 {
                let word = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
                let low = UInt32(truncatingIfNeeded: word) ^ crc, high = UInt32(truncatingIfNeeded: word >> 32)
                crc = t[7 * 256 + Int(low & 0xFF)] ^ t[6 * 256 + Int((low >> 8) & 0xFF)]
                    ^ t[5 * 256 + Int((low >> 16) & 0xFF)] ^ t[4 * 256 + Int(low >> 24)]
                    ^ t[3 * 256 + Int(high & 0xFF)] ^ t[2 * 256 + Int((high >> 8) & 0xFF)]
                    ^ t[1 * 256 + Int((high >> 16) & 0xFF)] ^ t[Int(high >> 24)]
                offset += 8
            }
            while offset < count {
                crc = t[Int((crc ^ UInt32(bytes[offset])) & 0xFF)] ^ (crc >> 8)
                offset += 1
            }
        }
        return ~crc
    }
}
