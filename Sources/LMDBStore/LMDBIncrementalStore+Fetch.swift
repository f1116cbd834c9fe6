import Foundation
import LMDB
import ObjectGraph

extension LMDBIncrementalStore {
    /// How the store would run `request`, as text: `IndexRange(Employee.byAge [30, 40)) → Filter(…) → Limit(20)`
    /// or `Scan(Employee) → Filter(…)`. The plan is chosen with the store's current contents, as a fetch would.
    ///
    /// A dictionary fetch prints the plan of the rows it reads followed by its ``QueryPlan/Aggregate`` node — or, when
    /// the store leaves its results to the context, `Aggregate(from objects, in the context)`.
    public func explain(_ request: FetchRequest) -> String {
        let planned = request.resultType == .dictionary ? DictionaryResults.rowRequest(for: request) : request
        let plan: QueryPlan
        if let state = try? open, let made = try? state.environment.read({ transaction in try self.plan(planned, state: state, transaction: transaction) }) {
            plan = made
        } else {
            plan = QueryPlanner.plan(planned, layout: layout, model: model)
        }
        guard request.resultType == .dictionary else { return plan.description }
        guard let properties = QueryPlan.Aggregate.properties(answering: request, layout: layout, model: model),
              let entity = layout.entity(request.entityName) else {
            return plan.description + " → Aggregate(from objects, in the context)"
        }
        return QueryPlan.Aggregate(request, properties: properties, plan: plan, entity: entity, family: PlanRun.family(of: planned, in: self),
                                   store: self).description(after: plan)
    }

    /// The ``QueryPlanner``'s plan for `request`, costed with bounded probes of the candidate ranges and LMDB's
    /// table sizes, read in `transaction`. The candidate paths of a request shape are worked out once and kept (up
    /// to 512 shapes; a predicate holding managed objects under their IDs, and only when it holds at most 16); the
    /// costs, which follow the data, are worked out again for each commit.
    func plan(_ request: FetchRequest, state: OpenState, transaction: any KeyValueTransaction) throws -> QueryPlan {
        try prepared(request, state: state, transaction: transaction, reusable: false).plan
    }

    /// ``plan(_:state:transaction:)`` with the row checks compiled for it. With `reusable` (a read, whose commit
    /// does not change under it), a plan made for the same shape, window and result type in a read of the same
    /// commit (``KeyValueTransaction/snapshotNumber``) is run again as it is: neither costed nor compiled again.
    /// Costs follow the data, and the data of one commit does not change; a write transaction's plans are not kept,
    /// since its own changes move the costs before it commits.
    ///
    /// With `checking`, the request is first checked against the model (``FetchRequest/validate(for:)``) — unless a
    /// kept plan of the same key was made for a request that passed that check: the key holds everything the check
    /// reads of a request without a batch size, prefetching key paths or dictionary results (the entity, the
    /// predicate with its values, the sort descriptors, the window, the result type), and the model does not change.
    func prepared(_ request: FetchRequest, state: OpenState, transaction: any KeyValueTransaction, reusable: Bool,
                  checking: Bool = false) throws(ManagedObjectContextError) -> PreparedPlan {
        // A predicate holding managed objects is kept under their IDs (a cache entry keeps no object alive), and
        // only when it holds a few: hashing one that names 50 000 objects cost more than analysing it.
        let key = QueryPlanner.isCacheable(request.predicate) ? request.predicate : request.predicate.flatMap { QueryPlanner.keyingObjectsByID($0) }
        let shape = key == nil && request.predicate != nil ? nil
            : PlanShape(entityName: request.entityName, includesSubentities: request.includesSubentities, predicate: key, sort: request.sortDescriptors)
        let planKey = reusable ? shape.map { PlanKey(shape: $0, request) } : nil
        let snapshot = transaction.snapshotNumber
        let known = planKey.flatMap { planKey in
            lock.withLock { () -> PreparedPlan? in
                guard let known = plans[planKey], known.snapshot == snapshot else { return nil }
                planHits += 1
                return known
            }
        }
        if checking, known?.isChecked != true || request.fetchBatchSize != 0 || !request.relationshipKeyPathsForPrefetching.isEmpty
            || request.resultType == .dictionary {
            try request.validate(for: model)
        }
        if let known { return known }
        var analysis = shape.flatMap { shape in
            lock.withLock { () -> QueryPlanner.Analysis? in
                let cached = planShapes[shape]
                if cached != nil { planShapeHits += 1 }
                return cached
            }
        }
        if analysis == nil, let fresh = QueryPlanner.analyze(request, layout: layout, model: model, storeIdentifier: state.storeIdentifier) {
            analysis = fresh
            // An analysis holds the objects' keys, not the objects — except the rest of a `SELF IN` conjunction.
            if let shape, QueryPlanner.isCacheable(fresh.keysResidual) { lock.withLock {
                if planShapes.count >= Self.planCacheCapacity { planShapes.removeAll(keepingCapacity: true) }
                planShapes[shape] = fresh
            } }
        }
        let statistics = PlanStatistics(
            entries: { name in (try? self.database(name, in: state).entryCount(in: transaction)) ?? 0 },
            probe: { index, limit in (try? self.countEntries(in: index, upTo: limit, state: state, transaction: transaction)) ?? 0 })
        let plan = QueryPlanner.plan(request, layout: layout, model: model, statistics: statistics, analysis: analysis)
        // A plan whose filter holds objects (the rest of a `SELF IN` conjunction) is not kept: it would keep them.
        guard let planKey, QueryPlanner.isCacheable(plan.filter.predicate) else {
            return PreparedPlan(plan, entityName: request.entityName, predicate: request.predicate, storeIdentifier: state.storeIdentifier,
                                snapshot: snapshot, isChecked: checking)
        }
        let prepared = PreparedPlan(plan, entityName: request.entityName, predicate: planKey.shape.predicate,
                                    storeIdentifier: state.storeIdentifier, snapshot: snapshot, isChecked: checking)
        lock.withLock {
            if plans.count >= Self.planCacheCapacity {
                // A plan of an older commit is never run again.
                plans = plans.filter { $0.value.snapshot == snapshot }
                if plans.count >= Self.planCacheCapacity { plans.removeAll(keepingCapacity: true) }
            }
            plans[planKey] = prepared
        }
        return prepared
    }

