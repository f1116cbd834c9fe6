import Foundation
import LMDB
import ObjectGraph

extension LMDBIncrementalStore {
    /// Runs a fetch or a save; see ``IncrementalStore/execute(_:)``.
    public func execute(_ request: PersistentStoreRequest) throws -> PersistentStoreResult {
        switch request {
        case .fetch(let fetch): return try self.fetch(fetch)
        case .save(let save): return .versions(try self.save(save))
        }
    }

    /// One LMDB write transaction for the whole request: versions are checked first (a mismatch is a conflict and
    /// nothing is written), then old secondary entries that changed are removed, new ones put (uniqueness checked),
    /// link tables rewritten for the relationships given, and rows written with their new versions — except an
    /// updated row whose attributes and to-ones are what it holds already (only its link tables changed), which keeps
    /// its bytes and version. Returns the version of every inserted and updated object.
    func save(_ request: SaveChangesRequest) throws -> [ManagedObjectID: Int64] {
        let state = try open
        for change in request.insertedObjects + request.updatedObjects { try checkValues(change) }
        let maintainer = IndexEntries()
        var versions: [ManagedObjectID: Int64] = [:]
        versions.reserveCapacity(request.insertedObjects.count + request.updatedObjects.count)
        do {
            try state.environment.write { transaction in
                // 1. Read the current rows and check versions.
                var old: [ManagedObjectID: StoredRow] = [:]
                var conflicts: [MergeConflict] = []
                for change in request.updatedObjects + request.deletedObjects {
                    let current = try readRow(change.objectID, state: state, transaction: transaction)
                    if let current { old[change.objectID] = current }
                    if current.map({ Int64(bitPattern: $0.version) }) != change.expectedVersion {
                        conflicts.append(MergeConflict(objectID: change.objectID, oldVersion: change.expectedVersion ?? 0,
                                                       newVersion: current.map { Int64(bitPattern: $0.version) } ?? 0,
                                                       persistedSnapshot: current.map { node(change.objectID, $0, in: state) }))
                    }
                }
                guard conflicts.isEmpty else {
                    throw ManagedObjectContextError(.mergeConflict, message: "\(conflicts.count) object\(conflicts.count == 1 ? "" : "s") changed in the store since they were read",
                                                    conflicts: conflicts)
                }
                // 2. New row states, pointing only at objects that exist.
                let references = References(inserted: Set(request.insertedObjects.map(\.objectID)),
                                            deleted: Set(request.deletedObjects.map(\.objectID)))
                for change in request.insertedObjects + request.updatedObjects {
                    let before = old[change.objectID]?.toOne
                    for (name, target) in change.toOne {
                        guard let relationship = model.relationship(named: name, in: change.objectID.entityName) else { continue }
                        // A reference the row already holds was checked when it was written; rewriting it unchanged adds nothing to check.
                        if let held = before?[name], held.key == (try? key(of: target)), held.entityTag == layout.entity(target.entityName)?.tag,
                           !references.deleted.contains(target) { continue }
                        _ = try checkTarget(target, of: relationship, owner: change.objectID, references, state: state, transaction: transaction)
                    }
                }
                var new: [ManagedObjectID: StoredRow] = [:]
                for change in request.insertedObjects {
                    let rows = try rowsDatabase(change.objectID, state)
                    let exists = try rows.contains(key: Self.keyBytes(try key(of: change.objectID)), in: transaction)
                    if exists { throw ManagedObjectContextError(.constraintViolation, message: "\(change.objectID) is already in the store") }
                    new[change.objectID] = try storedRow(change, version: 1)
                }
                var unchanged: Set<ManagedObjectID> = []
                for change in request.updatedObjects {
                    let current = old[change.objectID]!
                    var row = try storedRow(change, version: current.version)
                    if row == current {
                        unchanged.insert(change.objectID)
                    } else {
                        row.version += 1
                    }
                    new[change.objectID] = row
                }
                // 3. Secondary entries: remove the old ones that changed, then add the new ones.
                var oldEntries: [ManagedObjectID: (indexes: [IndexEntry], uniques: [IndexEntry])] = [:]
                var newEntries: [ManagedObjectID: (indexes: [IndexEntry], uniques: [IndexEntry])] = [:]
                for (id, row) in old { oldEntries[id] = maintainer.entries(for: row, key: try key(of: id), entity: layout.entity(id.entityName)!) }
                for (id, row) in new { newEntries[id] = maintainer.entries(for: row, key: try key(of: id), entity: layout.entity(id.entityName)!) }
                for (id, entries) in oldEntries {
                    let keep = Set((newEntries[id]?.indexes ?? []) + (newEntries[id]?.uniques ?? []))
                    for entry in entries.indexes + entries.uniques where !keep.contains(entry) {
                        if entry.isDuplicate {
                            try database(entry.database, in: state).delete(key: entry.key, value: entry.value, in: transaction)
                        } else {
                            try database(entry.database, in: state).delete(key: entry.key, in: transaction)
                        }
                    }
                }
                for (id, entries) in newEntries.sorted(by: { $0.key < $1.key }) {
                    let existing = Set((oldEntries[id]?.indexes ?? []) + (oldEntries[id]?.uniques ?? []))
                    for entry in entries.indexes where !existing.contains(entry) {
                        try database(entry.database, in: state).put(entry.value, forKey: entry.key, in: transaction)
                    }
                    for entry in entries.uniques where !existing.contains(entry) {
                        do {
                            try database(entry.database, in: state).put(entry.value, forKey: entry.key, in: transaction, options: .noOverwrite)
                        } catch LMDBError.keyExists {
                            throw uniquenessViolation(id, entry, new[id]!)
                        }
                    }
                }
                // 4. Link tables, then rows.
                for change in request.deletedObjects {
                    for relationship in layout.entity(change.objectID.entityName)!.linkRelationships {
                        try rewriteLinks(relationship, of: change.objectID, to: [], references, state: state, transaction: transaction)
                    }
                    try rowsDatabase(change.objectID, state).delete(key: Self.keyBytes(try key(of: change.objectID)), in: transaction)
                }
                for (position, change) in (request.insertedObjects + request.updatedObjects).enumerated() {
                    let isInsert = position < request.insertedObjects.count
                    for relationship in layout.entity(change.objectID.entityName)!.linkRelationships {
                        if let targets = change.toMany[relationship.name] {
                            // A new object has no links yet: an empty relationship has nothing to write or remove.
                            if isInsert && targets.isEmpty { continue }
                            try rewriteLinks(relationship, of: change.objectID, to: targets, references, state: state, transaction: transaction)
                        } else if let delta = change.toManyChanges[relationship.name], !relationship.isOrdered {
                            try applyLinkChanges(relationship, of: change.objectID, delta, references, state: state, transaction: transaction)
                        }
                    }
                    let row = new[change.objectID]!
                    versions[change.objectID] = Int64(bitPattern: row.version)
                    if !isInsert && unchanged.contains(change.objectID) { continue }
                    let entity = layout.entity(change.objectID.entityName)!
                    let blob = RowCodec.encode(row, entity: entity, modelHash: modelHashPrefix)
                    try rowsDatabase(change.objectID, state).put(blob, forKey: Self.keyBytes(try key(of: change.objectID)), in: transaction)
                }
                try appendToChangeLog(request, state: state, transaction: transaction)
            }
        } catch let error as ManagedObjectContextError {
            throw error
        } catch {
            throw storeError(error, "the save failed and wrote nothing")
        }
        return versions
    }

