extension ManagedObject {
    /// The objects a fetched property finds for this object: a fetch of the property's entity with its predicate,
    /// `$FETCH_SOURCE` standing for this object and `$FETCHED_PROPERTY` for the property (a dictionary with its
    /// `name`, `entityName` and `userInfo`), as Core Data evaluates fetched properties.
    ///
    /// The result is kept on the object, as Core Data keeps it: later changes to the store or the context do not
    /// change it until the object is refreshed (``ManagedObjectContext/refresh(_:mergeChanges:)``) or turned back
    /// into a fault. ``value(forKey:)`` answers the same, or `nil` when the fetch fails.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/unknownName`` when the entity
    ///   has no fetched property named `key`, ``ManagedObjectContextError/Code/objectNotFound`` when the object has no
    ///   context, or the fetch's error.
    public func fetchedObjects(forKey key: String) throws -> [ManagedObject] {
        guard case .fetchedProperty(let property) = handle.property(named: key) else {
            throw ManagedObjectContextError(.unknownName, message: "the entity \(entityName) has no fetched property \"\(key)\"")
        }
        guard let context = managedObjectContext else {
            throw ManagedObjectContextError(.objectNotFound, message: "\(objectID) has no context to fetch \(entityName).\(key) in")
        }
        if let cached = fetchedResults[key] {
            // An object saved since has a permanent ID now: its temporary one no longer leads to it, so fetch again.
            let objects = cached.map { $0.isTemporaryID ? context.registeredObject(for: $0) : context.object(with: $0) }
            if objects.allSatisfy({ $0 != nil }) { return objects.map { $0! } }
        }
        var predicate: FetchPredicate? = nil
        if let format = property.predicateFormat {
            let described: PredicateValue = .dictionary([
                "name": .string(property.name), "entityName": .string(property.entityName),
                "userInfo": .dictionary(property.userInfo.mapValues(PredicateValue.string)),
            ])
            predicate = try FetchPredicate(format: format)
                .withSubstitutionVariables(["FETCH_SOURCE": predicateValue, "FETCHED_PROPERTY": described])
        }
        let results = try context.fetch(FetchRequest(entityName: property.entityName, predicate: predicate))
        fetchedResults[key] = results.map(\.objectID)
        return results
    }
}
