import Foundation
import LMDB
import ObjectGraph

extension StoreMigration {
    /// The `meta` key of the progress record.
    static let recordKey = "migration"

    /// The progress record a store's `meta` entries hold, if any.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/storeUnusable`` when it does
    ///   not decode.
    static func record(in stored: [String: String], path: String) throws -> Record? {
        guard let json = stored[recordKey] else { return nil }
        do {
            return try JSONDecoder().decode(Record.self, from: Data(json.utf8))
        } catch {
            throw ManagedObjectContextError(.storeUnusable, message: "\(path) records a migration in progress that cannot be read (meta/\(recordKey)): \(error)")
        }
    }

    private static func put(_ record: Record?, _ meta: Database, _ transaction: any KeyValueTransaction) throws {
        let key = Array(recordKey.utf8)
        guard let record else {
            _ = try meta.delete(key: key, in: transaction)
            return
        }
        try meta.put(Array(try JSONEncoder().encode(record)), forKey: key, in: transaction)
    }

    /// Runs the migration, or resumes the one `record` describes (a staged copy made for another model or mapping
    /// is dropped and made again); returns once the store is the new model's.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/migrationFailed`` naming the
    ///   rows a new uniqueness constraint refuses, a custom mapping's bad value or error, or a save another process
    ///   made meanwhile — the staged copy is dropped and the store left as it was; or the engine's error (a kill
    ///   or a full disk leave the store resumable).
    func run(resuming pending: Record?) throws {
        let meta = try environment.openDatabase(named: StoreLayout.metadataDatabase, create: false)
        var record: Record
        if let pending, pending.phase == .install || (pending.to == new.model.versionHashString && pending.mapping == fingerprint) {
            record = pending
        } else {
            if pending != nil { try Self.discard(environment, path: path) }
            let sequences = try environment.openDatabase(named: StoreLayout.sequenceDatabase, create: false)
            let changes = try environment.read { try SequenceTable(database: sequences).counter(StoreLayout.changeSequenceKey, in: $0) }
            let unchanged = unchangedTables(plans())
            record = Record(phase: .stage, from: old.model.versionHashString, to: new.model.versionHashString, mapping: fingerprint,
                            changes: changes, step: 0, after: nil, tables: Self.staged(new).filter { !unchanged.contains($0) })
            let begun = record
            try environment.write { try Self.put(begun, meta, $0) }
        }
        if record.phase == .stage {
            do {
                try stage(&record, meta)
                try commit(&record, meta)
            } catch {
                try? Self.discard(environment, path: path)
                throw error
            }
        }
        try Self.install(environment, layout: new, record: record, path: path, rowsPerTransaction: rowsPerTransaction, progress: progress)
    }

    // MARK: Stage

    /// The tables of `layout` a migration may stage: all but the metadata, the sequences and the change log, which
    /// the commit writes.
    static func staged(_ layout: StoreLayout) -> [String] {
        layout.databaseNames.filter { ![StoreLayout.metadataDatabase, StoreLayout.sequenceDatabase, StoreLayout.changesDatabase].contains($0) }
    }

