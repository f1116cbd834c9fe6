import ObjectGraph

/// How a model maps onto named databases, entity tags and row field numbers (specified in `Docs/FORMAT.md`).
struct StoreLayout: Sendable {
    struct Field: Sendable {
        enum Kind: Sendable { case attribute(AttributeDescription), toOne(RelationshipDescription) }
        let name: String
        let id: UInt16
        let kind: Kind
        /// The attribute's type (`nil` for a to-one), and its maximum string length: what a save checks for every
        /// value, read without copying the attribute's description.
        let attributeType: AttributeType?
        let maximumLength: Int?

        init(name: String, id: UInt16, kind: Kind) {
            self.name = name
            self.id = id
            self.kind = kind
            if case .attribute(let attribute) = kind {
                attributeType = attribute.type
                maximumLength = attribute.validation.maximumLength
            } else {
                attributeType = nil
                maximumLength = nil
            }
        }
    }

    /// One entity's layout; a class, so the rows and plans that keep it share it instead of copying its parts.
    final class EntityLayout: Sendable {
        let name: String
        let tag: UInt16
        let root: String
        /// Persistent attributes and to-one relationships, inherited ones included, sorted by name; a field's number
        /// is its position.
        let fields: [Field]
        let fieldIndex: [String: Int]
        /// Fetch indexes and uniqueness constraints declared on this entity or its ancestors, with the entity
        /// that declares them (their database is the declaring entity's).
        let indexes: [(owner: String, index: FetchIndexDescription)]
        let uniques: [(owner: String, number: Int, constraint: UniquenessConstraint)]
        /// To-one relationships (each has an index: destination key + source key).
        let toOneRelationships: [RelationshipDescription]
        /// To-many relationships kept in link tables (ordered ones, many-to-many, and those without an inverse), and
        /// their slots in ``handle`` (where a change gives their members).
        let linkRelationships: [RelationshipDescription]
        let linkSlots: [ManagedObjectModel.Slot]
        /// What a save needs of ``toOneRelationships`` and ``linkRelationships`` (same orders), held by reference: a
        /// `RelationshipDescription` read out of its array is a copy that retains each of its strings and arrays.
        let toOneChecks: [RelationshipCheck]
        let linkChecks: [RelationshipCheck]

        /// The table names of ``indexes``, ``uniques`` and ``toOneRelationships``, in the same order: made once, so
        /// the index entries a save computes for every row share them instead of building each name again.
        let indexTables: [String]
        /// A uniqueness constraint that an index keeps (``indexOfConstraint``) has that index's table here.
        let uniqueTables: [String]
        let toOneTables: [String]
        /// For each uniqueness constraint (``uniques``' order), the index that keeps it, or -1 when it has its own
        /// `unique/…` table; for each index (``indexes``' order), the constraint it keeps, or -1. An index keeps a
        /// constraint when the same entity declares both and the index's elements are the constraint's properties in
        /// the same order, compared exactly (binary collation): its keys are the constraint's (or their bytes
        /// inverted, for descending elements), so a second table of the same keys would only cost room
        /// (`Docs/FORMAT.md`).
        let indexOfConstraint: [Int]
        let constraintOfIndex: [Int]
        /// The field numbers of each index's elements, each uniqueness constraint's properties and each to-one (in
        /// ``indexes``', ``uniques``' and ``toOneRelationships``' order): a save computes entries without names.
        let indexFields: [[Int]]
        /// Each index's elements' order and collation (in ``indexes``' order): what a save reads per row, without
        /// copying the index's description.
        let indexElements: [[(isAscending: Bool, collation: FetchIndexElementDescription.Collation)]]
        /// The fields of the attributes each index's entries store beside the row's reference (in ``indexes``'
        /// order; empty for an index that stores none — see ``FetchIndexDescription/storedAttributeNames``).
        let indexStoredFields: [[Int]]
        /// The width of each stored attribute in an entry's value (``IndexEntries/storedWidth(_:)``).
        let indexStoredWidths: [[Int]]
        let uniqueFields: [[Int]]
        let toOneFields: [Int]
        /// The model's runtime view of the entity, and where each field's value sits in its slot arrays
        /// (``AttributeSlots`` for attributes, ``ToOneSlots`` for to-ones), by field number: a row decodes into the
        /// arrays an object keeps, and a save reads them, without hashing a name.
        let handle: ManagedObjectModel.EntityHandle
        let slotPositions: [Int]
        /// The link table of each of ``linkRelationships`` (same order), and for every to-many relationship the table
        /// its members are read from — its link table, or its inverse's to-one index — by name: a save or a
        /// relationship fault finds its table without building a name.
        let linkTables: [String]
        let toManyTables: [String: (isLink: Bool, table: String)]
        /// Whether each field holds a to-one's reference (else an attribute's value), by field number: what a decoder
        /// checks per field without copying the field's description.
        let referenceFields: [Bool]
        /// The row value types each field may hold, by field number, as bits (`1 << type`): a reference for a
        /// to-one, the types its attribute's values are written as for an attribute (``RowCodec/ValueType``). In
        /// memory the layout owns: reached through a row's unowned entity, an array would be retained and released on
        /// every read of a field. Written once, in `init`.
        nonisolated(unsafe) let fieldValueTypes: UnsafeBufferPointer<UInt32>
        /// Each field's attribute type (`nil` for a to-one) and, for to-ones, its position in
        /// ``toOneRelationships`` (-1 for attributes), by field number.
        let attributeTypes: [AttributeType?]
        let toOneOfField: [Int]
        /// The field of each attribute position and of each to-one position of ``handle`` (-1: not stored, such as
        /// a transient attribute): what a row read a value at a time is asked for.
        let fieldOfAttribute: [Int]
        let fieldOfToOne: [Int]
        /// A row's fields, all NULL, in a new array: what a row being built starts from. Grown by `reserveCapacity`
        /// and `append`, which the compiler specializes; a copy of one shared all-NULL array on the row's first write
        /// moved each element through the generic value witness (≈ 800 instructions for an employee's row), and
        /// `init(repeating:count:)` looks the storage's metadata up on every call.
        @inline(__always)
        func newFields() -> ContiguousArray<RowField?> {
            var row = ContiguousArray<RowField?>()
            row.reserveCapacity(fields.count)
            for _ in 0..<fields.count { row.append(nil) }
            return row
        }

