import LMDB
import ObjectGraph

extension QueryPlan {
    /// A dictionary fetch's last node: the results the request asks for (fetched values, groups, aggregates), made
    /// from the plan of the rows it reads (``DictionaryResults/rowRequest(for:)``: its predicate and order, and its
    /// window when each row makes one result). The cheapest of four methods, chosen from the request's shape and the plan:
    ///
    /// - **counts per to-one destination** over the whole table (`count` grouped by a to-one, no predicate): one
    ///   key per destination in the relationship's `toone/…` table, whose entries LMDB counts; the rows without a
    ///   destination are the table's row count less the entries. No row or entry is read; the plan's source does not
    ///   run. Prints as `Aggregate(count by department, from toone/Employee.department's keys)`.
    /// - **counts per value of an attribute's own index**, over the whole index or the plan's range when it answers
    ///   the predicate alone: one step per distinct value. Prints as `Aggregate(count by age, from
    ///   Employee.byAge's keys [30, 40])`.
    /// - **values from index entries**, when the plan reads one index range whose entries hold every value the
    ///   request names and decide its predicate: no row read. Prints after the plan as `Aggregate(on index entries)`.
    /// - **values from the rows**, each read once, only the fields named decoded. Prints after the plan as
    ///   `Aggregate`.
    ///
    /// The two that read index keys fall back to the rows when a key does not give its value back (text cut to fit a
    /// key, a type the key decoder leaves out), and say so in their description.
    struct Aggregate {
        enum Method {
            case toOneCounts(relationship: String, destination: StoreLayout.EntityLayout, table: String)
            case attributeIndexCounts(attribute: String, type: AttributeType, table: String, owner: String, index: String, ranges: [KeyRange], ascending: Bool)
            case entries(index: IndexRange, elements: [EntryElement])
            case rows
        }

        /// The dictionary request (the plan is that of its rows).
        let request: FetchRequest
        let properties: [FetchedProperty]
        let method: Method

        /// What `request`'s results hold (``DictionaryResults/properties(for:model:)``) when the store computes them
        /// itself — every fetched, grouped and aggregated key is a plain attribute or to-one relationship of the
        /// entity (`SELF` or `*` for counts); `nil` when it leaves them to the context.
        static func properties(answering request: FetchRequest, layout: StoreLayout, model: ManagedObjectModel) -> [FetchedProperty]? {
            guard let entity = layout.entity(request.entityName) else { return nil }
            let properties = DictionaryResults.properties(for: request, model: model)
            for property in properties where !property.countsObjects {
                guard entity.fieldIndex[property.keyPath] != nil else { return nil }
            }
            return request.propertiesToGroupBy.allSatisfy { entity.fieldIndex[$0] != nil } ? properties : nil
        }

        /// The aggregation of `request`, whose results hold `properties`, run on `run`, the run of its rows' plan.
        init(_ request: FetchRequest, properties: [FetchedProperty], run: PlanRun) {
            self.init(request, properties: properties, plan: run.plan, entity: run.entity, family: run.family, store: run.store)
        }

        /// The aggregation of `request`, whose results hold `properties`, after `plan`, the plan of its rows.
        init(_ request: FetchRequest, properties: [FetchedProperty], plan: QueryPlan, entity: StoreLayout.EntityLayout, family: TagSet,
             store: LMDBIncrementalStore) {
            self.request = request
            self.properties = properties
            method = Self.toOneCounts(request, properties, entity: entity, family: family, store: store)
                ?? Self.attributeIndexCounts(request, properties, plan: plan, entity: entity, store: store)
                ?? Self.entries(request, properties, plan: plan, model: store.model)
                ?? .rows
        }

        /// The plan's text followed by this node's — alone for the methods that count index keys, which do not run
        /// the plan's source.
        func description(after plan: QueryPlan) -> String {
            switch method {
            case .toOneCounts(let relationship, _, let table):
                return "Aggregate(count by \(relationship), from \(table)'s keys)"
            case .attributeIndexCounts(let attribute, _, _, let owner, let index, _, _):
                let range = plan.filter.predicate == nil ? plan.indexRange.map { " \($0.bounds)" } ?? "" : ""
                return "Aggregate(count by \(attribute), from \(owner).\(index)'s keys\(request.predicate == nil ? "" : range); else from the rows)"
            case .entries:
                return plan.description + " → Aggregate(on index entries; else from the rows)"
            case .rows:
                return plan.description + " → Aggregate"
            }
        }