    private func stage(_ record: inout Record, _ meta: Database) throws {
        var oldTables: [String: Database] = [:]
        for name in old.databaseNames {
            oldTables[name] = try? environment.openDatabase(named: name, options: old.tables[name]?.options ?? [], create: false)
        }
        var staged: [String: Database] = [:]
        for name in record.tables ?? Self.staged(new) {
            staged[name] = try environment.openDatabase(named: Self.stagingPrefix + name, options: new.tables[name]?.options ?? [])
        }
        let sequences = SequenceTable(database: try environment.openDatabase(named: StoreLayout.sequenceDatabase, create: false))
        let roots = Set(old.entities.values.map(\.root)).sorted()
        let plans = plans()
        let newTags = plans.map { $0?.new.tag ?? 0 }
        let maintainers = new.entitiesByTag.map { entity in entity.map { EntityMaintainers($0) { staged[$0] } } }
        let derived = plans.contains { $0?.fields.contains { if case .derived = $0 { true } else { false } } == true }
            ? try environment.read { try derivedToOnes($0, oldTables, plans, newTags: newTags) } : [:]
        let dropsRows = !mapping.removedEntityNames.isEmpty
        // A hierarchy is read when one of its entities has a table staged: its rows, or an index they put entries in.
        let read = roots.map { root in
            plans.contains { plan in
                guard let plan, plan.old.root == root else { return false }
                return staged[StoreLayout.rowsDatabase(root: plan.new.root)] != nil || maintainers[Int(plan.new.tag)]?.isEmpty == false
            }
        }
        var links: [LinkEntry]?
        var updates = IndexUpdates(sortingEntries: true)

        while record.step < roots.count + 1 {
            let snapshot = record
            var next = record
            try environment.write { transaction in
                next = snapshot
                guard try sequences.counter(StoreLayout.changeSequenceKey, in: transaction) == snapshot.changes else {
                    throw ManagedObjectContextError(.migrationFailed,
                        message: "\(path) was saved to by another process while it was being migrated; nothing was changed — close the other processes and open it again")
                }
                if snapshot.step < roots.count {
                    // Rows of one old hierarchy, a batch at a time.
                    guard read[snapshot.step], let rows = oldTables[StoreLayout.rowsDatabase(root: roots[snapshot.step])] else {
                        next.step += 1
                        return try Self.put(next, meta, transaction)
                    }
                    let start = snapshot.after.flatMap(Self.bytes(hex:))
                    var done = 0, last: [UInt8]?
                    var exhausted = true
                    // The batch's rows, for the error a new uniqueness constraint they break gives.
                    var mappedRows: [(key: UInt64, row: StoredRow, entity: StoreLayout.EntityLayout)] = []
                    let violation = { (position: Int, constraint: Int) -> ManagedObjectContextError in
                        let (key, row, entity) = mappedRows[position]
                        let table = StoreLayout.rowsDatabase(root: entity.root)
                        return self.violation(of: constraint, in: entity, row: row, key: key, rows: staged[table] ?? oldTables[table], transaction)
                    }
                    try rows.withCursor(in: transaction) { cursor in
                        try cursor.forEach(in: start.map { KeyRange(lower: .exclusive($0)) } ?? .all) { entry in
                            guard done < rowsPerTransaction else {
                                exhausted = false
                                return false
                            }
                            done += 1
                            last = entry.keyBytes
                            let key = try rows.rowKey(in: entry)
                            let row = try decodeOld(entry, rows)
                            guard Int(row.entityTag) < plans.count, let plan = plans[Int(row.entityTag)] else { return true }
                            let mapped = try map(row, key: key, plan, newTags: newTags, derived: derived)
                            if let table = staged[StoreLayout.rowsDatabase(root: plan.new.root)] {
                                guard try RowTable(database: table).write(mapped, key: key, inserting: true, in: transaction) else {
                                    throw ManagedObjectContextError(.migrationFailed, message: "\(path): two rows of \(plan.new.root)'s new table have the key \(key); nothing was changed")
                                }
                            }
                            mappedRows.append((key, mapped, plan.new))
                            if let maintainers = maintainers[Int(plan.new.tag)] {
                                try updates.insertSorted(maintainers, row: mapped, key: key, position: mappedRows.count - 1, in: transaction,
                                                         violation: violation)
                            }
                            return true
                        }
                    }
                    // The batch's other index entries go in table and key order, through a cursor per table: each
                    // B-tree is walked once, front to back, rather than descended at random for every row.
                    try updates.putPending(in: transaction, violation: violation)
                    if exhausted {
                        next.step += 1
                        next.after = nil
                    } else {
                        next.after = last.map(Self.hex)
                    }
                } else {
                    // The to-many tables, from the old relationships they map from: every entry, in order, made
                    // once (the old tables do not change while staging), then put a batch at a time.
                    if links == nil {
                        links = try linkEntries(transaction, oldTables, staged, newTags: newTags) { owner, entity in
                            guard dropsRows, let layout = old.entities[entity], let rows = oldTables[StoreLayout.rowsDatabase(root: layout.root)],
                                  let tag = try RowTable(database: rows).entityTag(key: owner, in: transaction) else { return false }
                            return Int(tag) >= newTags.count || newTags[Int(tag)] == 0
                        }
                    }
                    let entries = links ?? []
                    var index = snapshot.after.flatMap { Int($0) } ?? 0
                    let end = min(index + rowsPerTransaction, entries.count)
                    while index < end {
                        let entry = entries[index]
                        try entry.table.add(entry.member, to: entry.owner, at: entry.position, options: entry.table.isOrdered ? [] : .appendDuplicate,
                                            in: transaction)
                        index += 1
                    }
                    if index >= entries.count {
                        next.step += 1
                        next.after = nil
                    } else {
                        next.after = String(index)
                    }
                }
                try Self.put(next, meta, transaction)
            }
            record = next
            progress?(MigrationProgress(phase: .staging, part: min(record.step + 1, roots.count + 1), partCount: roots.count + 1, table: nil))
        }
    }

