import LMDB
import ObjectGraph

// The nodes of a ``QueryPlan`` after its source — filter, sort, window, count — each running itself on a ``PlanRun``
// (the fetch's transaction, entities and compiled checks) and printing itself.

extension QueryPlan {
    /// Keeps the candidates that match what the source leaves of the predicate (`nil`: nothing — the source answers
    /// it, or there is none). Where the source is an index range whose entries hold every value the predicate reads
    /// (``IndexRange/entryElements``), each entry is checked first and only an entry that cannot tell reads its row;
    /// otherwise each candidate's row is read once and checked — its simple comparisons on the row's bytes
    /// (``RowFilter``), the evaluator deciding the rest. Prints as `Filter(name BEGINSWITH "A")`, with
    /// ` on index entries` when entries are checked; nothing when there is nothing to check.
    struct Filter {
        var predicate: FetchPredicate?
        /// The predicate names a relationship of the entity (`department.name`, `ANY tags == %@`): the rows it
        /// reaches are read once for all the views of a run (``RelatedRows``).
        var readsRelationships = false

        func description(after source: any PlanSource) -> String? {
            guard let predicate else { return nil }
            return "Filter(\(predicate.predicateFormat))" + (source.indexRange?.entryElements != nil ? " on index entries" : "")
        }

        /// Whether the rows need not be read to know which candidates match: the source or the index entries settle
        /// the predicate (an entry that cannot tell reads its row, ``candidateMatches(_:_:in:)``).
        func isSettledWithoutRows(in run: PlanRun) -> Bool {
            predicate == nil || run.checksEntries
        }

        /// Calls `body` with each matching candidate, in the source's order, until `body` returns false — for a run
        /// whose predicate is settled without rows (``isSettledWithoutRows(in:)``).
        @inline(__always)
        func forEachCandidate(in run: PlanRun, _ body: (Candidate, CursorEntry?) throws -> Bool) throws {
            try run.plan.source.forEachCandidate(in: run) { candidate, entry in
                try Self.candidateMatches(candidate, entry, in: run) ? body(candidate, entry) : true
            }
        }

        /// Every matching candidate in key order, each once, when the source gathers them before it yields any (a
        /// union, an intersection, a to-many join: no entries to check); `nil` for another source.
        func gatheredCandidates(in run: PlanRun) throws -> [Candidate]? {
            try run.plan.source.gatheredCandidates(in: run)
        }

        /// The number of candidates that match, counted up to `wanted`, for a run settled without rows — LMDB
        /// counting each key's entries when an index range alone answers.
        func countCandidates(in run: PlanRun, upTo wanted: Int) throws -> Int {
            if predicate == nil, let index = run.indexRange {
                return try run.store.countEntries(in: index, upTo: wanted, state: run.state, transaction: run.transaction)
            }
            if let gathered = try gatheredCandidates(in: run) { return gathered.count }
            var count = 0
            guard wanted > 0 else { return 0 }
            try forEachCandidate(in: run) { _, _ in
                count += 1
                return count < wanted
            }
            return count
        }

        /// Whether a candidate's row may match: false when its index entry already shows it does not (so its row is
        /// not read); the row decides the rest.
        @inline(__always)
        static func entryMayMatch(_ entry: CursorEntry?, in run: PlanRun) -> Bool {
            guard run.checksEntries, let entryCheck = run.entryCheck, let entry else { return true }
            return run.store.entryMatches(entry, elements: entryCheck.elements, stored: entryCheck.stored, predicate: entryCheck.predicate) != false
        }

        /// Whether the candidate matches when the rows need not be read (``isSettledWithoutRows(in:)``): always,
        /// unless the index entries check the predicate — from the entry when its key can tell, else from the row.
        @inline(__always)
        static func candidateMatches(_ candidate: Candidate, _ entry: CursorEntry?, in run: PlanRun) throws -> Bool {
            guard run.checksEntries, let entry else { return true }
            return try entryOrRowMatches(candidate, entry, in: run)
        }