        /// The results: counted from index keys, made from entries, or — when neither applies or a key does not give
        /// its value back — made from the rows.
        func execute(in run: PlanRun) throws -> [[String: PredicateValue]] {
            if let counted = try countsFromKeys(in: run) {
                return try DictionaryResults.finish(counted, for: request, havingApplied: false)
            }
            if case .entries(let index, let elements) = method, let made = try fromEntries(index, elements: elements, in: run) {
                return made
            }
            return try fromRows(in: run)
        }

        /// The groups and their counts from index keys alone, before the request's having predicate, order and
        /// window: `nil` for a method that does not count keys, or when a key does not give its value back.
        func countsFromKeys(in run: PlanRun) throws -> [[String: PredicateValue]]? {
            switch method {
            case .toOneCounts(let relationship, let destination, let table):
                return try toOneCounts(relationship, destination: destination, table: table, in: run)
            case .attributeIndexCounts(let attribute, let type, let table, _, _, let ranges, let ascending):
                return try attributeIndexCounts(attribute, type, table: table, ranges: ranges, ascending: ascending, in: run)
            case .entries, .rows:
                return nil
            }
        }

        // MARK: - Choosing

        /// Whether the request fetches only the grouped key `name` and counts of objects.
        private static func countsGroups(of name: String, _ properties: [FetchedProperty]) -> Bool {
            properties.allSatisfy { $0.function == nil ? $0.keyPath == name : $0.function == .count && $0.countsObjects }
        }

        private static func toOneCounts(_ request: FetchRequest, _ properties: [FetchedProperty], entity: StoreLayout.EntityLayout,
                                        family: TagSet, store: LMDBIncrementalStore) -> Method? {
            let layout = store.layout, model = store.model
            guard request.predicate == nil, request.propertiesToGroupBy.count == 1, let name = request.propertiesToGroupBy.first,
                  let relationship = entity.toOneRelationships.first(where: { $0.name == name }),
                  model.directSubentities(of: relationship.destinationEntityName).isEmpty,
                  let destination = layout.entity(relationship.destinationEntityName),
                  countsGroups(of: name, properties)
            else { return nil }
            // The entries of every row of the table are counted, so the request must cover the whole table.
            guard entity.name == entity.root, layout.entities.values.allSatisfy({ $0.root != entity.root || family.contains($0.tag) }),
                  layout.declaringEntity(of: name, in: entity.name) == entity.name else { return nil }
            return .toOneCounts(relationship: name, destination: destination, table: StoreLayout.toOneDatabase(entity: entity.name, relationship: name))
        }

        private static func attributeIndexCounts(_ request: FetchRequest, _ properties: [FetchedProperty], plan: QueryPlan,
                                                 entity: StoreLayout.EntityLayout, store: LMDBIncrementalStore) -> Method? {
            let model = store.model
            guard request.propertiesToGroupBy.count == 1, let name = request.propertiesToGroupBy.first,
                  let attribute = model.attribute(named: name, in: entity.name), !attribute.isTransient,
                  countsGroups(of: name, properties),
                  let (owner, index) = entity.indexes.first(where: { entry in
                      entry.index.elements.count == 1 && entry.index.elements[0].propertyName == name && entry.index.elements[0].collation == .binary
                  }),
                  owner == entity.name, request.includesSubentities || model.directSubentities(of: owner).isEmpty
            else { return nil }
            let table = StoreLayout.indexDatabase(entity: owner, index: index.name)
            var ranges = [KeyRange.all]
            if request.predicate != nil {
                guard plan.filter.predicate == nil, let range = plan.indexRange, range.table == table else { return nil }
                ranges = range.ranges
            }
            return .attributeIndexCounts(attribute: name, type: attribute.type, table: table, owner: owner, index: index.name, ranges: ranges,
                                         ascending: index.elements[0].isAscending)
        }

        private static func entries(_ request: FetchRequest, _ properties: [FetchedProperty], plan: QueryPlan, model: ManagedObjectModel) -> Method? {
            var names = Set(properties.map(\.keyPath).filter { $0 != "SELF" && $0 != "*" })
            names.formUnion(request.propertiesToGroupBy)
            names.formUnion(plan.sort.descriptors.map(\.keyPath))
            guard !names.isEmpty, let index = plan.indexRange, plan.filter.predicate == nil || index.entryElements != nil,
                  let elements = QueryPlanner.entryElements(index, reading: names.union(index.entryElements?.map(\.name) ?? []),
                                                            entity: request.entityName, model: model)
            else { return nil }
            return .entries(index: index, elements: elements)
        }

        // MARK: - Running