    /// The error of a uniqueness constraint (a position in `entity`'s ``StoreLayout/EntityLayout/uniques``) that
    /// `row`, staged under `key`, breaks: naming it and the row of the constraint's entities holding the same values
    /// (found by reading `rows`, the new layout's rows of the hierarchy, staged or kept — an error's cost only).
    private func violation(of constraint: Int, in entity: StoreLayout.EntityLayout, row: StoredRow, key: UInt64, rows: Database?,
                           _ transaction: any KeyValueTransaction) -> ManagedObjectContextError {
        let (owner, _, unique) = entity.uniques[constraint]
        let values = unique.propertyNames.map { name in entity.fieldIndex[name].flatMap { row.fields[$0] } }
        let family = TagSet(new) { new.model.ancestry(of: $0.name).contains(owner) }
        var other: (key: UInt64, entity: String)?
        if let rows {
            try? rows.withCursor(in: transaction) { cursor in
                try cursor.forEach { entry in
                    guard let candidate = try? RowCodec.decode(entry.value, layout: new), family.contains(candidate.entityTag),
                          let layout = new.entity(tag: candidate.entityTag), let candidateKey = try? rows.rowKey(in: entry), candidateKey != key,
                          unique.propertyNames.map({ name in layout.fieldIndex[name].flatMap { candidate.fields[$0] } }) == values else { return true }
                    other = (candidateKey, layout.name)
                    return false
                }
            }
        }
        let uri = { (entity: String, key: UInt64) in "x-coredata://\(storeIdentifier)/\(entity)/p\(key)" }
        let shown = zip(unique.propertyNames, values).map { name, value in
            "\(name) = " + (value.map { field in if case .attribute(let v) = field { "\(v)" } else { "\(field)" } } ?? "nil")
        }
        return ManagedObjectContextError(.migrationFailed,
            message: "\(path) cannot be migrated: the uniqueness constraint (\(unique.propertyNames.joined(separator: ", "))) of \(owner) is broken by the rows \(other.map { uri($0.entity, $0.key) } ?? "?") and \(uri(entity.name, key)) (\(shown.joined(separator: ", "))); nothing was changed")
    }

