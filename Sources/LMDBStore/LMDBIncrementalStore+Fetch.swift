import Foundation
import LMDB
import ObjectGraph

extension LMDBIncrementalStore {
    /// How the store would run `request`, as text: `IndexRange(Employee.byAge [30, 40)) → Filter(…) → Limit(20)`
    /// or `Scan(Employee) → Filter(…)`. The plan is chosen with the store's current contents, as a fetch would.
    public func explain(_ request: FetchRequest) -> String {
        guard let state = try? open,
              let text = try? state.environment.read({ transaction in plan(request, state: state, transaction: transaction).description })
        else { return QueryPlanner.plan(request, layout: layout, model: model).description }
        return text
    }

    /// The ``QueryPlanner``'s plan for `request`, costed with bounded probes of the candidate ranges and LMDB's
    /// table sizes, read in `transaction`. The candidate paths of a request shape are worked out once and kept
    /// (up to 512 shapes; not for predicates holding objects); the costs, which follow the data, are worked out
    /// every time.
    func plan(_ request: FetchRequest, state: OpenState, transaction: Transaction) -> QueryPlan {
        let shape = PlanShape(entityName: request.entityName, includesSubentities: request.includesSubentities,
                              predicate: request.predicate, sort: request.sortDescriptors)
        var analysis = lock.withLock { () -> QueryPlanner.Analysis? in
            let cached = planShapes[shape]
            if cached != nil { planShapeHits += 1 }
            return cached
        }
        if analysis == nil, let fresh = QueryPlanner.analyze(request, layout: layout, model: model, storeIdentifier: state.storeIdentifier) {
            analysis = fresh
            if QueryPlanner.isCacheable(request.predicate) { lock.withLock {
                if planShapes.count >= 512 { planShapes.removeAll(keepingCapacity: true) }
                planShapes[shape] = fresh
            } }
        }
        let statistics = PlanStatistics(
            entries: { name in (try? self.database(name, in: state).statistics(in: transaction).entries) ?? 0 },
            probe: { index, limit in (try? self.countEntries(in: index, upTo: limit, state: state, transaction: transaction)) ?? 0 })
        return QueryPlanner.plan(request, layout: layout, model: model, statistics: statistics, analysis: analysis)
    }

