import Foundation
import LMDB
import ObjectGraph

/// Migrates a store file in place from the model it was written with to another, by a ``MappingModel``
/// (`Docs/FORMAT.md`, "Migration"). Eager, in two phases, each a series of write transactions of bounded size whose
/// progress `meta/migration` records in the same transaction:
///
/// 1. **Stage**: every row is read with the old layout, mapped, and written with the new one into a staged copy of
///    each table of the new layout (`~migration/<name>`), with its index entries; then each to-many table is filled
///    from the old relationship it maps from. The old tables are not touched: a kill, a failed check (a new
///    uniqueness constraint the rows break, a custom mapping's error) or an open with the old model drops the
///    staged tables and leaves the store as it was.
/// 2. **Commit and install**: one transaction records the new model, the new sequences and the phase; from then on
///    the store is the new model's, and each table is emptied and filled from its staged copy, resumably, by
///    whichever process opens the store next. The old model's tables the new one lacks are dropped last.
///
/// Eager rather than lazy: entity tags and field numbers follow the model's names, so a new entity or attribute
/// renumbers every row of its table, and indexes must be built from every row anyway; a store that read rows of
/// several layouts would pay a model check on every read for the life of the file.
struct StoreMigration {
    /// The prefix of staged tables' names (no entity name starts with "~").
    static let stagingPrefix = "~migration/"

    /// What `meta/migration` records (JSON).
    struct Record: Codable, Equatable {
        enum Phase: String, Codable { case stage, install }
        var phase: Phase
        /// The model version hashes migrated from and to.
        var from: String
        var to: String
        /// A fingerprint of the mapping: a staged copy made by another mapping is started over.
        var mapping: String
        /// The change log's number when staging began: a save since means the staged copy is stale.
        var changes: UInt64
        /// The step in progress (a position in the phase's list of steps) and how far it got: the last key done in
        /// hexadecimal, or the number of entries done.
        var step: Int
        var after: String?
        /// The tables of the new layout that are staged and installed, in order; the others stay as they are
        /// (``unchangedTables(_:)``). Absent: all of them.
        var tables: [String]?
    }

    let environment: any KeyValueEngine
    let path: String
    let storeIdentifier: String
    let old: StoreLayout
    let new: StoreLayout
    let mapping: MappingModel
    let customMappings: [CustomEntityMapping]
    let rowsPerTransaction: Int
    /// Told after each write transaction how far the run has come.
    var progress: ((MigrationProgress) -> Void)? = nil

    var fingerprint: String {
        let text = mapping.description + "|" + customMappings.map { "\($0.entityName):\($0.computedAttributeNames.sorted())" }.sorted().joined(separator: ",")
        return String(Array(text.utf8).withUnsafeBytes(CRC32C.checksum), radix: 16)
    }

    // MARK: The plan

    /// Where one field of a new row takes its value.
    enum FieldSource {
        case null
        case value(AttributeValue)
        /// The old row's field, or `replacement` when it is NULL.
        case copied(Int, replacement: AttributeValue?)
        /// The old row's float field as a double.
        case widenedFloat(Int, replacement: AttributeValue?)
        /// A custom mapping's value for this attribute.
        case computed(String)
        /// The old row's to-one reference, its entity tag mapped.
        case reference(Int)
        /// The member this row has in a to-one derived from its inverse's old to-many (``derivedToOnes``).
        case derived(String)
    }

    /// How the rows of one old entity become rows of a new one.
    struct EntityPlan {
        let old: StoreLayout.EntityLayout
        let new: StoreLayout.EntityLayout
        let fields: [FieldSource]
        let customMappings: [CustomEntityMapping]

        /// Whether a custom mapping gives some of the fields.
        var computes: Bool { fields.contains { if case .computed = $0 { true } else { false } } }
    }

    /// Each old entity's plan, by old entity tag (`nil`: its rows are dropped).
    func plans() -> [EntityPlan?] {
        var plans = [EntityPlan?](repeating: nil, count: old.entitiesByTag.count)
        for entity in mapping.entityMappings {
            guard let source = entity.sourceEntityName, let from = old.entities[source], let to = new.entities[entity.destinationEntityName] else { continue }
            let attributes = Dictionary(entity.attributes.map { ($0.destinationName, $0) }, uniquingKeysWith: { a, _ in a })
            let relationships = Dictionary(entity.relationships.map { ($0.destinationName, $0) }, uniquingKeysWith: { a, _ in a })
            let fields: [FieldSource] = to.fields.map { field in
                switch field.kind {
                case .attribute:
                    guard let attribute = attributes[field.name] else { return .null }
                    switch attribute.source {
                    case .copied(let name):
                        return from.fieldIndex[name].map { .copied($0, replacement: attribute.nullReplacement) } ?? .null
                    case .widened(let name, let type, let wider):
                        guard let oldField = from.fieldIndex[name] else { return .null }
                        return type == .float && wider == .double ? .widenedFloat(oldField, replacement: attribute.nullReplacement)
                            : .copied(oldField, replacement: attribute.nullReplacement)
                    case .defaultValue(let value):
                        return value.map { .value($0) } ?? .null
                    case .computed:
                        return .computed(field.name)
                    }
                case .toOne(let relationship):
                    if case .copied(let name)? = relationships[field.name]?.source, let oldField = from.fieldIndex[name] {
                        return .reference(oldField)
                    }
                    return inverseSource(of: relationship) == nil ? .null : .derived(derivedKey(relationship, entity.destinationEntityName))
                }
            }
            let custom = customMappings.filter { new.model.ancestry(of: to.name).contains($0.entityName) }
            plans[Int(from.tag)] = EntityPlan(old: from, new: to, fields: fields, customMappings: custom)
        }
        return plans
    }

