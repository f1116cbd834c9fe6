import LMDB
import ObjectGraph

// The source nodes of a ``QueryPlan``: each declares what it reads, prints itself and yields its candidates.

extension QueryPlan {
    /// `SELF == %@` / `SELF IN %@`: the rows of those objects, read by key in the IDs' order (each found by one
    /// cursor, its entity tag read from the header). Prints as `KeyLookup(Employee {1, 2, 3})`.
    struct KeyLookup: PlanSource {
        let entityName: String
        let objectIDs: [ManagedObjectID]

        var yieldsKeyOrder: Bool { false }
        var readsRows: Bool { true }

        var description: String {
            // The first keys only: a lookup of 12 000 objects prints as 20 keys and a count.
            let shown = objectIDs.prefix(20).map { id in if case .integer(let key) = id.referenceObject { String(key) } else { id.description } }
            let more = objectIDs.count > shown.count ? ", … \(objectIDs.count - shown.count) more" : ""
            return "KeyLookup(\(entityName) {\(shown.joined(separator: ", "))\(more)})"
        }

        func forEachCandidate(in run: PlanRun, _ body: (Candidate, CursorEntry?) throws -> Bool) throws {
            var lookup = LMDBIncrementalStore.KeyLookup(state: run.state, family: run.family)
            try run.rows.withCursor(in: run.transaction) { cursor in
                for id in objectIDs {
                    guard let key = lookup.key(of: id),
                          let entry = try withUnsafeBytes(of: UInt64(key).bigEndian, { try cursor.seek(exactly: $0) }) else { continue }
                    let rowTag = try run.tag(of: entry.value, key: UInt64(key))
                    // An ID naming another entity of the table than its row's is no object.
                    guard rowTag == lookup.tag else { continue }
                    guard try body(Candidate(key: UInt64(key), tag: rowTag), entry) else { return }
                }
            }
        }
    }

    /// The entries of ranges of one index table (a fetch index, a to-one's `toone/…` table or a to-many's
    /// `members/…` table), each entry's value a row key and entity tag. As a plan's source it is walked in
    /// ``direction``; as a child of another node (a union's, an intersection's, a join's destinations), forward.
    /// Prints as `IndexRange(Employee.byAge [30, 40))`.
    struct IndexRange: PlanSource {
        /// The table's name; its handle (``IndexTable``) is the open store's.
        let table: String
        let label: String
        let keyPath: String
        /// Disjoint ranges in ascending key order (several for `IN` and ORed equalities).
        let ranges: [KeyRange]
        let bounds: String
        /// `==` and `IN` ranges, which hold a small share of the index when they hold more than a probe counts.
        var isEquality = false
        /// The index's elements, in key order.
        var elements: [FetchIndexElementDescription] = []
        /// The range holds one key of the index — an equality on a one-element index of a fixed-size type, or on a
        /// to-one — so its entries come in row-key order (LMDB keeps one key's values sorted). Not so for text: an
        /// equality's range also holds the keys of longer values it begins (`"a\0b"` for `"a"`), checked on the rows.
        var holdsOneKey = false
        /// The direction the plan walks the range in (backwards to stream a descending sort).
        var direction = ScanDirection.forward
        /// The range streams text in sort order, whose values too long for a key are cut: runs of keys sharing the cut
        /// prefix are sorted by the rows' values before they are handed on.
        var resortsLongKeys = false
        /// The range streams the order of the first of several sort keys: each run of entries under one key (the rows
        /// tied on that sort key) is put in the full order by the rows' values before it is handed on (an incremental
        /// sort), and the walk stops once the window is full at the end of a run.
        var resortsRuns = false
        /// Every value the plan's filter reads is an element of the keys (these, decoded in order) or stored in the
        /// values: the filter is checked on each entry before any row is read, and counts and object IDs read no row.
        var entryElements: [EntryElement]?
        /// The attributes a covering index's entries store after the row's reference, in order (empty for other
        /// indexes): their values are read from the entries, never from the rows.
        var stored: [EntryElement] = []
        /// The plan's sort keys are read from the entries (stored values or key elements): the matches are sorted
        /// there (top-K with a limit), and counts, IDs and faults read no row.
        var sortsOnEntries = false

