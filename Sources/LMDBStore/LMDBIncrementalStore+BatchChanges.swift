import LMDB
import ObjectGraph

extension LMDBIncrementalStore: BatchUpdatingStore {
    /// Updates the rows a batch update matches in one write transaction, without managed objects: the rows found by
    /// the request's plan (an index range when the predicate allows one), each new value evaluated on the stored row
    /// and checked (``BatchUpdateValues``), the row rewritten with a new version and only the index entries whose
    /// values changed replaced — new entries checked for uniqueness after every stale one is gone, as a save does —
    /// and the update recorded in the change log. A row whose values do not change is counted but not rewritten.
    public func executeBatchUpdate(_ request: BatchUpdateRequest) throws -> BatchResult {
        let state = try open
        let values = try BatchUpdateValues(request, model: model)
        var fetch = FetchRequest(entityName: request.entityName, predicate: request.predicate)
        fetch.includesSubentities = request.includesSubentities
        var updated: [Candidate] = []
        do {
            try state.environment.write { transaction in
                updated = []  // the engine runs the body again after growing a full map
                let matches = try matchingRows(fetch, state: state, transaction: transaction)
                var writer = BatchRowWriter(store: self, state: state, transaction: transaction)
                guard let requested = layout.entity(request.entityName) else {
                    throw ManagedObjectContextError(.unknownName, message: "the model has no entity named \"\(request.entityName)\"")
                }
                // The rows (the entity's and its sub-entities', in their root's table) read and rewritten in key order
                // through one cursor.
                let rows = state.rows(of: requested)
                try rows.withCursor(in: transaction) { cursor in
                    // Each entity's fields of the updated attributes, found once per entity (sub-entities have their own).
                    var fieldsByTag: [UInt16: [Int]] = [:]
                    func fields(of entity: StoreLayout.EntityLayout) -> [Int] {
                        if let known = fieldsByTag[entity.tag] { return known }
                        let found = values.attributeNames.map { entity.fieldIndex[$0]! }
                        fieldsByTag[entity.tag] = found
                        return found
                    }
                    /// The new values of `candidate`'s row, evaluated on its stored values, and the row decoded.
                    func evaluate(_ candidate: Candidate) throws -> (values: [AttributeValue?], row: StoredRow)? {
                        guard let entity = layout.entity(tag: candidate.tag), let bytes = try rows.bytes(key: candidate.key, cursor: cursor) else { return nil }
                        let id = state.identities.objectID(entityTag: candidate.tag, key: candidate.key)
                        do {
                            let view = RowView(store: self, state: state, transaction: transaction, id: id, row: try EncodedRow(bytes, layout: layout))
                            let new = try values.values(for: view, objectID: id)
                            if let failure = view.failure { throw failure }
                            // Decoded before anything is written: a put may move the page the bytes are borrowed from.
                            return (new, try RowCodec.decode(bytes, layout: layout))
                        } catch let error as RowDecodingError {
                            throw corruptedRow(candidate.key, in: entity.root, error)
                        }
                    }
                    // Expressions that read other rows see them all as they were: every value is worked out first.
                    let evaluated = values.readsOtherObjects ? try matches.map(evaluate) : []
                    for (position, candidate) in matches.enumerated() {
                        guard let (new, old) = values.readsOtherObjects ? evaluated[position] : try evaluate(candidate),
                              let entity = layout.entity(tag: candidate.tag) else { continue }
                        var row = old
                        for (field, value) in zip(fields(of: entity), new) { row.fields[field] = value.map(RowField.attribute) }
                        updated.append(candidate)
                        guard row != old else { continue }
                        row.version += 1
                        try writer.rewrite(candidate, of: entity, from: old, to: row, position: position, cursor: cursor)
                    }
                }
                try writer.putNewEntries { position, constraint in
                    let candidate = matches[position]
                    let id = state.identities.objectID(entityTag: candidate.tag, key: candidate.key)
                    let row = try? readRow(id, state: state, transaction: transaction)
                    let taken = row.map { takenValues(layout.entity(tag: candidate.tag)!, constraint: constraint, $0) } ?? "a unique value"
                    return ManagedObjectContextError(.constraintViolation,
                        message: "the batch update of \(request.entityName) gives \(id) \(taken), which another object has; nothing was updated")
                }
                try recordBatch(updated: updated, state: state, transaction: transaction)
            }
        } catch let error as ManagedObjectContextError {
            throw error
        } catch {
            throw storeError(error, "the batch update of \(request.entityName) failed and wrote nothing")
        }
        return BatchResult(count: updated.count, objectIDs: request.resultType == .objectIDs ? updated.map { objectID($0, state) } : nil)
    }