        /// ``candidateMatches(_:_:in:)`` for an entry the plan checks.
        @inline(never)
        private static func entryOrRowMatches(_ candidate: Candidate, _ entry: CursorEntry, in run: PlanRun) throws -> Bool {
            guard let (elements, stored, predicate) = run.entryCheck else { return true }
            let store = run.store
            if let decided = store.entryMatches(entry, elements: elements, stored: stored, predicate: predicate) { return decided }
            guard let bytes = try run.borrowedRow(candidate.key) else { return false }
            let row: EncodedRow
            do { row = try EncodedRow(bytes, layout: store.layout, checkingFields: false) } catch { throw run.corruptedRow(candidate.key, error) }
            let view = RowView(store: store, state: run.state, transaction: run.transaction, id: run.objectID(candidate), row: row)
            let matched = try predicate.evaluate(with: view)
            if let failure = view.failure { throw run.corruptedRow(candidate.key, failure) }
            return matched
        }

        /// Calls `body` with each candidate whose row matches, its row, and the view the evaluator checked it through
        /// (`nil` when the row's bytes settled it), until `body` returns false: rows read as the candidates come when
        /// the source yields key order or reads the rows itself; otherwise the candidates' keys gathered and sorted
        /// first, then their rows read with one cursor moving forward — most lookups land on the leaf page of the one
        /// before, which LMDB searches without descending from the root. A scan of a large table whose matches `body`
        /// takes all of (`consumingAll`) is read in parts on several threads (``PlanRun/scannedInParallel(_:)``),
        /// then handed on in order.
        @inline(__always)
        func forEachMatch(_ check: RowCheck, in run: PlanRun, consumingAll: Bool, _ body: (Candidate, EncodedRow, RowView?) throws -> Bool) throws {
            if consumingAll, let parts = try run.scannedInParallel(check) {
                for part in parts {
                    for match in part { guard try body(match.candidate, match.row, match.view) else { return } }
                }
                return
            }
            let source = run.plan.source
            if run.yieldsKeyOrder || run.readsRows {
                try run.rows.withCursor(in: run.transaction) { cursor in
                    try source.forEachCandidate(in: run) { candidate, entry in
                        guard Self.entryMayMatch(entry, in: run),
                              let (row, view) = try check.match(candidate, row: run.rowEntry(entry), cursor: cursor) else { return true }
                        return try body(candidate, row, view)
                    }
                }
                return
            }
            var candidates: [Candidate] = []
            try source.forEachCandidate(in: run) { candidate, entry in
                if Self.entryMayMatch(entry, in: run) { candidates.append(candidate) }
                return true
            }
            Sort.putInKeyOrder(&candidates)
            try run.rows.withCursor(in: run.transaction) { cursor in
                for candidate in candidates {
                    guard let (row, view) = try check.match(candidate, cursor: cursor) else { continue }
                    guard try body(candidate, row, view) else { return }
                }
            }
        }

        /// The number of rows that match, counted up to `wanted`, each read once (no view made of a row the bytes
        /// settle).
        func countRows(in run: PlanRun, upTo wanted: Int) throws -> Int {
            guard wanted > 0 else { return 0 }
            var count = 0
            try forEachMatch(RowCheck(run), in: run, consumingAll: wanted == .max) { _, _, _ in
                count += 1
                return count < wanted
            }
            return count
        }
    }