        deinit {
            fieldValueTypes.deallocate()
        }

        init(name: String, tag: UInt16, root: String, fields: [Field], fieldIndex: [String: Int],
             indexes: [(owner: String, index: FetchIndexDescription)], uniques: [(owner: String, number: Int, constraint: UniquenessConstraint)],
             toOneRelationships: [RelationshipDescription], toOneOwners: [String], linkRelationships: [RelationshipDescription],
             toManyTables: [String: (isLink: Bool, table: String)], handle: ManagedObjectModel.EntityHandle,
             model: ManagedObjectModel, entityNamesByTag: [String]) {
            self.name = name
            self.tag = tag
            self.root = root
            self.fields = fields
            self.fieldIndex = fieldIndex
            self.indexes = indexes
            self.uniques = uniques
            self.toOneRelationships = toOneRelationships
            self.linkRelationships = linkRelationships
            toOneChecks = toOneRelationships.map { RelationshipCheck($0, model: model, entityNamesByTag: entityNamesByTag) }
            linkChecks = linkRelationships.map { RelationshipCheck($0, model: model, entityNamesByTag: entityNamesByTag) }
            // Every name below is a persistent attribute or to-one of the entity (the model checked its indexes and
            // constraints), so each has a field; -1 stands for none and reads as NULL.
            let indexFields = indexes.map { $0.index.elements.map { fieldIndex[$0.propertyName] ?? -1 } }
            let indexElements = indexes.map { $0.index.elements.map { (isAscending: $0.isAscending, collation: $0.collation) } }
            let uniqueFields = uniques.map { $0.constraint.propertyNames.map { fieldIndex[$0] ?? -1 } }
            (self.indexFields, self.indexElements, self.uniqueFields) = (indexFields, indexElements, uniqueFields)
            indexStoredFields = indexes.map { $0.index.storedAttributeNames.map { fieldIndex[$0] ?? -1 } }
            indexStoredWidths = indexStoredFields.map { stored in
                stored.map { field in field >= 0 ? fields[field].attributeType.map(IndexEntries.storedWidth) ?? 9 : 9 }
            }
            var indexOfConstraint = [Int](repeating: -1, count: uniques.count)
            var constraintOfIndex = [Int](repeating: -1, count: indexes.count)
            for (constraint, fields) in uniqueFields.enumerated() where !fields.isEmpty && !fields.contains(-1) {
                let keeper = indexes.indices.first { index in
                    constraintOfIndex[index] < 0 && indexes[index].owner == uniques[constraint].owner && indexFields[index] == fields
                        && indexElements[index].allSatisfy { $0.collation == .binary }
                }
                guard let keeper else { continue }
                indexOfConstraint[constraint] = keeper
                constraintOfIndex[keeper] = constraint
            }
            self.indexOfConstraint = indexOfConstraint
            self.constraintOfIndex = constraintOfIndex
            let indexTables = indexes.map { StoreLayout.indexDatabase(entity: $0.owner, index: $0.index.name) }
            self.indexTables = indexTables
            uniqueTables = uniques.indices.map { constraint in
                indexOfConstraint[constraint] >= 0 ? indexTables[indexOfConstraint[constraint]]
                    : StoreLayout.uniqueDatabase(entity: uniques[constraint].owner, number: uniques[constraint].number)
            }
            toOneTables = zip(toOneRelationships, toOneOwners).map { StoreLayout.toOneDatabase(entity: $1, relationship: $0.name) }
            toOneFields = toOneRelationships.map { fieldIndex[$0.name] ?? -1 }
            self.handle = handle
            self.toManyTables = toManyTables
            linkTables = linkRelationships.map { toManyTables[$0.name]!.table }
            linkSlots = linkRelationships.map { handle.slot(named: $0.name)! }
            slotPositions = fields.map { handle.slot(named: $0.name)?.position ?? -1 }
            referenceFields = fields.map { $0.attributeType == nil }
            let bits = UnsafeMutableBufferPointer<UInt32>.allocate(capacity: fields.count)
            _ = bits.initialize(from: fields.lazy.map { RowCodec.ValueType.allowed(for: $0.attributeType) })
            fieldValueTypes = UnsafeBufferPointer(bits)
            attributeTypes = fields.map(\.attributeType)
            toOneOfField = fields.map { field in toOneRelationships.firstIndex { $0.name == field.name } ?? -1 }
            var fieldOfAttribute: [Int] = [], fieldOfToOne: [Int] = []
            for (id, position) in slotPositions.enumerated() where position >= 0 {
                if referenceFields[id] {
                    if fieldOfToOne.count <= position { fieldOfToOne += repeatElement(-1, count: position + 1 - fieldOfToOne.count) }
                    fieldOfToOne[position] = id
                } else {
                    if fieldOfAttribute.count <= position { fieldOfAttribute += repeatElement(-1, count: position + 1 - fieldOfAttribute.count) }
                    fieldOfAttribute[position] = id
                }
            }
            self.fieldOfAttribute = fieldOfAttribute
            self.fieldOfToOne = fieldOfToOne
        }
    }

