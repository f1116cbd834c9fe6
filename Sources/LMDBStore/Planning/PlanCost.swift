import Foundation
import LMDB
import ObjectGraph

/// What planning may ask of the data, inside the fetch's own read transaction.
struct PlanStatistics {
    /// The entries of a named table (LMDB keeps the count: nothing is walked).
    var entries: (_ database: String) -> Int
    /// The entries of an index range, counted up to `limit` (a probe: it stops there).
    var probe: (_ range: QueryPlan.IndexRange, _ limit: Int) -> Int

    /// Nothing known: every count is 0, every candidate costs nothing, and the planner's order of preference
    /// alone decides (what `explain` shows for an empty store).
    static var unknown: PlanStatistics { PlanStatistics(entries: { _ in 0 }, probe: { _, _ in 0 }) }
}

/// Estimates what each candidate access path costs, in units of one row read by key and checked.
///
/// Sizes come from bounded probes: each candidate range is counted up to a cap — the entries past which reading a
/// row per entry costs more than scanning the table (about a quarter of it), or ten times the smallest range so far
/// when that is more (the larger side of an intersection can be that much larger and still pay), and, for a range
/// that streams in sort order, a few times the rows the limit needs. Counting takes a step per distinct value (the
/// index keeps each value's rows as counted duplicates), so a probe costs at most a fraction of a scan and usually
/// far less. A range that reaches its cap is guessed at no less than the cap and a share of its index (a tenth for
/// equalities, a third for other ranges); intersections are only considered between ranges that were counted.
struct CostEstimator {
    /// A row read by its key through the B-tree, decoded as far as the predicate needs.
    static let rowRead = 1.0
    /// A row met by a scan in key order (neighbouring rows share pages).
    static let scannedRow = 0.25
    /// An index entry stepped over by a cursor.
    static let indexEntry = 0.05
    /// Per row and comparison level of a sort.
    static let sortStep = 0.01

    let request: FetchRequest
    let statistics: PlanStatistics
    /// Rows in the entity's root table.
    let rows: Double
    /// What checking the predicate costs per row beyond reading it: the related rows it reads.
    var residual = 0.0
    /// The smallest range counted or guessed so far.
    private var smallest: Double?

    init(request: FetchRequest, statistics: PlanStatistics, rows: Int) {
        self.request = request
        self.statistics = statistics
        self.rows = Double(rows)
    }

    /// The rows evaluating a predicate reads per row, in ``rowRead`` units: one per to-one it follows, and for each
    /// to-many the relationship's average size (its table's entries per row) — ``QueryPlanner/relationshipReads(_:entity:layout:model:)``.
    func relationshipReads(toOnes: Int, toManyTables: [String]) -> Double {
        var reads = Double(toOnes)
        for table in toManyTables { reads += Double(statistics.entries(table)) / max(1, rows) }
        return reads * Self.rowRead
    }

    /// The rows the fetch hands out: offset + limit, or all.
    private var wanted: Double? { request.windowEnd.map(Double.init) }

    /// Whether a path whose ranges answer the predicate exactly needs no row: a count, or object IDs (or faults)
    /// in key order or in the index's own order.
    func answeredByEntries(covered: Bool, streams: Bool) -> Bool {
        guard covered else { return false }
        switch request.resultType {
        case .count: return true
        case .managedObjectID: return request.sortDescriptors.isEmpty || streams
        case .managedObject: return request.returnsObjectsAsFaults && (request.sortDescriptors.isEmpty || streams)
        default: return false
        }
    }

    /// Whether a path that `streams` gives the whole requested order: a stream of the first of several sort keys
    /// needs the rows to order its ties.
    func streamsWholeOrder(_ streams: Bool) -> Bool {
        streams && request.sortDescriptors.count <= 1
    }

    private func sortCost(_ matches: Double, streams: Bool) -> Double {
        guard !request.sortDescriptors.isEmpty, !streams, matches > 1 else { return 0 }
        return matches * log2(matches) * Self.sortStep
    }

