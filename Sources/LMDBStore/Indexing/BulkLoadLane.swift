import Foundation

/// A second thread for the part of a bulk load that needs no transaction: while the transaction's thread reads the
/// next chunk and writes its rows, the lane makes the last chunk's index entries, sorts them and copies them into
/// their ``AppendRuns``. LMDB lets only the thread that began a write transaction use it, so the lane's work never
/// touches it; what the lane cannot keep it hands back (``finish()``) for that thread to put.
///
/// One job runs at a time, and the thread that submits them touches a job's state only once ``finish()`` has
/// returned it — the lock's handoff orders the two threads' memory, which is why a job may carry state that is not
/// `Sendable`. The lane is one thread of its own for its life (not a pool's, whose threads would each keep memory
/// the allocator gives them), ended by ``close()``.
final class BulkLoadLane<Output>: @unchecked Sendable {
    private let condition = NSCondition()
    /// The job submitted and not yet started.
    private var waiting: (() throws -> Output)?
    /// Whether a job was submitted and its output not yet taken.
    private var isBusy = false
    /// The last job's result, once it has one.
    private var result: Result<Output, any Error>?
    private var isClosed = false

    init() {
        let thread = Thread { [self] in run() }
        thread.name = "LMDBStore bulk load"
        thread.start()
    }

    /// The lane's thread: runs each job as it comes, until closed.
    private func run() {
        while let outcome = runNext() {
            condition.lock()
            result = outcome
            condition.broadcast()
            condition.unlock()
        }
    }

    /// Waits for the next job and runs it; `nil` once the lane is closed. The job, and what it captured, go when
    /// this returns, before its result is handed over: nothing of a request is let go on the lane after the request
    /// has moved on.
    private func runNext() -> Result<Output, any Error>? {
        condition.lock()
        while waiting == nil && !isClosed { condition.wait() }
        let job = waiting
        waiting = nil
        condition.unlock()
        guard let job else { return nil }
        return Result { try job() }
    }

    /// Runs `job` on the lane once the job before it was taken by ``finish()`` (a precondition: one at a time).
    func submit(_ job: @escaping () throws -> Output) {
        condition.lock()
        defer { condition.unlock() }
        precondition(!isBusy && !isClosed, "a bulk-load lane runs one job at a time, until it is closed")
        isBusy = true
        result = nil
        waiting = job
        condition.broadcast()
    }

    /// Waits for the job submitted last and returns its output, or throws its error; `nil` when none is running.
    func finish() throws -> Output? {
        condition.lock()
        defer { condition.unlock() }
        guard isBusy else { return nil }
        while result == nil { condition.wait() }
        isBusy = false
        defer { result = nil }
        return try result!.get()
    }

    /// Waits for the job submitted last, dropping its output and error, and ends the lane's thread: before the
    /// state the jobs use is let go, however the request ended.
    func close() {
        _ = try? finish()
        condition.lock()
        isClosed = true
        condition.broadcast()
        condition.unlock()
    }
}
