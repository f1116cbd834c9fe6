internal import CLMDB
import Dispatch

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An open LMDB store: one memory-mapped file (or directory) shared by every thread of this process and by other
/// processes that open the same file.
///
/// Open a store with ``open(at:options:)``. Opening the same file twice in one process returns the same
/// `Environment` — LMDB's locks break if one process maps a file twice — whatever path or link reaches it.
///
/// ```swift
/// let environment = try Environment.open(at: "/var/data/people.lmdb")
/// let people = try environment.openDatabase(named: "people")
/// try environment.write { transaction in
///     try people.put(Array("Ada".utf8), forKey: Array("p1".utf8), in: transaction)
/// }
/// let name = try environment.read { transaction in
///     try people.value(forKey: Array("p1".utf8), in: transaction)
/// }
/// ```
///
/// An environment is `Sendable`: share it between threads and tasks. It closes when the last reference goes away.
/// The corresponding LMDB type is `MDB_env`.
public final class Environment: @unchecked Sendable {
    /// The path the environment was opened at.
    public let path: String

    /// The data file LMDB maps (links resolved): the store file itself, or `data.mdb` in a store directory.
    public let dataPath: String

    /// The options the environment was opened with.
    public let options: Options

    /// The largest key LMDB accepts, in bytes (511 for the LMDB this package builds with). Keys must also be at
    /// least one byte long. The corresponding LMDB function is `mdb_env_get_maxkeysize`.
    public let maxKeySize: Int

    let handle: OpaquePointer
    let gate = ResizeGate()
    private let identity: StoreFile.Identity
    /// Holds this process's claim on the lock file it uses, for as long as the environment is open.
    private let lockFileGuard: LockFileGuard?
    private let readerPool = ReaderPool()
    private let writerThread = Locked<WriterThread?>(nil)
    private let databases = Locked<[String?: Database]>([:])

    /// Opens (or creates) the store at `path`, or returns the environment this process already has open for it.
    ///
    /// Before LMDB maps an existing file, its meta pages are read: a file that is not an LMDB store, was written by
    /// an incompatible LMDB, or is shorter than its meta page says (a truncated copy would otherwise crash the
    /// process with `SIGBUS`) is reported as an error. Stale reader slots left by crashed processes are cleared.
    ///
    /// When the file is already open in this process, the existing environment is returned and `options` other
    /// than ``Options/isReadOnly`` are ignored.
    ///
    /// - Throws: ``LMDBError`` naming the path: ``LMDBError/noSuchFile`` for a missing store opened read-only,
    ///   ``LMDBError/invalid`` for a foreign file, ``LMDBError/corrupted`` for a truncated one,
    ///   ``LMDBError/versionMismatch``, ``LMDBError/busy`` when the file is open read-only in this process and
    ///   `options` asks for writing, or the operating system's error.
    ///   The corresponding LMDB functions are `mdb_env_create`, `mdb_env_open` and `mdb_reader_check`.
    public static func open(at path: String, options: Options = Options()) throws -> Environment {
        while true {
            let opened = try registry.withLock { (entries) throws(LMDBError) -> Environment? in
                if let identity = StoreFile.identity(of: path), let entry = entries[identity] {
                    // An entry whose environment is gone is still closing on another thread: wait for it.
                    guard let existing = entry.environment else { return nil }
                    if existing.options.isReadOnly && !options.isReadOnly {
                        throw LMDBError(.busy, path: path,
                                        message: "the store is already open read-only in this process; it cannot also be opened for writing")
                    }
                    return existing
                }
                let environment = try Environment(path: path, options: options)
                entries[environment.identity] = RegistryEntry(environment: environment)
                return environment
            }
            if let opened { return opened }
            usleep(100)
        }
    }

    private init(path: String, options: Options) throws(LMDBError) {
        if options.layout == .directory && !StoreFile.isDirectory(path) && !options.isReadOnly {
            if mkdir(path, 0o755) != 0 && errno != EEXIST {
                throw LMDBError(LMDBError(rawValue: errno), path: path, message: "cannot create the store directory")
            }
        }
        // LMDB is given the real path, so every link to the store finds the same lock file.
        let openPath = StoreFile.canonicalPath(path)
        let (dataPath, lockPath) = options.layout == .singleFile
            ? (openPath, openPath + "-lock") : (openPath + "/data.mdb", openPath + "/lock.mdb")
        if options.isReadOnly && StoreFile.identity(of: dataPath) == nil {
            throw LMDBError(.noSuchFile, path: path, message: "there is no store here to open read-only")
        }
        try StoreFile.validate(dataPath: dataPath, reportedPath: path)

        var created: OpaquePointer?
        try check(mdb_env_create(&created), path: path)
        guard let handle = created else { throw LMDBError(.invalidArgument, path: path) }
        do throws(LMDBError) {
            try check(mdb_env_set_mapsize(handle, options.mapSize), path: path, message: "mapSize \(options.mapSize) was refused")
            try check(mdb_env_set_maxdbs(handle, MDB_dbi(clamping: options.maxDatabases)), path: path)
            try check(mdb_env_set_maxreaders(handle, UInt32(clamping: options.maxReaders)), path: path)
            let opened = mdb_env_open(handle, openPath, options.flags, mode_t(options.fileMode))
            if opened != MDB_SUCCESS {
                throw FailureDiagnosis.openFailure(opened, path: path, dataPath: dataPath, lockPath: lockPath, options: options)
            }
            lockFileGuard = try LockFileGuard(dataPath: dataPath, lockPath: lockPath, reportedPath: path)
        } catch {
            mdb_env_close(handle)
            throw error
        }
        var dead: Int32 = 0
        mdb_reader_check(handle, &dead)

        guard let identity = StoreFile.identity(of: path) else {
            mdb_env_close(handle)
            throw LMDBError(.noSuchFile, path: path, message: "the store vanished while it was being opened")
        }
        self.path = path
        self.dataPath = dataPath
        self.options = options
        self.handle = handle
        self.identity = identity
        self.maxKeySize = Int(mdb_env_get_maxkeysize(handle))
    }