    /// Records which objects the save touched, under the next change number, and forgets saves older than the log's
    /// length.
    private func appendToChangeLog(_ request: SaveChangesRequest, state: OpenState, transaction: Transaction) throws {
        let sequences = database(StoreLayout.sequenceDatabase, in: state)
        let log = database(StoreLayout.changesDatabase, in: state)
        let counterKey = Array(StoreLayout.changeSequenceKey.utf8)
        let number = try sequences.counter(forKey: counterKey, in: transaction) + 1
        try sequences.put(Self.keyBytes(number), forKey: counterKey, in: transaction)
        var payload: [UInt8] = []
        for (kind, changes) in [(UInt8(1), request.insertedObjects), (2, request.updatedObjects), (3, request.deletedObjects)] {
            for change in changes {
                payload.append(kind)
                TupleEncoding.appendBigEndian(layout.entity(change.objectID.entityName)!.tag, to: &payload)
                TupleEncoding.appendBigEndian(try key(of: change.objectID), to: &payload)
            }
        }
        try log.put(payload, forKey: Self.keyBytes(number), in: transaction)
        if number > StoreLayout.changeLogLength {
            try log.delete(key: Self.keyBytes(number - StoreLayout.changeLogLength), in: transaction)
        }
    }

    func rowsDatabase(_ objectID: ManagedObjectID, _ state: OpenState) throws(ManagedObjectContextError) -> Database {
        guard let entity = layout.entity(objectID.entityName) else {
            throw ManagedObjectContextError(.unknownName, message: "\(objectID) names an entity the model does not have")
        }
        return state.rows(of: entity)
    }

