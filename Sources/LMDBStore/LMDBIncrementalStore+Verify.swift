import Foundation
import LMDB
import ObjectGraph

extension LMDBIncrementalStore {
    /// Checks the store's invariants in one read transaction and returns every problem found (empty when the store
    /// is sound): every row decodes and passes its checksum; every index, uniqueness and to-one entry matches a row
    /// and every row has all of its entries; every link entry's owner and target exist; no row key is above its
    /// sequence.
    ///
    /// - Throws: ``ManagedObjectContextError`` when the store is not loaded or cannot be read at all.
    public func verify() throws -> [String] {
        let state = try open
        // Maintainers of every entity, over the store's tables: each computes the entries a row should have.
        let maintainers = layout.entitiesByTag.map { entity in entity.map { EntityMaintainers($0) { state.databases[$0] } } }
        var scratch = EntryScratch()
        return try state.environment.read { transaction in
            var problems: [String] = []
            var expected: [String: Set<[UInt8]>] = [:]
            var present: [String: Set<UInt64>] = [:]
            // The keys of indexes that keep a uniqueness constraint, for rows whose constrained values are not NULL.
            var constrainedKeys: [String: Set<[UInt8]>] = [:]
            for root in Set(layout.entities.values.map(\.root)).sorted() {
                let rows = database(StoreLayout.rowsDatabase(root: root), in: state)
                var highest: UInt64 = 0
                try rows.withCursor(in: transaction) { cursor in
                    try cursor.forEach { entry in
                        guard let key = EntryBytes.integer(entry.key) else {
                            problems.append("\(root): a row is stored under a \(entry.key.count)-byte key, not an 8-byte row key")
                            return true
                        }
                        highest = max(highest, key)
                        do {
                            let row = try RowCodec.decode(entry.value, layout: layout)
                            guard let entityName = layout.entityNamesByTag[row.entityTag], let entity = layout.entity(entityName) else {
                                problems.append("\(root) row \(key): its entity tag \(row.entityTag) names no entity of the model")
                                return true
                            }
                            present[root, default: []].insert(key)
                            maintainers[Int(entity.tag)]?.forEachEntry(of: row, key: key, scratch: &scratch) { table, _, entryKey, value, check in
                                let name = table.name ?? "?"
                                expected[name, default: []].insert(Array(entryKey) + [0xFF] + Array(value))
                                if check == .noOtherRow && !constrainedKeys[name, default: []].insert(Array(entryKey)).inserted {
                                    problems.append("\(name): row \(key) has another row's values of the uniqueness constraint this index keeps")
                                }
                            }
                        } catch {
                            problems.append("\(root) row \(key): \(error)")
                        }
                        return true
                    }
                }
                let sequence = try database(StoreLayout.sequenceDatabase, in: state)
                    .withValue(forKey: Array(root.utf8), in: transaction) { EntryBytes.integer($0) }
                switch sequence {
                case nil: if highest > 0 { problems.append("\(root): rows exist but the sequence has no counter") }
                case nil?: problems.append("\(root): the sequence's counter is not an 8-byte number")
                case let counter??: if highest > counter { problems.append("\(root): row key \(highest) is above its sequence \(counter)") }
                }
            }
            for name in layout.databaseNames where layout.tables[name]?.holdsRowEntries == true {
                var actual = Set<[UInt8]>()
                try database(name, in: state).withCursor(in: transaction) { cursor in
                    try cursor.forEach { entry in actual.insert(Array(entry.key) + [0xFF] + Array(entry.value)); return true }
                }
                let wanted = expected[name] ?? []
                let missing = wanted.subtracting(actual).count, extra = actual.subtracting(wanted).count
                if missing > 0 { problems.append("\(name): \(missing) entr\(missing == 1 ? "y is" : "ies are") missing for existing rows") }
                if extra > 0 { problems.append("\(name): \(extra) entr\(extra == 1 ? "y points" : "ies point") at no matching row") }
            }
            for name in layout.databaseNames {
                guard case .toMany(let ownerName, let relationshipName, _)? = layout.tables[name], let owner = layout.entity(ownerName),
                      let relationship = model.relationship(named: relationshipName, in: owner.name),
                      let target = layout.entity(relationship.destinationEntityName) else { continue }
                // An ordered relationship's key is the owner's key and a u32 position; an unordered one's, the owner's.
                let keySize = relationship.isOrdered ? 12 : 8
                try database(name, in: state).withCursor(in: transaction) { cursor in
                    try cursor.forEach { entry in
                        guard entry.key.count == keySize, let member = EntryBytes.reference(entry.value) else {
                            problems.append("\(name): an entry has a \(entry.key.count)-byte key and a \(entry.value.count)-byte value, not a \(keySize)-byte key and a 10-byte reference")
                            return true
                        }
                        let ownerKey = TupleEncoding.readBigEndianUInt64(entry.key, at: 0)
                        let targetKey = member.key
                        if present[owner.root]?.contains(ownerKey) != true { problems.append("\(name): owner \(ownerKey) has no row") }
                        if present[target.root]?.contains(targetKey) != true && relationship.deleteRule != .noAction,
                           model.inverse(of: relationship)?.deleteRule != .noAction {
                            problems.append("\(name): target \(targetKey) of owner \(ownerKey) has no row")
                        }
                        return true
                    }
                }
            }
            return problems
        }
    }
}