    /// A fetch, in one read transaction, following the ``QueryPlanner``'s plan: rows from key lookups, index
    /// ranges (one, a union or an intersection), a join or a scan, each still checked against the whole predicate;
    /// then sorted (unless the path already gives the order, when the walk stops after offset + limit matches)
    /// and windowed. Counts and object IDs come from index entries alone when the ranges answer the predicate.
    func fetch(_ request: FetchRequest) throws -> PersistentStoreResult {
        try request.validate(for: model)
        let state = try open
        guard let entity = layout.entity(request.entityName) else {
            throw ManagedObjectContextError(.unknownName, message: "the model has no entity named \"\(request.entityName)\"")
        }
        let family = Set((request.includesSubentities ? model.entityAndDescendants(of: request.entityName) : [request.entityName])
            .compactMap { layout.entity($0)?.tag })
        return try state.environment.read { transaction -> PersistentStoreResult in
            let plan = plan(request, state: state, transaction: transaction)
            if request.resultType == .count, let elements = plan.entryElements, case .index(let index) = plan.access, let predicate = request.predicate {
                // Every value the predicate reads is in the index keys: count the entries that match, read no row
                // (unless a key cannot tell).
                var count = 0
                try forEachRow(in: index, state: state, transaction: transaction) { key, tag, entry in
                    if family.contains(tag),
                       try entryOrRowMatches(entry, key: key, tag: tag, elements: elements, predicate: predicate, root: entity.root,
                                             state: state, transaction: transaction) {
                        count += 1
                    }
                    return true
                }
                return .count(request.window(0..<count).count)
            }
            if request.resultType == .count, plan.coveredByIndex {
                // Every term is answered by the index ranges: count their entries, read no row.
                var count = 0
                if case .index(let index) = plan.access {
                    count = try countEntries(in: index, state: state, transaction: transaction)
                } else {
                    count = try rowKeys(plan.access, family: family, state: state, transaction: transaction).count
                }
                return .count(request.window(0..<count).count)
            }
            if case .scan = plan.access, request.predicate == nil, request.sortDescriptors.isEmpty,
               request.resultType == .count || request.resultType == .managedObjectID || request.resultType == .managedObject {
                // Every row of the entities matches: keys and entity tags from the row table, no row decoded (each
                // row's checksum is checked when its object loads) — or, for loaded objects, the rows of the window
                // decoded once each as the walk passes them.
                if request.resultType == .managedObject && !request.returnsObjectsAsFaults {
                    let offset = max(0, request.fetchOffset)
                    let nodes = try scannedRows(of: entity, family: family, upTo: request.windowEnd, state: state, transaction: transaction) {
                        position, key, tag, bytes throws(RowDecodingError) -> IncrementalStoreNode? in
                        guard position >= offset else { return nil }
                        return try node(objectID(entityTag: tag, key: key, in: state), EncodedRow(bytes, layout: layout, checkingFields: false), in: state)
                    }
                    return .nodes(nodes)
                }
                let keys = try scannedRows(of: entity, family: family, upTo: request.windowEnd, state: state, transaction: transaction) {
                    _, key, tag, _ in (key: key, tag: tag)
                }
                if request.resultType == .count { return .count(request.window(0..<keys.count).count) }
                return .objectIDs(request.window(keys).map { objectID(entityTag: $0.tag, key: $0.key, in: state) })
            }
            if plan.coveredByIndex || plan.entryElements != nil,
               request.resultType == .managedObjectID || request.resultType == .managedObject,
               request.sortDescriptors.isEmpty || (plan.streamsInSortOrder && !plan.resortsLongKeys) {
                // The index entries answer the whole predicate: object IDs straight from them, no row read (then,
                // for loaded objects, the rows of the window only, each read and decoded once).
                var ids: [(key: UInt64, tag: UInt16)] = []
                if case .index(let index) = plan.access {
                    let residual = plan.entryElements.flatMap { elements in request.predicate.map { (elements, $0) } }
                    func keep(_ key: UInt64, _ tag: UInt16, _ entry: CursorEntry) throws -> Bool {
                        guard family.contains(tag) else { return false }
                        guard let (elements, predicate) = residual else { return true }
                        return try entryOrRowMatches(entry, key: key, tag: tag, elements: elements, predicate: predicate, root: entity.root,
                                                     state: state, transaction: transaction)
                    }
                    // Entries of one value come in row-key order already: sorted only when the walk crossed values.
                    var inKeyOrder = true
                    if plan.direction == .forward && !plan.resortsLongKeys {
                        // No runs to put in order: the entries go straight into the list. The walk stops once the
                        // window is full when the entries come in the order asked for: the sort's, streamed, or —
                        // with no sort — row-key order, which one key's entries are in.
                        let ordered = plan.streamsInSortOrder || (request.sortDescriptors.isEmpty && index.holdsOneKey)
                        let wanted = ordered ? request.windowEnd ?? Int.max : Int.max
                        try forEachRow(in: index, state: state, transaction: transaction) { key, tag, entry in
                            if try keep(key, tag, entry) {
                                if let last = ids.last, last.key > key { inKeyOrder = false }
                                ids.append((key, tag))
                            }
                            return ids.count < wanted
                        }
                    } else {
                        ids = try collectInIndexOrder(index, plan: plan, request: request, state: state, transaction: transaction) { key, tag, entry in
                            try keep(key, tag, entry) ? (key, tag) : nil
                        }
                        inKeyOrder = false
                    }
                    if !plan.streamsInSortOrder && !inKeyOrder { ids.sort { $0.key < $1.key } }
                } else {
                    ids = try rowKeys(plan.access, family: family, state: state, transaction: transaction)
                }
                if request.resultType == .managedObject && !request.returnsObjectsAsFaults {
                    return .nodes(try loadedNodes(request.window(ids), entity: entity, state: state, transaction: transaction))
                }
                return .objectIDs(request.window(ids).map { objectID(entityTag: $0.tag, key: $0.key, in: state) })
            }
            if case .keys(let objectIDs) = plan.access, plan.predicate == nil, request.sortDescriptors.isEmpty,
               request.resultType == .count || request.resultType == .managedObjectID
                || (request.resultType == .managedObject && request.returnsObjectsAsFaults) {
                // `SELF IN objects` and nothing else: which of them are rows of the fetched entities, told by each
                // row's entity tag, as a fetch of every ID tells them (a value damaged elsewhere in a row is found
                // when its object loads).
                let found = try lookedUp(objectIDs, in: entity, family: family, state: state, transaction: transaction)
                return request.resultType == .count ? .count(request.window(found).count) : .objectIDs(Array(request.window(found)))
            }
            let matches = try matchingRows(request, plan: plan, entity: entity, family: family, state: state, transaction: transaction)
            return try .fetched(request.window(matches), for: request, id: \.id, node: { view in
                do {
                    return try node(view.id, view.row, in: state)
                } catch let error as RowDecodingError {
                    throw corruptedRow(view.key, in: entity.root, error)
                }
            })
        }
    }