    /// One old row as a new one, by its entity's plan.
    private func map(_ row: StoredRow, key: UInt64, _ plan: EntityPlan, newTags: [UInt16], derived: [String: [UInt64: StoredRow.Reference]]) throws -> StoredRow {
        var computed: [String: AttributeValue?] = [:]
        if plan.computes {
            var values: [String: AttributeValue] = [:]
            for field in plan.old.fields {
                if case .attribute = field.kind, let value = row.attribute(Int(field.id)) { values[field.name] = value }
            }
            let source = MigrationSourceRow(entityName: plan.old.name, values: values)
            for custom in plan.customMappings {
                do {
                    for (name, value) in try custom.transform(source) where custom.computedAttributeNames.contains(name) { computed[name] = value }
                } catch {
                    throw ManagedObjectContextError(.migrationFailed,
                        message: "\(path) cannot be migrated: the custom mapping of \(custom.entityName) failed on x-coredata://\(storeIdentifier)/\(plan.new.name)/p\(key): \(error); nothing was changed",
                        underlying: error)
                }
            }
        }
        var fields = plan.new.newFields()
        for (position, source) in plan.fields.enumerated() {
            switch source {
            case .null:
                continue
            case .value(let value):
                fields[position] = .attribute(value)
            case .copied(let field, let replacement):
                if let value = row.attribute(field) ?? replacement { fields[position] = .attribute(value) }
            case .widenedFloat(let field, let replacement):
                if case .float(let value)? = row.attribute(field) {
                    fields[position] = .attribute(.double(Double(value)))
                } else if let value = row.attribute(field) ?? replacement {
                    fields[position] = .attribute(value)
                }
            case .computed(let name):
                let field = plan.new.fields[position]
                guard case .attribute(let attribute) = field.kind else { continue }
                if let value = computed[name] ?? nil {
                    guard value.fits(attribute.type) else {
                        throw ManagedObjectContextError(.migrationFailed,
                            message: "\(path) cannot be migrated: the custom mapping gives \(plan.new.name).\(name) of x-coredata://\(storeIdentifier)/\(plan.new.name)/p\(key) the value \(value), which is not \(attribute.type.coreDataName); nothing was changed")
                    }
                    fields[position] = .attribute(value)
                } else if !attribute.isOptional {
                    throw ManagedObjectContextError(.migrationFailed,
                        message: "\(path) cannot be migrated: the custom mapping gives the required \(plan.new.name).\(name) of x-coredata://\(storeIdentifier)/\(plan.new.name)/p\(key) no value; nothing was changed")
                }
            case .reference(let field):
                if let reference = row.reference(field), Int(reference.entityTag) < newTags.count, newTags[Int(reference.entityTag)] != 0 {
                    fields[position] = .reference(StoredRow.Reference(entityTag: newTags[Int(reference.entityTag)], key: reference.key))
                }
            case .derived(let name):
                if let member = derived[name]?[key] { fields[position] = .reference(member) }
            }
        }
        return StoredRow(entityTag: plan.new.tag, version: row.version, fields: fields)
    }

    // MARK: Commit

    /// The one transaction after which the store is the new model's: its model and layout in `meta`, the tables it
    /// no longer has listed to drop, each new hierarchy's key counter, an emptied change log (a process catching up
    /// across the migration finds a number missing and refreshes everything), and the install phase.
    private func commit(_ record: inout Record, _ meta: Database) throws {
        let sequences = SequenceTable(database: try environment.openDatabase(named: StoreLayout.sequenceDatabase, create: false))
        let changes = try environment.openDatabase(named: StoreLayout.changesDatabase, create: false)
        var feeding: [String: Set<String>] = [:]
        for entity in mapping.entityMappings {
            guard let source = entity.sourceEntityName, let from = old.entities[source], let to = new.entities[entity.destinationEntityName] else { continue }
            feeding[to.root, default: []].insert(from.root)
        }
        let existing = (try? environment.read { try meta.value(forKey: Array(LMDBIncrementalStore.MetaKey.leftoverTables.utf8), in: $0) })
            .flatMap { $0 }.flatMap { (try? JSONSerialization.jsonObject(with: Data($0))) as? [String] } ?? []
        let leftovers = Array(Set(existing).union(Set(old.databaseNames).subtracting(new.databaseNames))).sorted()
        var next = record
        next.phase = .install
        next.step = 0
        next.after = nil
        let installing = next
        try environment.write { transaction in
            var values = try LMDBIncrementalStore.layoutMetadata(new)
            values[LMDBIncrementalStore.MetaKey.modelHash] = new.model.versionHashString
            values[LMDBIncrementalStore.MetaKey.leftoverTables] = String(decoding: try JSONSerialization.data(withJSONObject: leftovers), as: UTF8.self)
            for (key, value) in values { try meta.put(Array(value.utf8), forKey: Array(key.utf8), in: transaction) }
            for name in old.entities.keys where new.entities[name] == nil {
                _ = try meta.delete(key: Array(LMDBIncrementalStore.MetaKey.fields(name).utf8), in: transaction)
            }
            for root in Set(new.entities.values.map(\.root)).sorted() {
                var counter = try sequences.counter(root, in: transaction)
                for source in feeding[root] ?? [] { counter = max(counter, try sequences.counter(source, in: transaction)) }
                try sequences.setCounter(root, to: counter, in: transaction)
            }
            for root in Set(old.entities.values.map(\.root)).subtracting(new.entities.values.map(\.root)).sorted() {
                _ = try sequences.database.delete(key: Array(root.utf8), in: transaction)
            }
            try changes.clear(in: transaction)
            try sequences.setCounter(StoreLayout.changeRecordsKey, to: 0, in: transaction)
            try sequences.setCounter(StoreLayout.changeSequenceKey, to: try sequences.counter(StoreLayout.changeSequenceKey, in: transaction) + 1, in: transaction)
            try Self.put(installing, meta, transaction)
        }
        record = installing
    }

