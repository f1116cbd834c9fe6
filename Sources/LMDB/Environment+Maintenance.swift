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
        /// The most reader slots in use at once since the lock file was made (LMDB's high-water mark, across every
        /// process); ``Environment/readerSlots()`` lists the slots taken now.
        public var readersInUse: Int
    }

    /// A reader slot of the lock file that a process holds: for an open read transaction, or for a reset one kept
    /// for reuse.
    public struct ReaderSlot: Sendable, Hashable {
        /// The process holding the slot.
        public var processID: Int32
        /// The thread that took it, as LMDB records it.
        public var thread: UInt
        /// The snapshot the open transaction reads, or `nil` for a reset transaction kept for reuse.
        public var transactionID: Int?
    }

    /// The reader slots taken now, by every process using the store. The corresponding LMDB function is
    /// `mdb_reader_list`.
    public func readerSlots() -> [ReaderSlot] {
        final class Lines { var text: [String] = [] }
        let lines = Lines()
        _ = withExtendedLifetime(lines) {
            mdb_reader_list(handle, { message, context in
                guard let message, let context else { return 0 }
                Unmanaged<Lines>.fromOpaque(context).takeUnretainedValue().text.append(String(cString: message))
                return 0
            }, Unmanaged.passUnretained(lines).toOpaque())
        }
        // Lines of "pid thread txnid" (thread in hexadecimal, "-" for a reset transaction) after a header.
        return lines.text.compactMap { line in
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\n" })
            guard fields.count == 3, let process = Int32(fields[0]), let thread = UInt(fields[1], radix: 16) else { return nil }
            return ReaderSlot(processID: process, thread: thread, transactionID: Int(fields[2]))
        }
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

    /// The pages on the free list as of a new read snapshot: pages of the file no table uses, which later writes
    /// take before the file grows (what `mdb_stat -f` counts; pages an open reader's snapshot still needs are among
    /// them). The free list is LMDB's own table 0, each of its values a list of page numbers led by its length.
    ///
    /// - Throws: ``LMDBError`` if the free list cannot be read.
    public func freePageCount() throws -> Int {
        try read { transaction in
            var cursor: OpaquePointer?
            try check(mdb_cursor_open(transaction.handle, 0, &cursor), path: path, message: "cannot read the free list")
            defer { mdb_cursor_close(cursor) }
            var key = MDB_val(), value = MDB_val()
            var total = 0
            var code = mdb_cursor_get(cursor, &key, &value, MDB_FIRST)
            while code == MDB_SUCCESS {
                guard let pages = value.mv_data, value.mv_size >= MemoryLayout<Int>.size else {
                    throw LMDBError(.corrupted, path: path, message: "a free-list entry is shorter than its length")
                }
                total += pages.loadUnaligned(as: Int.self)
                code = mdb_cursor_get(cursor, &key, &value, MDB_NEXT)
            }
            if code != MDB_NOTFOUND { try check(code, path: path, message: "cannot read the free list") }
            return total
        }
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
    /// Checks every B-tree page of the newest snapshot, without liblmdb, and returns the problems found (empty when
    /// the pages are sound).
    ///
    /// liblmdb trusts its pages: a damaged page header, node offset or child page number can make it return wrong
    /// entries, read out of bounds or stop the process in an assertion. This check reads the file itself, page by
    /// page, and follows nothing before checking it: every page a table reaches must lie in the file, be reached
    /// once, carry its own number and the kind its place in the tree calls for, hold its entries inside it in key
    /// order between the separators above it, and each table's counts must match its record; every page must be in
    /// a table or on the free list. Run it before reading a file that may be damaged. It reads each page once, so
    /// it takes about as long as reading the file.
    ///
    /// The check runs in a read transaction, which keeps the pages it reads from being reused by writers.
    ///
    /// - Throws: ``LMDBError`` when the file cannot be read or has no LMDB meta page.
    public func checkPages() throws -> [String] {
        #if canImport(Glibc)
        let descriptor = Glibc.open(dataPath, O_RDONLY)
        #else
        let descriptor = Darwin.open(dataPath, O_RDONLY)
        #endif
        guard descriptor >= 0 else {
            throw LMDBError(LMDBError(rawValue: errno), path: path, message: "cannot read the store file to check its pages")
        }
        defer { close(descriptor) }
        let header = UnsafeMutableRawBufferPointer.allocate(byteCount: 152, alignment: 8)
        defer { header.deallocate() }
        func meta(at offset: Int) -> PageWalk.Meta? {
            guard pread(descriptor, header.baseAddress, header.count, off_t(offset)) == header.count else { return nil }
            return PageWalk.Meta(UnsafeRawBufferPointer(header))
        }
        func walk(from current: PageWalk.Meta) throws -> [String] {
            // The size once the snapshot's meta page is read: the pages it reaches were written before it.
            guard let fileSize = StoreFile.size(of: dataPath) else {
                throw LMDBError(.invalid, path: path, message: "the store file is not a regular file")
            }
            return PageWalk.check(current, fileSize: fileSize, read: PageWalk.fileReader(descriptor, pageSize: current.pageSize)).problems
        }
        // The snapshot's meta page is one of the two, unless writers have committed twice since the transaction
        // began: then read again in a new one.
        var attempts = 0
        while true {
            attempts += 1
            let found: [String]? = try read { transaction in
                let snapshot = UInt64(transaction.id)
                guard let zero = meta(at: 0) else {
                    throw LMDBError(.corrupted, path: path, message: "the store file has no LMDB meta page at its start")
                }
                let candidates = [zero] + (zero.pageSize > 0 && zero.pageSize <= 65536 ? [meta(at: zero.pageSize)].compactMap { $0 } : [])
                guard let current = candidates.first(where: { $0.transaction == snapshot }) else {
                    if attempts < 20 { return nil }
                    throw LMDBError(.corrupted, path: path, message: """
                        no meta page names transaction \(snapshot), the snapshot being checked (they name \(candidates.map(\.transaction)))
                        """)
                }
                return try walk(from: current)
            }
            if let found { return found }
        }
    }
}