    /// Those of `objectIDs` (in ID order) that are rows of the entities tagged `family` in `entity`'s table, in
    /// row-key order (as any result without a sort): each row found by one cursor, and only its entity tag read. An
    /// ID naming another entity of the table than its row's is no object; a tag no entity of the table has is damage,
    /// an error naming the row.
    func lookedUp(_ objectIDs: [ManagedObjectID], in entity: StoreLayout.EntityLayout, family: Set<UInt16>, state: OpenState,
                  transaction: Transaction) throws -> [ManagedObjectID] {
        let rows = state.rows(of: entity)
        let inTable = layout.tags(sharingTableOf: entity)
        var found: [(key: Int64, id: ManagedObjectID)] = []
        found.reserveCapacity(objectIDs.count)
        var lookup = KeyLookup(state: state, family: family)
        try rows.withCursor(in: transaction) { cursor in
            for id in objectIDs {
                guard let key = lookup.key(of: id),
                      let entry = try withUnsafeBytes(of: UInt64(key).bigEndian, { try cursor.seek(exactly: $0) }) else { continue }
                guard let rowTag = RowCodec.entityTag(entry.value), inTable.contains(rowTag) else {
                    throw corruptedRow(key, in: entity.root, RowDecodingError(reason: "the row's header names no entity of this table"))
                }
                if rowTag == lookup.tag { found.append((key, id)) }
            }
        }
        // IDs of several entities of the table come entity by entity: their keys interleave.
        if zip(found, found.dropFirst()).contains(where: { $0.key > $1.key }) { found.sort { $0.key < $1.key } }
        return found.map(\.id)
    }

    /// The IDs of a key lookup, one at a time: the row key of each ID of this store and of the fetched entities
    /// (every entity for a `nil` family), the ID's entity found when its namespace changes (a lookup's IDs come
    /// grouped by entity), not per ID.
    struct KeyLookup {
        let state: OpenState
        let family: Set<UInt16>?
        private var namespace: ObjectIdentifier?
        private var wanted = false
        /// The entity of the last ID asked about (`nil` for an ID of another store or an unknown entity).
        private(set) var entity: StoreLayout.EntityLayout?
        /// The entity tag of the last ID asked about.
        var tag: UInt16 { entity?.tag ?? 0 }

        init(state: OpenState, family: Set<UInt16>?) {
            self.state = state
            self.family = family
        }

        /// The row key of `id`, or `nil` when the fetch has no row for it (another store or entity, a string key).
        mutating func key(of id: ManagedObjectID) -> Int64? {
            if id.namespaceIdentity != namespace {
                namespace = id.namespaceIdentity
                entity = id.storeIdentifier == state.storeIdentifier ? state.entity(of: id) : nil
                wanted = entity.map { family?.contains($0.tag) ?? true } ?? false
            }
            guard wanted, case .integer(let key) = id.referenceObject, key > 0 else { return nil }
            return key
        }
    }

    /// The error a row that cannot be decoded gives: the store file is corrupted there.
    func corruptedRow(_ key: some BinaryInteger, in root: String, _ error: RowDecodingError) -> ManagedObjectContextError {
        ManagedObjectContextError(.storeUnusable, message: "the row with key \(key) in \(root)'s table cannot be read: \(error.reason); the store file is corrupted")
    }

