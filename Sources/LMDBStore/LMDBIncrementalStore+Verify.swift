import Foundation
import LMDB
import ObjectGraph

/// How much ``LMDBIncrementalStore/verify(_:progress:)`` checks.
public enum VerificationLevel: Sendable, Hashable {
    /// The file's structure: every B-tree page LMDB would follow, read once without trusting it (about as long as
    /// reading the file). Damage here can make LMDB return wrong entries or stop the process.
    case quick
    /// The structure, then every row and every entry: each row decodes and passes its checksum; every index,
    /// uniqueness and to-one entry matches a row and every row has all of its entries; every link entry's owner and
    /// target exist; a relationship kept on both sides holds the same links on each; no row key is above its
    /// sequence.
    case full
}

extension LMDBIncrementalStore {
    /// Checks the store's invariants in one read transaction and returns every problem found (empty when the store
    /// is sound). ``VerificationLevel/quick`` checks the file's pages; ``VerificationLevel/full`` then reads every
    /// row and entry — but only when the pages are sound, since reading through damaged pages could stop the
    /// process.
    ///
    /// - Parameters:
    ///   - level: What to check; everything by default.
    ///   - progress: Called with the rows checked so far and the rows the store holds, every 50 000 rows and once
    ///     the rows are all checked (the tables of entries are compared after that). Not called by a quick check.
    /// - Throws: ``ManagedObjectContextError`` when the store is not loaded or cannot be read at all.
    public func verify(_ level: VerificationLevel = .full, progress: ((_ checked: Int, _ total: Int) -> Void)? = nil) throws -> [String] {
        let pages: [String]
        do {
            pages = try open.environment.checkPages()
        } catch let error as ManagedObjectContextError {
            throw error
        } catch {
            throw ManagedObjectContextError(.storeUnusable, message: "cannot check the pages of \(url?.path ?? "?"): \(error)", underlying: error)
        }
        if level == .quick { return pages }
        guard pages.isEmpty else {
            return pages + ["the rows and entries were not checked: reading them through damaged pages could stop the process"]
        }
        return try verifyRowsAndEntries(progress: progress)
    }

    /// Checks the pages of the store file at `url` before anything else reads it (see ``VerificationLevel/quick``),
    /// and returns the problems found.
    ///
    /// - Throws: ``ManagedObjectContextError`` naming the file when it is missing or cannot be opened as LMDB.
    public static func checkPages(at url: URL) throws -> [String] {
        let environment: any KeyValueEngine
        do {
            environment = try KeyValueEngines.open(at: url.path, options: .init { $0.isReadOnly = true })
            return try environment.checkPages()
        } catch {
            throw ManagedObjectContextError(.storeUnusable, message: "cannot check the pages of \(url.path): \(error)", underlying: error)
        }
    }