    // MARK: Tables that stay

    /// The tables of the new layout the migration would fill with exactly the entries they hold already: they are
    /// neither staged nor installed, and their entries (rows keep the model hash they were written with) stay as
    /// they are — what an added or removed attribute, index or constraint costs is the tables it touches.
    ///
    /// Entity tags are in every row, index entry and reference, so a migration that renumbers an entity (one added,
    /// removed or renamed before another in name order) or drops rows keeps none. Otherwise a table stays when it has
    /// the same name and kind in both layouts and:
    /// - a hierarchy's rows: every old entity of it maps to the entity of the same tag in the same hierarchy with the
    ///   same fields, each copied as it is (no entity of another hierarchy moves in);
    /// - a fetch index, uniqueness constraint or to-one's inverse: every old entity puts the same kind of entries in
    ///   it (``entryKinds(of:)``) as the entity it maps to, from fields copied as they are;
    /// - a to-many table: its relationship maps from itself, of the same entity.
    func unchangedTables(_ plans: [EntityPlan?]) -> Set<String> {
        guard mapping.removedEntityNames.isEmpty,
              old.entitiesByTag.indices.allSatisfy({ tag in old.entitiesByTag[tag] == nil || plans[tag].map { $0.new.tag == $0.old.tag } == true })
        else { return [] }
        let mapped = plans.compactMap { $0 }
        /// Whether the new row's field `name` is the old row's field of that name, as it is.
        func keeps(_ plan: EntityPlan, _ name: String) -> Bool {
            guard let to = plan.new.fieldIndex[name], let from = plan.old.fieldIndex[name],
                  plan.new.fields[to].attributeType == plan.old.fields[from].attributeType else { return false }
            switch plan.fields[to] {
            case .copied(let field, replacement: .none), .reference(let field): return field == from
            default: return false
            }
        }
        let oldEntries = mapped.map { Self.entryKinds(of: $0.old) }, newEntries = mapped.map { Self.entryKinds(of: $0.new) }
        var unchanged = Set<String>()
        for (name, kind) in new.tables where old.tables[name] == kind {
            let stays: Bool
            switch kind {
            case .metadata, .sequences, .changeLog:
                continue
            case .rows:
                let root = String(name.dropFirst(StoreLayout.rowsDatabase(root: "").count))
                stays = mapped.allSatisfy { plan in
                    guard plan.old.root == root || plan.new.root == root else { return true }
                    return plan.old.root == plan.new.root && plan.new.fields.count == plan.old.fields.count
                        && zip(plan.new.fields, plan.old.fields).allSatisfy { $0.name == $1.name && keeps(plan, $0.name) }
                }
            case .fetchIndex, .uniqueness, .toOneIndex:
                stays = mapped.indices.allSatisfy { position in
                    let kind = newEntries[position][name]
                    return kind == oldEntries[position][name] && (kind?.fields ?? []).allSatisfy { keeps(mapped[position], $0) }
                }
            case .toMany(let owner, let relationship, _):
                stays = old.entities[owner]?.toManyTables[relationship]?.table == name
                    && new.model.relationship(named: relationship, in: owner).flatMap { directSource(of: $0, in: owner) }
                        .map { $0.entity == owner && $0.relationship.name == relationship } == true
            }
            if stays { unchanged.insert(name) }
        }
        return unchanged
    }

    /// What decides the entries an entity's rows put in one secondary table: the entity's tag, the kind of entry,
    /// the fields it reads (by name, with their types), an index's elements' order and collation and the values it
    /// stores, and whether the table enforces uniqueness.
    struct EntryKind: Equatable {
        let description: [String]
        let fields: [String]
    }