    let model: ManagedObjectModel
    let entities: [String: EntityLayout]
    let entityNamesByTag: [UInt16: String]
    /// Entities by tag (tags are 1…n), for reading rows without a lookup by name.
    let entitiesByTag: [EntityLayout?]
    /// Every table the model needs, by name, with its kind.
    let tables: [String: TableKind]

    /// The entity a row's tag names.
    @inline(__always)
    func entity(tag: UInt16) -> EntityLayout? {
        Int(tag) < entitiesByTag.count ? entitiesByTag[Int(tag)] : nil
    }

    /// The order entity tags and field numbers follow: the bytes of the names' NFC UTF-8 (for the ASCII names
    /// models almost always use, plain byte order), stated so that a reader in another language derives the same
    /// numbers (`Docs/FORMAT.md`).
    static func namePrecedes(_ lhs: String, _ rhs: String) -> Bool {
        StringFolding.composed(lhs).utf8.lexicographicallyPrecedes(StringFolding.composed(rhs).utf8)
    }

    init(model: ManagedObjectModel) {
        self.model = model
        var entities: [String: EntityLayout] = [:]
        var names: [UInt16: String] = [:]
        let sortedNames = model.entityNames.sorted(by: Self.namePrecedes)
        let namesByTag = [""] + sortedNames  // tags start at 1
        for (offset, name) in sortedNames.enumerated() {
            let tag = UInt16(offset + 1)
            names[tag] = name
            let properties = model.allProperties(of: name).filter(\.isPersistent)
            var fields: [Field] = []
            for property in properties.sorted(by: { Self.namePrecedes($0.name, $1.name) }) {
                switch property {
                case .attribute(let attribute): fields.append(Field(name: attribute.name, id: UInt16(fields.count), kind: .attribute(attribute)))
                case .relationship(let relationship) where !relationship.isToMany:
                    fields.append(Field(name: relationship.name, id: UInt16(fields.count), kind: .toOne(relationship)))
                default: break
                }
            }
            let ancestry = model.ancestry(of: name)
            var indexes: [(owner: String, index: FetchIndexDescription)] = []
            var uniques: [(owner: String, number: Int, constraint: UniquenessConstraint)] = []
            for owner in ancestry {
                let declared = model.fetchIndexes(of: owner).filter { index in !indexes.contains { $0.index.name == index.name } }
                indexes += declared.map { (owner, $0) }
                for (number, constraint) in (model.entity(named: owner)?.uniquenessConstraints ?? []).enumerated() {
                    uniques.append((owner, number, constraint))
                }
            }
            let relationships = properties.compactMap { if case .relationship(let r) = $0 { r } else { nil } }
            let toOne = relationships.filter { !$0.isToMany }
            let toOneOwners = toOne.map { Self.declaringEntity(of: $0.name, in: name, model) }
            entities[name] = EntityLayout(
                name: name, tag: tag, root: ancestry.first ?? name, fields: fields,
                fieldIndex: Dictionary(uniqueKeysWithValues: fields.map { ($0.name, Int($0.id)) }),
                indexes: indexes, uniques: uniques,
                toOneRelationships: toOne, toOneOwners: toOneOwners,
                linkRelationships: relationships.filter { Self.needsLinkTable($0, model) },
                toManyTables: Self.toManyTables(of: name, relationships.filter(\.isToMany), model),
                handle: model.handle(forEntityNamed: name), model: model, entityNamesByTag: namesByTag)
        }
        self.entities = entities
        self.entityNamesByTag = names
        var byTag = [EntityLayout?](repeating: nil, count: names.count + 1)
        for (tag, name) in names { byTag[Int(tag)] = entities[name] }
        entitiesByTag = byTag
        tables = Self.tables(model, entities)
    }

