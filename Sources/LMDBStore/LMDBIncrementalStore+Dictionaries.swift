import Foundation
import LMDB
import ObjectGraph

extension LMDBIncrementalStore: DictionaryFetchingStore {
    /// `count` per value of a to-one relationship over a whole row table (no predicate), from the relationship's
    /// `toone/…` table alone: one key per destination, whose values LMDB counts, and the rows without a
    /// destination are the table's row count less the entries. No row is read. `nil` when the request
    /// is not of that shape. Groups come in destination-key order, the NULL group first.
    func groupCountsFromToOneIndex(_ request: FetchRequest, properties: [FetchedProperty], run: PlanRun) throws -> [[String: PredicateValue]]? {
        let entity = run.entity, state = run.state, transaction = run.transaction
        guard request.predicate == nil, request.propertiesToGroupBy.count == 1, let name = request.propertiesToGroupBy.first,
              let relationship = entity.toOneRelationships.first(where: { $0.name == name }),
              model.directSubentities(of: relationship.destinationEntityName).isEmpty,
              let destination = layout.entity(relationship.destinationEntityName),
              properties.allSatisfy({ $0.function == nil ? $0.keyPath == name : $0.function == .count && ($0.keyPath == "SELF" || $0.keyPath == "*") })
        else { return nil }
        // The entries of every row of the table are counted, so the request must cover the whole table.
        guard entity.name == entity.root, layout.entities.values.allSatisfy({ $0.root != entity.root || run.family.contains($0.tag) }),
              layout.declaringEntity(of: name, in: entity.name) == entity.name else { return nil }
        // One step per destination: the engine counts the rows pointing at it.
        let groups = try state.toOneTable(StoreLayout.toOneDatabase(entity: entity.name, relationship: name)).destinations(in: transaction)
        let unset = try state.rows(of: entity).entryCount(in: transaction) - groups.reduce(0) { $0 + $1.count }
        func result(_ value: PredicateValue, _ count: Int) -> [String: PredicateValue] {
            var result: [String: PredicateValue] = [name: value]
            for property in properties { result[property.name] = property.function == nil ? value : .integer(Int64(count)) }
            return result
        }
        var results: [[String: PredicateValue]] = unset > 0 ? [result(.null, unset)] : []
        for group in groups {
            results.append(result(.object(PredicateObject(objectID(entityTag: destination.tag, key: group.key, in: state))), group.count))
        }
        return results
    }

    /// `count` per value of an attribute that has an index of its own (one binary element), over the whole entity or
    /// over a range of that index that answers the predicate: one step per distinct value, LMDB counting its rows
    /// (no row, no entry visited). Groups come in index order, NULL first for an ascending index. `nil` when the
    /// request is not of that shape or a value in the index cannot be decoded (a string cut to fit the key limit, a
    /// type the key decoder leaves out).
    func groupCountsFromAttributeIndex(_ request: FetchRequest, properties: [FetchedProperty], run: PlanRun) throws -> [[String: PredicateValue]]? {
        let entity = run.entity, plan = run.plan
        guard request.propertiesToGroupBy.count == 1, let name = request.propertiesToGroupBy.first,
              let attribute = model.attribute(named: name, in: entity.name), !attribute.isTransient,
              properties.allSatisfy({ $0.function == nil ? $0.keyPath == name : $0.function == .count && ($0.keyPath == "SELF" || $0.keyPath == "*") }),
              let (owner, index) = entity.indexes.first(where: { entry in
                  entry.index.elements.count == 1 && entry.index.elements[0].propertyName == name && entry.index.elements[0].collation == .binary
              }),
              owner == entity.name, request.includesSubentities || model.directSubentities(of: owner).isEmpty
        else { return nil }
        let indexName = StoreLayout.indexDatabase(entity: owner, index: index.name)
        let ascending = index.elements[0].isAscending
        var ranges = [KeyRange.all]
        if request.predicate != nil {
            guard plan.filter == nil, let range = run.indexRange, range.table == indexName else { return nil }
            ranges = range.ranges
        }
        var results: [[String: PredicateValue]] = []
        var undecodable = false
        var inverted: [UInt8] = []
        try run.state.indexTable(indexName).forEachKey(in: ranges, in: run.transaction) { entry, count in
            let decoded: AttributeValue??
            if ascending {
                decoded = TupleEncoding.decodeElement(entry.key, as: attribute.type)
            } else {
                inverted = entry.key.map { ~$0 }
                decoded = inverted.withUnsafeBytes { TupleEncoding.decodeElement($0, as: attribute.type) }
            }
            guard let value = decoded else { undecodable = true; return false }
            let group = value.map(PredicateValue.init) ?? .null
            var result: [String: PredicateValue] = [:]
            for property in properties { result[property.name] = property.function == nil ? group : .integer(Int64(count)) }
            results.append(result)
            return true
        }
        return undecodable ? nil : results
    }