    deinit {
        Self.registry.withLock { entries in
            for pooled in readerPool.takeAll() { mdb_txn_abort(pooled) }
            mdb_env_close(handle)
            entries[identity] = nil
        }
    }

    /// Runs `body` while no other process has the store open, and keeps other processes from opening it (their
    /// ``open(at:options:)`` fails with ``LMDBError/busy``) until `body` returns: for work that rewrites the store
    /// under a layout other processes would not read, such as a migration. On file systems without
    /// open-file-description locks (and off Linux) nothing is checked and `body` just runs.
    ///
    /// - Throws: ``LMDBError/busy`` naming the store when another process has it open; `body`'s error.
    public func withExclusiveUse<Result>(_ body: () throws -> Result) throws -> Result {
        guard let lockFileGuard else { return try body() }
        return try lockFileGuard.useExclusively(reportedPath: path, body)
    }

    // MARK: - Process-wide registry

    struct RegistryEntry: Sendable {
        weak var environment: Environment?
    }

    static let registry = Locked<[StoreFile.Identity: RegistryEntry]>([:])
}

// MARK: - Transactions' plumbing

struct TransactionHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}

struct WriterThread: @unchecked Sendable {
    let thread: pthread_t
}

extension Environment {
    /// A read transaction from the pool (renewed) or a new one. Runs with the resize gate held shared.
    func takeReadHandle() -> (Int32, OpaquePointer?) {
        while let pooled = readerPool.take() {
            let code = mdb_txn_renew(pooled)
            if code == MDB_SUCCESS { return (code, pooled) }
            mdb_txn_abort(pooled)
            readerPool.abandon()
            if code != MDB_BAD_RSLOT { return (code, nil) }
        }
        var pointer: OpaquePointer?
        let code = mdb_txn_begin(handle, nil, UInt32(MDB_RDONLY), &pointer)
        if code != MDB_SUCCESS { readerPool.abandon() }
        return (code, pointer)
    }

    /// Resets a finished read transaction and keeps it for reuse (its reader slot given back once it sits idle).
    func recycleReadHandle(_ pointer: OpaquePointer) {
        mdb_txn_reset(pointer)
        switch readerPool.recycle(pointer) {
        case .refused: mdb_txn_abort(pointer)
        case .kept(let scheduleTrim): if scheduleTrim { scheduleReaderTrim() }
        }
    }

    /// Gives back, a while from now, the reader slots of kept transactions that went unused meanwhile; again while
    /// any are kept.
    private func scheduleReaderTrim() {
        let delay = DispatchTimeInterval.nanoseconds(Int(ReaderPool.idleNanoseconds))
        DispatchQueue.global(qos: .utility).asyncAfter(deadline: .now() + delay) { [weak self] in
            guard let self else { return }
            let (idle, more) = readerPool.takeIdle()
            for pointer in idle { mdb_txn_abort(pointer) }
            if more { scheduleReaderTrim() }
        }
    }

    /// Gives back the reader slots of every kept read transaction (when the lock file has no free slot).
    func releaseKeptReaders() {
        for pointer in readerPool.takeAll() { mdb_txn_abort(pointer) }
    }

    /// Why a read transaction found no reader slot: the limit, and how many slots this process holds.
    func readersFullMessage() -> String {
        var slots: UInt32 = 0
        mdb_env_get_maxreaders(handle, &slots)
        let open = readerPool.counts.open
        return "every one of the store's \(slots) reader slots is taken (this process has \(open) read transaction\(open == 1 ? "" : "s") open; other processes hold the rest) — end long reads or idle processes, or let the first process to open the store set a larger maxReaders"
    }

    /// Whether the calling thread holds this environment's write transaction.
    var isWriterThread: Bool {
        let current = pthread_self()
        return writerThread.withLock { writer in writer.map { pthread_equal($0.thread, current) != 0 } ?? false }
    }

    func markWriterThread(_ holds: Bool) {
        let value = holds ? WriterThread(thread: pthread_self()) : nil
        writerThread.withLock { $0 = value }
    }