    /// The row of `objectID`, or `nil` when there is none — or when the row under its key is another entity's (an
    /// ID naming a sub-entity with the key of a parent-entity row is no object, not that row).
    func readRow(_ objectID: ManagedObjectID, state: OpenState, transaction: Transaction) throws -> StoredRow? {
        let rows = try rowsDatabase(objectID, state)
        let decoded = try rows.withValue(forKey: Self.keyBytes(try key(of: objectID)), in: transaction) { bytes in
            Result { () throws(RowDecodingError) in try RowCodec.decode(bytes, layout: layout) }
        }
        switch decoded {
        case nil: return nil
        case .success(let row)?: return row.entityTag == layout.entity(objectID.entityName)?.tag ? row : nil
        case .failure(let error)?:
            throw ManagedObjectContextError(.storeUnusable, message: "the row of \(objectID) cannot be read: \(error.reason); the store file is corrupted")
        }
    }

    /// The row of `objectID` in a read transaction, checked but not decoded (its bytes are borrowed from the map
    /// until the transaction ends), or `nil` when there is none.
    func encodedRow(_ objectID: ManagedObjectID, state: OpenState, transaction: Transaction) throws -> EncodedRow? {
        try encodedRow(key: try key(of: objectID), in: try rowsDatabase(objectID, state), transaction: transaction, naming: "of \(objectID)")
    }

    /// The row under `key` in the row table `rows` (a fetch knows its table: no lookup by entity name per row);
    /// `naming` completes "the row …" in the error a corrupted row gives.
    func encodedRow(key: UInt64, in rows: Database, transaction: Transaction, naming: @autoclosure () -> String) throws -> EncodedRow? {
        let found = try withUnsafeBytes(of: key.bigEndian) { try rows.borrowedValue(forKey: $0, in: transaction) }
        guard let found else { return nil }
        do {
            return try EncodedRow(found, layout: layout)
        } catch {
            throw ManagedObjectContextError(.storeUnusable, message: "the row \(naming()) cannot be read: \(error.reason); the store file is corrupted")
        }
    }

    private func storedRow(_ change: ObjectChange, version: UInt64) throws -> StoredRow {
        var references: [String: StoredRow.Reference] = [:]
        for (name, target) in change.toOne {
            guard let tag = layout.entity(target.entityName)?.tag else {
                throw ManagedObjectContextError(.wrongValueType, message: "\(change.objectID).\(name) points at an entity the model does not have")
            }
            references[name] = StoredRow.Reference(entityTag: tag, key: try key(of: target))
        }
        return StoredRow(entityTag: layout.entity(change.objectID.entityName)!.tag, version: version, attributes: change.attributes, toOne: references)
    }