    /// Puts the matches in the requested order. How depends on the source:
    /// - an index walked in the sort's direction streams it (``isStreamed``): nothing to do but keep ties in row-key
    ///   order — each run of equal keys reversed when the index is walked backwards, and, when it streams only the
    ///   first of several sort keys or text whose long values are cut, each run put in the full order by the rows'
    ///   values (an incremental sort); the walk stops at the end of the run that fills the window;
    /// - an index whose entries hold the sort keys (``IndexRange/sortsOnEntries``): sorted on the entries, no row read;
    /// - otherwise on the rows: the first offset + limit by a bounded heap (top-K) reading one field per row, or all
    ///   of them.
    ///
    /// With no sort asked for, results come in row-key order, as a scan gives them: the matches of a source that does
    /// not yield that order are sorted by key (``putInKeyOrder(_:)``). Prints as `Sort(salary descending)`, with
    /// ` on index entries` or ` of each run of equal age`; nothing when the source streams the order.
    struct Sort {
        var descriptors: [FetchSortDescriptor]
        /// The source yields the requested order (an index walked in the sort's direction, or no sort and a source in
        /// row-key order), so nothing is sorted and the fetch stops after offset + limit matches.
        var isStreamed = false

        func description(after source: any PlanSource) -> String? {
            guard !descriptors.isEmpty else { return nil }
            let index = source.indexRange
            let keys = descriptors.map(\.description).joined(separator: ", ")
            if !isStreamed { return "Sort(\(keys))" + (index?.sortsOnEntries == true ? " on index entries" : "") }
            if index?.resortsRuns == true, let first = descriptors.first { return "Sort(\(keys)) of each run of equal \(first.keyPath)" }
            return nil
        }

        /// Whether the source yields the results' final order, so a walk may stop once the window is full: the sort's
        /// (streamed from an index), or — with no sort — row-key order.
        func yieldsResultOrder(in run: PlanRun) -> Bool {
            isStreamed || (descriptors.isEmpty && run.yieldsKeyOrder)
        }

        /// Whether counts, object IDs and loaded objects come from candidates (``candidates(in:upTo:)``), no row read
        /// but those of the window: the filter is settled without rows, and the candidates can be put in the
        /// requested order — none asked for, or the index yields it (and no cut text key needs the rows to order a
        /// run), or its entries hold the sort keys.
        func ordersCandidates(in run: PlanRun) -> Bool {
            guard run.plan.filter.isSettledWithoutRows(in: run) else { return false }
            let index = run.indexRange
            return descriptors.isEmpty || (isStreamed && index?.resortsLongKeys != true && index?.resortsRuns != true)
                || index?.sortsOnEntries == true
        }

        /// The matching candidates in the requested order, before the window, of which the window ends at `wanted`
        /// (``ordersCandidates(in:)`` must hold): a walk that yields that order stops after `wanted` of them.
        func candidates(in run: PlanRun, upTo wanted: Int) throws -> [Candidate] {
            let filter = run.plan.filter
            if let gathered = try filter.gatheredCandidates(in: run) { return gathered }
            if let index = run.indexRange, index.sortsOnEntries, !isStreamed { return try sortedOnEntries(index, in: run, upTo: wanted) }
            var found: [Candidate] = []
            if let index = run.indexRange, index.direction == .reverse || index.resortsLongKeys || index.resortsRuns {
                found = try collectInIndexOrder(index, in: run, upTo: wanted) { candidate, entry in
                    try Filter.candidateMatches(candidate, entry, in: run) ? candidate : nil
                }
            } else {
                let stop = yieldsResultOrder(in: run) ? wanted : .max
                guard stop > 0 else { return [] }
                try filter.forEachCandidate(in: run) { candidate, _ in
                    found.append(candidate)
                    return found.count < stop
                }
            }
            if !isStreamed { Self.putInKeyOrder(&found) }
            return found
        }