    /// The rows and entries part of a full check, in one read transaction.
    private func verifyRowsAndEntries(progress: ((_ checked: Int, _ total: Int) -> Void)?) throws -> [String] {
        let state = try open
        // Maintainers of every entity, over the store's tables: each computes the entries a row should have.
        let maintainers = layout.entitiesByTag.map { entity in entity.map { EntityMaintainers($0) { state.databases[$0] } } }
        var scratch = EntryScratch()
        let sides = RelationshipSides(layout)
        return try state.environment.read { transaction in
            var problems: [String] = []
            var expected: [String: Set<[UInt8]>] = [:]
            var present: [String: Set<UInt64>] = [:]
            // The keys of indexes that keep a uniqueness constraint, for rows whose constrained values are not NULL.
            var constrainedKeys: [String: Set<[UInt8]>] = [:]
            // The links of each relationship kept on both sides, by side, as its rows and link tables hold them.
            var links: [String: Set<RelationshipSides.Link>] = [:]
            let roots = Set(layout.entities.values.map(\.root)).sorted()
            let total = try roots.reduce(0) { $0 + (try database(StoreLayout.rowsDatabase(root: $1), in: state).entryCount(in: transaction)) }
            var checked = 0
            for root in roots {
                let rows = database(StoreLayout.rowsDatabase(root: root), in: state)
                var highest: UInt64 = 0
                try rows.withCursor(in: transaction) { cursor in
                    try cursor.forEach { entry in
                        checked += 1
                        if checked % 50_000 == 0 { progress?(checked, total) }
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
                            for (field, side) in sides.toOnes[Int(entity.tag)] {
                                if let target = row.reference(field) { links[side, default: []].insert(.init(owner: key, target: target.key)) }
                            }
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
            progress?(checked, total)
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
                let side = sides.linkTables[name]
                try database(name, in: state).withCursor(in: transaction) { cursor in
                    try cursor.forEach { entry in
                        guard entry.key.count == keySize, let member = EntryBytes.reference(entry.value) else {
                            problems.append("\(name): an entry has a \(entry.key.count)-byte key and a \(entry.value.count)-byte value, not a \(keySize)-byte key and a 10-byte reference")
                            return true
                        }
                        let ownerKey = TupleEncoding.readBigEndianUInt64(entry.key, at: 0)
                        let targetKey = member.key
                        if let side { links[side, default: []].insert(.init(owner: ownerKey, target: targetKey)) }
                        if present[owner.root]?.contains(ownerKey) != true { problems.append("\(name): owner \(ownerKey) has no row") }
                        if present[target.root]?.contains(targetKey) != true && relationship.deleteRule != .noAction,
                           model.inverse(of: relationship)?.deleteRule != .noAction {
                            problems.append("\(name): target \(targetKey) of owner \(ownerKey) has no row")
                        }
                        return true
                    }
                }
            }
            problems += sides.problems(links) { side, key in present[side.root]?.contains(key) == true }
            return problems
        }
    }
}

/// The relationships a store keeps on both sides — a to-one in its rows or a to-many in a link table, with an inverse
/// kept the same way — which `verify()` checks link by link: each link one side holds, the other must hold back.
/// (A to-many read through its inverse's to-one index has one side only.)
struct RelationshipSides {
    /// One link as the row keys of its owner and its target.
    struct Link: Hashable {
        var owner: UInt64
        var target: UInt64
    }

    /// One kept side: `Entity.relationship` (the declaring entity), that entity and its hierarchy, and the other
    /// side's name.
    struct Side {
        let name: String
        let entity: String
        let root: String
        let inverse: String
    }

    /// By entity tag: the fields of to-ones kept on both sides, with their side's name.
    private(set) var toOnes: [[(field: Int, side: String)]]
    /// By link table name: its side's name, for to-manys kept on both sides.
    private(set) var linkTables: [String: String] = [:]
    private(set) var sides: [String: Side] = [:]

    init(_ layout: StoreLayout) {
        let model = layout.model
        toOnes = Array(repeating: [], count: layout.entitiesByTag.count)
        func side(_ relationship: RelationshipDescription, declaredBy owner: String) -> String? {
            guard let inverse = model.inverse(of: relationship),
                  !inverse.isToMany || StoreLayout.needsLinkTable(inverse, model),
                  let ownerRoot = layout.entity(owner)?.root, let target = layout.entity(relationship.destinationEntityName) else { return nil }
            let name = owner + "." + relationship.name
            sides[name] = Side(name: name, entity: owner, root: ownerRoot, inverse: layout.declaringEntity(of: inverse.name, in: target.name) + "." + inverse.name)
            return name
        }
        for case let entity? in layout.entitiesByTag {
            for (position, relationship) in entity.toOneRelationships.enumerated() where entity.toOneFields[position] >= 0 {
                if let name = side(relationship, declaredBy: layout.declaringEntity(of: relationship.name, in: entity.name)) {
                    toOnes[Int(entity.tag)].append((entity.toOneFields[position], name))
                }
            }
            for (relationship, table) in zip(entity.linkRelationships, entity.linkTables) {
                if let name = side(relationship, declaredBy: layout.declaringEntity(of: relationship.name, in: entity.name)) {
                    linkTables[table] = name
                }
            }
        }
    }

    /// The links one side holds and the other does not, named with the first of them; each pair of sides compared
    /// once. A link whose other row is missing is left to the checks that name missing rows.
    func problems(_ links: [String: Set<Link>], exists: (Side, UInt64) -> Bool) -> [String] {
        var problems: [String] = []
        for name in sides.keys.sorted() {
            guard let side = sides[name], let inverse = sides[side.inverse], name <= inverse.name else { continue }
            let here = links[name] ?? [], there = Set((links[inverse.name] ?? []).map { Link(owner: $0.target, target: $0.owner) })
            for (holder, other, missing) in [(side, inverse, here.subtracting(there)), (inverse, side, there.subtracting(here))] {
                let lost = missing.filter { exists(side, $0.owner) && exists(inverse, $0.target) }.sorted { ($0.owner, $0.target) < ($1.owner, $1.target) }
                guard let first = lost.first else { continue }
                let (owner, target) = holder.name == side.name ? (first.owner, first.target) : (first.target, first.owner)
                problems.append("\(holder.name) ↔ \(other.name): \(lost.count) link\(lost.count == 1 ? " is" : "s are") on the \(holder.name) side only (the first: \(holder.entity) row \(owner) → \(other.entity) row \(target); \(other.name) does not hold it)")
                if name == inverse.name { break }
            }
        }
        return problems
    }
}
