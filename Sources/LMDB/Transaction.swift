internal import CLMDB

/// A transaction: a consistent snapshot to read from and, for a write transaction, the changes to commit.
///
/// Transactions exist only inside ``Environment/read(_:)`` and ``Environment/write(_:)``, which begin them, pass
/// them to a closure, and end them when it returns. Using a transaction after its closure has returned (for example
/// one smuggled out of it) is a programming error and stops the process with a precondition failure.
///
/// A transaction is not `Sendable`: a write transaction must begin and end on one thread, and LMDB's memory behind
/// any bytes a transaction hands out is valid only until it ends. The corresponding LMDB type is `MDB_txn`.
public final class Transaction {
    /// The environment the transaction belongs to.
    public let environment: Environment

    /// Whether this is a read-only transaction.
    public let isReadOnly: Bool

    private var pointer: OpaquePointer?

    /// Set when an LMDB call in this transaction reported `MDB_MAP_FULL`: the transaction can only abort now, and
    /// ``Environment/write(_:)`` grows the map and runs the body again even if the body swallowed the error.
    var filledMap = false

    /// Set when a database was deleted in this transaction: LMDB closes its handle at once, even if the transaction
    /// then aborts, so ``Environment/write(_:)`` cannot run the body again.
    var droppedDatabase = false

    init(environment: Environment, pointer: OpaquePointer, isReadOnly: Bool) {
        self.environment = environment
        self.pointer = pointer
        self.isReadOnly = isReadOnly
    }

    /// The live C handle. Using a finished transaction is a precondition failure.
    var handle: OpaquePointer {
        @inline(__always) get {
            guard let pointer else {
                preconditionFailure("LMDB transaction used after it finished: a transaction is valid only inside the closure it was passed to")
            }
            return pointer
        }
    }

    /// Whether the transaction is still open (its closure has not returned).
    public var isActive: Bool { pointer != nil }

    /// Ends the wrapper's life; the caller commits, aborts or recycles the C handle.
    func finish() {
        pointer = nil
    }

    /// Ends a read transaction begun by ``Environment/beginRead()``: its handle goes back to the pool and the map
    /// may be resized again. Ending one twice is a precondition failure.
    package func endRead() {
        precondition(isReadOnly, "endRead() ends read transactions only")
        let pointer = handle
        finish()
        environment.recycleReadHandle(pointer)
        environment.gate.unlockShared()
    }

    /// The transaction's ID: the ID of the snapshot it reads, or of the commit it will make.
    /// The corresponding LMDB function is `mdb_txn_id`.
    public var id: Int {
        Int(mdb_txn_id(handle))
    }

    /// Checks an LMDB return code from a call in this transaction, noting a full map.
    @inline(__always)
    func check(_ code: Int32, database: Database, message: @autoclosure () -> String? = nil) throws(LMDBError) {
        guard code != MDB_SUCCESS else { return }
        if code == MDB_MAP_FULL { filledMap = true }
        throw LMDBError(LMDBError(rawValue: code), path: environment.path, database: database.name, message: message())
    }
}
