internal import CLMDB

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension Environment {
    /// The state of an environment's memory map and reader table. The corresponding LMDB type is `MDB_envinfo`.
    public struct Info: Sendable, Hashable {
        /// The current size of the memory map in bytes.
        public var mapSize: Int
        /// The number of the last page in use.
        public var lastPageNumber: Int
        /// The ID of the last committed transaction.
        public var lastTransactionID: Int
        /// The size of the reader table.
        public var maxReaders: Int
        /// The number of reader slots in use (by this and other processes).
        public var readersInUse: Int
    }

    /// Statistics of the environment's main B+tree, which holds the named databases' records.
    /// The corresponding LMDB function is `mdb_env_stat`.
    ///
    /// - Throws: ``LMDBError`` if LMDB cannot read the meta page.
    public func statistics() throws -> Statistics {
        var stat = MDB_stat()
        try check(mdb_env_stat(handle, &stat), path: path)
        return Statistics(stat)
    }

    /// The map size, last page, last transaction and reader counts. The corresponding LMDB function is
    /// `mdb_env_info`.
    ///
    /// - Throws: ``LMDBError`` if LMDB cannot read the meta page.
    public func info() throws -> Info {
        var info = MDB_envinfo()
        try check(mdb_env_info(handle, &info), path: path)
        return Info(mapSize: info.me_mapsize, lastPageNumber: info.me_last_pgno,
                    lastTransactionID: info.me_last_txnid, maxReaders: Int(info.me_maxreaders),
                    readersInUse: Int(info.me_numreaders))
    }

    /// Flushes committed data to disk. Needed only with ``Durability/noSync`` or ``Durability/skipMetaSync``;
    /// with `force`, the flush is synchronous even under ``Durability/noSync``.
    /// The corresponding LMDB function is `mdb_env_sync`.
    ///
    /// - Throws: ``LMDBError`` with the operating system's error if the flush fails.
    public func sync(force: Bool = true) throws {
        if options.isReadOnly { return }
        try check(mdb_env_sync(handle, force ? 1 : 0), path: path, message: "cannot flush the store to disk")
    }

    /// Writes a consistent copy of the store to `destination` while it stays in use: a single file for a
    /// ``Layout/singleFile`` store, an existing empty directory for a ``Layout/directory`` store. With
    /// `compacting`, free pages are left out and pages renumbered, so the copy may be much smaller.
    /// The corresponding LMDB function is `mdb_env_copy2`.
    ///
    /// - Throws: ``LMDBError`` naming `destination`, e.g. when it already exists.
    public func copy(to destination: String, compacting: Bool = false) throws {
        if options.layout == .singleFile, StoreFile.identity(of: destination) != nil {
            throw LMDBError(LMDBError(rawValue: EEXIST), path: destination, message: "the copy's destination already exists")
        }
        try check(mdb_env_copy2(handle, destination, compacting ? UInt32(MDB_CP_COMPACT) : 0),
                  path: destination, message: "cannot copy the store")
    }
}