        var yieldsKeyOrder: Bool { holdsOneKey && direction == .forward && !resortsLongKeys && !resortsRuns }

        var indexRange: IndexRange? { self }

        var description: String { "IndexRange(\(label) \(bounds)\(direction == .reverse ? " reverse" : ""))" }

        func forEachCandidate(in run: PlanRun, _ body: (Candidate, CursorEntry?) throws -> Bool) throws {
            let family = run.family
            try forEachEntry(in: run, direction: direction) { key, tag, entry in
                family.contains(tag) ? try body(Candidate(key: key, tag: tag), entry) : true
            }
        }

        /// Calls `body` with the row key, entity tag and entry of each entry (the ranges in turn, each walked
        /// `direction`; forward, a key's values come a page at a time), of any entity, until it returns false.
        func forEachEntry(in run: PlanRun, direction: ScanDirection = .forward,
                          _ body: (_ key: UInt64, _ tag: UInt16, _ entry: CursorEntry) throws -> Bool) throws {
            try run.state.indexTable(table).forEachEntry(in: ranges, direction: direction, in: run.transaction) { row, entry in
                try body(row.key, row.entityTag, entry)
            }
        }

        /// Calls `body` with the entries' row references, a run of one key's values at a time, and how many values
        /// the key holds — the ranges in turn, forward, a page at a time where the engine hands them so
        /// (``IndexTable/forEachReferenceRun(in:on:_:)``) — until it returns false.
        func forEachReferenceRun(in run: PlanRun, _ body: (_ run: ReferenceRun, _ valuesOfKey: Int) throws -> Bool) throws {
            let table = run.state.indexTable(self.table)
            try table.withCursor(in: run.transaction) { cursor in
                var going = true
                for range in ranges where going {
                    try table.forEachReferenceRun(in: range, on: cursor) { references, valuesOfKey in
                        going = try body(references, valuesOfKey)
                        return going
                    }
                }
            }
        }

        /// Appends the candidates of the fetched entities to `found`, as they come (forward, a page of values at a
        /// time).
        func appendCandidates(in run: PlanRun, to found: inout [Candidate]) throws {
            let family = run.family
            try forEachReferenceRun(in: run) { references, _ in
                for reference in references where family.contains(reference.entityTag) {
                    found.append(Candidate(key: reference.key, tag: reference.entityTag))
                }
                return true
            }
        }
    }

    /// An OR of terms on different attributes (or a relationship's members): the rows in any of the ranges, each
    /// once, in key order — gathered as they come, then sorted and rid of repeats (no hashing per entry). Prints as
    /// `Union(IndexRange(…), IndexRange(…))`.
    struct Union: GatheringSource {
        let ranges: [IndexRange]

        var description: String { "Union(\(ranges.map(\.description).joined(separator: ", ")))" }

        func gather(in run: PlanRun) throws -> [Candidate] {
            var keys: [Candidate] = []
            for range in ranges { try range.appendCandidates(in: run, to: &keys) }
            return PlanRun.sortedUnique(keys)
        }
    }

    /// An AND of terms on two indexed attributes: the rows in both ranges, in key order — the first (smaller)
    /// range's keys kept, the second's looked up among them. Prints as `Intersection(IndexRange(…), IndexRange(…))`.
    struct Intersection: GatheringSource {
        let ranges: [IndexRange]

        var description: String { "Intersection(\(ranges.map(\.description).joined(separator: ", ")))" }

        func gather(in run: PlanRun) throws -> [Candidate] {
            var first: [UInt64: UInt16] = [:]
            let family = run.family
            try ranges[0].forEachEntry(in: run) { key, tag, _ in
                if family.contains(tag) { first[key] = tag }
                return true
            }
            var keys: [Candidate] = []
            try ranges[1].forEachEntry(in: run) { key, _, _ in
                if let tag = first[key] { keys.append(Candidate(key: key, tag: tag)) }
                return true
            }
            keys.sort { $0.key < $1.key }
            return keys
        }
    }

