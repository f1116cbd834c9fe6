import LMDB
import ObjectGraph

/// A row a plan's source yields: its key and entity tag (one of the fetched entities'). Sixteen bytes: sources
/// gather and sort them by the thousand.
struct Candidate: Hashable {
    let key: UInt64
    let tag: UInt16
}

/// A ``QueryPlan`` with its row checks (``RowFilter``), each compiled the first time a fetch needs it: what the
/// source leaves of the predicate (``filter(_:)``), and the whole predicate when the source answered it
/// (``answeredCheck(_:)``). Kept with the commit it was costed in, so that a fetch reading the same commit runs it
/// again as it is, checks included.
final class PreparedPlan: @unchecked Sendable {
    let plan: QueryPlan
    /// The commit the plan was costed in (``KeyValueTransaction/snapshotNumber``).
    let snapshot: UInt64
    private let entityName: String
    /// The request's predicate (a kept plan's holds object IDs, not objects).
    private let predicate: FetchPredicate?
    private let storeIdentifier: String
    /// Each check once compiled (`.some(nil)`: compiled to nothing). The plan is immutable otherwise; fetches on
    /// several threads may compile a check at once, and the first to finish keeps it.
    private let compiled = Locked<(filter: RowFilter??, answered: RowFilter??)>((nil, nil))
    /// Whether the request the plan was made for passed ``FetchRequest/validate(for:)``: a request of the same key
    /// then needs no check (``LMDBIncrementalStore/prepared(_:state:transaction:reusable:checking:)``).
    let isChecked: Bool

    init(_ plan: QueryPlan, entityName: String, predicate: FetchPredicate?, storeIdentifier: String, snapshot: UInt64, isChecked: Bool = false) {
        self.plan = plan
        self.isChecked = isChecked
        self.entityName = entityName
        self.predicate = predicate
        self.storeIdentifier = storeIdentifier
        self.snapshot = snapshot
    }

    /// The plan's filter compiled to run on a row's bytes (`nil` when there is none).
    func filter(_ store: LMDBIncrementalStore) -> RowFilter? {
        if let known = compiled.withLock({ $0.filter }) { return known }
        let made = plan.filter.flatMap { compile($0, store) }
        compiled.withLock { if $0.filter == nil { $0.filter = .some(made) } }
        return made
    }

    /// See ``PlanRun/answeredCheck``.
    func answeredCheck(_ store: LMDBIncrementalStore) -> RowFilter? {
        guard plan.filter == nil else { return nil }
        if let known = compiled.withLock({ $0.answered }) { return known }
        let made = predicate.flatMap { compile($0, store) }
        compiled.withLock { if $0.answered == nil { $0.answered = .some(made) } }
        return made
    }

    private func compile(_ predicate: FetchPredicate, _ store: LMDBIncrementalStore) -> RowFilter? {
        RowFilter(predicate, entity: entityName, model: store.model, layout: store.layout, storeIdentifier: storeIdentifier)
    }
}

/// One fetch running a ``QueryPlan`` in one read transaction: the store's open state, the request and the fetched
/// entities, worked out once. The plan's source node yields ``Candidate``s (``PlanSource``); the steps after it —
/// the filter on index entries, the filter on rows, the order, the window — run here, each rule in one place, by
/// what the result needs (a count, IDs, rows):
///
/// - a plan whose predicate the source or the index entries settle reads no row for counts and object IDs
///   (``count()``, ``candidates()``); otherwise each candidate's row is read once and checked (``views()``);
/// - results without a usable order come in row-key order: candidates the source does not yield so are sorted by
///   key before their rows are read (``putInKeyOrder(_:)``), so one cursor moves forward through the row table;
/// - a source that yields the requested order stops once offset + limit results are found.
final class PlanRun {
    let store: LMDBIncrementalStore
    let state: LMDBIncrementalStore.OpenState
    let transaction: any KeyValueTransaction
    let plan: QueryPlan
    let request: FetchRequest
    /// The fetched entity's layout; its root's table holds every candidate's row.
    let entity: StoreLayout.EntityLayout
    let rows: RowTable
    /// The tags of the fetched entities (the entity, and its sub-entities when the request includes them).
    let family: TagSet
    /// The tags of every entity whose rows share the table: a row with any other tag is damage.
    let inTable: TagSet
    /// What the index entries check, when the plan checks the predicate on them: the key's elements and the predicate.
    let entryCheck: (elements: [QueryPlan.EntryElement], stored: [QueryPlan.EntryElement], predicate: FetchPredicate)?
    /// Whether there is an ``entryCheck`` (tested per candidate without copying it).
    let checksEntries: Bool
    /// Whether the source reads each candidate's row (a key lookup, a scan): the entry it yields is the row's own.
    let readsRows: Bool
    /// Whether the source yields its candidates in ascending row-key order, each once (``PlanSource/yieldsKeyOrder``).
    let yieldsKeyOrder: Bool
    /// The plan's source when it is one index range.
    let indexRange: QueryPlan.IndexRange?
    /// Whether ``transaction`` is a read (not a write, whose changes no other read sees): only then may a scan be
    /// read in parts on other threads (``scannedInParallel(_:)``).
    let isRead: Bool
    /// The reads of the same commit that parts of a scan were read in on other threads: their rows are borrowed
    /// until the run ends, when they end too.
    var partReads: [any KeyValueTransaction] = []

