import Foundation
import LMDB
import ObjectGraph

/// How a fetch reads the store, as chosen by ``QueryPlanner``: a tree of nodes, run by ``PlanRun``.
///
/// The **source** is the node that yields candidate rows (``PlanSource``): a key lookup, an index range (which may
/// check the filter on its entries), a union or an intersection of ranges, a join through a to-one or a to-many,
/// a scan, or nothing. Each source node runs itself and prints itself; nodes with children (a union's ranges, a
/// join's destination range) run those. After the source come the **steps** on the rows it yields, each present
/// only when the source leaves it something to do: the **filter** (the predicate still checked on each row), the
/// **sort** (top-K with a limit; absent when the source streams in sort order, and run by run when it streams the
/// order of the first sort key only) and the **window** (offset, limit).
///
/// `description` prints the tree as the pipeline it runs, left to right:
/// `IndexRange(Employee.byAge [30, 40)) → Filter(name BEGINSWITH "A") → Sort(salary descending) → Limit(20)`.
struct QueryPlan: CustomStringConvertible {
    /// The node yielding the candidate rows.
    var source: any PlanSource
    /// What is still checked on each row the source yields (`nil`: nothing — the source answers the predicate, or
    /// there is none). For an index range with ``IndexRange/entryElements``, checked on each entry first.
    var filter: FetchPredicate?
    /// The source yields the requested order (an index walked in the sort's direction, or no sort and a source in
    /// row-key order), so no sort step runs and the fetch stops after offset + limit matches.
    var streamsInSortOrder = false
    var sort: [FetchSortDescriptor]
    var limit: Int
    var offset: Int

    /// The source when it is one index range.
    var indexRange: IndexRange? { source.indexRange }

    var description: String {
        var steps = [source.description]
        if let filter {
            steps.append("Filter(\(filter.predicateFormat))" + (indexRange?.entryElements != nil ? " on index entries" : ""))
        }
        if !sort.isEmpty && !streamsInSortOrder {
            steps.append("Sort(\(sort.map(\.description).joined(separator: ", ")))" + (indexRange?.sortsOnEntries == true ? " on index entries" : ""))
        } else if indexRange?.resortsRuns == true, let first = sort.first {
            steps.append("Sort(\(sort.map(\.description).joined(separator: ", "))) of each run of equal \(first.keyPath)")
        }
        if offset > 0 { steps.append("Offset(\(offset))") }
        if limit > 0 { steps.append("Limit(\(limit))") }
        return steps.joined(separator: " → ")
    }
}

/// A plan's source: the node that yields the candidate rows — row key and entity tag, of the fetched entities only —
/// and knows how they come. A new way to find rows is a new source: a type conforming to this protocol, a candidate
/// for it in the planner (`QueryPlanner+AccessPaths.swift`) and its cost (`PlanCost.swift`); the steps after it
/// (filter, sort, window) and every result type work with it unchanged.
protocol PlanSource: CustomStringConvertible {
    /// Whether candidates come in ascending row-key order, each once (so results with no sort need no sorting, and
    /// their rows are read by one cursor moving forward).
    var yieldsKeyOrder: Bool { get }
    /// Whether the source reads each candidate's row itself: the entry it yields with a candidate is the row's own.
    var readsRows: Bool { get }
    /// Calls `body` with each candidate and the entry it was read from (an index entry, the row itself when
    /// ``readsRows``, or `nil`) until `body` returns false.
    func forEachCandidate(in run: PlanRun, _ body: (Candidate, CursorEntry?) throws -> Bool) throws
    /// Every candidate at once, in key order, each once — for a source that gathers them all before it yields any
    /// (a union, an intersection, a to-many join); `nil` for the others.
    func gatheredCandidates(in run: PlanRun) throws -> [Candidate]?
    /// The source itself when it is one index range (no dynamic cast: what the steps after an index range may do
    /// differently — stream in its order, read values from its entries — is asked of every plan).
    var indexRange: QueryPlan.IndexRange? { get }
    /// The source itself when it is a scan of the whole table, which may be read in parts on several threads.
    var scan: QueryPlan.Scan? { get }
}

extension PlanSource {
    var readsRows: Bool { false }
    var indexRange: QueryPlan.IndexRange? { nil }
    var scan: QueryPlan.Scan? { nil }
    func gatheredCandidates(in run: PlanRun) throws -> [Candidate]? { nil }
}

/// A source that gathers its candidates before it yields any: it yields them as ``gatheredCandidates(in:)`` gives
/// them, in key order, each once.
protocol GatheringSource: PlanSource {
    /// Every candidate, in key order, each once.
    func gather(in run: PlanRun) throws -> [Candidate]
}

extension GatheringSource {
    var yieldsKeyOrder: Bool { true }
    func gatheredCandidates(in run: PlanRun) throws -> [Candidate]? { try gather(in: run) }
    func forEachCandidate(in run: PlanRun, _ body: (Candidate, CursorEntry?) throws -> Bool) throws {
        for candidate in try gather(in: run) where try !body(candidate, nil) { return }
    }
}

extension QueryPlan {
    /// One element of an index key, as the predicate reads it back from an entry.
    struct EntryElement {
        let name: String
        let type: AttributeType
        /// A descending element: its bytes are stored inverted.
        let inverted: Bool
    }
}
