internal import CLMDB

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension Environment {
    /// What ``compact(at:options:)`` did to a store file.
    public struct Compaction: Sendable, Hashable {
        /// The data file's size before, in bytes.
        public var bytesBefore: Int
        /// The data file's size after, in bytes.
        public var bytesAfter: Int
    }

    /// Rewrites the store at `path` without its free pages, in place: what SQLite's `VACUUM` does for its files.
    ///
    /// LMDB never shrinks a file: a write copies every page it changes, the old pages go on the free list for later
    /// writes, and a large import or delete leaves the file at its high-water mark. This writes a compacted copy next
    /// to the data file (``copy(to:compacting:)``: live pages only, renumbered, each table's pages in key order),
    /// flushes it, and renames it over the data file, so a crash at any point leaves either the old file or the new
    /// one whole. The copy continues the old file's transaction numbers, so the lock file stays valid for it.
    ///
    /// The store must be open nowhere while this runs. It holds LMDB's own "open alone" lock on the lock file
    /// throughout: a process that opens the store meanwhile waits, then opens the compacted file. Programs that
    /// open the file without LMDB's locking (`MDB_NOLOCK`) are not seen.
    ///
    /// - Throws: ``LMDBError`` naming the path: ``LMDBError/busy`` when the store is open in this process (close
    ///   every ``Environment`` of it first) or in another one; ``LMDBError/noSuchFile`` when there is no store;
    ///   ``LMDBError/invalid`` or ``LMDBError/corrupted`` for a file that is not a sound LMDB store;
    ///   ``LMDBError/incompatible`` for a data file with other hard links (they would keep the old file); the
    ///   operating system's error when the copy cannot be written next to the file (e.g. ``LMDBError/noSpace``),
    ///   with the store left as it was.
    public static func compact(at path: String, options: Options = Options()) throws -> Compaction {
        try compact(at: path, options: options, beforeReplacing: {})
    }

    /// ``compact(at:options:)``, running `beforeReplacing` once the copy is on disk and before it replaces the file
    /// (for tests of what happens meanwhile).
    static func compact(at path: String, options: Options, beforeReplacing: () throws -> Void) throws -> Compaction {
        // The store's place in this process's registry is held for the compaction: an open of it in this process
        // waits, as for an environment still closing.
        var claimed: StoreFile.Identity?
        while claimed == nil {
            claimed = try registry.withLock { (entries) throws(LMDBError) -> StoreFile.Identity? in
                guard let identity = StoreFile.identity(of: path) else {
                    throw LMDBError(.noSuchFile, path: path, message: "there is no store here to compact")
                }
                if let entry = entries[identity] {
                    if entry.environment != nil {
                        throw LMDBError(.busy, path: path,
                                        message: "the store is open in this process; close every use of it before compacting it")
                    }
                    return nil
                }
                entries[identity] = RegistryEntry(environment: nil)
                return identity
            }
            if claimed == nil { usleep(100) }
        }
        // The new file is a new identity: claimed too before it takes the old one's place, so that an open in this
        // process waits on the registry until LMDB's lock is given back, never in `mdb_env_open` holding the
        // registry's lock (which this compaction needs to finish).
        var replacement: StoreFile.Identity?
        defer {
            registry.withLock { entries in
                entries.removeValue(forKey: claimed!)
                if let replacement { entries.removeValue(forKey: replacement) }
            }
        }
        return try Compactor(path: path, options: options).run(beforeReplacing: beforeReplacing) { newFile in
            registry.withLock { entries in
                guard entries[newFile] == nil else { return }
                entries[newFile] = RegistryEntry(environment: nil)
                replacement = newFile
            }
        }
    }
}

/// The steps of ``Environment/compact(at:options:)`` once this process holds the store's registry entry.
private struct Compactor {
    let path: String
    let openPath: String
    let dataPath: String
    let lockPath: String
    let layout: Environment.Layout

    init(path: String, options: Environment.Options) {
        self.path = path
        openPath = StoreFile.canonicalPath(path)
        layout = options.layout
        (dataPath, lockPath) = options.layout == .singleFile
            ? (openPath, openPath + "-lock") : (openPath + "/data.mdb", openPath + "/lock.mdb")
    }