    /// The plan and its row checks, compiled once (and shared by the fetches that run a kept plan).
    private let prepared: PreparedPlan

    init(_ prepared: PreparedPlan, for request: FetchRequest, entity: StoreLayout.EntityLayout, store: LMDBIncrementalStore,
         state: LMDBIncrementalStore.OpenState, transaction: any KeyValueTransaction, isRead: Bool = false) {
        self.store = store
        self.state = state
        self.transaction = transaction
        let plan = prepared.plan
        self.plan = plan
        self.prepared = prepared
        self.request = request
        self.entity = entity
        rows = state.rows(of: entity)
        family = store.layout.tags(of: Set((request.includesSubentities ? store.model.entityAndDescendants(of: request.entityName)
                                                                          : [request.entityName]).compactMap { store.layout.entity($0)?.tag }))
        inTable = store.layout.tags(sharingTableOf: entity)
        indexRange = plan.indexRange
        entryCheck = indexRange.flatMap { index in index.entryElements.flatMap { elements in plan.filter.map { (elements, index.stored, $0) } } }
        checksEntries = entryCheck != nil
        readsRows = plan.source.readsRows
        yieldsKeyOrder = plan.source.yieldsKeyOrder
        self.isRead = isRead
    }

    deinit {
        for read in partReads { read.endRead() }
    }

    /// The plan's filter compiled to run on a row's bytes (`nil` when there is none).
    var filter: RowFilter? { prepared.filter(store) }

    /// When the source answered the whole predicate (an index range, a to-one's or a to-many's table, a union or an
    /// intersection of them) and rows are read anyway — loaded objects, a sort on the rows —, the predicate compiled
    /// to run on a row's bytes: a row it rejects came from a damaged entry, which stops the fetch instead of
    /// becoming a wrong answer. Only what the bytes settle is checked; a comparison they cannot settle is not
    /// evaluated. `nil` when the source left part of the predicate to the rows (they are checked then), or when
    /// there is no predicate.
    var answeredCheck: RowFilter? { prepared.answeredCheck(store) }

    // MARK: - Results

    /// Whether the rows need not be read to know which candidates match: the key lookup, the index ranges or the
    /// index entries settle the predicate (an entry that cannot tell reads its row, ``entryOrRowMatches(_:)``).
    var settledWithoutRows: Bool {
        plan.filter == nil || checksEntries
    }

    /// Whether counts, object IDs and loaded objects come from candidates (``candidates()``), no row read but those
    /// of the window: the predicate is settled without rows, and the candidates can be put in the requested order —
    /// none asked for, or the index yields it (and no cut text key needs the rows to order a run).
    var answersFromCandidates: Bool {
        settledWithoutRows && (request.sortDescriptors.isEmpty
                               || (plan.streamsInSortOrder && indexRange?.resortsLongKeys != true && indexRange?.resortsRuns != true)
                               || indexRange?.sortsOnEntries == true)
    }