    /// The ``EntryKind`` of each secondary table `entity`'s rows put entries in, by table name.
    static func entryKinds(of entity: StoreLayout.EntityLayout) -> [String: EntryKind] {
        var kinds: [String: EntryKind] = [:]
        func typed(_ name: String) -> String {
            "\(name):\(entity.fieldIndex[name].flatMap { entity.fields[$0].attributeType }.map(\.rawValue) ?? "reference")"
        }
        for (position, (_, index)) in entity.indexes.enumerated() {
            let stored = index.storedAttributeNames
            kinds[entity.indexTables[position]] = EntryKind(
                description: ["index", "\(entity.tag)", entity.constraintOfIndex[position] >= 0 ? "unique" : "",
                              index.elements.map { "\(typed($0.propertyName)) \($0.isAscending) \($0.collation.rawValue)" }.joined(separator: ","),
                              stored.map(typed).joined(separator: ",")],
                fields: index.elements.map(\.propertyName) + stored)
        }
        for (position, (_, _, constraint)) in entity.uniques.enumerated() where entity.indexOfConstraint[position] < 0 {
            kinds[entity.uniqueTables[position]] = EntryKind(description: ["unique", "\(entity.tag)", constraint.propertyNames.map(typed).joined(separator: ",")],
                                                             fields: constraint.propertyNames)
        }
        for (position, relationship) in entity.toOneRelationships.enumerated() {
            kinds[entity.toOneTables[position]] = EntryKind(description: ["toOne", "\(entity.tag)", relationship.name], fields: [relationship.name])
        }
        return kinds
    }

    /// The old relationship a new one's inverse takes its destinations from, for a new relationship that has no
    /// source of its own: its pairs, reversed, are the new one's.
    func inverseSource(of relationship: RelationshipDescription) -> (entity: String, relationship: RelationshipDescription)? {
        guard let inverse = new.model.inverse(of: relationship),
              let owner = mapping.entityMappings.first(where: { $0.destinationEntityName == relationship.destinationEntityName }),
              let sourceEntity = owner.sourceEntityName,
              case .copied(let name)? = owner.relationships.first(where: { $0.destinationName == inverse.name })?.source,
              let was = old.model.relationship(named: name, in: sourceEntity) else { return nil }
        return (sourceEntity, was)
    }

    /// The old relationship a new one takes its destinations from directly.
    func directSource(of relationship: RelationshipDescription, in entity: String) -> (entity: String, relationship: RelationshipDescription)? {
        guard let owner = mapping.entityMappings.first(where: { $0.destinationEntityName == entity }), let sourceEntity = owner.sourceEntityName,
              case .copied(let name)? = owner.relationships.first(where: { $0.destinationName == relationship.name })?.source,
              let was = old.model.relationship(named: name, in: sourceEntity) else { return nil }
        return (sourceEntity, was)
    }

    func derivedKey(_ relationship: RelationshipDescription, _ entity: String) -> String {
        new.declaringEntity(of: relationship.name, in: entity) + "." + relationship.name
    }

    // MARK: Old relationships' pairs

    /// Every (owner key, member) pair of the old relationship `relationship` of `entity`, members with their old
    /// tags, grouped by owner in key order (an ordered relationship's members in their order).
    func oldPairs(of relationship: RelationshipDescription, in entity: String, _ transaction: any KeyValueTransaction,
                  _ tables: [String: Database]) throws -> [(owner: UInt64, member: StoredRow.Reference)] {
        guard let layout = old.entities[entity] else { return [] }
        var pairs: [(owner: UInt64, member: StoredRow.Reference)] = []
        if !relationship.isToMany {
            guard let rows = tables[StoreLayout.rowsDatabase(root: layout.root)] else { return [] }
            let declaring = old.declaringEntity(of: relationship.name, in: entity)
            let family = TagSet(old) { old.model.ancestry(of: $0.name).contains(declaring) }
            try rows.withCursor(in: transaction) { cursor in
                try cursor.forEach { entry in
                    let row = try decodeOld(entry, rows)
                    guard family.contains(row.entityTag), let rowEntity = old.entity(tag: row.entityTag),
                          let field = rowEntity.fieldIndex[relationship.name], let member = row.reference(field) else { return true }
                    pairs.append((try rows.rowKey(in: entry), member))
                    return true
                }
            }
            return pairs
        }
        guard let (_, name) = layout.toManyTables[relationship.name], let table = tables[name] else { return [] }
        try table.withCursor(in: transaction) { cursor in
            try cursor.forEach { entry in
                guard entry.key.count >= 8, entry.value.count == 10 else {
                    throw ManagedObjectContextError(.storeUnusable, message: "\(path): an entry of \"\(name)\" is not an owner key and a 10-byte reference; nothing was migrated")
                }
                let owner = UInt64(bigEndian: entry.key.loadUnaligned(as: UInt64.self))
                let key = UInt64(bigEndian: entry.value.loadUnaligned(as: UInt64.self))
                let tag = UInt16(bigEndian: entry.value.loadUnaligned(fromByteOffset: 8, as: UInt16.self))
                pairs.append((owner, StoredRow.Reference(entityTag: tag, key: key)))
                return true
            }
        }
        return pairs
    }