    /// The rows `request` matches, windowed, in row-key order: found by the request's plan in `transaction` — a
    /// write transaction's, so nothing changes between finding the rows and changing them.
    func matchingRows(_ request: FetchRequest, state: OpenState, transaction: any KeyValueTransaction) throws -> [Candidate] {
        try request.validate(for: model)
        guard let entity = layout.entity(request.entityName) else {
            throw ManagedObjectContextError(.unknownName, message: "the model has no entity named \"\(request.entityName)\"")
        }
        let run = PlanRun(try prepared(request, state: state, transaction: transaction, reusable: false), for: request, entity: entity,
                          store: self, state: state, transaction: transaction)
        var found = run.answersFromCandidates ? Array(try run.candidates())
            : try run.views().map { Candidate(key: UInt64(bitPattern: $0.key), tag: $0.row.entityTag) }
        found.sort { $0.key < $1.key }
        return found
    }

    fileprivate func objectID(_ candidate: Candidate, _ state: OpenState) -> ManagedObjectID {
        state.identities.objectID(entityTag: candidate.tag, key: candidate.key)
    }

    /// Records what one transaction of a batch wrote in the change log — the rows it inserted (one entity's, under
    /// consecutive keys), updated and deleted — or, for more rows than the log keeps, moves the log's number on
    /// without records, so a process catching up across it refreshes everything.
    func recordBatch(inserted: (tag: UInt16, keys: Range<UInt64>)? = nil, updated: [Candidate] = [], deleted: [Candidate] = [],
                     state: OpenState, transaction: any KeyValueTransaction) throws {
        let count = (inserted?.keys.count ?? 0) + updated.count + deleted.count
        guard count > 0 else { return }
        guard count <= StoreLayout.changeLogRecords else {
            try state.changeLog.skipNumber(in: transaction)
            return
        }
        try state.changeLog.append(count: count, in: transaction) { writer in
            func record(_ kind: UInt8, _ tag: UInt16, _ key: UInt64) {
                writer.byte(kind)
                writer.bigEndian(tag)
                writer.bigEndian(key)
            }
            if let inserted { for key in inserted.keys { record(1, inserted.tag, key) } }
            for row in updated { record(2, row.tag, row.key) }
            for row in deleted { record(3, row.tag, row.key) }
        }
    }
}

extension LMDBIncrementalStore: BatchDeletingStore {
    /// Deletes the rows a batch delete names in one write transaction, without managed objects, honouring delete
    /// rules from the rows and tables alone: a cascade deletes the rows a deleted row's to-ones point at and its
    /// to-many members (read from its link table or its inverse's to-one index), a nullify clears the deleted row
    /// from the other side (a to-one field rewritten, a link removed), a deny stops the request when a related object
    /// that is not deleted too remains. Every deleted row's index entries and links go with it; the change log
    /// records the deleted rows and those rewritten.
    ///
    /// The result counts every object deleted, the named ones first and then those their cascade rules took with
    /// them, and lists them for ``BatchResultType/objectIDs`` — what a context merging the change must let go of.
    public func executeBatchDelete(_ request: BatchDeleteRequest) throws -> BatchResult {
        let state = try open
        var deleted: [Candidate] = []
        do {
            try state.environment.write { transaction in
                var deletion = BatchDeletion(store: self, state: state, transaction: transaction)
                if let fetch = request.fetchRequest {
                    try deletion.collect(try matchingRows(fetch, state: state, transaction: transaction))
                } else {
                    try deletion.collect(try existingRows(request.objectIDs ?? [], state: state, transaction: transaction))
                }
                try deletion.checkDenials()
                deleted = try deletion.apply()
            }
        } catch let error as ManagedObjectContextError {
            throw error
        } catch {
            throw storeError(error, "the batch delete failed and deleted nothing")
        }
        return BatchResult(count: deleted.count, objectIDs: request.resultType == .objectIDs ? deleted.map { objectID($0, state) } : nil)
    }