        /// The rows that match, in the requested order, of which the window ends at `wanted`: each read once and
        /// checked by the filter. Not windowed. The views borrow the rows from the map: they must not outlive the
        /// transaction.
        func views(in run: PlanRun, upTo wanted: Int) throws -> [RowView] {
            let check = RowCheck(run)
            let filter = run.plan.filter
            if isStreamed, let index = run.indexRange {
                // The index yields the requested order — or that of its first key, each run of ties then sorted by
                // the rest: rows read as their entries come, runs of cut text keys (or of ties) put in order by the
                // rows' values, the walk stopped once the window is full. The rows are read with one cursor, not a
                // lookup each.
                // Made when a run first needs sorting: most walks (a unique sort key) sort none.
                var rowSort: RowSort?? = nil
                return try run.rows.withCursor(in: run.transaction) { cursor in
                    try collectInIndexOrder(index, in: run, upTo: wanted, resort: { views, keeping in
                        if rowSort == nil { rowSort = .some(RowSort(descriptors, family: run.family, layout: run.store.layout)) }
                        return try Self.sorted(views, keeping: keeping, by: rowSort ?? nil, descriptors: descriptors, in: run)
                    }) { candidate, entry in
                        Filter.entryMayMatch(entry, in: run) ? try check.view(of: candidate, cursor: cursor) : nil
                    }
                }
            }
            let sorts = !descriptors.isEmpty
            if sorts, wanted < .max, let sort = RowSort(descriptors, family: run.family, layout: run.store.layout) {
                // The first offset + limit by a sort the row bytes settle: one field per row read into a bounded
                // heap, a view made only of the rows kept.
                var top = TopRows<EncodedRow>(sort, capacity: wanted)
                try filter.forEachMatch(check, in: run, consumingAll: true) { candidate, row, _ in
                    do throws(RowDecodingError) {
                        try top.offer(candidate, row) { values throws(RowDecodingError) in try sort.values(of: row, into: &values) }
                    } catch {
                        throw run.corruptedRow(candidate.key, error)
                    }
                    return true
                }
                return top.sorted().map { check.view(of: $0.candidate, $0.kept) }
            }
            var matches: [RowView] = []
            let stop = yieldsResultOrder(in: run) ? wanted : .max
            try filter.forEachMatch(check, in: run, consumingAll: stop == .max) { candidate, row, view in
                matches.append(view ?? check.view(of: candidate, row))
                return matches.count < stop
            }
            Self.putInKeyOrder(&matches)
            if sorts {
                // With a limit only the first offset + limit matter: a bounded heap finds them (top-K).
                let sorted = FetchSortDescriptor.sorted(matches, using: descriptors, prefix: wanted == .max ? nil : wanted)
                // A sort value that could not be decoded (in any row, kept or not) is a corrupted store, not a NULL.
                if let failed = matches.first(where: { $0.failure != nil }), let failure = failed.failure {
                    throw run.corruptedRow(failed.key, failure)
                }
                matches = sorted
            }
            return matches
        }

        /// The first `keeping` (all of them when `nil`) of a run of views in the order of `descriptors`: by their
        /// rows' bytes into a bounded heap when ``RowSort`` takes the sort (one value per row read, a comparison of
        /// words or bytes), else by their values. A run of rows tied on the first sort key (`age == 60` of `age, name`)
        /// may hold thousands; the window wants a few of them.
        private static func sorted(_ views: [RowView], keeping: Int?, by sort: RowSort?, descriptors: [FetchSortDescriptor],
                                   in run: PlanRun) throws -> [RowView] {
            guard let sort else {
                let sorted = FetchSortDescriptor.sorted(views, using: descriptors, prefix: keeping)
                // A sort value that could not be decoded is a corrupted store, not a NULL.
                if let failed = views.first(where: { $0.failure != nil }), let failure = failed.failure { throw run.corruptedRow(failed.key, failure) }
                return sorted
            }
            var top = TopRows<RowView>(sort, capacity: keeping ?? views.count)
            for view in views {
                let candidate = Candidate(key: UInt64(bitPattern: view.key), tag: view.row.entityTag)
                do throws(RowDecodingError) {
                    try top.offer(candidate, view) { values throws(RowDecodingError) in try sort.values(of: view.row, into: &values) }
                } catch {
                    throw run.corruptedRow(candidate.key, error)
                }
            }
            return top.sorted().map(\.kept)
        }