    /// What `take` makes of the entries of `index`, walked in the plan's direction, in the plan's order. Entries
    /// come in runs — of equal keys, or, where text streams in sort order, of keys sharing the prefix a value too
    /// long for a key is cut to (such values follow one another by digest, so `resort` puts the run in value
    /// order). Walking backwards, a run comes in descending key order and is reversed first, so ties stay in key
    /// order. With the order streamed, the walk stops once offset + limit items are taken — between runs, where runs
    /// matter.
    func collectInIndexOrder<Item>(_ index: QueryPlan.IndexRange, plan: QueryPlan, request: FetchRequest, state: OpenState,
                                   transaction: Transaction, resort: ([Item]) -> [Item] = { $0 },
                                   _ take: (_ key: UInt64, _ tag: UInt16, _ entry: CursorEntry) throws -> Item?) throws -> [Item] {
        let wanted = plan.streamsInSortOrder ? request.windowEnd ?? Int.max : Int.max
        let reverse = plan.direction == .reverse
        let cutPrefix = plan.resortsLongKeys ? IndexEntries.cutElementPrefix : Int.max
        let byRun = reverse || plan.resortsLongKeys
        var items: [Item] = []
        var run: [UInt8] = []
        var runStart = 0
        func closeRun() {
            if reverse { items[runStart...].reverse() }
            if run.count >= cutPrefix, items.count - runStart > 1 { items.replaceSubrange(runStart..., with: resort(Array(items[runStart...]))) }
            runStart = items.count
        }
        try forEachRow(in: index, direction: plan.direction, state: state, transaction: transaction) { key, tag, entry in
            if byRun {
                let runKey = entry.key.prefix(cutPrefix)
                if !run.elementsEqual(runKey) {
                    closeRun()
                    if items.count >= wanted { return false }
                    run = Array(runKey)
                }
            }
            if let item = try take(key, tag, entry) { items.append(item) }
            return byRun || items.count < wanted
        }
        if byRun { closeRun() }
        return items
    }

    /// The entries of `index`'s ranges, counted up to `limit` — a step per distinct value, LMDB counting each
    /// value's rows.
    func countEntries(in index: QueryPlan.IndexRange, upTo limit: Int = .max, state: OpenState, transaction: Transaction) throws -> Int {
        var count = 0
        try database(index.database, in: state).withCursor(in: transaction) { cursor in
            for range in index.ranges where count < limit { count += try cursor.count(in: range, upTo: limit - count) }
        }
        return count
    }

    /// Whether an entry's row matches `predicate`, decided from the entry's key alone (`elements` read back in
    /// order); `nil` when the key cannot decide it and the row must: an element that does not decode (cut to fit the
    /// key), non-ASCII text (the key holds it precomposed, the row as written, and some operators can tell them
    /// apart), or a predicate that fails to evaluate (the row's check then reports it).
    func entryMatches(_ key: UnsafeRawBufferPointer, elements: [QueryPlan.EntryElement], predicate: FetchPredicate) -> Bool? {
        guard let values = entryValues(key, elements: elements) else { return nil }
        return try? predicate.evaluate(with: values)
    }

    /// The values `elements` read back from an index key, by name; `nil` when one does not decode (cut to fit the
    /// key) or is non-ASCII text (held precomposed in the key, as written in the row).
    func entryValues(_ key: UnsafeRawBufferPointer, elements: [QueryPlan.EntryElement]) -> [String: PredicateValue]? {
        var values: [String: PredicateValue] = [:]
        var offset = 0
        for element in elements {
            guard let (value, end) = TupleEncoding.decodeElement(key, at: offset, as: element.type, inverted: element.inverted) else { return nil }
            if case .string(let text)? = value, !text.utf8.allSatisfy({ $0 < 0x80 }) { return nil }
            values[element.name] = value.map(PredicateValue.init) ?? .null
            offset = end
        }
        return values
    }

    /// Whether the row of an index entry matches, from the entry when it can tell (``entryMatches(_:elements:predicate:)``),
    /// else from the row.
    func entryOrRowMatches(_ entry: CursorEntry, key: UInt64, tag: UInt16, elements: [QueryPlan.EntryElement], predicate: FetchPredicate,
                           root: String, state: OpenState, transaction: Transaction) throws -> Bool {
        if let decided = entryMatches(entry.key, elements: elements, predicate: predicate) { return decided }
        let rows = database(StoreLayout.rowsDatabase(root: root), in: state)
        guard let row = try encodedRow(key: key, in: rows, transaction: transaction, naming: "with key \(key) in \(root)'s table") else { return false }
        let view = RowView(store: self, state: state, transaction: transaction, id: objectID(entityTag: tag, key: key, in: state), row: row)
        let matched = try predicate.evaluate(with: view)
        if let failure = view.failure { throw corruptedRow(key, in: root, failure) }
        return matched
    }