    /// The entries of `range`: probed, or guessed past the probe's cap.
    mutating func entries(of range: QueryPlan.IndexRange, streams: Bool = false, covered: Bool = false) -> (entries: Double, counted: Bool) {
        // Past this many entries, reading a row per entry costs more than scanning the table; a range up to ten
        // times the smallest one is still worth counting, as the larger side of an intersection.
        var cap = max(256, Int(rows * Self.scannedRow / (Self.rowRead + Self.indexEntry)) + 1)
        if let smallest { cap = max(cap, min(Int(rows), Int(smallest) * 10 + 100)) }
        // A range streaming in sort order is walked only until the window is full: past that many entries its cost
        // does not change. One that answers the predicate keeps every entry, so the window's size is enough to know
        // (counting each key of a compound index's prefix cost more than the walk it prices).
        if streams, let wanted { cap = min(cap, covered ? Int(wanted) + 1 : Int(wanted) * 4 + 16) }
        let counted = statistics.probe(range, cap)
        let estimate = counted < cap
            ? Double(counted)
            : max(Double(cap), Double(statistics.entries(range.table)) * (range.isEquality ? 0.1 : 0.33))
        if counted < cap || !streams { smallest = min(smallest ?? estimate, estimate) }
        return (estimate, counted < cap)
    }

    /// One index range: its entries, then a row each (fewer when it streams in sort order and a limit stops it, or
    /// when the residual is checked on the entries — `entryChecked` — and rejects some before their rows are read).
    mutating func index(_ range: QueryPlan.IndexRange, rank: Int, streams: Bool, direction: ScanDirection, covered: Bool,
                        entryChecked: Bool = false, sortsOnEntries: Bool = false) -> QueryPlanner.Candidate {
        let (entries, counted) = entries(of: range, streams: streams, covered: covered)
        // A residual rejects some rows: assume half of them when the range does not answer the predicate.
        let kept = covered ? 1.0 : 0.5
        var cost: Double
        // In a constant, not an argument: `streams || sortsOnEntries` written as the argument crashed the release
        // compiler's jump threading (Swift 6.3.1, "cannot get borrow introducers").
        let ordered = streamsWholeOrder(streams) || sortsOnEntries
        if answeredByEntries(covered: covered || entryChecked, streams: ordered) {
            let stepped = streams && request.resultType != .count ? min(entries, (wanted ?? entries) / kept) : entries
            cost = stepped * Self.indexEntry * (covered ? 1 : 2)
            if sortsOnEntries {
                // Sorted on the entries: each entry's sort values decoded, then the matches sorted (no row read).
                cost += stepped * Self.indexEntry + sortCost(stepped * kept, streams: false)
            }
        } else {
            let stepped = streams ? min(entries, (wanted ?? entries) / kept) : entries
            let read = entryChecked ? stepped * kept : stepped
            cost = stepped * Self.indexEntry * (entryChecked ? 2 : 1) + read * (Self.rowRead + residual) + sortCost(entries, streams: streams)
        }
        return QueryPlanner.Candidate(source: range, rank: rank, entries: entries, counted: counted, streams: streams,
                                      direction: direction, covered: covered, sortsOnEntries: sortsOnEntries, cost: cost)
    }

    /// Two ranges whose common row keys are read: both walked, then the rows in both (guessed as if the two
    /// conditions were independent).
    func intersection(_ ranges: [QueryPlan.IndexRange], sizes: (QueryPlanner.Candidate, QueryPlanner.Candidate), rank: Int,
                      covered: Bool) -> QueryPlanner.Candidate {
        let (first, second) = sizes
        let both = rows > 0 ? first.entries * second.entries / rows : 0
        let walked = (first.entries + second.entries) * Self.indexEntry
        var candidate = QueryPlanner.Candidate(source: QueryPlan.Intersection(ranges: ranges), rank: rank, entries: both,
                                               counted: first.counted && second.counted, streams: request.sortDescriptors.isEmpty,
                                               covered: covered)
        candidate.cost = walked + (answeredByEntries(covered: covered, streams: false) ? 0 : both * (Self.rowRead + residual))
            + sortCost(both, streams: candidate.streams)
        return candidate
    }