        /// The matching candidates of `index` sorted by the values its entries hold (``IndexRange/sortsOnEntries``),
        /// before the window: each match's sort values read from its entry's bytes as ``RowSort`` reads them from a
        /// row (``EntrySortPlaces``) into a bounded heap of `wanted` (all of them without a limit), ties by row key.
        /// A sort value an entry does not give back is a damaged entry: an error naming the table, never a wrong
        /// order.
        private func sortedOnEntries(_ index: QueryPlan.IndexRange, in run: PlanRun, upTo wanted: Int) throws -> [Candidate] {
            guard let sort = RowSort(descriptors, family: run.family, layout: run.store.layout),
                  let places = EntrySortPlaces(sort, descriptors: descriptors, range: index) else {
                return try sortedOnEntryValues(index, in: run, upTo: wanted)
            }
            var top = TopRows<Void>(sort, capacity: wanted)
            try run.plan.source.forEachCandidate(in: run) { candidate, entry in
                guard let entry else { return true }
                if run.checksEntries, try !Filter.candidateMatches(candidate, entry, in: run) { return true }
                try top.offer(candidate, ()) { values throws(ManagedObjectContextError) in
                    guard places.values(of: entry, into: &values) else { throw Self.undecodableSortValues(index) }
                }
                return true
            }
            return top.sorted().map(\.candidate)
        }

        /// ``sortedOnEntries(_:in:upTo:)`` for sorts ``RowSort`` does not take (a UUID key): each match's values
        /// decoded by name and sorted as ``FetchSortDescriptor`` sorts them.
        private func sortedOnEntryValues(_ index: QueryPlan.IndexRange, in run: PlanRun, upTo wanted: Int) throws -> [Candidate] {
            let names = Set(descriptors.map(\.keyPath))
            guard let elements = QueryPlanner.entryElements(index, reading: names, entity: run.request.entityName, model: run.store.model) else {
                preconditionFailure("a plan sorts on entries that do not hold its sort keys")
            }
            var found: [SortedEntry] = []
            try run.plan.filter.forEachCandidate(in: run) { candidate, entry in
                guard let entry else { return true }
                guard let values = run.store.entryValues(entry, elements: elements, stored: index.stored) else { throw Self.undecodableSortValues(index) }
                found.append(SortedEntry(candidate: candidate, values: values))
                return true
            }
            Self.putInKeyOrder(&found)
            return FetchSortDescriptor.sorted(found, using: descriptors, prefix: wanted == .max ? nil : wanted).map(\.candidate)
        }

        /// The error for an entry of `index` whose sort values do not decode.
        private static func undecodableSortValues(_ index: QueryPlan.IndexRange) -> ManagedObjectContextError {
            ManagedObjectContextError(.storeUnusable, message: "the store file is damaged: an entry of the table \"\(index.table)\" does not hold the values it is sorted by (verify() lists every problem)")
        }

