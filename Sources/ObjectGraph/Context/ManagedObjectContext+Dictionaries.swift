/// A store that computes dictionary results itself (from indexes, say). Stores that do not conform get theirs
/// computed by the context from the matching objects.
public protocol DictionaryFetchingStore: IncrementalStore {
    /// The dictionaries for `request`, or `nil` when the store cannot compute this one itself.
    ///
    /// - Throws: An error that says why the request cannot be run.
    func executeDictionaryFetch(_ request: FetchRequest) throws -> [[String: PredicateValue]]?
}

extension ManagedObjectContext {
    /// The dictionary results of `request` (Core Data's `.dictionaryResultType`): per object, or per group with
    /// ``FetchRequest/propertiesToGroupBy`` (filtered by ``FetchRequest/havingPredicate``), deduplicated with
    /// ``FetchRequest/returnsDistinctResults``, sorted and windowed. To-one relationships appear as object IDs
    /// (`PredicateValue.object` of the ``ManagedObjectID``). ``lastDictionaryFetchStrategy`` says whether the store
    /// computed them or the context did.
    ///
    /// - Throws: As ``fetch(_:)``; a ``PredicateEvaluationError`` when an aggregate does not fit its values.
    public func fetchDictionaries(_ request: FetchRequest) throws -> [[String: PredicateValue]] {
        try request.validate(for: model)
        let stores = persistentStoreCoordinator.stores(holding: request.entityName)
        if stores.count == 1, !hasChanges, let native = stores[0] as? any DictionaryFetchingStore,
           let result = try native.executeDictionaryFetch(request) {
            lastDictionaryFetchStrategy = "computed by the \(native.type) store"
            return result
        }
        lastDictionaryFetchStrategy = "computed in memory by the context from \(request.entityName) objects"
        // One store call with every row's values, not a fault per object.
        let objects = try fetch(DictionaryResults.rowRequest(for: request).with { $0.returnsObjectsAsFaults = false })
        return try DictionaryResults.make(from: objects, for: request, model: model) { keyPath, object in
            Self.identify(try PredicateExpression(node: .keyPath(keyPath)).value(for: object))
        }
    }

    /// Objects in a result become their IDs.
    private static func identify(_ value: PredicateValue) -> PredicateValue {
        switch value {
        case .object(let object): (object.base as? ManagedObject).map { .object(PredicateObject($0.objectID)) } ?? value
        case .array(let elements): .array(elements.map(identify))
        default: value
        }
    }
}