    /// Calls `body` with the row key, entity tag and entry of each entry of `index` (its ranges in turn, each walked
    /// `direction`) until it returns false.
    func forEachRow(in index: QueryPlan.IndexRange, direction: ScanDirection = .forward, state: OpenState, transaction: Transaction,
                    _ body: (_ key: UInt64, _ tag: UInt16, _ entry: CursorEntry) throws -> Bool) throws {
        let table = database(index.database, in: state)
        try table.withCursor(in: transaction) { cursor in
            var going = true
            for range in direction == .forward ? index.ranges : index.ranges.reversed() where going {
                try cursor.forEach(in: range, direction: direction) { entry in
                    // Each value: the row key, then its entity tag.
                    let row = try table.reference(in: entry)
                    going = try body(row.key, row.entityTag, entry)
                    return going
                }
            }
        }
    }

    /// The rows of the fetched entities (`family`) a union or an intersection of index ranges yields, each once, in
    /// key order — from the index entries alone.
    func rowKeys(_ access: QueryPlan.Access, family: Set<UInt16>, state: OpenState, transaction: Transaction) throws -> [(key: UInt64, tag: UInt16)] {
        var found: [UInt64: UInt16] = [:]
        var keys: [(key: UInt64, tag: UInt16)] = []
        let wanted = layout.tags(of: family)
        switch access {
        case .union(let indexes):
            // Gathered as they come, then sorted and rid of repeats (a row in two of the ranges): no hashing per entry.
            for index in indexes {
                try forEachRow(in: index, state: state, transaction: transaction) { key, tag, _ in
                    if wanted.contains(tag) { keys.append((key, tag)) }
                    return true
                }
            }
            return Self.sortedUnique(keys)
        case .intersection(let indexes):
            // The first range is the smaller: its keys are kept, the second's looked up among them.
            try forEachRow(in: indexes[0], state: state, transaction: transaction) { key, tag, _ in
                if wanted.contains(tag) { found[key] = tag }
                return true
            }
            try forEachRow(in: indexes[1], state: state, transaction: transaction) { key, _, _ in
                if let tag = found[key] { keys.append((key, tag)) }
                return true
            }
        case .toManyJoin(let join):
            try forEachRow(in: join.destination, state: state, transaction: transaction) { destinationKey, _, _ in
                switch join.owners {
                case .link(let name):
                    // The inverse's members of this destination: its owners, with their entity tags.
                    let links = database(name, in: state)
                    try links.withCursor(in: transaction) { cursor in
                        try cursor.forEach(in: KeyRange.prefix(Self.keyBytes(destinationKey))) { entry in
                            let owner = try links.reference(in: entry)
                            if wanted.contains(owner.entityTag) { keys.append((owner.key, owner.entityTag)) }
                            return true
                        }
                    }
                case .toOneField(let name, let rowsName):
                    let naming = "with key \(destinationKey) in \(rowsName)"
                    guard let row = try encodedRow(key: destinationKey, in: database(rowsName, in: state), transaction: transaction, naming: naming),
                          let field = row.entity.fieldIndex[name] else { return true }
                    do {
                        if case .reference(let owner)? = try row.field(field), wanted.contains(owner.entityTag) { keys.append((owner.key, owner.entityTag)) }
                    } catch let error as RowDecodingError {
                        throw ManagedObjectContextError(.storeUnusable, message: "the row \(naming) cannot be read: \(error.reason); the store file is corrupted")
                    }
                }
                return true
            }
            return Self.sortedUnique(keys)
        case .scan, .keys, .index, .join, .empty:
            preconditionFailure("row keys are gathered for unions, intersections and to-many joins only")
        }
        keys.sort { $0.key < $1.key }
        return keys
    }

    /// `keys` in key order, each key once.
    static func sortedUnique(_ keys: [(key: UInt64, tag: UInt16)]) -> [(key: UInt64, tag: UInt16)] {
        var keys = keys
        keys.sort { $0.key < $1.key }
        var unique: [(key: UInt64, tag: UInt16)] = []
        unique.reserveCapacity(keys.count)
        for entry in keys where entry.key != unique.last?.key { unique.append(entry) }
        return unique
    }

    /// The nodes of the rows under `keys` in `entity`'s table, in that order: each row read once, its checksum checked
    /// and every field decoded (a key whose row is gone is left out).
    func loadedNodes(_ keys: some Collection<(key: UInt64, tag: UInt16)>, entity: StoreLayout.EntityLayout, state: OpenState,
                     transaction: Transaction) throws -> [IncrementalStoreNode] {
        let rows = state.rows(of: entity)
        var nodes: [IncrementalStoreNode] = []
        nodes.reserveCapacity(keys.count)
        for (key, tag) in keys {
            guard let bytes = try withUnsafeBytes(of: key.bigEndian, { try rows.borrowedValue(forKey: $0, in: transaction) }) else { continue }
            do throws(RowDecodingError) {
                nodes.append(try node(objectID(entityTag: tag, key: key, in: state), EncodedRow(bytes, layout: layout, checkingFields: false), in: state))
            } catch {
                throw corruptedRow(key, in: entity.root, error)
            }
        }
        return nodes
    }