    /// A comparison through a to-one (`department.name == "R&D"`): a range of the destination's index gives the
    /// destination keys, and the relationship's `toone/…` table the rows pointing at each — destination by
    /// destination, in key order within each. Prints as `Join(IndexRange(…) → Employee.department)`.
    struct Join: PlanSource {
        /// Where the destinations come from: a range of their index, or — with no index on the compared attribute —
        /// a scan of their table, each row checked (chosen when the destination's table is small beside the fetched
        /// one's: `Join(Scan(Section) → Filter(name == "libs") → Package.section)`).
        enum Destinations {
            case range(IndexRange)
            case scan(DestinationScan)
        }

        let destinations: Destinations
        /// The relationship's `toone/…` table.
        let toOneTable: String
        let label: String

        var yieldsKeyOrder: Bool { false }

        var description: String {
            switch destinations {
            case .range(let range): "Join(\(range) → \(label))"
            case .scan(let scan): "Join(\(scan) → \(label))"
            }
        }

        /// The table the destinations' count is taken from (their index, or their rows).
        var destinationTable: String {
            switch destinations {
            case .range(let range): range.table
            case .scan(let scan): scan.rowsTable
            }
        }

        func forEachCandidate(in run: PlanRun, _ body: (Candidate, CursorEntry?) throws -> Bool) throws {
            let toOne = run.state.toOneTable(toOneTable)
            let family = run.family
            func forEachDestination(_ visit: (UInt64) throws -> Bool) throws {
                switch destinations {
                case .range(let range): try range.forEachEntry(in: run) { destination, _, _ in try visit(destination) }
                case .scan(let scan): try scan.forEachMatch(in: run, visit)
                }
            }
            try toOne.withCursor(in: run.transaction) { pointers in
                try forEachDestination { destination in
                    // Every row pointing at this destination.
                    try toOne.forEachPointer(to: destination, on: pointers) { source in
                        family.contains(source.entityTag) ? try body(Candidate(key: source.key, tag: source.entityTag), nil) : true
                    }
                }
            }
        }
    }

    /// The rows of a join's destination entity that match a comparison of one of their attributes, found by reading
    /// every row of its table (no index answers the comparison): for a small destination table, such as a to-one's
    /// lookup entity.
    struct DestinationScan: CustomStringConvertible {
        let entityName: String
        /// The root of the destination's hierarchy, and the table of its rows.
        let root: String
        let rowsTable: String
        /// The comparison, on the destination's attribute.
        let predicate: FetchPredicate
        /// The destination entity's tags (and its sub-entities').
        let family: TagSet

        var description: String { "Scan(\(entityName)) → Filter(\(predicate.predicateFormat))" }

        /// Calls `visit` with the key of each matching destination row until it returns false.
        func forEachMatch(in run: PlanRun, _ visit: (UInt64) throws -> Bool) throws {
            let rows = run.state.rowTable(rowsTable)
            try rows.withCursor(in: run.transaction) { cursor in
                try cursor.forEach { entry in
                    let key = try rows.rowKey(in: entry)
                    let row: EncodedRow
                    do throws(RowDecodingError) {
                        row = try EncodedRow(entry.value, layout: run.store.layout, checkingFields: false)
                    } catch {
                        throw run.store.corruptedRow(key, in: root, error)
                    }
                    guard family.contains(row.entityTag) else { return true }
                    let view = RowView(store: run.store, state: run.state, transaction: run.transaction,
                                       id: run.state.identities.objectID(entityTag: row.entityTag, key: key), row: row)
                    let matched = try predicate.evaluate(with: view)
                    if let failure = view.failure { throw run.store.corruptedRow(key, in: root, failure) }
                    return matched ? try visit(key) : true
                }
            }
        }
    }

