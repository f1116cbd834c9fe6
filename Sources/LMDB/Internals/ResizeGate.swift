#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A process-wide readers–writer gate around an environment's memory map.
///
/// LMDB allows `mdb_env_set_mapsize` only while this process has no transaction open. Every transaction holds the
/// gate shared for its lifetime; growing the map holds it exclusively. The default glibc rwlock prefers readers, so a
/// read transaction nested inside a write transaction on the same thread never waits on a pending resize.
final class ResizeGate: @unchecked Sendable {
    private let lock: UnsafeMutablePointer<pthread_rwlock_t>

    init() {
        lock = .allocate(capacity: 1)
        lock.initialize(to: pthread_rwlock_t())
        let result = pthread_rwlock_init(lock, nil)
        precondition(result == 0, "pthread_rwlock_init failed: \(result)")
    }

    deinit {
        pthread_rwlock_destroy(lock)
        lock.deallocate()
    }

    @inline(__always) func lockShared() {
        let result = pthread_rwlock_rdlock(lock)
        precondition(result == 0, "pthread_rwlock_rdlock failed: \(result)")
    }

    @inline(__always) func unlockShared() {
        pthread_rwlock_unlock(lock)
    }

    func withExclusiveAccess<Result, Failure: Error>(_ body: () throws(Failure) -> Result) throws(Failure) -> Result {
        let result = pthread_rwlock_wrlock(lock)
        precondition(result == 0, "pthread_rwlock_wrlock failed: \(result)")
        defer { pthread_rwlock_unlock(lock) }
        return try body()
    }
}