    /// Where each to-many relationship of `entity` is read from: its link table, or its inverse's to-one index.
    private static func toManyTables(of entity: String, _ relationships: [RelationshipDescription], _ model: ManagedObjectModel)
        -> [String: (isLink: Bool, table: String)]
    {
        var tables: [String: (isLink: Bool, table: String)] = [:]
        for relationship in relationships {
            if needsLinkTable(relationship, model) {
                tables[relationship.name] = (true, linkDatabase(entity: declaringEntity(of: relationship.name, in: entity, model), relationship: relationship))
            } else if let inverse = model.inverse(of: relationship) {
                tables[relationship.name] = (false, toOneDatabase(entity: declaringEntity(of: inverse.name, in: relationship.destinationEntityName, model),
                                                                  relationship: inverse.name))
            }
        }
        return tables
    }

    /// A to-many relationship needs its own table unless its inverse is a to-one whose index answers it.
    static func needsLinkTable(_ relationship: RelationshipDescription, _ model: ManagedObjectModel) -> Bool {
        guard relationship.isToMany else { return false }
        if relationship.isOrdered { return true }
        guard let inverse = model.inverse(of: relationship) else { return true }
        return inverse.isToMany
    }

    func entity(_ name: String) -> EntityLayout? { entities[name] }

    // MARK: Database names

    static let metadataDatabase = "meta"
    static let sequenceDatabase = "seq"
    static let changesDatabase = "changes"
    /// The `seq` key of the change log's counter (no entity name can start with "~").
    static let changeSequenceKey = "~changes"
    /// The `seq` key of the number of records the change log holds.
    static let changeRecordsKey = "~changeRecords"
    /// How many saves the change log remembers at most.
    static let changeLogLength: UInt64 = 10_000
    /// How many objects' records (11 bytes each) the change log holds at most: past that, its oldest saves are
    /// forgotten — a bulk import leaves about 550 KB of log, not 11 bytes per object imported.
    static let changeLogRecords: UInt64 = 50_000
    static func rowsDatabase(root: String) -> String { "rows/" + root }
    static func indexDatabase(entity: String, index: String) -> String { "index/\(entity)/\(index)" }
    static func uniqueDatabase(entity: String, number: Int) -> String { "unique/\(entity)/\(number)" }
    static func toOneDatabase(entity: String, relationship: String) -> String { "toone/\(entity)/\(relationship)" }
    /// The table of a to-many relationship that needs one (``needsLinkTable(_:_:)``), declared by `entity`: an
    /// ordered one's `link/…` table (owner key + position → member), an unordered one's `members/…` table (owner key
    /// → its members as sorted duplicate values).
    static func linkDatabase(entity: String, relationship: RelationshipDescription) -> String {
        (relationship.isOrdered ? "link/" : "members/") + entity + "/" + relationship.name
    }