    /// The number of rows that match, windowed — from the candidates when the rows need not be read (counted up to
    /// offset + limit), LMDB counting each key's entries when the index range alone answers.
    func count() throws -> Int {
        guard settledWithoutRows else { return request.window(try views()).count }
        var count = 0
        let wanted = request.windowEnd ?? .max
        if plan.filter == nil, let index = indexRange {
            count = try store.countEntries(in: index, upTo: wanted, state: state, transaction: transaction)
        } else if let gathered = try gatheredCandidates() {
            count = gathered.count
        } else if wanted > 0 {
            try forEachCandidate { candidate, entry in
                if try entryOrRowMatches(candidate, entry) { count += 1 }
                return count < wanted
            }
        }
        return request.window(0..<count).count
    }

    /// The matching candidates in the requested order, before the window (``answersFromCandidates`` must hold):
    /// a walk that yields that order stops after offset + limit of them.
    func candidates() throws -> [Candidate] {
        // A union, an intersection or a to-many join gathers its rows before it yields them (and has no entries to
        // check): taken as they are.
        if let gathered = try gatheredCandidates() { return gathered }
        if let index = indexRange, index.sortsOnEntries, !plan.streamsInSortOrder { return try sortedOnEntries(index) }
        var found: [Candidate] = []
        if let index = indexRange, index.direction == .reverse || index.resortsLongKeys || index.resortsRuns {
            found = try collectInIndexOrder(index) { candidate, entry in try entryOrRowMatches(candidate, entry) ? candidate : nil }
        } else {
            let wanted = yieldsResultOrder ? request.windowEnd ?? .max : .max
            guard wanted > 0 else { return [] }
            try forEachCandidate { candidate, entry in
                if try entryOrRowMatches(candidate, entry) { found.append(candidate) }
                return found.count < wanted
            }
        }
        if !plan.streamsInSortOrder { putInKeyOrder(&found) }
        return found
    }

    /// The matching candidates of `index` sorted by the values its entries hold (``QueryPlan/IndexRange/sortsOnEntries``),
    /// before the window: each match's sort values read from its entry's bytes as ``RowSort`` reads them from a row
    /// (``EntrySortPlaces``) into a bounded heap of offset + limit (all of them without a limit), ties by row key. A
    /// sort value an entry does not give back is a damaged entry: an error naming the table, never a wrong order.
    private func sortedOnEntries(_ index: QueryPlan.IndexRange) throws -> [Candidate] {
        guard let sort = RowSort(request.sortDescriptors, family: family, layout: store.layout),
              let places = EntrySortPlaces(sort, descriptors: request.sortDescriptors, range: index) else {
            return try sortedOnEntryValues(index)
        }
        var top = TopRows<Void>(sort, capacity: request.windowEnd ?? .max)
        try forEachCandidate { candidate, entry in
            guard let entry else { return true }
            if checksEntries, try !entryOrRowMatches(candidate, entry) { return true }
            try top.offer(candidate, ()) { values throws(ManagedObjectContextError) in
                guard places.values(of: entry, into: &values) else { throw undecodableSortValues(index) }
            }
            return true
        }
        return top.sorted().map(\.candidate)
    }

    /// ``sortedOnEntries(_:)`` for sorts ``RowSort`` does not take (a UUID key): each match's values decoded by name
    /// and sorted as ``FetchSortDescriptor`` sorts them.
    private func sortedOnEntryValues(_ index: QueryPlan.IndexRange) throws -> [Candidate] {
        let names = Set(request.sortDescriptors.map(\.keyPath))
        guard let elements = QueryPlanner.entryElements(index, reading: names, entity: request.entityName, model: store.model) else {
            preconditionFailure("a plan sorts on entries that do not hold its sort keys")
        }
        var found: [SortedEntry] = []
        try forEachCandidate { candidate, entry in
            guard let entry, try entryOrRowMatches(candidate, entry) else { return true }
            guard let values = store.entryValues(entry, elements: elements, stored: index.stored) else { throw undecodableSortValues(index) }
            found.append(SortedEntry(candidate: candidate, values: values))
            return true
        }
        putInKeyOrder(&found)
        return FetchSortDescriptor.sorted(found, using: request.sortDescriptors, prefix: request.windowEnd).map(\.candidate)
    }