/// Dictionary results (Core Data's `.dictionaryResultType`) from the rows a request matches, whoever reads them:
/// the context from managed objects, or a store from its own rows.
package enum DictionaryResults {
    /// The request that finds the rows, unsorted when grouped (groups are sorted instead). It carries the request's
    /// window when each row makes one result in the rows' order (``windowsRows(_:)``), so that a store stops after
    /// offset + limit rows; otherwise it finds all of them and the window applies to the results.
    package static func rowRequest(for request: FetchRequest) -> FetchRequest {
        var rows = request
        rows.resultType = .managedObject
        if !windowsRows(request) {
            rows.fetchLimit = 0
            rows.fetchOffset = 0
        }
        if !request.propertiesToGroupBy.isEmpty { rows.sortDescriptors = [] }
        return rows
    }

    /// Whether each matching row makes one result, in the rows' order — no grouping, no aggregate, no distinctness —
    /// so the request's window is the rows' window (``rowRequest(for:)`` carries it, and ``finish(_:for:havingApplied:)``
    /// does not apply it again).
    package static func windowsRows(_ request: FetchRequest) -> Bool {
        request.propertiesToGroupBy.isEmpty && !request.returnsDistinctResults && !request.propertiesToFetch.contains { $0.function != nil }
    }

    /// What each result holds: the request's properties, or every persistent attribute.
    package static func properties(for request: FetchRequest, model: ManagedObjectModel) -> [FetchedProperty] {
        request.propertiesToFetch.isEmpty
            ? model.allProperties(of: request.entityName).compactMap { property -> FetchedProperty? in
                if case .attribute(let attribute) = property, !attribute.isTransient { return .keyPath(attribute.name) } else { return nil }
            }
            : request.propertiesToFetch
    }

    /// The results for `rows` (matching `request`'s predicate, in its order unless grouped): one per row, or one
    /// per group of ``FetchRequest/propertiesToGroupBy`` filtered by ``FetchRequest/havingPredicate``; then made
    /// distinct, sorted (groups) and windowed. `value` reads a key path of a row, with related objects as their IDs.
    package static func make<Rows: Sequence>(
        from rows: Rows, for request: FetchRequest, model: ManagedObjectModel, value: (String, Rows.Element) throws -> PredicateValue
    ) throws -> [[String: PredicateValue]] {
        let properties = properties(for: request, model: model)
        let grouped = !request.propertiesToGroupBy.isEmpty
        let aggregates = properties.contains { $0.function != nil }

        var results: [[String: PredicateValue]] = []
        if grouped || aggregates {
            var order: [[PredicateValue]] = []
            var groups: [[PredicateValue]: [Rows.Element]] = [:]
            for object in rows {
                var key: [PredicateValue] = []
                for path in request.propertiesToGroupBy { key.append(try value(path, object)) }
                if groups[key] == nil { order.append(key) }
                groups[key, default: []].append(object)
            }
            if order.isEmpty && !grouped { order = [[]]; groups[[]] = [] }
            for key in order {
                let members = groups[key]!
                var row: [String: PredicateValue] = [:]
                for (index, path) in request.propertiesToGroupBy.enumerated() { row[path] = key[index] }
                for property in properties {
                    if let function = property.function {
                        row[property.name] = try aggregate(function, property.keyPath, members, value)
                    } else {
                        row[property.name] = try members.first.map { try value(property.keyPath, $0) } ?? .null
                    }
                }
                if let having = request.havingPredicate, try !having.evaluate(with: row) { continue }
                results.append(row)
            }
        } else {
            for object in rows {
                var row: [String: PredicateValue] = [:]
                for property in properties { row[property.name] = try value(property.keyPath, object) }
                results.append(row)
            }
        }
        return try finish(results, for: request, havingApplied: true)
    }

    /// Applies the rest of `request` to results made per row or per group: the having predicate (unless the caller
    /// filtered the groups already), distinctness, the sort of groups and the window (unless the rows were windowed:
    /// ``windowsRows(_:)``).
    package static func finish(_ results: [[String: PredicateValue]], for request: FetchRequest, havingApplied: Bool) throws -> [[String: PredicateValue]] {
        var results = results
        let grouped = !request.propertiesToGroupBy.isEmpty
        if !havingApplied, let having = request.havingPredicate {
            results = try results.filter { try having.evaluate(with: $0) }
        }
        if request.returnsDistinctResults {
            var seen = Set<[String: PredicateValue]>()
            results = results.filter { seen.insert($0).inserted }
        }
        if grouped && !request.sortDescriptors.isEmpty {
            // Result keys may themselves contain dots ("author.name"): look them up whole.
            results = results.enumerated().sorted { a, b in
                for descriptor in request.sortDescriptors {
                    let order = descriptor.compare(a.element[descriptor.keyPath] ?? descriptor.sortValue(of: a.element),
                                                   b.element[descriptor.keyPath] ?? descriptor.sortValue(of: b.element))
                    if order != 0 { return order < 0 }
                }
                return a.offset < b.offset
            }.map(\.element)
        }
        return windowsRows(request) ? results : Array(request.window(results))
    }

    private static func aggregate<Row>(
        _ function: FetchedProperty.Function, _ keyPath: String, _ members: [Row], _ value: (String, Row) throws -> PredicateValue
    ) throws -> PredicateValue {
        if function == .count && (keyPath == "SELF" || keyPath == "*") { return .integer(Int64(members.count)) }
        var values: [PredicateValue] = []
        for member in members {
            let value = try value(keyPath, member)
            if case .array(let elements) = value { values += elements } else if !value.isNull { values.append(value) }
        }
        let evaluator = PredicateEvaluator(root: .null, variables: [:])
        let node = ExpressionNode.keyPath(keyPath)
        switch function {
        case .count: return .integer(Int64(values.count))
        case .sum: return try evaluator.function("sum", [.array(values)], node)
        case .min: return try evaluator.function("min", [.array(values)], node)
        case .max: return try evaluator.function("max", [.array(values)], node)
        case .average: return try evaluator.function("average", [.array(values)], node)
        }
    }
}