    #if os(Linux)
    /// `F_OFD_SETLK`: a lock owned by the descriptor, which conflicts with every other process's LMDB lock and goes
    /// away when the descriptor closes.
    private static let setLock = LockFileGuard.setLock
    #else
    private static let setLock: Int32 = F_SETLK
    #endif

    /// Compacts the store, running `beforeReplacing` once the copy is flushed, and `claim` with the identity the
    /// store will have (the copy's, for a single file) just before the copy takes the data file's place.
    func run(beforeReplacing: () throws -> Void, claim: (StoreFile.Identity) -> Void) throws -> Environment.Compaction {
        if layout == .singleFile && StoreFile.isDirectory(openPath) {
            throw LMDBError(.invalidArgument, path: path,
                            message: "this is a folder, not a store file: a store in the directory layout is compacted with options whose layout is .directory")
        }
        guard let before = StoreFile.size(of: dataPath), before > 0 else {
            throw LMDBError(.noSuchFile, path: path, message: "there is no store here to compact")
        }
        try StoreFile.validate(dataPath: dataPath, reportedPath: path)
        var file = stat()
        guard stat(dataPath, &file) == 0 else {
            throw LMDBError(LMDBError(rawValue: errno), path: path, message: "cannot read the store file")
        }
        if file.st_nlink > 1 {
            throw LMDBError(.incompatible, path: path, message: """
                the store file has \(file.st_nlink) names (hard links); the compacted file would replace only this one \
                and the others would keep the old file — remove the other links, or write a compacted copy instead
                """)
        }

        let lock = try holdLockFileAlone()
        defer { close(lock) }

        let temporary = dataPath + ".compacting"
        unlink(temporary)  // Left by a compaction that crashed: nothing else writes it while the lock is held.
        let copy = open(temporary, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, file.st_mode & 0o7777)
        guard copy >= 0 else {
            throw LMDBError(LMDBError(rawValue: errno), path: temporary, message: "cannot create the compacted copy beside the store")
        }
        var replaced = false
        defer { if !replaced { unlink(temporary) } }
        do {
            defer { close(copy) }
            try writeCompactedCopy(to: copy, at: temporary)
            _ = fchmod(copy, file.st_mode & 0o7777)
            guard fsync(copy) == 0 else {
                throw LMDBError(LMDBError(rawValue: errno), path: temporary, message: "cannot flush the compacted copy")
            }
        }
        try beforeReplacing()
        if layout == .singleFile, let newFile = StoreFile.identity(of: temporary) { claim(newFile) }
        guard rename(temporary, dataPath) == 0 else {
            throw LMDBError(LMDBError(rawValue: errno), path: path, message: "cannot put the compacted copy in the store file's place")
        }
        replaced = true
        syncFolder(of: dataPath)
        return Environment.Compaction(bytesBefore: before, bytesAfter: StoreFile.size(of: dataPath) ?? 0)
    }

    /// Takes LMDB's "open alone" lock — a write lock on the lock file's first byte, which every process with the
    /// store open holds shared — and returns the descriptor holding it. A process that opens the store meanwhile
    /// waits in `mdb_env_open` for the lock to go, before it opens the data file.
    private func holdLockFileAlone() throws -> Int32 {
        if StoreFile.identity(of: lockPath) == nil {
            // A store copied without its lock file: let LMDB make and fill one first, or a process waiting for the
            // lock would then find it empty.
            try makeLockFile()
        }
        let descriptor = open(lockPath, O_RDWR | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw LMDBError(LMDBError(rawValue: errno), path: path, message: "cannot open the store's lock file \(lockPath) to hold it")
        }
        var exclusive = LockFileGuard.range(F_WRLCK, from: 0, to: 1)
        guard fcntl(descriptor, Self.setLock, &exclusive) == 0 else {
            let failure = errno
            close(descriptor)
            if failure == EAGAIN || failure == EACCES {
                throw LMDBError(.busy, path: path, message: "another process has the store open; it can be compacted once no process has it open")
            }
            throw LMDBError(LMDBError(rawValue: failure), path: path, message: "cannot lock the store's lock file \(lockPath)")
        }
        return descriptor
    }