    /// The error for an entry of `index` whose sort values do not decode.
    private func undecodableSortValues(_ index: QueryPlan.IndexRange) -> ManagedObjectContextError {
        ManagedObjectContextError(.storeUnusable, message: "the store file is damaged: an entry of the table \"\(index.table)\" does not hold the values it is sorted by (verify() lists every problem)")
    }

    /// The object IDs of ``candidates()``'s window.
    func objectIDs() throws -> [ManagedObjectID] {
        if plan.filter == nil, request.sortDescriptors.isEmpty, let index = indexRange, index.yieldsKeyOrder {
            return try objectIDsInIndexOrder(index)
        }
        return try request.window(candidates()).map { objectID($0) }
    }

    /// The object IDs of the window when an index range alone answers the predicate and yields row-key order (one
    /// key's rows: `age == 30`): nothing to check, order or window but the count, so the IDs are made straight from
    /// the entries' references, a page of them at a time — each page's IDs written into a scratch buffer (IDs are
    /// plain data) and appended at once, so the array is checked for room once a page, not once an ID.
    private func objectIDsInIndexOrder(_ index: QueryPlan.IndexRange) throws -> [ManagedObjectID] {
        let offset = request.fetchOffset, wanted = request.fetchLimit > 0 ? offset + request.fetchLimit : Int.max
        guard wanted > 0 else { return [] }
        let family = self.family, identities = state.identities
        var ids: [ManagedObjectID] = []
        var matched = 0
        var scratch = UnsafeMutableBufferPointer<ManagedObjectID>(start: nil, count: 0)
        defer { scratch.deallocate() }
        try index.forEachReferenceRun(in: self) { references, valuesOfKey in
            // Sized once for the first key's values (the one key of an equality), not grown by doubling.
            if ids.capacity == 0 { ids.reserveCapacity(Swift.max(0, Swift.min(wanted, valuesOfKey) - offset)) }
            if scratch.count < references.count {
                scratch.deallocate()
                scratch = .allocate(capacity: references.count)
            }
            var made = 0
            var going = true
            for reference in references where family.contains(reference.entityTag) {
                if matched >= offset {
                    (scratch.baseAddress.unsafelyUnwrapped + made).initialize(to: identities.objectID(entityTag: reference.entityTag, key: reference.key))
                    made += 1
                }
                matched += 1
                if matched == wanted {
                    going = false
                    break
                }
            }
            ids.append(contentsOf: UnsafeBufferPointer(rebasing: scratch[..<made]))
            return going
        }
        return ids
    }

    /// The nodes of ``candidates()``'s window: each row read with one cursor and decoded once, and checked against
    /// the predicate its source answered (``answeredCheck``).
    func nodes() throws -> [IncrementalStoreNode] {
        let window = request.window(try candidates())
        var nodes: [IncrementalStoreNode] = []
        nodes.reserveCapacity(window.count)
        let layout = store.layout
        var writer = store.rowWriter(state)
        let answered = answeredCheck
        try rows.withCursor(in: transaction) { cursor in
            for candidate in window {
                guard let entry = try withUnsafeBytes(of: candidate.key.bigEndian, { try cursor.seek(exactly: $0) }) else { continue }
                let row: EncodedRow
                do throws(RowDecodingError) {
                    row = try EncodedRow(entry.value, layout: layout, checkingFields: false)
                } catch {
                    throw corruptedRow(candidate.key, error)
                }
                if answered?.matches(row) == false {
                    throw store.entryWithoutMatchingRow(objectID(candidate), source: plan.source.description)
                }
                do throws(RowDecodingError) {
                    nodes.append(try store.node(objectID(candidate), row, copyingInto: &writer))
                } catch {
                    throw corruptedRow(candidate.key, error)
                }
            }
        }
        return nodes
    }