    /// The rows of the IDs that name an object of this store, in the order given, each once.
    private func existingRows(_ ids: [ManagedObjectID], state: OpenState, transaction: any KeyValueTransaction) throws -> [Candidate] {
        var rows: [Candidate] = []
        var seen: Set<Candidate> = []
        for id in ids where id.storeIdentifier == state.storeIdentifier {
            guard let entity = state.entity(of: id), case .integer(let key) = id.referenceObject, key > 0,
                  try state.rows(of: entity).entityTag(key: UInt64(key), in: transaction) == entity.tag else { continue }
            let row = Candidate(key: UInt64(key), tag: entity.tag)
            if seen.insert(row).inserted { rows.append(row) }
        }
        return rows
    }
}

/// Rewrites and removes rows inside a batch's write transaction: each row written or deleted at once, the index
/// entries that change kept until ``putNewEntries(violation:)``, then applied table by table in key order — the stale
/// ones removed first, so a value one row gives up may be taken by another in the same batch.
private struct BatchRowWriter {
    let store: LMDBIncrementalStore
    let state: LMDBIncrementalStore.OpenState
    let transaction: any KeyValueTransaction
    private var indexes = IndexUpdates(sortingEntries: true)
    /// Where a rewritten row is encoded before it is put through a cursor.
    private var scratch: [UInt8] = []

    init(store: LMDBIncrementalStore, state: LMDBIncrementalStore.OpenState, transaction: any KeyValueTransaction) {
        self.store = store
        self.state = state
        self.transaction = transaction
    }

    /// Writes `new` over `old`, the row of `candidate` — through `cursor` when one on the row's table is given (rows
    /// rewritten in key order); `position` is what a uniqueness violation of its new entries is reported with.
    mutating func rewrite(_ candidate: Candidate, of entity: StoreLayout.EntityLayout, from old: StoredRow, to new: StoredRow, position: Int,
                          cursor: (any KeyValueCursor)? = nil) throws {
        try indexes.update(state.maintainers(of: entity), old: old, new: new, key: candidate.key, row: position, in: transaction)
        if let cursor {
            try state.rows(of: entity).rewrite(new, key: candidate.key, cursor: cursor, scratch: &scratch)
        } else {
            _ = try state.rows(of: entity).write(new, key: candidate.key, inserting: false, in: transaction)
        }
    }

    /// Removes the index entries of the row of `candidate`, whose state is `old` (the caller deletes the row).
    mutating func removeEntries(of candidate: Candidate, _ entity: StoreLayout.EntityLayout, old: StoredRow) throws {
        try indexes.update(state.maintainers(of: entity), old: old, new: nil, key: candidate.key, row: -1, in: transaction)
    }

    /// Removes `member` from `owner`'s members in the unordered relationship table `table`, with the stale entries.
    mutating func removeLink(_ member: StoredRow.Reference, from owner: UInt64, in table: ToManyTable) {
        table.withEntry(member, of: owner) { key, value in indexes.removeSorted(value, forKey: key, from: table.database) }
    }

    /// Removes the stale index entries of the rows rewritten and removed, and puts the new ones, checking uniqueness.
    mutating func putNewEntries(violation: (_ position: Int, _ constraint: Int) -> ManagedObjectContextError) throws {
        try indexes.putPending(in: transaction, violation: violation)
    }
}

/// One batch delete's work in its write transaction: the rows to delete (named ones, then what cascades reach),
/// the deny rules to check, then the rows removed and the other sides of their relationships cleared.
private struct BatchDeletion {
    let store: LMDBIncrementalStore
    let state: LMDBIncrementalStore.OpenState
    let transaction: any KeyValueTransaction
    /// The rows to delete, in the order they were reached, and the same as a set.
    private var order: [Candidate] = []
    private var doomed: Set<Candidate> = []
    /// Related rows a deny rule forbids deleting the owner beside: (owner, relationship, related row).
    private var denials: [(owner: Candidate, relationship: String, related: Candidate)] = []
    /// Each entity's relationships as the deletion treats them, by entity tag, worked out when first needed.
    private var rules: [UInt16: EntityRules] = [:]