        /// `count` per destination of a to-one over the whole row table, groups in destination-key order, the NULL
        /// group first: one step per destination, the engine counting the rows pointing at it.
        private func toOneCounts(_ name: String, destination: StoreLayout.EntityLayout, table: String, in run: PlanRun) throws -> [[String: PredicateValue]] {
            let state = run.state, transaction = run.transaction
            let groups = try state.toOneTable(table).destinations(in: transaction)
            let unset = try run.rows.entryCount(in: transaction) - groups.reduce(0) { $0 + $1.count }
            let properties = self.properties
            var results: [[String: PredicateValue]] = unset > 0 ? [Self.group(name, .null, count: unset, properties)] : []
            for group in groups {
                let value = PredicateValue.object(PredicateObject(state.identities.objectID(entityTag: destination.tag, key: group.key)))
                results.append(Self.group(name, value, count: group.count, properties))
            }
            return results
        }

        /// `count` per value of an attribute's own index over `ranges`, groups in index order (NULL first for an
        /// ascending index), LMDB counting each value's rows; `nil` when a value in the index cannot be decoded.
        private func attributeIndexCounts(_ name: String, _ type: AttributeType, table: String, ranges: [KeyRange], ascending: Bool,
                                          in run: PlanRun) throws -> [[String: PredicateValue]]? {
            let properties = self.properties
            var results: [[String: PredicateValue]] = []
            var undecodable = false
            var inverted: [UInt8] = []
            try run.state.indexTable(table).forEachKey(in: ranges, in: run.transaction) { entry, count in
                let decoded: AttributeValue??
                if ascending {
                    decoded = TupleEncoding.decodeElement(entry.key, as: type)
                } else {
                    inverted = entry.key.map { ~$0 }
                    decoded = inverted.withUnsafeBytes { TupleEncoding.decodeElement($0, as: type) }
                }
                guard let value = decoded else { undecodable = true; return false }
                results.append(Self.group(name, value.map(PredicateValue.init) ?? .null, count: count, properties))
                return true
            }
            return undecodable ? nil : results
        }

        /// One group's result counted from index keys: the grouped key's value under its own name (as groups made
        /// from rows hold it, whatever the fetched property is called), and each fetched property — the value, or
        /// the count.
        private static func group(_ name: String, _ value: PredicateValue, count: Int, _ properties: [FetchedProperty]) -> [String: PredicateValue] {
            var result = [String: PredicateValue](minimumCapacity: properties.count + 1)
            result[name] = value
            for property in properties { result[property.name] = property.function == nil ? value : .integer(Int64(count)) }
            return result
        }

        /// The results made from the entries of `index` (walked by the plan's sort, checked by its filter), no row
        /// read; `nil` when an entry's key cannot give a value (a value cut to fit the key, non-ASCII text).
        private func fromEntries(_ index: IndexRange, elements: [EntryElement], in run: PlanRun) throws -> [[String: PredicateValue]]? {
            let plan = run.plan, store = run.store
            let predicate = plan.filter.predicate, sort = plan.sort.descriptors
            var undecidable = false
            var entries = try plan.sort.collectInIndexOrder(index, in: run, upTo: plan.window.end, resort: { FetchSortDescriptor.sorted($0, using: sort, prefix: $1) }) { candidate, entry -> EntryValues? in
                guard !undecidable else { return nil }
                guard let values = store.entryValues(entry, elements: elements, stored: index.stored) else { undecidable = true; return nil }
                if let predicate {
                    guard let matched = try? predicate.evaluate(with: values) else { undecidable = true; return nil }
                    if !matched { return nil }
                }
                return EntryValues(key: candidate.key, values: values)
            }
            guard !undecidable else { return nil }
            if !plan.sort.isStreamed {
                // In row-key order, as rows come; then sorted as asked.
                Sort.putInKeyOrder(&entries)
                if !sort.isEmpty { entries = FetchSortDescriptor.sorted(entries, using: sort, prefix: plan.window.end == .max ? nil : plan.window.end) }
            }
            // The plan's window: the request's when each entry makes one result, else none.
            return try DictionaryResults.make(from: plan.window.apply(to: entries), for: request, model: store.model) { key, entry in
                entry.values[key] ?? .null
            }
        }

        /// The results made from the matching rows, in the plan's order and window (the request's window when each
        /// row makes one result, ``DictionaryResults/windowsRows(_:)``; else none).
        private func fromRows(in run: PlanRun) throws -> [[String: PredicateValue]] {
            let rows = try run.views()
            let results = try DictionaryResults.make(from: rows, for: request, model: run.store.model) { key, row in row.resultValue(forKey: key) }
            if let failed = rows.first(where: { $0.failure != nil }), let failure = failed.failure {
                throw run.corruptedRow(failed.key, failure)
            }
            return results
        }
    }
}

extension FetchedProperty {
    /// A count of the objects themselves (`count:` of `SELF` or `*`), which needs no value of theirs.
    var countsObjects: Bool {
        function == .count && (keyPath == "SELF" || keyPath == "*")
    }
}
