import Dispatch

/// Reset read transactions kept for reuse, and a count of this process's open read transactions.
///
/// A reset read transaction keeps its reader slot in the lock file, and the lock file's slots
/// (``Environment/Options/maxReaders``) are shared by every process using the store. So the pool keeps few handles
/// (``limit``), and the slots of handles left idle for ``idleNanoseconds`` are given back: a process that once ran
/// many reads at once and then went quiet does not keep other processes from reading.
final class ReaderPool: @unchecked Sendable {
    /// The most reset transactions kept for reuse.
    static let limit = 8
    /// How long a kept transaction may sit unused before its slot is given back.
    static let idleNanoseconds: UInt64 = 1_000_000_000

    private struct Pooled {
        let handle: TransactionHandle
        let since: UInt64
    }

    private struct State {
        var pooled: [Pooled] = []
        var open = 0
        var trimScheduled = false
    }

    private let state = Locked(State())

    /// Counts a read transaction as open and returns a kept handle for it, the most recently used first, if any.
    func take() -> OpaquePointer? {
        state.withLock { state in
            state.open += 1
            return state.pooled.popLast()?.handle.pointer
        }
    }

    /// Counts a read transaction that could not begin as closed again.
    func abandon() {
        state.withLock { $0.open -= 1 }
    }

    /// What became of a finished transaction handed back.
    enum Recycled {
        /// The pool is full: the caller aborts the handle.
        case refused
        /// Kept; the caller schedules a trim when asked to (none is scheduled yet).
        case kept(scheduleTrim: Bool)
    }

    /// Counts a read transaction as closed and keeps its reset handle, unless the pool is full.
    func recycle(_ pointer: OpaquePointer) -> Recycled {
        let now = DispatchTime.now().uptimeNanoseconds
        return state.withLock { state in
            state.open -= 1
            guard state.pooled.count < Self.limit else { return .refused }
            state.pooled.append(Pooled(handle: TransactionHandle(pointer: pointer), since: now))
            defer { state.trimScheduled = true }
            return .kept(scheduleTrim: !state.trimScheduled)
        }
    }

    /// Removes and returns the handles idle for ``idleNanoseconds`` or longer, and whether any are left (and a
    /// further trim should be scheduled).
    func takeIdle() -> (idle: [OpaquePointer], more: Bool) {
        let now = DispatchTime.now().uptimeNanoseconds
        return state.withLock { state in
            let fresh = state.pooled.firstIndex { now &- $0.since < Self.idleNanoseconds } ?? state.pooled.endIndex
            let idle = state.pooled[..<fresh].map(\.handle.pointer)
            state.pooled.removeFirst(fresh)
            state.trimScheduled = !state.pooled.isEmpty
            return (idle, state.trimScheduled)
        }
    }

    /// Removes and returns every kept handle (closing the environment, or giving slots back when the lock file is
    /// full).
    func takeAll() -> [OpaquePointer] {
        state.withLock { state in
            defer { state.pooled.removeAll() }
            return state.pooled.map(\.handle.pointer)
        }
    }

    /// The read transactions of this process that are open now, and the reset ones kept.
    var counts: (open: Int, kept: Int) {
        state.withLock { ($0.open, $0.pooled.count) }
    }
}