    /// A fetch, in one read transaction, running the ``QueryPlanner``'s plan (``PlanRun``): counts, object IDs and
    /// loaded objects from the source's candidates when the key lookup, the index ranges or their entries settle the
    /// predicate and the order (no row read but those of the window); otherwise each candidate's row read once and
    /// checked, then sorted and windowed.
    func fetch(_ request: FetchRequest) throws -> PersistentStoreResult {
        try withRun(of: request, checking: true) { run -> PersistentStoreResult in
            switch request.resultType {
            case .count:
                return .count(try run.count())
            case .managedObjectID where run.answersFromCandidates:
                return .objectIDs(try run.objectIDs())
            case .managedObject where run.answersFromCandidates:
                return request.returnsObjectsAsFaults ? .objectIDs(try run.objectIDs()) : .nodes(try run.nodes())
            default:
                let window = try run.views()
                var writer = rowWriter(run.state)
                func made(_ view: RowView) throws -> IncrementalStoreNode {
                    do throws(RowDecodingError) {
                        return try node(view.id, view.row, copyingInto: &writer)
                    } catch {
                        throw run.corruptedRow(view.key, error)
                    }
                }
                if request.resultType == .managedObject && request.returnsObjectsAsFaults && request.includesPropertyValues
                    && (2...ReadAhead.capacity).contains(window.count) {
                    // Faults whose rows were just read (to sort or check them): kept for when they fire. A row with
                    // a value that does not decode is not kept (nor is the window): the fetch did not need that value,
                    // and its fault reports it when it fires, as it would have.
                    var nodes: [ManagedObjectID: IncrementalStoreNode] = [:]
                    nodes.reserveCapacity(window.count)
                    for view in window {
                        guard let node = try? node(view.id, view.row, copyingInto: &writer) else { break }
                        nodes[view.id] = node
                    }
                    if nodes.count == window.count {
                        let ahead = ReadAhead(snapshot: run.transaction.snapshotNumber, nodes: nodes)
                        lock.withLock { readAhead = ahead }
                    }
                }
                return try .fetched(window, for: request, id: \.id, node: made)
            }
        }
    }

    /// Calls `body` with a run of the plan for `request` (``PlanRun``), in one read transaction; with `checking`, the
    /// request is checked against the model first (see ``prepared(_:state:transaction:reusable:checking:)``).
    func withRun<Result>(of request: FetchRequest, checking: Bool = false, _ body: (PlanRun) throws -> Result) throws -> Result {
        let state = try open
        guard let entity = layout.entity(request.entityName) else {
            throw ManagedObjectContextError(.unknownName, message: "the model has no entity named \"\(request.entityName)\"")
        }
        return try state.environment.read { transaction in
            try body(PlanRun(prepared(request, state: state, transaction: transaction, reusable: true, checking: checking), for: request, entity: entity,
                             store: self, state: state, transaction: transaction, isRead: true))
        }
    }