    /// `ANY toMany.attr op constant` (`ANY employees.salary > 100`): a range of the destination's index gives the
    /// destinations, and each destination's owners come from the inverse's link table (many-to-many) or from the
    /// destination row's inverse to-one field (one-to-many); the owners are then sorted and each kept once. Owners
    /// without a matching destination are never met. Prints as `AnyJoin(IndexRange(…) → Department.employees)`.
    struct ToManyJoin: GatheringSource {
        enum Owners {
            /// `link/<Destination>/<inverse>`: a prefix of destination key, values of owner key + tag.
            case link(table: String)
            /// The inverse to-one, read from each destination row of this root table.
            case toOneField(name: String, rows: String)
        }
        let destination: IndexRange
        let owners: Owners
        let label: String

        var description: String { "AnyJoin(\(destination) → \(label))" }

        func gather(in run: PlanRun) throws -> [Candidate] {
            PlanRun.sortedUnique(try owners(in: run))
        }

        /// The owners of the destinations that are of the fetched entities, as they come (a row may come once per
        /// destination it holds).
        private func owners(in run: PlanRun) throws -> [Candidate] {
            let store = run.store, family = run.family
            var owners: [Candidate] = []
            try destination.forEachEntry(in: run) { destinationKey, _, _ in
                switch self.owners {
                case .link(let name):
                    // The inverse's members of this destination: its owners, with their entity tags.
                    try run.state.indexTable(name).forEachEntry(in: [.prefix(LMDBIncrementalStore.keyBytes(destinationKey))], in: run.transaction) { owner, _ in
                        if family.contains(owner.entityTag) { owners.append(Candidate(key: owner.key, tag: owner.entityTag)) }
                        return true
                    }
                case .toOneField(let name, let rowsName):
                    let naming = "with key \(destinationKey) in \(rowsName)"
                    guard let row = try store.encodedRow(key: destinationKey, in: run.state.rowTable(rowsName),
                                                         transaction: run.transaction, naming: naming),
                          let field = row.entity.fieldIndex[name] else { return true }
                    do {
                        if case .reference(let owner)? = try row.field(field), family.contains(owner.entityTag) {
                            owners.append(Candidate(key: owner.key, tag: owner.entityTag))
                        }
                    } catch let error as RowDecodingError {
                        throw ManagedObjectContextError(.storeUnusable, message: "the row \(naming) cannot be read: \(error.reason); the store file is corrupted")
                    }
                }
                return true
            }
            return owners
        }
    }

    /// Every row of the entity's root table, in key order; rows of entities not fetched are passed over by the tag
    /// in their header. Prints as `Scan(Employee)`.
    struct Scan: PlanSource {
        let entityName: String

        var yieldsKeyOrder: Bool { true }
        var readsRows: Bool { true }

        var description: String { "Scan(\(entityName))" }
        var scan: QueryPlan.Scan? { self }

        func forEachCandidate(in run: PlanRun, _ body: (Candidate, CursorEntry?) throws -> Bool) throws {
            try forEachCandidate(in: run, keys: .all, transaction: run.transaction, body)
        }

        /// The candidates whose row keys lie in `keys`, read in `transaction`: the run's, or for a part of a scan
        /// read on several threads, a read of the same commit (``PlanRun/scannedInParallel(_:)``).
        @inline(__always)
        func forEachCandidate(in run: PlanRun, keys: KeyRange, transaction: any KeyValueTransaction,
                              _ body: (Candidate, CursorEntry?) throws -> Bool) throws {
            let rows = run.rows, family = run.family
            try rows.withCursor(in: transaction) { cursor in
                try cursor.forEach(in: keys) { entry in
                    let key = try rows.rowKey(in: entry)
                    let tag = try run.tag(of: entry.value, key: key)
                    guard family.contains(tag) else { return true }
                    return try body(Candidate(key: key, tag: tag), entry)
                }
            }
        }
    }

    /// Nothing: the predicate is false whatever the row (`FALSEPREDICATE`, `x AND FALSEPREDICATE`). Prints as
    /// `Empty(Employee)`.
    struct Empty: GatheringSource {
        let entityName: String

        var description: String { "Empty(\(entityName))" }

        func gather(in run: PlanRun) throws -> [Candidate] { [] }
    }
}