        /// What `take` makes of the candidates of `index`, walked in its direction, in the plan's order, stopping
        /// after `wanted` items when the order is streamed. Entries come in runs — of equal keys, or, where text
        /// streams in sort order, of keys sharing the prefix a value too long for a key is cut to (such values
        /// follow one another by digest, so `resort` puts the run in value order). Walking backwards, a run comes in
        /// descending key order and is reversed first, so ties stay in key order. The walk stops between runs, where
        /// runs matter.
        func collectInIndexOrder<Item>(_ index: QueryPlan.IndexRange, in run: PlanRun, upTo wanted: Int,
                                       resort: ([Item], _ keeping: Int?) throws -> [Item] = { items, _ in items },
                                       _ take: (Candidate, CursorEntry) throws -> Item?) throws -> [Item] {
            let stop = isStreamed ? wanted : Int.max
            let reverse = index.direction == .reverse
            let cutPrefix = index.resortsLongKeys ? IndexEntries.cutElementPrefix : Int.max
            let byRun = reverse || index.resortsLongKeys || index.resortsRuns
            let family = run.family
            // A struct, not variables a nested function captures: those are checked for exclusive access at run
            // time on every entry.
            var runs = EntryRuns<Item>()
            try index.forEachEntry(in: run, direction: index.direction) { key, tag, entry in
                if byRun {
                    // Borrowed from the map, as the entry is: valid until the read transaction ends.
                    let runKey = UnsafeRawBufferPointer(rebasing: entry.key.prefix(cutPrefix))
                    if !EntryBytes.same(runs.key, runKey) {
                        try runs.close(reversing: reverse, resorting: index.resortsRuns || runs.key.count >= cutPrefix, upTo: stop, by: resort)
                        if runs.items.count >= stop { return false }
                        runs.key = runKey
                    }
                }
                if family.contains(tag), let item = try take(Candidate(key: key, tag: tag), entry) { runs.items.append(item) }
                return byRun || runs.items.count < stop
            }
            if byRun { try runs.close(reversing: reverse, resorting: index.resortsRuns || runs.key.count >= cutPrefix, upTo: stop, by: resort) }
            return runs.items
        }

        /// Puts `items` in row-key order: results without a usable order come so, as a scan gives them. Already
        /// ordered lists (one key's entries, IDs of one entity) are left as they are.
        static func putInKeyOrder<Item: RowKeyed>(_ items: inout [Item]) {
            if zip(items, items.dropFirst()).contains(where: { $0.rowKey > $1.rowKey }) { items.sort { $0.rowKey < $1.rowKey } }
        }
    }

    /// Keeps `offset` matches out and `limit` (0: all) of the rest, and tells the nodes below where the window ends
    /// (``end``), so that a walk in the final order stops there and a top-K sort keeps that many. Prints as
    /// `Offset(10) → Limit(20)`, each only when set.
    struct Window {
        var offset: Int
        var limit: Int

        /// The pipeline steps this window prints.
        var steps: [String] {
            (offset > 0 ? ["Offset(\(offset))"] : []) + (limit > 0 ? ["Limit(\(limit))"] : [])
        }

        /// How many matches the window needs from the nodes below: offset + limit (`Int.max` past it), or all of
        /// them.
        var end: Int { FetchRequest.windowEnd(offset: offset, limit: limit) ?? .max }

        /// The window of `items`.
        func apply<Items: Collection>(to items: Items) -> Items.SubSequence {
            FetchRequest.window(items, offset: offset, limit: limit)
        }

        /// The window of the sort's candidates (``Sort/ordersCandidates(in:)`` must hold).
        func candidates(in run: PlanRun) throws -> ArraySlice<Candidate> {
            apply(to: try run.plan.sort.candidates(in: run, upTo: end))
        }

        /// The object IDs of the window's candidates.
        func objectIDs(in run: PlanRun) throws -> [ManagedObjectID] {
            let plan = run.plan
            if plan.filter.predicate == nil, plan.sort.descriptors.isEmpty, let index = run.indexRange, index.yieldsKeyOrder {
                return try objectIDsInIndexOrder(index, in: run)
            }
            return try candidates(in: run).map { run.objectID($0) }
        }