    /// What `take` makes of the rows of `entity`'s table whose tag is in `family`, in key order, up to `limit` of
    /// them (`take` is told each row's position among those, its key, tag and bytes; `nil` skips the row but counts
    /// it). Only the header's tag is read before `take`; a tag no entity of the table has is an error naming the row.
    func scannedRows<Item>(of entity: StoreLayout.EntityLayout, family: Set<UInt16>, upTo limit: Int?, state: OpenState,
                           transaction: Transaction,
                           _ take: (_ position: Int, _ key: UInt64, _ tag: UInt16, _ bytes: UnsafeRawBufferPointer) throws(RowDecodingError) -> Item?) throws -> [Item] {
        let rows = state.rows(of: entity)
        // Per tag (tags are 1…n): whether a row of this table may carry it — any other is damage, which must not pass
        // as "another entity's row" — and whether the fetch wants its rows. Looked up per row without hashing.
        let inTable = layout.tags(sharingTableOf: entity), wantedTags = layout.tags(of: family)
        var items: [Item] = []
        var position = 0
        let wanted = limit ?? Int.max
        guard wanted > 0 else { return [] }
        try rows.withCursor(in: transaction) { cursor in
            try cursor.forEach { entry in
                let key = try rows.rowKey(in: entry)
                guard let tag = RowCodec.entityTag(entry.value) else {
                    throw corruptedRow(key, in: entity.root, RowDecodingError(reason: "the row is \(entry.value.count) bytes, shorter than a row header"))
                }
                guard inTable.contains(tag) else {
                    throw corruptedRow(key, in: entity.root, RowDecodingError(reason: "the row names the entity tag \(tag), which no entity of this table has"))
                }
                guard wantedTags.contains(tag) else { return true }
                do throws(RowDecodingError) {
                    if let item = try take(position, key, tag, entry.value) { items.append(item) }
                } catch {
                    throw corruptedRow(key, in: entity.root, error)
                }
                position += 1
                return position < wanted
            }
        }
        return items
    }

