import Dispatch
import LMDB

/// A scan of a large table read in parts on several threads: the rows are split into key ranges, each read in a
/// read transaction of its own that sees the same commit as the run's, each checked as the one-thread scan checks
/// its rows, and the matches handed on in key order — the same answer, in the same order, as one thread gives.
enum ParallelScan {
    /// The fewest rows a part of a scan is given: below twice this a table is scanned on one thread (a thread's
    /// start and a second read cost about as much as checking a few hundred rows; a part of 8 192 takes about
    /// 0.4 ms). At 32 768 the package index's 63 436 rows were scanned on one thread, at 0.64× GRDB's speed; in two
    /// parts, 1.15×.
    static let minimumRowsPerPart = 8_192

    /// ``minimumRowsPerPart`` as the current task sees it: tests lower it to read small tables in parts.
    @TaskLocal static var rowsPerPart = minimumRowsPerPart

    /// Called after the run's read began and before the parts begin theirs: a test commits there, to see that no part
    /// reads the later commit.
    @TaskLocal static var beforePartReads: (@Sendable () throws -> Void)?
}

extension PlanRun {
    /// A row a part of a parallel scan found matching, with the view the evaluator checked it through (`nil` when
    /// its bytes settled it). The row is borrowed from the part's read, which ends with the run.
    struct ScannedMatch {
        let candidate: Candidate
        let row: EncodedRow
        let view: RowView?
    }

    /// The matches of the plan's scan, read in parts on several threads, each part's in key order; `nil` when the
    /// scan is read on this thread: the source is not a whole-table scan, the run is in a write transaction (whose
    /// changes no other read sees), the store reads scans with one thread (``LMDBIncrementalStore/Options/scanThreads``)
    /// or the table has fewer than two parts' worth of rows. The first part is read in the run's own transaction;
    /// each other in a read begun here, on the caller's thread, which must see the same commit
    /// (``KeyValueTransaction/snapshotNumber``) — when a writer committed in between, that part is read in the run's
    /// transaction after the others. The parts' reads end with the run, on the thread that began them (a read holds
    /// a lock that only its own thread may release), since the matches borrow their rows.
    func scannedInParallel(_ check: RowCheck) throws -> [[ScannedMatch]]? {
        guard isRead, let scan = plan.source.scan else { return nil }
        let threads = store.storeOptions.threadsPerScan
        guard threads > 1 else { return nil }
        let rowCount = try rows.database.entryCount(in: transaction)
        let parts = min(threads, rowCount / max(1, ParallelScan.rowsPerPart))
        guard parts > 1, let bounds = try partBounds(parts) else { return nil }

        try ParallelScan.beforePartReads?()
        // Each part's read: the run's for the first, a new read of the same commit for the others (`nil`: another
        // commit came between, and the part waits for the run's read).
        var reads: [(any KeyValueTransaction)?] = [transaction]
        for _ in 1..<parts {
            let read = try state.environment.beginRead()
            if read.snapshotNumber == transaction.snapshotNumber {
                partReads.append(read)
                reads.append(read)
            } else {
                read.endRead()
                reads.append(nil)
            }
        }
        let results = PartResults(count: parts)
        let shared = SharedRun(run: self, check: check, reads: reads)
        DispatchQueue.concurrentPerform(iterations: parts) { part in
            guard let read = shared.reads[part] else { return }
            let check = part == 0 ? shared.check : RowCheck(shared.run, transaction: read)
            results[part] = Result { try shared.run.matches(of: scan, keys: bounds[part], transaction: read, check: check) }
        }
        return try (0..<parts).map { part in
            guard let result = results[part] else { return try matches(of: scan, keys: bounds[part], transaction: transaction, check: check) }
            return try result.get()
        }
    }

    /// The key ranges of `parts` parts of the row table, split evenly between its first and last keys; the first
    /// and last ranges are open (below and above). `nil` when the table holds fewer keys than parts.
    private func partBounds(_ parts: Int) throws -> [KeyRange]? {
        let ends: (first: UInt64, last: UInt64)? = try rows.withCursor(in: transaction) { cursor in
            guard let first = try cursor.first(), let last = try cursor.last() else { return nil }
            return (try rows.rowKey(in: first), try rows.rowKey(in: last))
        }
        guard let (first, highest) = ends, highest > first, highest - first >= UInt64(parts) else { return nil }
        let step = (highest - first) / UInt64(parts) + 1
        let starts = (0..<parts).map { first + UInt64($0) * step }
        return starts.indices.map { index in
            let lower = index == 0 ? nil : KeyRange.Bound.inclusive(LMDBIncrementalStore.keyBytes(starts[index]))
            guard index + 1 < starts.count else { return KeyRange(lower: lower, upper: nil) }
            return KeyRange(lower: lower, upper: .exclusive(LMDBIncrementalStore.keyBytes(starts[index + 1])))
        }
    }

    /// The rows of `scan` in `keys` that `check` passes, read in `transaction`.
    fileprivate func matches(of scan: QueryPlan.Scan, keys: KeyRange, transaction: any KeyValueTransaction, check: RowCheck) throws -> [ScannedMatch] {
        var found: [ScannedMatch] = []
        try scan.forEachCandidate(in: self, keys: keys, transaction: transaction) { candidate, entry in
            if let (row, view) = try check.match(candidate, row: entry?.value) {
                found.append(ScannedMatch(candidate: candidate, row: row, view: view))
            }
            return true
        }
        return found
    }
}

/// The run, the check of its own read and each part's read, as the threads of a parallel scan see them. Unchecked:
/// the parts only read the run's constants (its store, open state, plan, request and tables, and the store's
/// immutable layout and model); each part reads in a transaction of its own (the first in the run's, which nothing
/// else uses meanwhile) and the first part alone uses the run's check; the run's variable (``PlanRun/partReads``) is
/// not touched while the parts run.
private struct SharedRun: @unchecked Sendable {
    let run: PlanRun
    let check: RowCheck
    let reads: [(any KeyValueTransaction)?]
}

/// What a part's thread hands back: its matches in key order, or the error that stopped it.
private typealias PartResult = Result<[PlanRun.ScannedMatch], any Error>

/// One slot per part for the threads of a parallel scan to write their results in: each thread writes its own slot
/// and only the caller reads them, after every thread is done.
private final class PartResults: @unchecked Sendable {
    private let slots: UnsafeMutableBufferPointer<PartResult?>

    init(count: Int) {
        slots = .allocate(capacity: count)
        slots.initialize(repeating: nil)
    }

    subscript(part: Int) -> PartResult? {
        get { slots[part] }
        set { slots[part] = newValue }
    }

    deinit {
        _ = slots.deinitialize()
        slots.deallocate()
    }
}