    /// The IDs of a key lookup, one at a time: the row key of each ID of this store and of the fetched entities
    /// (every entity for a `nil` family), the ID's entity found when its namespace changes (a lookup's IDs come
    /// grouped by entity), not per ID.
    struct KeyLookup {
        let state: OpenState
        let family: TagSet?
        private var namespace: ObjectIdentifier?
        private var wanted = false
        /// The entity of the last ID asked about (`nil` for an ID of another store or an unknown entity).
        private(set) var entity: StoreLayout.EntityLayout?
        /// The entity tag of the last ID asked about.
        var tag: UInt16 { entity?.tag ?? 0 }

        init(state: OpenState, family: TagSet?) {
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
            guard wanted, let key = id.integerKey, key > 0 else { return nil }
            return key
        }
    }

    /// The error a row that cannot be decoded gives: the store file is corrupted there.
    func corruptedRow(_ key: some BinaryInteger, in root: String, _ error: RowDecodingError) -> ManagedObjectContextError {
        ManagedObjectContextError(.storeUnusable, message: "the row with key \(key) in \(root)'s table cannot be read: \(error.reason); the store file is corrupted")
    }

    /// The error for a row that does not match the predicate `source` (a plan's source) found it by: an entry that
    /// no longer agrees with its row.
    func entryWithoutMatchingRow(_ id: ManagedObjectID, source: String) -> ManagedObjectContextError {
        ManagedObjectContextError(.storeUnusable, message: "the store file is damaged: \(source) found \(id.uriRepresentation.absoluteString), whose row does not match the predicate the entry stands for (verify() lists every problem)")
    }

    /// The entries of `index`'s ranges, counted up to `limit` — a step per distinct value, LMDB counting each
    /// value's rows.
    func countEntries(in index: QueryPlan.IndexRange, upTo limit: Int = .max, state: OpenState, transaction: any KeyValueTransaction) throws -> Int {
        try state.indexTable(index.table).count(in: index.ranges, upTo: limit, in: transaction)
    }

    /// Whether an entry's row matches `predicate`, decided from the entry alone (`elements` read back from its key
    /// in order, `stored` from its value); `nil` when the entry cannot decide it and the row must: an element that
    /// does not decode (cut to fit the key), non-ASCII text (the key holds it precomposed, the row as written, and
    /// some operators can tell them apart), or a predicate that fails to evaluate (the row's check then reports it).
    func entryMatches(_ entry: CursorEntry, elements: [QueryPlan.EntryElement], stored: [QueryPlan.EntryElement],
                      predicate: FetchPredicate) -> Bool? {
        guard let values = entryValues(entry, elements: elements, stored: stored) else { return nil }
        return try? predicate.evaluate(with: values)
    }

    /// The values an index entry holds, by name: `elements` read back from its key, in order, and `stored` — a
    /// covering index's attributes — from its value after the row's reference; `nil` when a key element does not
    /// decode (cut to fit the key) or is non-ASCII text (held precomposed in the key, as written in the row), or a
    /// stored value does not (a damaged entry: the row then decides, and `verify()` reports the entry).
    func entryValues(_ entry: CursorEntry, elements: [QueryPlan.EntryElement], stored: [QueryPlan.EntryElement] = []) -> [String: PredicateValue]? {
        var values: [String: PredicateValue] = [:]
        var offset = 0
        for element in elements {
            guard let (value, end) = TupleEncoding.decodeElement(entry.key, at: offset, as: element.type, inverted: element.inverted) else { return nil }
            if case .string(let text)? = value, !text.utf8.allSatisfy({ $0 < 0x80 }) { return nil }
            values[element.name] = value.map(PredicateValue.init) ?? .null
            offset = end
        }
        offset = IndexEntries.referenceSize
        for element in stored {
            // Each at its type's full width (a NULL padded with zeros).
            let width = IndexEntries.storedWidth(element.type)
            guard offset + width <= entry.value.count,
                  let (value, _) = TupleEncoding.decodeElement(UnsafeRawBufferPointer(rebasing: entry.value[offset..<offset + width]), at: 0, as: element.type)
            else { return nil }
            values[element.name] = value.map(PredicateValue.init) ?? .null
            offset += width
        }
        return values
    }
}