    private func makeLockFile() throws {
        var created: OpaquePointer?
        try check(mdb_env_create(&created), path: path)
        guard let handle = created else { throw LMDBError(.invalidArgument, path: path) }
        defer { mdb_env_close(handle) }
        let flags = UInt32(MDB_NOTLS) | UInt32(MDB_RDONLY) | (layout == .singleFile ? UInt32(MDB_NOSUBDIR) : 0)
        try check(mdb_env_open(handle, openPath, flags, 0o644), path: path, message: "cannot make the store's lock file")
    }

    /// Writes the compacted copy to `copy` from an environment that leaves the lock file alone (this process holds
    /// it), then gives the copy the old file's transaction number.
    private func writeCompactedCopy(to copy: Int32, at temporary: String) throws {
        var created: OpaquePointer?
        try check(mdb_env_create(&created), path: path)
        guard let handle = created else { throw LMDBError(.invalidArgument, path: path) }
        defer { mdb_env_close(handle) }
        let flags = UInt32(MDB_NOTLS) | UInt32(MDB_RDONLY) | UInt32(MDB_NOLOCK) | (layout == .singleFile ? UInt32(MDB_NOSUBDIR) : 0)
        try check(mdb_env_open(handle, openPath, flags, 0o644), path: path, message: "cannot open the store to compact it")
        var info = MDB_envinfo()
        try check(mdb_env_info(handle, &info), path: path)
        var statistics = MDB_stat()
        try check(mdb_env_stat(handle, &statistics), path: path)
        try check(mdb_env_copyfd2(handle, copy, UInt32(MDB_CP_COMPACT)), path: temporary, message: "cannot write the compacted copy")
        try continueTransactions(of: copy, at: temporary, from: UInt64(info.me_last_txnid), pageSize: Int(statistics.ms_psize))
    }

    /// LMDB's compacting copy starts the transaction numbers again at 1. A process that waited for the lock opens
    /// the new file without rereading the lock file, whose last transaction number picks which meta page is
    /// current (the number's parity) and what the next write is: so both meta pages get the copy's tables under the
    /// old file's numbers, the last on the page that number picks and its predecessor on the other.
    private func continueTransactions(of copy: Int32, at temporary: String, from last: UInt64, pageSize: Int) throws {
        guard last > 0 else { return }
        let metaEnd = StoreFile.metaFieldsEnd
        var pages = [[UInt8]](repeating: [UInt8](repeating: 0, count: metaEnd), count: 2)
        var metas: [PageWalk.Meta] = []
        for slot in 0..<2 {
            let count = pages[slot].withUnsafeMutableBytes { pread(copy, $0.baseAddress, metaEnd, off_t(slot * pageSize)) }
            guard count == metaEnd, let meta = pages[slot].withUnsafeBytes(PageWalk.Meta.init) else {
                throw LMDBError(.corrupted, path: temporary, message: "the compacted copy has no meta page \(slot)")
            }
            metas.append(meta)
        }
        let newest = metas[0].transaction >= metas[1].transaction ? pages[0] : pages[1]
        for slot in 0..<2 {
            var page = newest
            let number: UInt64 = UInt64(slot) == last & 1 ? last : last - 1
            page.withUnsafeMutableBytes {
                $0.storeBytes(of: UInt64(slot), toByteOffset: 0, as: UInt64.self)  // the page header's page number
                $0.storeBytes(of: number, toByteOffset: StoreFile.transactionOffset, as: UInt64.self)
            }
            let written = page.withUnsafeBytes { pwrite(copy, $0.baseAddress, metaEnd, off_t(slot * pageSize)) }
            guard written == metaEnd else {
                throw LMDBError(LMDBError(rawValue: errno), path: temporary, message: "cannot write the compacted copy's meta page \(slot)")
            }
        }
    }

    /// Flushes the folder holding `file`, so that the rename is on disk.
    private func syncFolder(of file: String) {
        let folder = file.lastIndex(of: "/").map { String(file[..<$0]) } ?? "."
        let descriptor = open(folder.isEmpty ? "/" : folder, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        _ = fsync(descriptor)
        close(descriptor)
    }
}