    /// The rows that match, each read once and checked against what the source leaves of the predicate (its simple
    /// comparisons settled on the row's bytes, the evaluator deciding the rest), in the requested order — sorted
    /// (top-K with a limit) unless the index yields it. Not windowed. The views borrow the rows from the map: they
    /// must not outlive the transaction.
    func views() throws -> [RowView] {
        let check = RowCheck(self)
        if plan.streamsInSortOrder, let index = indexRange {
            // The index yields the requested order — or that of its first key, each run of ties then sorted by the
            // rest: rows read as their entries come, runs of cut text keys (or of ties) put in order by the rows'
            // values, the walk stopped once the window is full. The rows are read with one cursor, not a lookup each.
            return try rows.withCursor(in: transaction) { cursor in
                try collectInIndexOrder(index, resort: { FetchSortDescriptor.sorted($0, using: request.sortDescriptors) }) { candidate, entry in
                    entryMayMatch(entry) ? try check.view(of: candidate, cursor: cursor) : nil
                }
            }
        }
        let sorts = !request.sortDescriptors.isEmpty && !plan.streamsInSortOrder
        if sorts, let wanted = request.windowEnd, let sort = RowSort(request.sortDescriptors, family: family, layout: store.layout) {
            // The first offset + limit by a sort the row bytes settle: one field per row read into a bounded heap, a
            // view made only of the rows kept.
            var top = TopRows<EncodedRow>(sort, capacity: wanted)
            try forEachMatch(check, consumingAll: true) { candidate, row, _ in
                do throws(RowDecodingError) {
                    try top.offer(candidate, row) { values throws(RowDecodingError) in try sort.values(of: row, into: &values) }
                } catch {
                    throw corruptedRow(candidate.key, error)
                }
                return true
            }
            return top.sorted().map { check.view(of: $0.candidate, $0.kept) }
        }
        var matches: [RowView] = []
        let wanted = yieldsResultOrder ? request.windowEnd ?? .max : .max
        try forEachMatch(check, consumingAll: wanted == .max) { candidate, row, view in
            matches.append(view ?? check.view(of: candidate, row))
            return matches.count < wanted
        }
        putInKeyOrder(&matches)
        if sorts {
            // With a limit only the first offset + limit matter: a bounded heap finds them (top-K).
            let sorted = FetchSortDescriptor.sorted(matches, using: request.sortDescriptors, prefix: request.windowEnd)
            // A sort value that could not be decoded (in any row, kept or not) is a corrupted store, not a NULL.
            if let failed = matches.first(where: { $0.failure != nil }), let failure = failed.failure {
                throw corruptedRow(failed.key, failure)
            }
            matches = sorted
        }
        return matches
    }

    /// Calls `body` with each candidate whose row matches, its row, and the view the evaluator checked it through
    /// (`nil` when the row's bytes settled it), until `body` returns false: rows read as the candidates come when
    /// the source yields key order or reads the rows itself; otherwise the candidates' keys gathered and sorted first,
    /// then their rows read with one cursor moving forward — most lookups land on the leaf page of the one before,
    /// which LMDB searches without descending from the root. A scan of a large table whose matches `body` takes all
    /// of (`consumingAll`) is read in parts on several threads (``scannedInParallel(_:)``), then handed on in order.
    @inline(__always)
    private func forEachMatch(_ check: RowCheck, consumingAll: Bool, _ body: (Candidate, EncodedRow, RowView?) throws -> Bool) throws {
        if consumingAll, let parts = try scannedInParallel(check) {
            for part in parts {
                for match in part { guard try body(match.candidate, match.row, match.view) else { return } }
            }
            return
        }
        if yieldsKeyOrder || readsRows {
            try rows.withCursor(in: transaction) { cursor in
                try forEachCandidate { candidate, entry in
                    guard entryMayMatch(entry), let (row, view) = try check.match(candidate, row: rowEntry(entry), cursor: cursor) else { return true }
                    return try body(candidate, row, view)
                }
            }
            return
        }
        var candidates: [Candidate] = []
        try forEachCandidate { candidate, entry in
            if entryMayMatch(entry) { candidates.append(candidate) }
            return true
        }
        putInKeyOrder(&candidates)
        try rows.withCursor(in: transaction) { cursor in
            for candidate in candidates {
                guard let (row, view) = try check.match(candidate, cursor: cursor) else { continue }
                guard try body(candidate, row, view) else { return }
            }
        }
    }

    // MARK: - Order

    /// Whether the source yields the results' final order, so a walk may stop once the window is full: the sort's
    /// (streamed from an index), or — with no sort — row-key order.
    var yieldsResultOrder: Bool {
        plan.streamsInSortOrder || (request.sortDescriptors.isEmpty && yieldsKeyOrder)
    }

