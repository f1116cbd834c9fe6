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

    /// From how many new rows a save puts their unchecked index entries last, each table's sorted: below it, sorting
    /// costs more than the searches it saves.
    static let sortedInsertThreshold = 64

    /// One LMDB write transaction for the whole request: versions are checked first (a mismatch is a conflict and
    /// nothing is written), then old secondary entries that changed are removed, new ones put (uniqueness checked),
    /// link tables rewritten for the relationships given, and rows written with their new versions — except an
    /// updated row whose attributes and to-ones are what it holds already (only its link tables changed), which keeps
    /// its bytes and version. Returns the version of every inserted and updated object.
    func save(_ request: SaveChangesRequest) throws -> [ManagedObjectID: Int64] {
        // Inserts then updates, read in place through the request's own buffers (joining the two arrays copied every
        // change, retaining every array in it, and destroyed the copies again).
        try request.insertedObjects.withUnsafeBufferPointer { inserted in
            try request.updatedObjects.withUnsafeBufferPointer { updated in
                try save(request, written: WrittenChanges(inserted: inserted, updated: updated))
            }
        }
    }

    private func save(_ request: SaveChangesRequest, written: WrittenChanges) throws -> [ManagedObjectID: Int64] {
        let state = try open
        // Inserts then updates, each with its entity's layout, found once.
        let insertCount = request.insertedObjects.count
        var entities: [StoreLayout.EntityLayout] = []
        var inputs: [(attributes: AttributeSlots, toOne: ToOneSlots)] = []
        entities.reserveCapacity(written.count)
        inputs.reserveCapacity(written.count)
        // Changes are read in place by index (a change bound to a local is a copy: every array in it retained).
        for position in written.indices {
            let objectID = written[position].objectID
            guard let entity = state.entity(of: objectID) else {
                throw ManagedObjectContextError(.unknownName, message: "\(objectID) names an entity the model does not have")
            }
            let values: (attributes: AttributeSlots, toOne: ToOneSlots)
            if written[position].keepsStoredValues {
                values = (entity.handle.emptyAttributes, entity.handle.emptyToOne)  // unused: the stored row is kept
            } else {
                values = try slotValues(written[position].values, of: objectID, entity)
                try checkValues(values.attributes, of: objectID, entity)
            }
            entities.append(entity)
            inputs.append(values)
        }
        var versions: [ManagedObjectID: Int64] = [:]
        versions.reserveCapacity(written.count)
        do {
            try state.environment.write { transaction in
                // 1. Read the current rows of updated and deleted objects and check versions.
                var conflicts: [MergeConflict] = []
                func current(_ change: ObjectChange) throws -> StoredRow? {
                    if change.keepsStoredValues {
                        // Only its link tables change: the row is checked and its version read, not decoded (it is
                        // neither rewritten nor re-indexed, so its fields are never looked at). A context that loaded
                        // the object still expects the version it read.
                        let header = try storedHeader(change.objectID, state: state, transaction: transaction)
                        guard let header, header.tag == state.entity(of: change.objectID)?.tag else {
                            throw ManagedObjectContextError(.objectNotFound, message: "\(change.objectID) gains or loses related objects but is not in the store")
                        }
                        if let expected = change.expectedVersion, Int64(bitPattern: header.version) != expected {
                            let row = try readRow(change.objectID, state: state, transaction: transaction)
                            conflicts.append(MergeConflict(objectID: change.objectID, oldVersion: expected, newVersion: Int64(bitPattern: header.version),
                                                           persistedSnapshot: row.map { node(change.objectID, $0, in: state) }))
                        }
                        return StoredRow(entityTag: header.tag, version: header.version, fields: [])
                    }
                    let row = try readRow(change.objectID, state: state, transaction: transaction)
                    if row.map({ Int64(bitPattern: $0.version) }) != change.expectedVersion {
                        conflicts.append(MergeConflict(objectID: change.objectID, oldVersion: change.expectedVersion ?? 0,
                                                       newVersion: row.map { Int64(bitPattern: $0.version) } ?? 0,
                                                       persistedSnapshot: row.map { node(change.objectID, $0, in: state) }))
                    }
                    return row
                }
                let updatedRows = try request.updatedObjects.map(current)
                let deletedRows = try request.deletedObjects.map(current)
                guard conflicts.isEmpty else {
                    throw ManagedObjectContextError(.mergeConflict, message: "\(conflicts.count) object\(conflicts.count == 1 ? "" : "s") changed in the store since they were read",
                                                    conflicts: conflicts)
                }
                // 2. New row states, pointing only at objects that exist (each target checked once per save).
                // Updated objects were found in the store just now (with their entity's tag): a link to one needs no
                // second read of its row.
                var known = [ManagedObjectID: UInt16](minimumCapacity: written.count)
                for position in written.indices where position < insertCount || updatedRows[position - insertCount] != nil {
                    known[written[position].objectID] = entities[position].tag
                }
                var references = References(known: known, deleted: Set(request.deletedObjects.map(\.objectID)))
                var rows: [StoredRow] = []
                rows.reserveCapacity(written.count)
                for position in written.indices {
                    let entity = entities[position], objectID = written[position].objectID
                    let (attributes, toOne) = inputs[position]
                    let before = position < insertCount ? nil : updatedRows[position - insertCount]
                    if written[position].keepsStoredValues, let before {
                        rows.append(before)  // equal to what is stored: neither rewritten nor given a new version
                        continue
                    }
                    var row = StoredRow(entityTag: entity.tag, version: before?.version ?? 1, fields: entity.newFields())
                    for id in entity.fields.indices {
                        let slot = entity.slotPositions[id]
                        guard entity.referenceFields[id] else {
                            if let value = attributes[slot: slot] { row.fields[id] = .attribute(value) }
                            continue
                        }
                        guard let target = toOne[slot: slot] else { continue }
                        // A reference the row already holds was checked when it was written; rewriting it unchanged adds nothing to check.
                        let tag: UInt16
                        if let held = before?.reference(id), held.key == (try? key(of: target)), let known = state.entity(of: target)?.tag,
                           held.entityTag == known, !references.deleted.contains(target) {
                            tag = known
                        } else {
                            // The relationship's check is a reference (a `RelationshipDescription` would be copied, every string in it retained).
                            tag = try checkTarget(target, of: entity.toOneChecks[entity.toOneOfField[id]], owner: objectID, &references,
                                                  state: state, transaction: transaction)
                        }
                        row.fields[id] = .reference(StoredRow.Reference(entityTag: tag, key: try key(of: target)))
                    }
                    rows.append(row)
                }
                // An updated row whose attributes and to-ones are unchanged keeps its bytes and version.
                var rewrites = [Bool](repeating: true, count: written.count)
                for position in insertCount..<written.count {
                    if rows[position] == updatedRows[position - insertCount]! {
                        rewrites[position] = false
                    } else {
                        rows[position].version += 1
                    }
                }
                // 3. Secondary entries, each table by its maintainer: the stale entries of updated and deleted rows
                // go first, then inserted rows' entries are put, then updated rows' new ones (in the order the
                // context sent the objects: inserts in key order, updates sorted by ID) — so a value one row gives
                // up may be taken by another in the same save. Many new rows' unchecked entries wait and go last,
                // each table's in key order (a run of one key's values at once): a bulk import through a context.
                var indexes = IndexUpdates(sortingInserts: insertCount >= Self.sortedInsertThreshold)
                for position in insertCount..<written.count where rewrites[position] {
                    try indexes.update(state.maintainers(of: entities[position]), old: updatedRows[position - insertCount]!, new: rows[position],
                                       key: try key(of: written[position].objectID), row: position, in: transaction)
                }
                for (offset, change) in request.deletedObjects.enumerated() {
                    guard let row = deletedRows[offset], let entity = state.entity(of: change.objectID) else { continue }
                    try indexes.update(state.maintainers(of: entity), old: row, new: nil, key: try key(of: change.objectID), row: -1, in: transaction)
                }
                func violation(_ position: Int, _ constraint: Int) -> ManagedObjectContextError {
                    uniquenessViolation(written[position].objectID, constraint: constraint, rows[position])
                }
                for position in 0..<insertCount {
                    try indexes.insert(state.maintainers(of: entities[position]), row: rows[position], key: try key(of: written[position].objectID),
                                       position: position, in: transaction, violation: violation)
                }
                try indexes.putPending(in: transaction, violation: violation)
                // 4. Link tables, then rows.
                for change in request.deletedObjects {
                    guard let entity = state.entity(of: change.objectID) else { continue }
                    for (relationship, table) in zip(entity.linkChecks, state.linkTables[Int(entity.tag)]) {
                        try rewriteLinks(relationship, in: table, of: change.objectID, to: [], &references, state: state, transaction: transaction)
                    }
                    try state.rows(of: entity).delete(key: try key(of: change.objectID), in: transaction)
                }
                for position in written.indices {
                    let isInsert = position < insertCount
                    let entity = entities[position], objectID = written[position].objectID
                    for (link, table) in state.linkTables[Int(entity.tag)].enumerated() {
                        let relationship = entity.linkChecks[link], slot = entity.linkSlots[link]
                        if let targets = written[position].relationships.members(slot, of: entity.handle) {
                            if isInsert {
                                // A new object has no links yet: its members are put, nothing is read or removed.
                                try insertLinks(relationship, in: table, of: objectID, to: targets, &references, state: state, transaction: transaction)
                            } else {
                                try rewriteLinks(relationship, in: table, of: objectID, to: targets, &references, state: state, transaction: transaction)
                            }
                        } else if let delta = written[position].relationships.changes(slot, of: entity.handle), !relationship.isOrdered {
                            try applyLinkChanges(relationship, in: table, of: objectID, delta, &references, state: state, transaction: transaction)
                        }
                    }
                    versions[objectID] = Int64(bitPattern: rows[position].version)
                    guard rewrites[position] else { continue }
                    // New rows' keys come from a sequence, so they usually go after every row the table holds; a key
                    // that is taken refuses the insert and the save.
                    guard try state.rows(of: entity).write(rows[position], key: try key(of: objectID), inserting: isInsert,
                                                           in: transaction) else {
                        throw ManagedObjectContextError(.constraintViolation, message: "\(objectID) is already in the store")
                    }
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

    /// Records which objects the save touched, under the next change number.
    private func appendToChangeLog(_ request: SaveChangesRequest, state: OpenState, transaction: any KeyValueTransaction) throws {
        let count = request.insertedObjects.count + request.updatedObjects.count + request.deletedObjects.count
        try state.changeLog.append(count: count, in: transaction) { writer in
            // Objects come many of one entity at a time: its tag is looked up again only when the entity changes.
            var last: (namespace: ObjectIdentifier, tag: UInt16)?
            func record(_ kind: UInt8, _ id: ManagedObjectID) throws {
                let namespace = id.namespaceIdentity
                if last?.namespace != namespace { last = (namespace, state.entity(of: id)!.tag) }
                writer.byte(kind)
                writer.bigEndian(last!.tag)
                writer.bigEndian(try key(of: id))
            }
            // By index: the IDs are read in place, not each whole change copied out of its array.
            for index in request.insertedObjects.indices { try record(1, request.insertedObjects[index].objectID) }
            for index in request.updatedObjects.indices { try record(2, request.updatedObjects[index].objectID) }
            for index in request.deletedObjects.indices { try record(3, request.deletedObjects[index].objectID) }
        }
    }

    func rowTable(_ objectID: ManagedObjectID, _ state: OpenState) throws(ManagedObjectContextError) -> RowTable {
        guard let entity = state.entity(of: objectID) else {
            throw ManagedObjectContextError(.unknownName, message: "\(objectID) names an entity the model does not have")
        }
        return state.rows(of: entity)
    }

    /// The row of `objectID`, or `nil` when there is none — or when the row under its key is another entity's (an
    /// ID naming a sub-entity with the key of a parent-entity row is no object, not that row).
    func readRow(_ objectID: ManagedObjectID, state: OpenState, transaction: any KeyValueTransaction) throws -> StoredRow? {
        let row = try withRow(key: try key(of: objectID), in: try rowTable(objectID, state), of: objectID, transaction: transaction) {
            bytes throws(RowDecodingError) in try RowCodec.decode(bytes, layout: layout)
        }
        return row.flatMap { $0.entityTag == state.entity(of: objectID)?.tag ? $0 : nil }
    }

    /// The entity tag and version of the row of `objectID`, checked (checksum, header, field table) but not decoded;
    /// `nil` when there is none. Works in write transactions, unlike ``encodedRow(_:state:transaction:)``.
    func storedHeader(_ objectID: ManagedObjectID, state: OpenState, transaction: any KeyValueTransaction) throws -> (tag: UInt16, version: UInt64)? {
        try withRow(key: try key(of: objectID), in: try rowTable(objectID, state), of: objectID, transaction: transaction) {
            bytes throws(RowDecodingError) in
            let row = try EncodedRow(bytes, layout: layout)
            return (tag: row.entityTag, version: row.version)
        }
    }

    /// Lends the bytes of the row under `key` in `rows` to `read`, in a read or a write transaction (the key's bytes
    /// on the stack); `nil` when there is no row. A row `read` finds damaged is an error naming `objectID`.
    func withRow<Value>(key: UInt64, in rows: RowTable, of objectID: ManagedObjectID, transaction: any KeyValueTransaction,
                        _ read: (UnsafeRawBufferPointer) throws(RowDecodingError) -> Value) throws -> Value? {
        try rows.withBytes(key: key, in: transaction) { bytes in
            do throws(RowDecodingError) {
                return try read(bytes)
            } catch {
                throw unreadableRow(of: objectID, error)
            }
        }
    }

    /// The error for the row of `objectID` that does not decode.
    func unreadableRow(of objectID: ManagedObjectID, _ error: RowDecodingError) -> ManagedObjectContextError {
        ManagedObjectContextError(.storeUnusable, message: "the row of \(objectID) cannot be read: \(error.reason); the store file is corrupted")
    }

    /// The row of `objectID` in a read transaction, checked but not decoded (its bytes are borrowed from the map
    /// until the transaction ends), or `nil` when there is none.
    func encodedRow(_ objectID: ManagedObjectID, state: OpenState, transaction: any KeyValueTransaction) throws -> EncodedRow? {
        try encodedRow(key: try key(of: objectID), in: try rowTable(objectID, state), transaction: transaction, naming: "of \(objectID)")
    }

    /// The row under `key` in the row table `rows` (a fetch knows its table: no lookup by entity name per row);
    /// `naming` completes "the row …" in the error a corrupted row gives. `checkingFields: false` when the caller
    /// decodes every field next, which checks them as it goes.
    func encodedRow(key: UInt64, in rows: RowTable, transaction: any KeyValueTransaction, naming: @autoclosure () -> String,
                    checkingFields: Bool = true) throws -> EncodedRow? {
        guard let found = try rows.bytes(key: key, in: transaction) else { return nil }
        do {
            return try EncodedRow(found, layout: layout, checkingFields: checkingFields)
        } catch {
            throw ManagedObjectContextError(.storeUnusable, message: "the row \(naming()) cannot be read: \(error.reason); the store file is corrupted")
        }
    }

    /// The row under `key`, found with `cursor` on its row table: a cursor moving forward through keys in order
    /// lets LMDB search the leaf page of the row before instead of descending from the root. The checksum and header
    /// are checked, the fields not (the caller decodes or filters them); the bytes stay in the map until the read
    /// transaction ends. `naming` completes "the row …" in the error a corrupted row gives.
    func encodedRow(key: UInt64, in rows: RowTable, cursor: any KeyValueCursor, naming: @autoclosure () -> String) throws -> EncodedRow? {
        guard let found = try rows.bytes(key: key, cursor: cursor) else { return nil }
        do {
            return try EncodedRow(found, layout: layout, checkingFields: false)
        } catch {
            throw ManagedObjectContextError(.storeUnusable, message: "the row \(naming()) cannot be read: \(error.reason); the store file is corrupted")
        }
    }

    /// A change's attribute values and to-one targets in the slot positions of the entity's model handle: as they
    /// are when the context sent them so, placed by name otherwise (a name the entity does not store is refused).
    /// Takes the change's values alone: a whole `ObjectChange` read out of the request's array is a copy that retains
    /// every array in it.
    private func slotValues(_ values: StoredValues, of objectID: ManagedObjectID, _ entity: StoreLayout.EntityLayout) throws -> (attributes: AttributeSlots, toOne: ToOneSlots) {
        if case .slots(let handle, let attributes, let toOne) = values, handle === entity.handle { return (attributes, toOne) }
        let attributes = values.attributeDictionary, toOne = values.toOneDictionary
        for name in attributes.keys {
            guard let index = entity.fieldIndex[name], entity.fields[index].attributeType != nil else {
                throw ManagedObjectContextError(.unknownName, message: "\(entity.name) has no stored attribute \"\(name)\" (object \(objectID))")
            }
        }
        for name in toOne.keys {
            guard let index = entity.fieldIndex[name], entity.fields[index].attributeType == nil else {
                throw ManagedObjectContextError(.unknownName, message: "\(entity.name) has no to-one relationship \"\(name)\" (object \(objectID))")
            }
        }
        return (entity.handle.attributeSlots(attributes), entity.handle.toOneSlots(toOne))
    }

    /// Bad input is refused before anything is written: a value of the wrong type, NaN, a string over its maximum
    /// length.
    private func checkValues(_ attributes: AttributeSlots, of objectID: ManagedObjectID, _ entity: StoreLayout.EntityLayout) throws {
        for id in entity.fields.indices {
            guard let type = entity.attributeTypes[id], let value = attributes[slot: entity.slotPositions[id]] else { continue }
            let name = entity.fields[id].name
            guard value.fits(type) else {
                throw ManagedObjectContextError(.wrongValueType,
                    message: "\(entity.name).\(name) is \(type.coreDataName), but the value is \(value.kindName) \(value) (object \(objectID))")
            }
            if value.isNaN {
                throw ManagedObjectContextError(.wrongValueType,
                    message: "\(entity.name).\(name) cannot hold a NaN \(value.kindName): it is not equal to itself, so it cannot be compared, sorted or indexed (object \(objectID))")
            }
            if case .string(let text) = value, let maximum = entity.fields[id].maximumLength, text.count > maximum {
                throw ManagedObjectContextError(.validation,
                    message: "\(entity.name).\(name) is \(text.count) characters, longer than its maximum length \(maximum) (object \(objectID))")
            }
        }
    }

    /// The error for a row whose values of the uniqueness constraint at `constraint` (a position in its entity's
    /// ``StoreLayout/EntityLayout/uniques``) another row has.
    private func uniquenessViolation(_ id: ManagedObjectID, constraint position: Int, _ row: StoredRow) -> ManagedObjectContextError {
        ManagedObjectContextError(.constraintViolation,
            message: "\(takenValues(layout.entity(id.entityName)!, constraint: position, row)) is already taken; \(id) cannot have it too")
    }

    /// "Owner (a, b) = (1, "x")": the constraint at `position` of `entity` and the values `row` gives it, for the error
    /// a violation of it gives.
    func takenValues(_ entity: StoreLayout.EntityLayout, constraint position: Int, _ row: StoredRow) -> String {
        let constraint = entity.uniques.indices.contains(position) ? entity.uniques[position] : nil
        let names = constraint?.constraint.propertyNames ?? []
        let values = names.map { name in
            entity.fieldIndex[name].map { row.attribute($0).map { "\($0)" } ?? row.reference($0).map { "key \($0.key)" } ?? "nil" } ?? "nil"
        }
        return "\(constraint?.owner ?? entity.name) (\(names.joined(separator: ", "))) = (\(values.joined(separator: ", ")))"
    }

    /// Adds and removes single members of an unordered relationship's `members/…` table: one put or delete per
    /// member, nothing read.
    private func applyLinkChanges(_ relationship: RelationshipCheck, in table: ToManyTable, of objectID: ManagedObjectID, _ delta: ToManyChange,
                                  _ references: inout References, state: OpenState, transaction: any KeyValueTransaction) throws {
        let owner = try key(of: objectID)
        for target in delta.removed {
            // A member's value holds its entity tag, which its ID names; an object of no entity of the model was
            // never a member.
            guard let tag = state.entity(of: target)?.tag else { continue }
            try table.remove(StoredRow.Reference(entityTag: tag, key: try key(of: target)), from: owner, in: transaction)
        }
        for target in delta.added {
            let tag = try checkTarget(target, of: relationship, owner: objectID, &references, state: state, transaction: transaction)
            try table.add(StoredRow.Reference(entityTag: tag, key: try key(of: target)), to: owner, at: 0, in: transaction)
        }
    }

    /// Puts the links of a new object (which has none yet): one put per member, nothing read or removed.
    private func insertLinks(_ relationship: RelationshipCheck, in table: ToManyTable, of objectID: ManagedObjectID, to targets: [ManagedObjectID],
                             _ references: inout References, state: OpenState, transaction: any KeyValueTransaction) throws {
        let owner = try key(of: objectID)
        for (position, target) in targets.enumerated() {
            let tag = try checkTarget(target, of: relationship, owner: objectID, &references, state: state, transaction: transaction)
            let member = StoredRow.Reference(entityTag: tag, key: try key(of: target))
            // The owner's key comes from the sequence, so its first entry usually goes after every entry the table
            // holds: appended without a search, else put in place. An unordered relationship's later members go
            // under the same key (`append` refuses an equal key), among its values.
            if table.isOrdered || position == 0 {
                do {
                    try table.add(member, to: owner, at: position, options: .append, in: transaction)
                    continue
                } catch LMDBError.keyExists {}
            }
            try table.add(member, to: owner, at: position, in: transaction)
        }
    }

    /// Replaces the members of one object's relationship in its table (`members/…` when unordered, `link/…` when
    /// ordered).
    private func rewriteLinks(_ relationship: RelationshipCheck, in table: ToManyTable, of objectID: ManagedObjectID, to targets: [ManagedObjectID],
                              _ references: inout References, state: OpenState, transaction: any KeyValueTransaction) throws {
        let owner = try key(of: objectID)
        guard !table.isOrdered, !targets.isEmpty else {
            try table.removeAll(of: owner, in: transaction)
            for (position, target) in targets.enumerated() {
                let tag = try checkTarget(target, of: relationship, owner: objectID, &references, state: state, transaction: transaction)
                try table.add(StoredRow.Reference(entityTag: tag, key: try key(of: target)), to: owner, at: position, in: transaction)
            }
            return
        }
        // Unordered: write only the difference, so adding one member to a large relationship costs one put (a bulk
        // load that grows many-to-many relationships batch by batch stays linear). Members are told apart by key,
        // which is unique within the destination's family of entities: each is checked to be of that family first.
        var wanted: [UInt64: ManagedObjectID] = [:]
        wanted.reserveCapacity(targets.count)
        for target in targets {
            _ = try heldEntity(target, of: relationship, owner: objectID, state: state)
            wanted[try key(of: target)] = target
        }
        for member in try table.members(of: owner, in: transaction) where wanted.removeValue(forKey: member.key) == nil {
            try table.remove(member, from: owner, in: transaction)
        }
        // Only members not linked before are checked: a large relationship gaining one costs one lookup.
        for (targetKey, target) in wanted {
            let tag = try checkTarget(target, of: relationship, owner: objectID, &references, state: state, transaction: transaction)
            try table.add(StoredRow.Reference(entityTag: tag, key: targetKey), to: owner, at: 0, in: transaction)
        }
    }

    /// What a save writes and deletes, for checking the objects its relationships point at.
    struct References {
        /// Objects known to exist, with their entity's tag: the save's inserts, the updated objects it found in the
        /// store, and targets found there already in this save (a thousand objects pointing at one department read
        /// its row once).
        var known: [ManagedObjectID: UInt16]
        let deleted: Set<ManagedObjectID>
    }

    /// The entity of `target`, which `relationship` must be able to hold (its destination or a sub-entity of it).
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/wrongValueType`` naming the owner,
    ///   the relationship and the object.
    func heldEntity(_ target: ManagedObjectID, of relationship: RelationshipCheck, owner: ManagedObjectID,
                    state: OpenState) throws(ManagedObjectContextError) -> StoreLayout.EntityLayout {
        guard let entity = state.entity(of: target), relationship.accepts(entity.tag) else {
            throw notHeld(target, by: relationship, owner: owner)
        }
        return entity
    }

    private func notHeld(_ target: ManagedObjectID, by relationship: RelationshipCheck, owner: ManagedObjectID) -> ManagedObjectContextError {
        ManagedObjectContextError(.wrongValueType,
            message: "\(owner.entityName).\(relationship.name) holds \(relationship.destinationEntityName) objects, not \(target) (object \(owner))")
    }

    /// Checks that `target` may be held by `relationship` and exists — among the save's inserts and the updates it
    /// found, or in the store as the entity its ID names, and not deleted by the same save — and returns its entity
    /// tag. A reference to anything else would be written as a key that leads nowhere.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/wrongValueType`` for an object of
    ///   another entity, or ``ManagedObjectContextError/Code/objectNotFound`` naming the owner, the relationship and
    ///   the missing object.
    func checkTarget(_ target: ManagedObjectID, of relationship: RelationshipCheck, owner: ManagedObjectID,
                             _ references: inout References, state: OpenState, transaction: any KeyValueTransaction) throws -> UInt16 {
        // Known already (its tag with it): only the kind of object is checked, without finding its entity.
        if let tag = references.known[target] {
            guard relationship.accepts(tag) else { throw notHeld(target, by: relationship, owner: owner) }
            return tag
        }
        let entity = try heldEntity(target, of: relationship, owner: owner, state: state)
        let stored = try references.deleted.contains(target) ? nil
            : state.rows(of: entity).entityTag(key: try key(of: target), in: transaction)
        guard stored == entity.tag else {
            throw ManagedObjectContextError(.objectNotFound,
                message: "\(owner.entityName).\(relationship.name) of \(owner) points at \(target), which is not in the store\(references.deleted.contains(target) ? " (the same save deletes it)" : "")")
        }
        references.known[target] = entity.tag
        return entity.tag
    }
}

/// A save request's inserted then updated changes as one sequence of positions, each read in place (an addressor
/// into the request's buffers: reading a change's ID or members copies nothing else of it). Valid only while the
/// buffers are (`LMDBIncrementalStore.save(_:)`).
private struct WrittenChanges {
    let inserted: UnsafeBufferPointer<ObjectChange>
    let updated: UnsafeBufferPointer<ObjectChange>

    var count: Int { inserted.count + updated.count }
    var indices: Range<Int> { 0..<count }

    subscript(position: Int) -> ObjectChange {
        unsafeAddress {
            precondition(position >= 0 && position < count, "a change position past the request's changes")
            return position < inserted.count ? inserted.baseAddress! + position : updated.baseAddress! + (position - inserted.count)
        }
    }
}