    func decodeOld(_ entry: CursorEntry, _ rows: Database) throws -> StoredRow {
        do {
            return try RowCodec.decode(entry.value, layout: old)
        } catch {
            throw ManagedObjectContextError(.storeUnusable,
                message: "\(path): the row with key \((try? rows.rowKey(in: entry)).map(String.init) ?? "?") in \"\(rows.name ?? "")\" cannot be read while migrating: \(error.reason); nothing was migrated")
        }
    }

    /// One entry of a new to-many table: its owner, member (with its new tag) and position among the owner's members.
    struct LinkEntry {
        let table: ToManyTable
        let owner: UInt64
        let member: StoredRow.Reference
        let position: Int
    }

    /// Every entry of the new to-many tables (`staged` finds them by name), table by table in name order, each
    /// table's in the order they are put. `isDropped` says whether an owner's row (by key, and the old entity whose
    /// relationship it is) is dropped with its entity.
    func linkEntries(_ transaction: any KeyValueTransaction, _ tables: [String: Database], _ staged: [String: Database], newTags: [UInt16],
                     isDropped: (UInt64, String) throws -> Bool) throws -> [LinkEntry] {
        var result: [LinkEntry] = []
        for name in new.databaseNames {
            guard case .toMany(let owner, let relationshipName, let isOrdered)? = new.tables[name], let database = staged[name],
                  let relationship = new.model.relationship(named: relationshipName, in: owner) else { continue }
            let table = ToManyTable(database: database, isOrdered: isOrdered)
            var source = ""
            var pairs: [(owner: UInt64, member: StoredRow.Reference)] = []
            if let (entity, was) = directSource(of: relationship, in: owner) {
                pairs = try oldPairs(of: was, in: entity, transaction, tables)
                source = entity
            } else if let (entity, was) = inverseSource(of: relationship) {
                source = mapping.entityMappings.first { $0.destinationEntityName == owner }?.sourceEntityName ?? ""
                pairs = try oldPairs(of: was, in: entity, transaction, tables).map { pair in
                    (pair.member.key, StoredRow.Reference(entityTag: 0, key: pair.owner))
                }
                // The members' tags: the old owners' rows say them.
                let root = old.entities[entity].map { StoreLayout.rowsDatabase(root: $0.root) } ?? ""
                if let rows = tables[root] {
                    for index in pairs.indices {
                        pairs[index].member.entityTag = try RowTable(database: rows).entityTag(key: pairs[index].member.key, in: transaction) ?? 0
                    }
                }
                pairs.sort { ($0.owner, $0.member.key) < ($1.owner, $1.member.key) }
            }
            var position = 0, previous: UInt64?
            for pair in pairs {
                let tag = Int(pair.member.entityTag) < newTags.count ? newTags[Int(pair.member.entityTag)] : 0
                guard tag != 0, try !isDropped(pair.owner, source) else { continue }
                if pair.owner != previous { position = 0 }
                previous = pair.owner
                result.append(LinkEntry(table: table, owner: pair.owner, member: StoredRow.Reference(entityTag: tag, key: pair.member.key), position: position))
                position += 1
            }
        }
        return result
    }

    /// For each new to-one with no source of its own whose inverse's old to-many has one: each row's member.
    func derivedToOnes(_ transaction: any KeyValueTransaction, _ tables: [String: Database], _ plans: [EntityPlan?],
                       newTags: [UInt16]) throws -> [String: [UInt64: StoredRow.Reference]] {
        var maps: [String: [UInt64: StoredRow.Reference]] = [:]
        for plan in plans.compactMap({ $0 }) {
            for (field, source) in zip(plan.new.fields, plan.fields) {
                guard case .derived(let key) = source, maps[key] == nil, case .toOne(let relationship) = field.kind,
                      let (entity, was) = inverseSource(of: relationship) else { continue }
                var map: [UInt64: StoredRow.Reference] = [:]
                let ownerRoot = old.entities[entity].map { StoreLayout.rowsDatabase(root: $0.root) } ?? ""
                for pair in try oldPairs(of: was, in: entity, transaction, tables) {
                    guard let rows = tables[ownerRoot], let tag = try RowTable(database: rows).entityTag(key: pair.owner, in: transaction),
                          Int(tag) < newTags.count, newTags[Int(tag)] != 0 else { continue }
                    map[pair.member.key] = StoredRow.Reference(entityTag: newTags[Int(tag)], key: pair.owner)
                }
                maps[key] = map
            }
        }
        return maps
    }
}
