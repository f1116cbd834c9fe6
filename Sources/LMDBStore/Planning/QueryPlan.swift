import Foundation
import LMDB
import ObjectGraph

/// How a fetch reads the store, as chosen by ``QueryPlanner``: a pipeline of nodes, each of which runs itself and
/// prints itself, run in one read transaction by ``PlanRun``.
///
/// - The **source** (``PlanSource``) yields candidate rows: a key lookup, an index range (which may check the filter
///   on its entries), a union or an intersection of ranges, a join through a to-one or a to-many, a scan, or
///   nothing. Nodes with children (a union's ranges, a join's destination range) run those.
/// - The **filter** (``Filter``) keeps the candidates that match what the source leaves of the predicate — on index
///   entries where they hold every value it reads, else on the rows, which it reads (in row-key order when the
///   source does not yield it).
/// - The **sort** (``Sort``) puts the matches in the requested order: top-K with a limit, on index entries where
///   they hold the sort keys, run by run where the source streams the first sort key's order, nothing where it
///   streams the whole order — and in row-key order when no order is asked for.
/// - The **window** (``Window``) keeps offset + limit of them, and stops the nodes below once it has them when they
///   come in the final order.
/// - A count fetch ends in a **count** (``Count``), which counts what the filter keeps (LMDB counting index keys'
///   entries where the source alone answers) and never sorts.
///
/// Each rule lives in its node: a new way to find rows is a new source, and the nodes above work with it unchanged.
/// `description` prints the pipeline left to right, each node that does something:
/// `IndexRange(Employee.byAge [30, 40)) → Filter(name BEGINSWITH "A") → Sort(salary descending) → Limit(20)`.
struct QueryPlan: CustomStringConvertible {
    /// The node yielding the candidate rows.
    var source: any PlanSource
    var filter: Filter
    var sort: Sort
    var window: Window
    /// The plan's last node when it answers a count fetch (which then neither sorts nor reads its window's rows).
    var count: Count?

    init(source: any PlanSource, for request: FetchRequest) {
        self.source = source
        filter = Filter(predicate: request.predicate)
        sort = Sort(descriptors: request.resultType == .count ? [] : request.sortDescriptors)
        window = Window(offset: max(0, request.fetchOffset), limit: max(0, request.fetchLimit))
        count = request.resultType == .count ? Count() : nil
    }

    /// The source when it is one index range.
    var indexRange: IndexRange? { source.indexRange }

    var description: String {
        var steps = [source.description]
        if let filter = filter.description(after: source) { steps.append(filter) }
        if let sort = sort.description(after: source) { steps.append(sort) }
        steps += window.steps
        if count != nil { steps.append("Count") }
        return steps.joined(separator: " → ")
    }
}

/// A plan's source: the node that yields the candidate rows — row key and entity tag, of the fetched entities only —
/// and knows how they come. A new way to find rows is a new source: a type conforming to this protocol, a candidate
/// for it in the planner (`QueryPlanner+AccessPaths.swift`) and its cost (`PlanCost.swift`); the steps after it
/// (``QueryPlan/Filter``, ``QueryPlan/Sort``, ``QueryPlan/Window``, ``QueryPlan/Count``) work with it unchanged.
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