        /// The window's object IDs when an index range alone answers the predicate and yields row-key order (one
        /// key's rows: `age == 30`): nothing to check or order, so the IDs are made straight from the entries'
        /// references, a page of them at a time — each page's IDs written into a scratch buffer (IDs are plain data)
        /// and appended at once, so the array is checked for room once a page, not once an ID.
        private func objectIDsInIndexOrder(_ index: QueryPlan.IndexRange, in run: PlanRun) throws -> [ManagedObjectID] {
            let offset = self.offset, wanted = end
            guard wanted > 0 else { return [] }
            let family = run.family, identities = run.state.identities
            var ids: [ManagedObjectID] = []
            var matched = 0
            var scratch = UnsafeMutableBufferPointer<ManagedObjectID>(start: nil, count: 0)
            defer { scratch.deallocate() }
            try index.forEachReferenceRun(in: run) { references, valuesOfKey in
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

        /// The nodes of the window's candidates: each row read with one cursor and decoded once, and checked against
        /// the predicate its source answered (``PlanRun/answeredCheck``).
        func nodes(in run: PlanRun) throws -> [IncrementalStoreNode] {
            let window = try candidates(in: run)
            var nodes: [IncrementalStoreNode] = []
            nodes.reserveCapacity(window.count)
            let store = run.store, layout = store.layout
            var writer = store.rowWriter(run.state)
            let answered = run.answeredCheck
            try run.rows.withCursor(in: run.transaction) { cursor in
                for candidate in window {
                    guard let entry = try withUnsafeBytes(of: candidate.key.bigEndian, { try cursor.seek(exactly: $0) }) else { continue }
                    let row: EncodedRow
                    do throws(RowDecodingError) {
                        row = try EncodedRow(entry.value, layout: layout, checkingFields: false)
                    } catch {
                        throw run.corruptedRow(candidate.key, error)
                    }
                    if answered?.matches(row) == false {
                        throw store.entryWithoutMatchingRow(run.objectID(candidate), source: run.plan.source.description)
                    }
                    do throws(RowDecodingError) {
                        nodes.append(try store.node(run.objectID(candidate), row, copyingInto: &writer))
                    } catch {
                        throw run.corruptedRow(candidate.key, error)
                    }
                }
            }
            return nodes
        }

        /// The window of the matching rows, in order (``Sort/views(in:upTo:)``).
        func views(in run: PlanRun) throws -> ArraySlice<RowView> {
            apply(to: try run.plan.sort.views(in: run, upTo: end))
        }
    }

    /// Counts the matches the window keeps: the filter's candidates when the rows need not be read (up to offset +
    /// limit, LMDB counting each key's entries when an index range alone answers), else its rows. Never sorts: the
    /// order does not change a count. Prints as `Count`.
    struct Count {
        func execute(in run: PlanRun) throws -> Int {
            let filter = run.plan.filter, window = run.plan.window
            let counted = filter.isSettledWithoutRows(in: run) ? try filter.countCandidates(in: run, upTo: window.end)
                : try filter.countRows(in: run, upTo: window.end)
            return window.apply(to: 0..<counted).count
        }
    }
}

/// The items ``QueryPlan/Sort/collectInIndexOrder(_:in:upTo:resort:_:)`` has taken, and the run of index entries
/// the last ones came from.
private struct EntryRuns<Item> {
    var items: [Item] = []
    /// The key (or cut key prefix) of the current run, borrowed from the map.
    var key = UnsafeRawBufferPointer(start: nil, count: 0)
    /// Where the current run's items start.
    var start = 0

    /// Ends the current run: its items reversed when the walk went backwards (so ties stay in key order), then, when
    /// `resorting` (the run shares a cut key, or ties on the first sort key), put in order by `resort` — which keeps
    /// only as many as the walk still wants (`stop`: offset + limit when the order is streamed, else `Int.max`).
    mutating func close(reversing: Bool, resorting: Bool, upTo stop: Int, by resort: ([Item], Int?) throws -> [Item]) throws {
        if reversing { items[start...].reverse() }
        if resorting, items.count - start > 1 {
            items.replaceSubrange(start..., with: try resort(Array(items[start...]), stop == .max ? nil : max(0, stop - start)))
        }
        start = items.count
    }
}

/// A candidate with the values its index entry holds, sorted by them (``QueryPlan/Sort``).
private struct SortedEntry: KeyValueReadable, RowKeyed {
    let candidate: Candidate
    let values: [String: PredicateValue]

    var rowKey: UInt64 { candidate.key }

    func predicateValue(forKey key: String) -> PredicateValue { values[key] ?? .null }
}