    /// The rows `request` matches, through `plan`: read by key, from index ranges or a join (each row still checked
    /// against the whole predicate) or by a scan of the root table; then sorted (unless the path gives the order,
    /// when the walk stops after offset + limit matches; with a limit, top-K). Not windowed. The views borrow the
    /// rows from the map: they must not outlive `transaction`.
    func matchingRows(_ request: FetchRequest, plan: QueryPlan, entity: StoreLayout.EntityLayout, family: Set<UInt16>,
                      state: OpenState, transaction: Transaction) throws -> [RowView] {
        let rows = database(StoreLayout.rowsDatabase(root: entity.root), in: state)
        var matches: [RowView] = []
        let wanted = plan.streamsInSortOrder ? request.windowEnd ?? Int.max : Int.max
        // What each row is checked against: the whole predicate (a key lookup may have answered all of it). Its
        // simple comparisons are first tried on the row's bytes; the evaluator decides only what they leave open.
        let predicate: FetchPredicate?
        if case .keys = plan.access { predicate = plan.predicate } else { predicate = request.predicate }
        let filter = predicate.flatMap { RowFilter($0, entity: request.entityName, model: model, layout: layout) }
        /// The row's view if it matches; a field that cannot be decoded stops the fetch with the row's key. (Thrown
        /// at once rather than recorded: a flag the loops would test per row, captured by this function, costs a
        /// runtime exclusivity check per row.)
        func consider(_ row: EncodedRow, key: UInt64, id: @autoclosure () -> ManagedObjectID) throws -> RowView? {
            let settled = filter?.matches(row)
            if settled == false { return nil }
            let view = RowView(store: self, state: state, transaction: transaction, id: id(), row: row)
            let matched = try settled ?? predicate?.evaluate(with: view) ?? true
            if let failure = view.failure { throw corruptedRow(key, in: entity.root, failure) }
            return matched ? view : nil
        }
        /// Reads and considers the row under `key`.
        func consider(key: UInt64, tag: UInt16) throws -> RowView? {
            guard let row = try encodedRow(key: key, in: rows, transaction: transaction, naming: "with key \(key) in \(entity.root)'s table",
                                           checkingFields: false)
            else { return nil }
            return try consider(row, key: key, id: objectID(entityTag: tag, key: key, in: state))
        }
        switch plan.access {
        case .keys(let objectIDs):
            // Primary-key lookups: only IDs of this store, of the fetched entities, with integer keys. The planner
            // orders them by key, so one cursor moves forward through the table and most lookups search only the
            // leaf page of the one before; an ID's entity is looked up when the namespace changes, not per ID.
            var lookup = KeyLookup(state: state, family: family)
            try rows.withCursor(in: transaction) { cursor in
                for id in objectIDs {
                    guard let key = lookup.key(of: id), let row = try encodedRow(key: UInt64(key), cursor: cursor, naming: "of \(id)") else { continue }
                    // An ID naming a sub-entity with the key of another entity's row is no object.
                    guard row.entityTag == lookup.tag else { continue }
                    if let view = try consider(row, key: UInt64(key), id: id) { matches.append(view) }
                }
            }
        case .index(let index) where !plan.streamsInSortOrder:
            // The rows are sorted afterwards, so the order they are read in does not matter: the candidates' keys are
            // gathered from the index, sorted, and their rows read with one cursor moving forward — most lookups then
            // land on the leaf page of the one before, where LMDB searches that page without descending from the root.
            var candidates: [(key: UInt64, tag: UInt16)] = []
            let wantedTags = layout.tags(of: family)
            try forEachRow(in: index, direction: plan.direction, state: state, transaction: transaction) { key, tag, entry in
                guard wantedTags.contains(tag) else { return true }
                if let elements = plan.entryElements, let predicate = request.predicate,
                   entryMatches(entry.key, elements: elements, predicate: predicate) == false {
                    return true
                }
                candidates.append((key, tag))
                return true
            }
            candidates.sort { $0.key < $1.key }
            try rows.withCursor(in: transaction) { cursor in
                for (key, tag) in candidates {
                    guard let row = try encodedRow(key: key, cursor: cursor, naming: "with key \(key) in \(entity.root)'s table") else { continue }
                    if let view = try consider(row, key: key, id: objectID(entityTag: tag, key: key, in: state)) { matches.append(view) }
                }
            }
        case .index(let index):
            matches = try collectInIndexOrder(index, plan: plan, request: request, state: state, transaction: transaction,
                                              resort: { FetchSortDescriptor.sorted($0, using: request.sortDescriptors) }) { key, tag, entry in
                guard family.contains(tag) else { return nil }
                // An entry whose key already shows the row does not match is passed over without reading the row.
                if let elements = plan.entryElements, let predicate = request.predicate,
                   entryMatches(entry.key, elements: elements, predicate: predicate) == false {
                    return nil
                }
                return try consider(key: key, tag: tag)
            }
        case .union, .intersection, .toManyJoin:
            for (key, tag) in try rowKeys(plan.access, family: family, state: state, transaction: transaction)
            where matches.count < wanted {
                if let view = try consider(key: key, tag: tag) { matches.append(view) }
            }
        case .join(let join):
            // Each destination in the range, then every row pointing at it (a prefix of the to-one table).
            let toOne = database(join.toOneDatabase, in: state)
            try toOne.withCursor(in: transaction) { pointers in
                try forEachRow(in: join.destination, state: state, transaction: transaction) { destination, _, _ in
                    // The rows pointing at this destination: the values of its key in the to-one table.
                    let key = Self.keyBytes(destination)
                    try pointers.forEach(in: KeyRange(lower: .inclusive(key), upper: .inclusive(key))) { entry in
                        let source = try toOne.reference(in: entry)
                        guard family.contains(source.entityTag) else { return true }
                        if let view = try consider(key: source.key, tag: source.entityTag) { matches.append(view) }
                        return true
                    }
                    return true
                }
            }
        case .empty:
            break
        case .scan:
            let wantedTags = layout.tags(of: family)
            try rows.withCursor(in: transaction) { cursor in
                try cursor.forEach { entry in
                    let key = try rows.rowKey(in: entry)
                    guard let tag = RowCodec.entityTag(entry.value) else {
                        throw corruptedRow(key, in: entity.root, RowDecodingError(reason: "the row is \(entry.value.count) bytes, shorter than a row header"))
                    }
                    guard wantedTags.contains(tag) else { return true }
                    do {
                        // The cursor's bytes stay in the map until the read transaction ends. The checksum is checked
                        // here; each field's extent as the filter or the evaluator walks to it.
                        if let view = try consider(try EncodedRow(entry.value, layout: layout, checkingFields: false), key: key,
                                                   id: objectID(entityTag: tag, key: key, in: state)) {
                            matches.append(view)
                        }
                    } catch let error as RowDecodingError {
                        throw corruptedRow(key, in: entity.root, error)
                    }
                    return matches.count < wanted
                }
            }
        }
        switch plan.access {
        case .index, .join, .keys:
            // Index order is (value, key); results without a usable order come in key order, as a scan gives them.
            if !plan.streamsInSortOrder { matches.sort { $0.key < $1.key } }
        case .union, .intersection, .toManyJoin, .scan, .empty:
            break
        }
        if !request.sortDescriptors.isEmpty && !plan.streamsInSortOrder {
            // With a limit only the first offset + limit matter: a bounded heap finds them (top-K).
            let sorted = FetchSortDescriptor.sorted(matches, using: request.sortDescriptors, prefix: request.windowEnd)
            // A sort value that could not be decoded (in any row, kept or not) is a corrupted store, not a NULL.
            if let failed = matches.first(where: { $0.failure != nil }), let failure = failed.failure {
                throw corruptedRow(failed.key, in: entity.root, failure)
            }
            matches = sorted
        }
        return matches
    }
}