/// A stored row as a predicate sees it, within one read transaction: each attribute decoded when it is asked for,
/// relationships as the related rows (read when a key path reaches them, each once per fetch: ``RelatedRows``). A
/// value that cannot be decoded reads as NULL and is kept in ``failure``, which the fetch turns into an error — a
/// value of a row reached through a relationship included, which names that row.
final class RowView: KeyValueReadable, Hashable {
    let store: LMDBIncrementalStore
    let state: LMDBIncrementalStore.OpenState
    let transaction: any KeyValueTransaction
    let id: ManagedObjectID
    let row: EncodedRow
    private(set) var failure: RowDecodingError?
    /// The rows reached through relationships, shared by the views of one fetch (made with the first one reached
    /// when the view was made alone).
    private var related: RelatedRows?
    /// The view whose relationship led here: a value this one cannot read is that one's failure too.
    private let reachedFrom: RowView?

    init(store: LMDBIncrementalStore, state: LMDBIncrementalStore.OpenState, transaction: any KeyValueTransaction, id: ManagedObjectID, row: EncodedRow,
         related: RelatedRows? = nil, reachedFrom: RowView? = nil) {
        self.store = store
        self.state = state
        self.transaction = transaction
        self.id = id
        self.row = row
        self.related = related
        self.reachedFrom = reachedFrom
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
                fail(error)
                return .null
            }
        }
        guard let relationship = store.model.relationship(named: key, in: id.entityName), relationship.isToMany,
              case .integer(let ownerKey) = id.referenceObject else { return .null }
        let references: [StoredRow.Reference]
        do {
            references = try store.relatedKeys(relationship, of: id, key: UInt64(ownerKey), state: state, transaction: transaction)
        } catch {
            fail(RowDecodingError(reason: "its members of \(key) cannot be read: \(Self.reason(error))"))
            return .array([])
        }
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
            fail(error)
            return .null
        }
    }

    /// Keeps the first failure, and hands it to the view that reached this one, naming this row.
    private func fail(_ error: RowDecodingError) {
        if failure == nil { failure = error }
        reachedFrom?.failReached(id, error)
    }

    /// A row this view reached (through its relationships, or theirs) has a value that cannot be read.
    private func failReached(_ reached: ManagedObjectID, _ error: RowDecodingError) {
        if failure == nil { failure = RowDecodingError(reason: "the row of \(reached) it reaches through a relationship: \(error.reason)") }
        reachedFrom?.failReached(reached, error)
    }

    /// The view of the row `reference` names, read once per fetch; `nil` when there is no such row. A row that
    /// cannot be read is this view's failure, naming that row.
    private func view(_ reference: StoredRow.Reference) -> RowView? {
        let related = self.related ?? RelatedRows()
        self.related = related
        let targetID = store.objectID(entityTag: reference.entityTag, key: reference.key, in: state)
        let row: EncodedRow?
        do {
            row = try related.row(reference) {
                guard let bytes = try store.rowTable(targetID, state).bytes(key: reference.key, in: transaction) else { return nil }
                return try EncodedRow(bytes, layout: store.layout)
            }
        } catch let error as RowDecodingError {
            failReached(targetID, error)
            return nil
        } catch {
            failReached(targetID, RowDecodingError(reason: Self.reason(error)))
            return nil
        }
        return row.map { RowView(store: store, state: state, transaction: transaction, id: targetID, row: $0, related: related, reachedFrom: self) }
    }

    /// What an error says, for a failure's reason.
    private static func reason(_ error: any Error) -> String {
        (error as? ManagedObjectContextError)?.message ?? (error as? RowDecodingError)?.reason ?? "\(error)"
    }

    var predicateIdentity: AnyHashable? { id }

    /// The row key (keys are unique within a root table, across its sub-entities).
    var key: Int64 {
        id.integerKey ?? 0
    }

    static func == (lhs: RowView, rhs: RowView) -> Bool { lhs.id == rhs.id }
    func hash(into hasher: inout Hasher) { hasher.combine(id) }
}

/// The rows a fetch's views reach through relationships, each read and checked once: a thousand employees filtered or
/// sorted by `department.name` read their ten departments' rows ten times, not a thousand. Keeps the first
/// ``capacity`` rows (borrowed from the map, as the views' are), then reads the others each time. A view of one fetch
/// at a time uses it (a part of a parallel scan has its own).
final class RelatedRows {
    /// The most rows kept.
    static let capacity = 4_096
    private var rows: [StoredRow.Reference: EncodedRow?] = [:]

    /// The row `reference` names (`nil`: no such row), read by `read` the first time.
    func row(_ reference: StoredRow.Reference, _ read: () throws -> EncodedRow?) throws -> EncodedRow? {
        if let known = rows[reference] { return known }
        let row = try read()
        if rows.count < Self.capacity { rows[reference] = .some(row) }
        return row
    }
}