    /// The entity that declares a relationship (the first in the ancestry that has it).
    func declaringEntity(of relationship: String, in entityName: String) -> String {
        Self.declaringEntity(of: relationship, in: entityName, model)
    }

    private static func declaringEntity(of relationship: String, in entityName: String, _ model: ManagedObjectModel) -> String {
        model.ancestry(of: entityName).first { model.entity(named: $0)?.relationships.contains { $0.name == relationship } == true } ?? entityName
    }

    /// Every named database the model needs, sorted.
    var databaseNames: [String] { tables.keys.sorted() }

    /// Every table the model needs, with its kind.
    private static func tables(_ model: ManagedObjectModel, _ entities: [String: EntityLayout]) -> [String: TableKind] {
        var tables: [String: TableKind] = [metadataDatabase: .metadata, sequenceDatabase: .sequences, changesDatabase: .changeLog]
        for name in model.entityNames {
            let layout = entities[name]!
            tables[rowsDatabase(root: layout.root)] = .rows
            for entry in layout.indexes { tables[indexDatabase(entity: entry.owner, index: entry.index.name)] = .fetchIndex }
            for (constraint, entry) in layout.uniques.enumerated() where layout.indexOfConstraint[constraint] < 0 {
                tables[uniqueDatabase(entity: entry.owner, number: entry.number)] = .uniqueness
            }
            for relationship in layout.toOneRelationships {
                tables[toOneDatabase(entity: declaringEntity(of: relationship.name, in: name, model), relationship: relationship.name)] = .toOneIndex
            }
            for relationship in layout.linkRelationships {
                let owner = declaringEntity(of: relationship.name, in: name, model)
                tables[linkDatabase(entity: owner, relationship: relationship)] = .toMany(owner: owner, relationship: relationship.name,
                                                                                          isOrdered: relationship.isOrdered)
            }
        }
        return tables
    }
}

/// Entity tags as a table indexed by tag (tags are 1…n), so that a row's tag is looked up on a cursor step without
/// hashing.
struct TagSet {
    private let members: [Bool]

    /// The tags of `layout`'s entities that `include` takes.
    init(_ layout: StoreLayout, _ include: (StoreLayout.EntityLayout) -> Bool) {
        members = layout.entitiesByTag.map { $0.map(include) ?? false }
    }

    func contains(_ tag: UInt16) -> Bool {
        Int(tag) < members.count && members[Int(tag)]
    }
}

extension StoreLayout {
    /// The tags of `family` (a fetch's entities), as a ``TagSet``.
    func tags(of family: Set<UInt16>) -> TagSet {
        TagSet(self) { family.contains($0.tag) }
    }

    /// The tags of the entities whose rows share `entity`'s table: a row of that table with another tag is damage.
    func tags(sharingTableOf entity: EntityLayout) -> TagSet {
        TagSet(self) { $0.root == entity.root }
    }
}

/// The part of a relationship a save checks and writes by: its name (for errors), its destination entity and whether
/// it is ordered.
final class RelationshipCheck: Sendable {
    let name: String
    let destinationEntityName: String
    let isOrdered: Bool
    /// By entity tag: whether an object of that entity may be held (the destination or one of its sub-entities).
    private let acceptedTags: [Bool]

    init(_ relationship: RelationshipDescription, model: ManagedObjectModel, entityNamesByTag: [String]) {
        name = relationship.name
        destinationEntityName = relationship.destinationEntityName
        isOrdered = relationship.isOrdered
        acceptedTags = entityNamesByTag.map { !$0.isEmpty && model.entity($0, isKindOf: relationship.destinationEntityName) }
    }

    /// Whether an object of the entity tagged `tag` may be held: an array read, where a save checks every target.
    func accepts(_ tag: UInt16) -> Bool {
        Int(tag) < acceptedTags.count && acceptedTags[Int(tag)]
    }
}