    /// Puts `items` in row-key order: results without a usable order come so, as a scan gives them. Already
    /// ordered lists (one key's entries, IDs of one entity) are left as they are.
    func putInKeyOrder<Item: RowKeyed>(_ items: inout [Item]) {
        if zip(items, items.dropFirst()).contains(where: { $0.rowKey > $1.rowKey }) { items.sort { $0.rowKey < $1.rowKey } }
    }

    // MARK: - Sources

    /// Calls `body` with each candidate the plan's source yields, with the entry it was read from, until `body`
    /// returns false (``PlanSource/forEachCandidate(in:_:)``).
    @inline(__always)
    func forEachCandidate(_ body: (Candidate, CursorEntry?) throws -> Bool) throws {
        try plan.source.forEachCandidate(in: self, body)
    }

    /// The candidates of a source that gathers them all before it yields any, in key order, each once; `nil` for
    /// another source (``PlanSource/gatheredCandidates(in:)``).
    func gatheredCandidates() throws -> [Candidate]? {
        try plan.source.gatheredCandidates(in: self)
    }

    /// What `take` makes of the candidates of `index`, walked in its direction, in the plan's order. Entries
    /// come in runs — of equal keys, or, where text streams in sort order, of keys sharing the prefix a value too
    /// long for a key is cut to (such values follow one another by digest, so `resort` puts the run in value
    /// order). Walking backwards, a run comes in descending key order and is reversed first, so ties stay in key
    /// order. With the order streamed, the walk stops once offset + limit items are taken — between runs, where runs
    /// matter.
    func collectInIndexOrder<Item>(_ index: QueryPlan.IndexRange, resort: ([Item]) -> [Item] = { $0 },
                                   _ take: (Candidate, CursorEntry) throws -> Item?) throws -> [Item] {
        let wanted = plan.streamsInSortOrder ? request.windowEnd ?? Int.max : Int.max
        let reverse = index.direction == .reverse
        let cutPrefix = index.resortsLongKeys ? IndexEntries.cutElementPrefix : Int.max
        let byRun = reverse || index.resortsLongKeys || index.resortsRuns
        // A struct, not variables a nested function captures: those are checked for exclusive access at run time
        // on every entry.
        var runs = EntryRuns<Item>()
        try index.forEachEntry(in: self, direction: index.direction) { key, tag, entry in
            if byRun {
                // Borrowed from the map, as the entry is: valid until the read transaction ends.
                let runKey = UnsafeRawBufferPointer(rebasing: entry.key.prefix(cutPrefix))
                if !EntryBytes.same(runs.key, runKey) {
                    runs.close(reversing: reverse, resorting: index.resortsRuns || runs.key.count >= cutPrefix, by: resort)
                    if runs.items.count >= wanted { return false }
                    runs.key = runKey
                }
            }
            if family.contains(tag), let item = try take(Candidate(key: key, tag: tag), entry) { runs.items.append(item) }
            return byRun || runs.items.count < wanted
        }
        if byRun { runs.close(reversing: reverse, resorting: index.resortsRuns || runs.key.count >= cutPrefix, by: resort) }
        return runs.items
    }

    /// `keys` in key order, each key once.
    static func sortedUnique(_ keys: [Candidate]) -> [Candidate] {
        var keys = keys
        keys.sort { $0.key < $1.key }
        var unique: [Candidate] = []
        unique.reserveCapacity(keys.count)
        for candidate in keys where candidate.key != unique.last?.key { unique.append(candidate) }
        return unique
    }

    // MARK: - Checks

    /// The row a source read a candidate from, when it reads rows (``readsRows``).
    @inline(__always)
    func rowEntry(_ entry: CursorEntry?) -> UnsafeRawBufferPointer? {
        readsRows ? entry?.value : nil
    }

    /// Whether a candidate's row may match: false when its index entry already shows it does not (so its row is not
    /// read); the row decides the rest.
    @inline(__always)
    func entryMayMatch(_ entry: CursorEntry?) -> Bool {
        guard checksEntries, let entryCheck, let entry else { return true }
        return store.entryMatches(entry, elements: entryCheck.elements, stored: entryCheck.stored, predicate: entryCheck.predicate) != false
    }

