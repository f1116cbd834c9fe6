internal import CLMDB

extension Environment {
    /// Runs `body` in a read-only transaction and returns what it returns.
    ///
    /// The transaction sees the store as of its start, whatever other threads or processes commit meanwhile. Read
    /// transactions are cheap to repeat: their C handles are reset and renewed rather than created each time
    /// (`mdb_txn_reset`, `mdb_txn_renew`). Keep the body short — an open read transaction stops LMDB from reusing
    /// pages freed after its snapshot, so the file grows while it lives. A read transaction may be opened inside a
    /// write transaction's body; it does not see that write's uncommitted changes.
    ///
    /// - Throws: What `body` throws, or ``LMDBError`` if the transaction cannot begin
    ///   (``LMDBError/readersFull`` when every reader slot stays taken after stale slots are cleared).
    ///   The corresponding LMDB function is `mdb_txn_begin` with `MDB_RDONLY`.
    public func read<Result>(_ body: (Transaction) throws -> Result) throws -> Result {
        let transaction = try beginRead()
        defer { transaction.endRead() }
        return try body(transaction)
    }

    /// Begins a read transaction that the caller ends with ``Transaction/endRead()`` — for a caller that cannot
    /// pass a closure cheaply (the store's key-value seam, whose point reads would otherwise go through a closure
    /// called across a protocol). Until it is ended, the transaction holds a reader slot and keeps the map from
    /// being resized.
    package func beginRead() throws -> Transaction {
        var freedSlots = false
        while true {
            gate.lockShared()
            let (code, pointer) = takeReadHandle()
            guard code == MDB_SUCCESS, let pointer else {
                gate.unlockShared()
                if code == MDB_MAP_RESIZED {
                    try adoptMapSize()
                    continue
                }
                if code == MDB_READERS_FULL {
                    if !freedSlots {
                        // Slots of dead processes, and this process's own kept ones, are given back first.
                        freedSlots = true
                        _ = clearStaleReaders()
                        releaseKeptReaders()
                        continue
                    }
                    throw LMDBError(.readersFull, path: path, message: readersFullMessage())
                }
                throw LMDBError(LMDBError(rawValue: code), path: path, message: "cannot begin a read transaction")
            }
            return Transaction(environment: self, pointer: pointer, isReadOnly: true)
        }
    }

    /// Runs `body` in a write transaction and commits it when `body` returns; if `body` throws, the transaction is
    /// aborted and nothing it wrote is kept.
    ///
    /// One write transaction runs at a time across every thread and process using the store; `write` waits for its
    /// turn. The body must be synchronous and must not start another write transaction: on the same thread that
    /// would deadlock, so it is rejected with ``LMDBError/wouldDeadlock``.
    ///
    /// **The body may run more than once.** When the memory map fills up (`MDB_MAP_FULL`), the transaction is
    /// aborted, the map is grown (doubling, up to ``Options/maxMapSize``), and `body` runs again from the start in a
    /// fresh transaction. Keep side effects outside the store idempotent, or move them after `write` returns. A
    /// body that dropped a database (``Database/drop(in:)``) is not run again: the map grows and the write throws
    /// ``LMDBError/mapFull``, since LMDB has closed the dropped database's handle.
    ///
    /// - Throws: What `body` throws, or ``LMDBError``: ``LMDBError/permissionDenied`` in a read-only environment,
    ///   ``LMDBError/wouldDeadlock`` for a nested write, ``LMDBError/mapFull`` beyond ``Options/maxMapSize``, or
    ///   an error from the commit. The corresponding LMDB functions are `mdb_txn_begin` and `mdb_txn_commit`.
    public func write<Result>(_ body: (Transaction) throws -> Result) throws -> Result {
        if isWriterThread {
            throw LMDBError(.wouldDeadlock, path: path,
                            message: "a write transaction is already open on this thread; LMDB would wait for itself forever")
        }
        if options.isReadOnly {
            throw LMDBError(.permissionDenied, path: path, message: "the store is open read-only")
        }
        while true {
            gate.lockShared()
            var pointer: OpaquePointer?
            let code = mdb_txn_begin(handle, nil, 0, &pointer)
            guard code == MDB_SUCCESS, let pointer else {
                gate.unlockShared()
                if code == MDB_MAP_RESIZED {
                    try adoptMapSize()
                    continue
                }
                throw LMDBError(LMDBError(rawValue: code), path: path, message: "cannot begin a write transaction")
            }
            let mapSize = currentMapSize()
            markWriterThread(true)
            let transaction = Transaction(environment: self, pointer: pointer, isReadOnly: false)
            let outcome: WriteOutcome<Result>
            do {
                let result = try body(transaction)
                transaction.finish()
                if transaction.filledMap {
                    mdb_txn_abort(pointer)
                    outcome = .mapFull
                } else {
                    let commit = mdb_txn_commit(pointer)
                    outcome = commit == MDB_SUCCESS ? .committed(result)
                        : commit == MDB_MAP_FULL ? .mapFull
                        : .failed(FailureDiagnosis.commitFailure(commit, path: path, dataPath: dataPath))
                }
            } catch {
                transaction.finish()
                mdb_txn_abort(pointer)
                outcome = transaction.filledMap ? .mapFull : .failed(error)
            }
            markWriterThread(false)
            gate.unlockShared()

            switch outcome {
            case .committed(let result):
                return result
            case .failed(let error):
                throw error
            case .mapFull:
                try growMap(from: mapSize)
                if transaction.droppedDatabase {
                    // LMDB closed the dropped database's handle already: running the body again would use it.
                    throw LMDBError(.mapFull, path: path,
                                    message: "the map filled in a write that dropped a database, which cannot be run again with the same handles; the map has grown: open the database again and retry (or clear it in a write of its own first)")
                }
            }
        }
    }

    /// Clears reader slots left behind by processes that died with a read transaction open, and returns how many
    /// were cleared. ``open(at:options:)`` does this already; call it again in long-running processes that share a
    /// store with short-lived ones. The corresponding LMDB function is `mdb_reader_check`.
    @discardableResult
    public func clearStaleReaders() -> Int {
        var dead: Int32 = 0
        mdb_reader_check(handle, &dead)
        return Int(dead)
    }
}

private enum WriteOutcome<Result> {
    case committed(Result)
    case failed(any Error)
    case mapFull
}