    init(store: LMDBIncrementalStore, state: LMDBIncrementalStore.OpenState, transaction: any KeyValueTransaction) {
        self.store = store
        self.state = state
        self.transaction = transaction
    }

    /// What a deleted object's relationship asks of the other side.
    enum OtherSide {
        /// Nothing: no inverse, or an inverse kept by the deleted row's own entries (a to-many read from the to-one's
        /// index, whose entry goes with the row).
        case nothing
        /// The related row's to-one of this name: cleared when it points at the deleted row.
        case toOne(String)
        /// The related row's to-many of this name, kept in its own table: the deleted row's link removed.
        case link(String, isOrdered: Bool)
    }

    struct ToOneRule {
        let name: String
        let field: Int
        let rule: DeleteRule
        let otherSide: OtherSide
    }

    struct ToManyRule {
        let name: String
        /// Where the members are read: the relationship's link table, or its inverse's to-one index.
        let members: IndexTable
        /// The relationship's own link table, whose entries of the deleted row go with it (`nil`: read from the
        /// inverse's index).
        let own: ToManyTable?
        let rule: DeleteRule
        let otherSide: OtherSide
    }

    struct EntityRules {
        let toOnes: [ToOneRule]
        let toManys: [ToManyRule]
    }

    private mutating func rules(of tag: UInt16) throws -> EntityRules {
        if let known = rules[tag] { return known }
        guard let entity = store.layout.entity(tag: tag) else {
            throw ManagedObjectContextError(.storeUnusable, message: "a row names the entity tag \(tag), which the store's model does not have")
        }
        let model = store.model
        func otherSide(of relationship: RelationshipDescription) -> OtherSide {
            guard let inverse = model.inverse(of: relationship) else { return .nothing }
            if !inverse.isToMany { return .toOne(inverse.name) }
            // A to-many inverse is kept in a table of its own (many-to-many, ordered), or read from this to-one's index.
            guard let destination = store.layout.entity(relationship.destinationEntityName),
                  destination.toManyTables[inverse.name]?.isLink == true else { return .nothing }
            return .link(inverse.name, isOrdered: inverse.isOrdered)
        }
        var toOnes: [ToOneRule] = [], toManys: [ToManyRule] = []
        for slot in entity.handle.relationshipSlots where slot.isPersistent {
            guard let relationship = slot.relationship else { continue }
            switch slot.kind {
            case .toOne:
                guard let field = entity.fieldIndex[relationship.name] else { continue }
                toOnes.append(ToOneRule(name: relationship.name, field: field, rule: relationship.deleteRule, otherSide: otherSide(of: relationship)))
            case .toMany:
                guard let source = state.toManyTables[Int(tag)][relationship.name] else { continue }
                let own = source.isLink ? ToManyTable(database: source.table.database, isOrdered: relationship.isOrdered) : nil
                toManys.append(ToManyRule(name: relationship.name, members: source.table, own: own, rule: relationship.deleteRule,
                                          otherSide: otherSide(of: relationship)))
            default:
                continue
            }
        }
        let found = EntityRules(toOnes: toOnes, toManys: toManys)
        rules[tag] = found
        return found
    }

    private mutating func add(_ row: Candidate) {
        if doomed.insert(row).inserted { order.append(row) }
    }