    /// Whether the candidate matches when the rows need not be read (``settledWithoutRows``): always, unless the
    /// index entries check the predicate — from the entry when its key can tell, else from the row.
    @inline(__always)
    func entryOrRowMatches(_ candidate: Candidate, _ entry: CursorEntry?) throws -> Bool {
        guard checksEntries, let entry else { return true }
        return try entryOrRowMatches(candidate, entry)
    }

    /// ``entryOrRowMatches(_:_:)`` for an entry the plan checks.
    @inline(never)
    private func entryOrRowMatches(_ candidate: Candidate, _ entry: CursorEntry) throws -> Bool {
        guard let (elements, stored, predicate) = entryCheck else { return true }
        if let decided = store.entryMatches(entry, elements: elements, stored: stored, predicate: predicate) { return decided }
        guard let bytes = try borrowedRow(candidate.key) else { return false }
        let row: EncodedRow
        do { row = try EncodedRow(bytes, layout: store.layout, checkingFields: false) } catch { throw corruptedRow(candidate.key, error) }
        let view = RowView(store: store, state: state, transaction: transaction, id: objectID(candidate), row: row)
        let matched = try predicate.evaluate(with: view)
        if let failure = view.failure { throw corruptedRow(candidate.key, failure) }
        return matched
    }

    // MARK: - Rows

    /// The bytes of the row under `key` (`nil` when there is none).
    func borrowedRow(_ key: UInt64) throws -> UnsafeRawBufferPointer? {
        try rows.bytes(key: key, in: transaction)
    }

    /// The entity tag of a row of the table, from its header alone; a row too short for a header, or whose tag no
    /// entity of the table has, is an error naming the row — never a row silently left out.
    @inline(__always)
    func tag(of row: UnsafeRawBufferPointer, key: UInt64) throws -> UInt16 {
        guard let tag = RowCodec.entityTag(row), inTable.contains(tag) else { throw damagedHeader(row, key: key) }
        return tag
    }

    /// The error for a row whose header ``tag(of:key:)`` refuses.
    @inline(never)
    private func damagedHeader(_ row: UnsafeRawBufferPointer, key: UInt64) -> ManagedObjectContextError {
        guard let tag = RowCodec.entityTag(row) else {
            return corruptedRow(key, RowDecodingError(reason: "the row is \(row.count) bytes, shorter than a row header"))
        }
        return corruptedRow(key, RowDecodingError(reason: "the row names the entity tag \(tag), which no entity of this table has"))
    }

    func objectID(_ candidate: Candidate) -> ManagedObjectID {
        state.identities.objectID(entityTag: candidate.tag, key: candidate.key)
    }

    /// The error a row that cannot be decoded gives: the store file is corrupted there.
    func corruptedRow(_ key: some BinaryInteger, _ error: RowDecodingError) -> ManagedObjectContextError {
        store.corruptedRow(key, in: entity.root, error)
    }
}

/// What the row checks of one run read: the predicate left for the rows, its simple comparisons compiled to run on
/// a row's bytes (``RowFilter``), and what a view of a row holds — taken from the run once, so a row's check retains
/// only what its view keeps.
struct RowCheck {
    let predicate: FetchPredicate?
    let filter: RowFilter?
    /// The whole predicate on a row's bytes when the source answered it and nothing is left to check
    /// (``PlanRun/answeredCheck``), and the source, for the error.
    private let answered: RowFilter?
    private let source: any PlanSource
    /// Whether there is a ``predicate`` (tested per row without copying it).
    private let checksRows: Bool
    private let store: LMDBIncrementalStore
    private let state: LMDBIncrementalStore.OpenState
    private let transaction: any KeyValueTransaction
    private let layout: StoreLayout
    private let rows: RowTable
    private let root: String

    /// The checks of `run`'s rows read in `transaction` (the run's by default; for a part of a scan read on
    /// another thread, a read of the same commit).
    init(_ run: PlanRun, transaction: (any KeyValueTransaction)? = nil) {
        // The plan's filter: what the source leaves of the predicate (nothing when index ranges answer it exactly,
        // as counts and IDs trust them; the rest of a key lookup's conjunction; else the whole predicate).
        predicate = run.plan.filter
        checksRows = predicate != nil
        filter = run.filter
        answered = run.answeredCheck
        source = run.plan.source
        store = run.store
        state = run.state
        self.transaction = transaction ?? run.transaction
        layout = run.store.layout
        rows = run.rows
        root = run.entity.root
    }