    /// Bad input is refused before anything is written: a value of the wrong type, NaN, a string over its maximum
    /// length, an attribute or relationship the entity does not have.
    private func checkValues(_ change: ObjectChange) throws {
        let entityName = change.objectID.entityName
        guard let entity = layout.entity(entityName) else {
            throw ManagedObjectContextError(.unknownName, message: "\(change.objectID) names an entity the model does not have")
        }
        for (name, value) in change.attributes {
            guard let index = entity.fieldIndex[name], case .attribute(let attribute) = entity.fields[index].kind else {
                throw ManagedObjectContextError(.unknownName, message: "\(entityName) has no stored attribute \"\(name)\" (object \(change.objectID))")
            }
            guard value.fits(attribute.type) else {
                throw ManagedObjectContextError(.wrongValueType,
                    message: "\(entityName).\(name) is \(attribute.type.coreDataName), but the value is \(value.kindName) \(value) (object \(change.objectID))")
            }
            if value.isNaN {
                throw ManagedObjectContextError(.wrongValueType,
                    message: "\(entityName).\(name) cannot hold a NaN \(value.kindName): it is not equal to itself, so it cannot be compared, sorted or indexed (object \(change.objectID))")
            }
            if case .string(let text) = value, let maximum = attribute.validation.maximumLength, text.count > maximum {
                throw ManagedObjectContextError(.validation,
                    message: "\(entityName).\(name) is \(text.count) characters, longer than its maximum length \(maximum) (object \(change.objectID))")
            }
        }
        for name in change.toOne.keys where entity.fieldIndex[name] == nil {
            throw ManagedObjectContextError(.unknownName, message: "\(entityName) has no to-one relationship \"\(name)\" (object \(change.objectID))")
        }
    }

    private func uniquenessViolation(_ id: ManagedObjectID, _ entry: IndexEntry, _ row: StoredRow) -> ManagedObjectContextError {
        let entity = layout.entity(id.entityName)!
        let constraint = entity.uniques.first { StoreLayout.uniqueDatabase(entity: $0.owner, number: $0.number) == entry.database }
        let names = constraint?.constraint.propertyNames ?? []
        let values = names.map { row.attributes[$0].map { "\($0)" } ?? row.toOne[$0].map { "key \($0.key)" } ?? "nil" }
        return ManagedObjectContextError(.constraintViolation,
            message: "\(constraint?.owner ?? id.entityName) (\(names.joined(separator: ", "))) = (\(values.joined(separator: ", "))) is already taken; \(id) cannot have it too")
    }

    /// Replaces the link entries of one object's relationship.
    /// Adds and removes single members of an unordered link table: one put or delete per member, nothing read.
    private func applyLinkChanges(_ relationship: RelationshipDescription, of objectID: ManagedObjectID, _ delta: ToManyChange,
                                  _ references: References, state: OpenState, transaction: Transaction) throws {
        let table = database(StoreLayout.linkDatabase(entity: layout.declaringEntity(of: relationship.name, in: objectID.entityName),
                                                      relationship: relationship.name), in: state)
        let owner = Self.keyBytes(try key(of: objectID))
        for target in delta.removed {
            _ = try table.delete(key: owner + Self.keyBytes(try key(of: target)), in: transaction)
        }
        for target in delta.added {
            let tag = try checkTarget(target, of: relationship, owner: objectID, references, state: state, transaction: transaction)
            let targetKey = Self.keyBytes(try key(of: target))
            try table.put(targetKey + [UInt8(tag >> 8), UInt8(tag & 0xFF)], forKey: owner + targetKey, in: transaction)
        }
    }