    /// Adds `named` and every row their cascade rules reach, and notes what their deny rules forbid.
    mutating func collect(_ named: [Candidate]) throws {
        for row in named { add(row) }
        var next = 0
        while next < order.count {
            let owner = order[next]
            next += 1
            let rules = try rules(of: owner.tag)
            if rules.toOnes.contains(where: { $0.rule == .cascade || $0.rule == .deny }) {
                guard let entity = store.layout.entity(tag: owner.tag),
                      let row = try store.encodedRow(key: owner.key, in: state.rows(of: entity), transaction: transaction, naming: "of \(objectID(owner))")
                else { continue }
                for toOne in rules.toOnes where toOne.rule == .cascade || toOne.rule == .deny {
                    let field: RowField?
                    do { field = try row.field(toOne.field) } catch { throw store.corruptedRow(owner.key, in: entity.root, error) }
                    guard case .reference(let target)? = field else { continue }
                    let related = Candidate(key: target.key, tag: target.entityTag)
                    if toOne.rule == .cascade { add(related) } else { denials.append((owner, toOne.name, related)) }
                }
            }
            for toMany in rules.toManys where toMany.rule == .cascade || toMany.rule == .deny {
                for member in try toMany.members.references(under: owner.key, in: transaction) {
                    let related = Candidate(key: member.key, tag: member.entityTag)
                    if toMany.rule == .cascade { add(related) } else { denials.append((owner, toMany.name, related)) }
                }
            }
        }
    }

    /// Throws when a deny rule forbids a deletion: a related object that exists and is not deleted too.
    func checkDenials() throws {
        var held: [String: (owner: Candidate, relationship: String, count: Int)] = [:]
        var order: [String] = []
        for denial in denials where !doomed.contains(denial.related) {
            guard let entity = store.layout.entity(tag: denial.related.tag),
                  try state.rows(of: entity).entityTag(key: denial.related.key, in: transaction) == denial.related.tag else { continue }
            let name = "\(denial.owner.tag)/\(denial.owner.key)/\(denial.relationship)"
            if held[name] == nil { order.append(name) }
            held[name, default: (denial.owner, denial.relationship, 0)].count += 1
        }
        guard !order.isEmpty else { return }
        let failures = order.map { name in
            let (owner, relationship, count) = held[name]!
            let id = objectID(owner)
            return ValidationFailure(objectID: id, entityName: id.entityName, propertyName: relationship,
                message: "cannot be deleted while \(relationship) holds \(count) object\(count == 1 ? "" : "s") (delete rule deny)")
        }
        throw ManagedObjectContextError(.validation,
            message: "the batch delete would break \(failures.count) deny rule\(failures.count == 1 ? "" : "s") (\(failures[0].objectID).\(failures[0].propertyName!): \(failures[0].message)); nothing was deleted",
            validationFailures: failures)
    }

    /// Runs `body` with a cursor on each of `tables`, in their order, open for the body's length.
    private func withCursors(on tables: [Database], _ body: ([any KeyValueCursor]) throws -> Void) throws {
        func open(_ next: Int, _ opened: [any KeyValueCursor]) throws {
            guard next < tables.count else { return try body(opened) }
            try tables[next].withCursor(in: transaction) { try open(next + 1, opened + [$0]) }
        }
        try open(0, [])
    }

