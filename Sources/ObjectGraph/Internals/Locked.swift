import Foundation

/// A value guarded by a lock the thread sanitizer can see.
///
/// Used instead of `Synchronization.Mutex`: on Linux that type locks with raw futex calls from a module the sanitizer
/// does not instrument, so it sees no order between two threads' accesses under it and reports every contended one as
/// a race. `NSLock` locks a `pthread_mutex_t`, whose calls the sanitizer intercepts.
final class Locked<Value>: @unchecked Sendable {
    private let lock = NSLock()
    /// Touched only under `lock`, so the runtime exclusivity check would guard nothing.
    @exclusivity(unchecked) private var value: Value

    init(_ value: Value) {
        self.value = value
    }

    /// Runs `body` on the value with the lock held.
    @inline(__always)
    func withLock<Result, Failure: Error>(_ body: (inout Value) throws(Failure) -> Result) throws(Failure) -> Result {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}