    /// Dictionary results computed from index entries alone, when the plan reads one index range whose keys hold
    /// every value the request names (fetched, grouped, aggregated, sorted) and decide its predicate: no row is read.
    /// `nil` when the request is not of that shape, or an entry's key cannot give a value (a value cut to fit the
    /// key, non-ASCII text) — the rows then answer.
    func dictionaryFromIndexEntries(_ request: FetchRequest, properties: [FetchedProperty], run: PlanRun) throws -> [[String: PredicateValue]]? {
        let rowRequest = run.request, plan = run.plan
        var names = Set(properties.map(\.keyPath).filter { $0 != "SELF" && $0 != "*" })
        names.formUnion(request.propertiesToGroupBy)
        names.formUnion(rowRequest.sortDescriptors.map(\.keyPath))
        guard !names.isEmpty else { return nil }
        guard let index = run.indexRange, plan.filter == nil || index.entryElements != nil,
              let elements = QueryPlanner.entryElements(index, reading: names.union(index.entryElements?.map(\.name) ?? []),
                                                        entity: request.entityName, model: model)
        else { return nil }
        let predicate = plan.filter
        var undecidable = false
        var entries = try run.collectInIndexOrder(index, resort: { FetchSortDescriptor.sorted($0, using: rowRequest.sortDescriptors) }) { candidate, entry -> EntryValues? in
            guard !undecidable else { return nil }
            guard let values = entryValues(entry, elements: elements, stored: index.stored) else { undecidable = true; return nil }
            if let predicate {
                guard let matched = try? predicate.evaluate(with: values) else { undecidable = true; return nil }
                if !matched { return nil }
            }
            return EntryValues(key: candidate.key, values: values)
        }
        guard !undecidable else { return nil }
        if !plan.streamsInSortOrder {
            // In row-key order, as rows come; then sorted as asked.
            run.putInKeyOrder(&entries)
            if !rowRequest.sortDescriptors.isEmpty { entries = FetchSortDescriptor.sorted(entries, using: rowRequest.sortDescriptors) }
        }
        return try DictionaryResults.make(from: entries, for: request, model: model) { key, entry in entry.values[key] ?? .null }
    }

    /// Dictionary results computed from the rows in one read transaction, reading only the fields the request names,
    /// with no managed object made: when every fetched, grouped and aggregated key is a plain attribute or to-one
    /// relationship of the entity (`SELF` for counts). Anything else (key paths through relationships, to-many
    /// values) returns `nil`, and the context computes it from objects.
    public func executeDictionaryFetch(_ request: FetchRequest) throws -> [[String: PredicateValue]]? {
        try request.validate(for: model)
        guard let entity = layout.entity(request.entityName) else { return nil }
        let properties = DictionaryResults.properties(for: request, model: model)
        for property in properties where !(property.function == .count && (property.keyPath == "SELF" || property.keyPath == "*")) {
            guard entity.fieldIndex[property.keyPath] != nil else { return nil }
        }
        guard request.propertiesToGroupBy.allSatisfy({ entity.fieldIndex[$0] != nil }) else { return nil }
        // Planned once, for every way the results may be computed.
        return try withRun(of: DictionaryResults.rowRequest(for: request)) { run in
            if let counted = try groupCountsFromToOneIndex(request, properties: properties, run: run)
                ?? groupCountsFromAttributeIndex(request, properties: properties, run: run) {
                return try DictionaryResults.finish(counted, for: request, havingApplied: false)
            }
            if let fromEntries = try dictionaryFromIndexEntries(request, properties: properties, run: run) {
                return fromEntries
            }
            let rows = try run.views()
            let results = try DictionaryResults.make(from: rows, for: request, model: model) { key, row in row.resultValue(forKey: key) }
            if let failed = rows.first(where: { $0.failure != nil }), let failure = failed.failure {
                throw run.corruptedRow(failed.key, failure)
            }
            return results
        }
    }
}

/// The values an index entry's key holds, by name, with the entry's row key (for dictionary results from entries).
struct EntryValues: KeyValueReadable, RowKeyed {
    let key: UInt64
    let values: [String: PredicateValue]

    var rowKey: UInt64 { key }

    func predicateValue(forKey key: String) -> PredicateValue { values[key] ?? .null }
}