    /// Removes the rows, their entries and links, and clears them from the other sides of nullified relationships;
    /// records the change. Returns the rows deleted (those that existed), in the order they were reached.
    mutating func apply() throws -> [Candidate] {
        var writer = BatchRowWriter(store: store, state: state, transaction: transaction)
        /// Rows that keep pointing at a deleted row through a to-one, by the to-one's name.
        var cleared: [Candidate: [String]] = [:]
        var clearedOrder: [Candidate] = []
        /// Rows whose link tables lost a deleted member (their bytes stay).
        var unlinked: Set<Candidate> = []
        var removed: Set<Candidate> = []
        func clear(_ related: Candidate, _ side: OtherSide, of owner: Candidate) throws {
            guard !doomed.contains(related) else { return }
            switch side {
            case .nothing:
                break
            case .toOne(let name):
                if cleared[related] == nil { clearedOrder.append(related) }
                cleared[related, default: []].append(name)
            case .link(let name, let isOrdered):
                guard let table = state.toManyTables[Int(related.tag)][name]?.table.database else { return }
                let links = ToManyTable(database: table, isOrdered: isOrdered), member = StoredRow.Reference(entityTag: owner.tag, key: owner.key)
                if isOrdered {
                    try links.removeMember(member, from: related.key, in: transaction)
                } else {
                    // With the index entries, in key order: many deleted rows leave the same few owners' lists.
                    writer.removeLink(member, from: related.key, in: links)
                }
                unlinked.insert(related)
            }
        }
        // In row-key order table by table, through one cursor per table: each row is read and deleted where the
        // cursor stands, most on the leaf page of the one before.
        let owners = order.compactMap { owner in store.layout.entity(tag: owner.tag).map { (entity: $0, table: state.rows(of: $0), row: owner) } }
            .sorted { ($0.table.database.handle, $0.row.key) < ($1.table.database.handle, $1.row.key) }
        var start = 0
        while start < owners.count {
            let table = owners[start].table
            var end = start
            while end < owners.count && owners[end].table.database.handle == table.database.handle { end += 1 }
            // The tables the group's to-many rules read members from (and delete the owner's own links in), each
            // through one cursor for the group: the owners come in key order.
            var memberTables: [Database] = []
            for tag in Set(owners[start..<end].map(\.row.tag)) {
                for toMany in try rules(of: tag).toManys where (toMany.own != nil || toMany.rule == .nullify)
                    && !memberTables.contains(where: { $0.handle == toMany.members.database.handle }) {
                    memberTables.append(toMany.members.database)
                }
            }
            try table.withCursor(in: transaction) { cursor in
                try withCursors(on: memberTables) { memberCursors in
                    for (entity, _, owner) in owners[start..<end] {
                        guard let bytes = try table.bytes(key: owner.key, cursor: cursor) else { continue }
                        let old: StoredRow
                        do throws(RowDecodingError) { old = try RowCodec.decode(bytes, layout: store.layout) } catch { throw store.corruptedRow(owner.key, in: entity.root, error) }
                        guard old.entityTag == owner.tag else { continue }
                        let rules = try rules(of: owner.tag)
                        for toOne in rules.toOnes where toOne.rule == .nullify {
                            guard let target = old.reference(toOne.field) else { continue }
                            try clear(Candidate(key: target.key, tag: target.entityTag), toOne.otherSide, of: owner)
                        }
                        for toMany in rules.toManys where toMany.own != nil || toMany.rule == .nullify {
                            let members = memberCursors[memberTables.firstIndex { $0.handle == toMany.members.database.handle }!]
                            if toMany.rule == .nullify {
                                for member in try toMany.members.references(under: owner.key, cursor: members) {
                                    try clear(Candidate(key: member.key, tag: member.entityTag), toMany.otherSide, of: owner)
                                }
                            }
                            guard let own = toMany.own else { continue }
                            if own.isOrdered { try own.removeAll(of: owner.key, in: transaction) } else { try own.removeAll(of: owner.key, cursor: members) }
                        }
                        try writer.removeEntries(of: owner, entity, old: old)
                        // The cursor still stands on the row: the other tables' writes do not move it.
                        try cursor.deleteCurrent()
                        removed.insert(owner)
                    }
                }
            }
            start = end
        }
        // The rows left pointing at deleted rows: each to-one that does is cleared, the row given a new version.
        var rewritten: [Candidate] = []
        for (position, related) in clearedOrder.enumerated() {
            guard let entity = store.layout.entity(tag: related.tag),
                  let old = try store.readRow(objectID(related), state: state, transaction: transaction) else { continue }
            var row = old
            for name in cleared[related]! {
                guard let field = entity.fieldIndex[name], let target = row.reference(field),
                      doomed.contains(Candidate(key: target.key, tag: target.entityTag)) else { continue }
                row.fields[field] = nil
            }
            guard row != old else { continue }
            row.version += 1
            try writer.rewrite(related, of: entity, from: old, to: row, position: position)
            rewritten.append(related)
            unlinked.remove(related)
        }
        try writer.putNewEntries { position, constraint in
            ManagedObjectContextError(.constraintViolation,
                message: "clearing a deleted object from \(objectID(clearedOrder[position])) breaks uniqueness constraint \(constraint) of its entity; nothing was deleted")
        }
        let deleted = order.filter { removed.contains($0) }
        try store.recordBatch(updated: rewritten + unlinked.sorted { ($0.tag, $0.key) < ($1.tag, $1.key) }, deleted: deleted,
                              state: state, transaction: transaction)
        return deleted
    }

    private func objectID(_ row: Candidate) -> ManagedObjectID {
        state.identities.objectID(entityTag: row.tag, key: row.key)
    }
}