    /// The candidate's row as a view if it matches (``match(_:row:cursor:)``).
    func view(of candidate: Candidate, row read: UnsafeRawBufferPointer? = nil, cursor: (any KeyValueCursor)? = nil) throws -> RowView? {
        guard let (row, view) = try match(candidate, row: read, cursor: cursor) else { return nil }
        return view ?? self.view(of: candidate, row)
    }

    /// A view of a candidate's row.
    func view(of candidate: Candidate, _ row: EncodedRow) -> RowView {
        RowView(store: store, state: state, transaction: transaction,
                id: state.identities.objectID(entityTag: candidate.tag, key: candidate.key), row: row)
    }

    /// The candidate's row if it matches (`row`, when the source read it, else read with `cursor` or looked up),
    /// with the view the evaluator checked it through — `nil` when the row's bytes settled it, so a row is made a
    /// view only when something needs one. A row that cannot be decoded stops the fetch with its key. (Thrown at once
    /// rather than recorded: a flag the loops would test per row costs a runtime exclusivity check per row.)
    @inline(__always)
    func match(_ candidate: Candidate, row read: UnsafeRawBufferPointer? = nil, cursor: (any KeyValueCursor)? = nil) throws -> (EncodedRow, RowView?)? {
        let bytes: UnsafeRawBufferPointer
        if let read {
            bytes = read
        } else if let cursor {
            guard let found = try withUnsafeBytes(of: candidate.key.bigEndian, { try cursor.seek(exactly: $0) }) else { return nil }
            bytes = found.value
        } else {
            guard let found = try rows.bytes(key: candidate.key, in: transaction)
            else { return nil }
            bytes = found
        }
        let row: EncodedRow
        // The checksum is checked here; each field's extent as the filter or the evaluator walks to it.
        do { row = try EncodedRow(bytes, layout: layout, checkingFields: false) } catch { throw store.corruptedRow(candidate.key, in: root, error) }
        guard checksRows else {
            if answered?.matches(row) == false {
                throw store.entryWithoutMatchingRow(state.identities.objectID(entityTag: candidate.tag, key: candidate.key), source: source.description)
            }
            return (row, nil)
        }
        if let settled = filter?.matches(row) { return settled ? (row, nil) : nil }
        let view = view(of: candidate, row)
        let matched = try predicate?.evaluate(with: view) ?? true
        if let failure = view.failure { throw store.corruptedRow(candidate.key, in: root, failure) }
        return matched ? (row, view) : nil
    }
}

/// The items ``PlanRun/collectInIndexOrder(_:resort:_:)`` has taken, and the run of index entries the last ones
/// came from.
private struct EntryRuns<Item> {
    var items: [Item] = []
    /// The key (or cut key prefix) of the current run, borrowed from the map.
    var key = UnsafeRawBufferPointer(start: nil, count: 0)
    /// Where the current run's items start.
    var start = 0

    /// Ends the current run: its items reversed when the walk went backwards (so ties stay in key order), then, when
    /// `resorting` (the run shares a cut key), put in order by `resort`.
    mutating func close(reversing: Bool, resorting: Bool, by resort: ([Item]) -> [Item]) {
        if reversing { items[start...].reverse() }
        if resorting, items.count - start > 1 { items.replaceSubrange(start..., with: resort(Array(items[start...]))) }
        start = items.count
    }
}

/// Something with a row key, which ``PlanRun/putInKeyOrder(_:)`` orders.
protocol RowKeyed {
    var rowKey: UInt64 { get }
}

/// A candidate with the values its index entry holds, sorted by them (``PlanRun/sortedOnEntries(_:)``).
private struct SortedEntry: KeyValueReadable, RowKeyed {
    let candidate: Candidate
    let values: [String: PredicateValue]

    var rowKey: UInt64 { candidate.key }

    func predicateValue(forKey key: String) -> PredicateValue { values[key] ?? .null }
}

extension Candidate: RowKeyed {
    var rowKey: UInt64 { key }
}

extension RowView: RowKeyed {
    var rowKey: UInt64 { UInt64(bitPattern: key) }
}