/// A stored row as a predicate sees it, within one read transaction: each attribute decoded when it is asked for,
/// relationships as the related rows (read when a key path reaches them). A value that cannot be decoded reads as
/// NULL and is kept in ``failure``, which the fetch turns into an error.
final class RowView: KeyValueReadable, Hashable {
    let store: LMDBIncrementalStore
    let state: LMDBIncrementalStore.OpenState
    let transaction: Transaction
    let id: ManagedObjectID
    let row: EncodedRow
    private(set) var failure: RowDecodingError?

    init(store: LMDBIncrementalStore, state: LMDBIncrementalStore.OpenState, transaction: Transaction, id: ManagedObjectID, row: EncodedRow) {
        self.store = store
        self.state = state
        self.transaction = transaction
        self.id = id
        self.row = row
    }

    func predicateValue(forKey key: String) -> PredicateValue {
        if let field = row.entity.fieldIndex[key] {
            do {
                switch try row.field(field) {
                case .attribute(let value)?: return PredicateValue(value)
                case .reference(let reference)?: return view(reference).map { .object(PredicateObject($0)) } ?? .null
                case nil: return .null
                }
            } catch {
                failure = failure ?? error
                return .null
            }
        }
        guard let relationship = store.model.relationship(named: key, in: id.entityName), relationship.isToMany else { return .null }
        guard case .integer(let ownerKey) = id.referenceObject,
              let references = try? store.relatedKeys(relationship, of: id, key: UInt64(ownerKey), state: state, transaction: transaction)
        else { return .array([]) }
        return .array(references.compactMap { view($0) }.map { .object(PredicateObject($0)) })
    }

    /// A field's value for a dictionary result: attributes as values, a to-one as the target's object ID (its row
    /// is not read).
    func resultValue(forKey key: String) -> PredicateValue {
        guard let field = row.entity.fieldIndex[key] else { return .null }
        do {
            switch try row.field(field) {
            case .attribute(let value)?: return PredicateValue(value)
            case .reference(let reference)?:
                return .object(PredicateObject(store.objectID(entityTag: reference.entityTag, key: reference.key, in: state)))
            case nil: return .null
            }
        } catch {
            failure = failure ?? error
            return .null
        }
    }

    private func view(_ reference: StoredRow.Reference) -> RowView? {
        let targetID = store.objectID(entityTag: reference.entityTag, key: reference.key, in: state)
        guard let row = try? store.encodedRow(targetID, state: state, transaction: transaction) else { return nil }
        return RowView(store: store, state: state, transaction: transaction, id: targetID, row: row)
    }

    var predicateIdentity: AnyHashable? { id }

    /// The row key (keys are unique within a root table, across its sub-entities).
    var key: Int64 {
        if case .integer(let value) = id.referenceObject { value } else { 0 }
    }

    static func == (lhs: RowView, rhs: RowView) -> Bool { lhs.id == rhs.id }
    func hash(into hasher: inout Hasher) { hasher.combine(id) }
}