    private func rewriteLinks(_ relationship: RelationshipDescription, of objectID: ManagedObjectID, to targets: [ManagedObjectID],
                              _ references: References, state: OpenState, transaction: Transaction) throws {
        let table = database(StoreLayout.linkDatabase(entity: layout.declaringEntity(of: relationship.name, in: objectID.entityName),
                                                      relationship: relationship.name), in: state)
        let owner = Self.keyBytes(try key(of: objectID))
        if !relationship.isOrdered {
            // Unordered: write only the difference, so adding one member to a large relationship costs one put (a
            // bulk load that grows many-to-many relationships batch by batch stays linear).
            var wanted: [[UInt8]: (target: ManagedObjectID, key: [UInt8])] = [:]
            for target in targets {
                let targetKey = Self.keyBytes(try key(of: target))
                wanted[owner + targetKey] = (target, targetKey)
            }
            try table.withCursor(in: transaction) { cursor in
                var entry = try cursor.seek(atOrAfter: owner)
                while let current = entry, current.key.starts(with: owner) {
                    if wanted.removeValue(forKey: Array(current.key)) != nil {
                        entry = try cursor.next()
                    } else {
                        try cursor.deleteCurrent()
                        entry = try cursor.current()
                    }
                }
            }
            // Only members not linked before are checked: a large relationship gaining one costs one lookup.
            for (linkKey, member) in wanted {
                let tag = try checkTarget(member.target, of: relationship, owner: objectID, references, state: state, transaction: transaction)
                try table.put(member.key + [UInt8(tag >> 8), UInt8(tag & 0xFF)], forKey: linkKey, in: transaction)
            }
            return
        }
        try table.withCursor(in: transaction) { cursor in
            var entry = try cursor.seek(atOrAfter: owner)
            while let current = entry, current.key.starts(with: owner) {
                try cursor.deleteCurrent()
                entry = try cursor.current()
            }
        }
        for (position, target) in targets.enumerated() {
            let tag = try checkTarget(target, of: relationship, owner: objectID, references, state: state, transaction: transaction)
            let targetKey = Self.keyBytes(try key(of: target))
            var linkKey = owner
            if relationship.isOrdered {
                withUnsafeBytes(of: UInt32(position).bigEndian) { linkKey.append(contentsOf: $0) }
            } else {
                linkKey += targetKey
            }
            try table.put(targetKey + [UInt8(tag >> 8), UInt8(tag & 0xFF)], forKey: linkKey, in: transaction)
        }
    }

    /// What a save inserts and deletes, for checking the objects its relationships point at.
    struct References {
        let inserted: Set<ManagedObjectID>
        let deleted: Set<ManagedObjectID>
    }

    /// Checks that `target` may be held by `relationship` and exists — among the save's inserts, or in the store as
    /// the entity its ID names, and not deleted by the same save — and returns its entity tag. A reference to
    /// anything else would be written as a key that leads nowhere.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/wrongValueType`` for an object of
    ///   another entity, or ``ManagedObjectContextError/Code/objectNotFound`` naming the owner, the relationship and
    ///   the missing object.
    private func checkTarget(_ target: ManagedObjectID, of relationship: RelationshipDescription, owner: ManagedObjectID,
                             _ references: References, state: OpenState, transaction: Transaction) throws -> UInt16 {
        guard let entity = layout.entity(target.entityName), model.entity(target.entityName, isKindOf: relationship.destinationEntityName) else {
            throw ManagedObjectContextError(.wrongValueType,
                message: "\(owner.entityName).\(relationship.name) holds \(relationship.destinationEntityName) objects, not \(target) (object \(owner))")
        }
        if references.inserted.contains(target) { return entity.tag }
        let stored = try references.deleted.contains(target) ? nil
            : rowsDatabase(target, state).withValue(forKey: Self.keyBytes(try key(of: target)), in: transaction) { RowCodec.entityTag($0) }
        guard stored == entity.tag else {
            throw ManagedObjectContextError(.objectNotFound,
                message: "\(owner.entityName).\(relationship.name) of \(owner) points at \(target), which is not in the store\(references.deleted.contains(target) ? " (the same save deletes it)" : "")")
        }
        return entity.tag
    }
}
