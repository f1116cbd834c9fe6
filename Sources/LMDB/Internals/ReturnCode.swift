internal import CLMDB

/// The innermost layer over LMDB's C calls: a return code becomes `Void` or a thrown ``LMDBError`` with context.
@inline(__always)
func check(_ code: Int32, path: String? = nil, database: String? = nil, message: @autoclosure () -> String? = nil) throws(LMDBError) {
    if code != MDB_SUCCESS {
        throw LMDBError(LMDBError(rawValue: code), path: path, database: database, message: message())
    }
}

/// An `MDB_val` that points at `bytes` for the duration of one C call.
@inline(__always)
func mdbValue(_ bytes: UnsafeRawBufferPointer) -> MDB_val {
    MDB_val(mv_size: bytes.count, mv_data: UnsafeMutableRawPointer(mutating: bytes.baseAddress))
}

extension UnsafeRawBufferPointer {
    /// The bytes an `MDB_val` filled in by LMDB points at; borrowed from the map.
    @inline(__always)
    init(_ value: MDB_val) {
        self.init(start: value.mv_data, count: value.mv_size)
    }
}

/// Runs `body` with the bytes of any byte sequence, without copying when the sequence is contiguous.
@inlinable
func withBytes<Bytes: Sequence<UInt8>, Result>(
    _ bytes: Bytes, _ body: (UnsafeRawBufferPointer) throws -> Result
) rethrows -> Result {
    if let result = try bytes.withContiguousStorageIfAvailable({ try body(UnsafeRawBufferPointer($0)) }) {
        return result
    }
    return try Array(bytes).withUnsafeBytes(body)
}