    /// Adopts a map size another process set (`MDB_MAP_RESIZED`).
    func adoptMapSize() throws(LMDBError) {
        try gate.withExclusiveAccess { () throws(LMDBError) in
            try check(mdb_env_set_mapsize(handle, 0), path: path, message: "cannot adopt the map size another process set")
        }
    }

    /// Grows the map after a write filled it, unless another thread already grew it past `observed`.
    func growMap(from observed: Int) throws(LMDBError) {
        try gate.withExclusiveAccess { () throws(LMDBError) in
            let current = currentMapSize()
            guard current <= observed else { return }
            let grown = Swift.min(options.maxMapSize, Swift.max(observed &* 2, observed &+ (1 << 20)))
            guard grown > current else {
                throw LMDBError(.mapFull, path: path,
                                message: "the store needs more than its maxMapSize of \(options.maxMapSize) bytes")
            }
            let code = mdb_env_set_mapsize(handle, grown)
            if code == ENOMEM {
                throw LMDBError(.mapFull, path: path,
                                message: "the store needs a map of \(grown) bytes, which does not fit in this process's address space (see ulimit -v)")
            }
            try check(code, path: path, message: "cannot grow the map to \(grown) bytes")
        }
    }

    func currentMapSize() -> Int {
        var info = MDB_envinfo()
        mdb_env_info(handle, &info)
        return info.me_mapsize
    }
}

// MARK: - Databases

extension Environment {
    /// Opens the named database, creating it when `create` is true and the environment is writable.
    ///
    /// Open every database before the write transactions that use it: a database handle belongs to the whole
    /// environment and is opened once, then shared. Opening the same name again returns the same handle.
    ///
    /// - Parameters:
    ///   - name: The database's name, or `nil` for the unnamed main database.
    ///   - options: The database's flags. They must match the flags the database was created with.
    ///   - create: Whether to create a missing database (ignored, and treated as `false`, in a read-only store).
    /// - Throws: ``LMDBError/notFound`` naming the database when it does not exist and is not created;
    ///   ``LMDBError/incompatible`` when `options` differ from the database's; ``LMDBError/databasesFull``;
    ///   ``LMDBError/wouldDeadlock`` when called for a new database inside a write transaction on this thread.
    ///   The corresponding LMDB function is `mdb_dbi_open`.
    public func openDatabase(named name: String?, options: DatabaseOptions = [], create: Bool = true) throws -> Database {
        if let cached = databases.withLock({ $0[name] }) {
            return try checkCompatible(cached, options: options)
        }
        if isWriterThread {
            throw LMDBError(.wouldDeadlock, path: path, database: name,
                            message: "a new database cannot be opened inside a write transaction; open it before")
        }
        return try databases.withLock { (cache) throws -> Database in
            if let cached = cache[name] { return try checkCompatible(cached, options: options) }
            let creating = create && !self.options.isReadOnly
            let flags = options.rawValue | (creating ? UInt32(MDB_CREATE) : 0)
            var dbi = MDB_dbi()
            var stored: UInt32 = 0
            let body = { (transaction: OpaquePointer) throws(LMDBError) in
                let code = mdb_dbi_open(transaction, name, flags, &dbi)
                if code == MDB_NOTFOUND {
                    throw LMDBError(.notFound, path: self.path, database: name,
                                    message: "the database \"\(name ?? "<main>")\" does not exist in this store")
                }
                try check(code, path: self.path, database: name, message: "cannot open the database")
                try check(mdb_dbi_flags(transaction, dbi, &stored), path: self.path, database: name)
            }
            if creating {
                try write { transaction in try body(transaction.handle) }
            } else {
                try withCommittedReadTransaction(body)
            }
            let database = Database(handle: dbi, name: name, options: DatabaseOptions(rawValue: stored))
            cache[name] = database
            return try checkCompatible(database, options: options)
        }
    }

    /// Forgets a dropped database's handle so that its name can be opened (and created) again.
    func forgetDatabase(named name: String?) {
        databases.withLock { _ = $0.removeValue(forKey: name) }
    }

    private func checkCompatible(_ database: Database, options: DatabaseOptions) throws(LMDBError) -> Database {
        guard database.options == options else {
            throw LMDBError(.incompatible, path: path, database: database.name,
                            message: "the database has options \(database.options), not \(options)")
        }
        return database
    }

    /// Runs `body` in a read-only transaction that is committed, not reset, so database handles opened in it stay
    /// open for the environment.
    private func withCommittedReadTransaction(_ body: (OpaquePointer) throws(LMDBError) -> Void) throws(LMDBError) {
        while true {
            gate.lockShared()
            var pointer: OpaquePointer?
            let code = mdb_txn_begin(handle, nil, UInt32(MDB_RDONLY), &pointer)
            guard code == MDB_SUCCESS, let transaction = pointer else {
                gate.unlockShared()
                if code == MDB_MAP_RESIZED { try adoptMapSize(); continue }
                throw LMDBError(LMDBError(rawValue: code), path: path, message: "cannot begin a read transaction")
            }
            defer { gate.unlockShared() }
            do {
                try body(transaction)
            } catch {
                mdb_txn_abort(transaction)
                throw error
            }
            try check(mdb_txn_commit(transaction), path: path)
            return
        }
    }
}