    // MARK: Install

    /// Empties each table the record lists as staged (every one of `layout` when it lists none) and fills it from its
    /// staged copy, `rowsPerTransaction` entries (whole keys) a write, recording the step and the last key done; drops
    /// each staged copy once it is copied, and the progress record at the end. Resumable from any kill, by any
    /// process (the layout is the model `meta` keeps).
    static func install(_ environment: any KeyValueEngine, layout: StoreLayout, record: Record, path: String, rowsPerTransaction: Int,
                        progress: ((MigrationProgress) -> Void)? = nil) throws {
        let meta = try environment.openDatabase(named: StoreLayout.metadataDatabase, create: false)
        let names = record.tables ?? staged(layout)
        var record = record
        while record.step < names.count {
            let name = names[record.step]
            let options = layout.tables[name]?.options ?? []
            let target = try environment.openDatabase(named: name, options: options)
            let staged: Database
            do {
                staged = try environment.openDatabase(named: stagingPrefix + name, options: options, create: false)
            } catch LMDBError.notFound {
                throw ManagedObjectContextError(.storeUnusable, message: "\(path) is being migrated but lacks the staged copy of \"\(name)\"; its meta/\(recordKey) is damaged")
            }
            let snapshot = record
            var next = record
            try environment.write { transaction in
                next = snapshot
                if snapshot.after == nil { try target.clear(in: transaction) }
                let start = snapshot.after.flatMap(bytes(hex:))
                var done = 0, last: [UInt8]?, exhausted = true
                try staged.withCursor(in: transaction) { cursor in
                    try cursor.forEach(in: start.map { KeyRange(lower: .exclusive($0)) } ?? .all) { entry in
                        // Stop between keys only: a key's duplicate values go in one write.
                        if done >= rowsPerTransaction, let last, !last.elementsEqual(entry.key) {
                            exhausted = false
                            return false
                        }
                        if last == nil || !last!.elementsEqual(entry.key) { last = entry.keyBytes }
                        done += 1
                        try target.put(entry.value, forKey: entry.key, in: transaction, options: options.contains(.dupSort) ? .appendDuplicate : .append)
                        return true
                    }
                }
                if exhausted {
                    try staged.drop(in: transaction)
                    next.step += 1
                    next.after = nil
                } else {
                    next.after = last.map(hex)
                }
                try put(next, meta, transaction)
            }
            record = next
            progress?(MigrationProgress(phase: .installing, part: min(record.step + 1, names.count), partCount: names.count, table: name))
        }
        try environment.write { try put(nil, meta, $0) }
    }

    // MARK: Discard

    /// Drops every staged table and the progress record: the store is as it was before the migration began.
    static func discard(_ environment: any KeyValueEngine, path: String) throws {
        let names = try environment.tableNames(startingWith: stagingPrefix)
        let meta = try environment.openDatabase(named: StoreLayout.metadataDatabase, create: false)
        try environment.drop(try names.compactMap { try environment.openExistingDatabase(named: $0) }) { try put(nil, meta, $0) }
    }

    // MARK: Keys as text

    static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }.joined()
    }

    static func bytes(hex: String) -> [UInt8]? {
        let digits = Array(hex.utf8)
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(digits.count / 2)
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let byte = UInt8(String(decoding: digits[index..<index + 2], as: UTF8.self), radix: 16) else { return nil }
            bytes.append(byte)
        }
        return bytes
    }
}