    /// The ranges of an OR's operands: each walked, and every row in any of them read once.
    mutating func union(_ ranges: [QueryPlan.IndexRange], rank: Int, covered: Bool) -> QueryPlanner.Candidate {
        var total = 0.0
        var counted = true
        for range in ranges {
            let estimate = entries(of: range)
            total += estimate.entries
            counted = counted && estimate.counted
        }
        let read = min(total, rows)
        var candidate = QueryPlanner.Candidate(source: QueryPlan.Union(ranges: ranges), rank: rank, entries: read, counted: counted,
                                               streams: request.sortDescriptors.isEmpty, covered: covered)
        candidate.cost = total * Self.indexEntry + (answeredByEntries(covered: covered, streams: false) ? 0 : read * (Self.rowRead + residual))
            + sortCost(read, streams: candidate.streams)
        return candidate
    }

    /// A range of the destination's index, then the rows pointing at each destination (as many per destination as
    /// the to-one table holds on average).
    mutating func join(_ join: QueryPlan.Join, rank: Int, covered: Bool = false) -> QueryPlanner.Candidate {
        let destinations: Double, counted: Bool, found: Double
        switch join.destinations {
        case .range(let range):
            (destinations, counted) = entries(of: range)
            found = destinations * Self.indexEntry
        case .scan:
            // Every destination row read and checked; a tenth of them assumed to match.
            let scanned = Double(statistics.entries(join.destinationTable))
            (destinations, counted) = (max(1, scanned * 0.1), false)
            found = scanned * Self.scannedRow
        }
        let fanout = Double(statistics.entries(join.toOneTable)) / Double(max(1, statistics.entries(join.destinationTable)))
        let pointing = destinations * fanout
        var candidate = QueryPlanner.Candidate(source: join, rank: rank, entries: pointing, counted: counted, covered: covered)
        // Answered exactly, counts and IDs need only the to-one table's entries; otherwise each row is read and checked.
        let perRow = answeredByEntries(covered: covered, streams: false) ? Self.indexEntry : Self.rowRead + Self.indexEntry + residual
        candidate.cost = found + pointing * perRow + sortCost(pointing, streams: false)
        return candidate
    }

    /// A range of a to-many's destination index, each destination's owners found through the inverse (a link-table
    /// prefix, or the destination row's to-one field), then each owner read once.
    mutating func toManyJoin(_ join: QueryPlan.ToManyJoin, rank: Int) -> QueryPlanner.Candidate {
        let (destinations, counted) = entries(of: join.destination)
        let perDestination: Double
        switch join.owners {
        case .link: perDestination = Self.indexEntry
        case .toOneField: perDestination = Self.rowRead
        }
        let owners = min(destinations, rows)
        var candidate = QueryPlanner.Candidate(source: join, rank: rank, entries: owners, counted: counted,
                                               streams: request.sortDescriptors.isEmpty)
        candidate.cost = destinations * (Self.indexEntry + perDestination) + owners * (Self.rowRead + residual)
            + sortCost(owners, streams: candidate.streams)
        return candidate
    }

    /// Every row of the root table, in key order (which is the result order when nothing is sorted, so a limit
    /// stops it early).
    func scan(rank: Int) -> QueryPlanner.Candidate {
        let streams = request.sortDescriptors.isEmpty
        var candidate = QueryPlanner.Candidate(source: QueryPlan.Scan(entityName: request.entityName), rank: rank, entries: rows, streams: streams)
        candidate.cost = rows * (Self.scannedRow + residual) + sortCost(smallest ?? rows, streams: streams)
        return candidate
    }
}
