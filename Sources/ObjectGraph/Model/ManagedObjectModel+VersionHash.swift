/// Version hashes: what a store compares to know whether the model it was written with is the model it is opened
/// with. They cover exactly what shapes stored data, and nothing else:
///
/// - an entity: its name, whether it is abstract, its ancestry, its version hash modifier, every persistent property
///   it has (inherited ones included), its fetch indexes (inherited and implied ones included) and its uniqueness
///   constraints;
/// - an attribute: name, type, transformer name, version hash modifier;
/// - a relationship: name, destination, inverse name, to-many, ordered, version hash modifier.
///
/// Left out on purpose, because changing them changes no stored byte: transient properties, fetched properties,
/// user info, class names, default values, optionality, validation rules, relationship counts, delete rules,
/// renaming identifiers, configurations, fetch request templates and the version identifier.
extension ManagedObjectModel {
    static func entityHash(_ entity: EntityDescription, resolved: ResolvedEntity) -> [UInt8] {
        var fields = HashFields()
        fields.append("entity", entity.name)
        fields.append("abstract", entity.isAbstract ? "1" : "0")
        fields.append("ancestry", resolved.ancestry.joined(separator: "/"))
        fields.append("modifier", entity.versionHashModifier ?? "")
        let persistent = resolved.properties.filter(\.isPersistent).sorted { $0.name < $1.name }
        for property in persistent {
            switch property {
            case .attribute(let attribute):
                fields.append("attribute", attribute.name)
                fields.append("type", attribute.type.rawValue)
                fields.append("transformer", attribute.transformerName ?? "")
                fields.append("modifier", attribute.versionHashModifier ?? "")
            case .relationship(let relationship):
                fields.append("relationship", relationship.name)
                fields.append("destination", relationship.destinationEntityName)
                fields.append("inverse", relationship.inverseName ?? "")
                fields.append("toMany", relationship.isToMany ? "1" : "0")
                fields.append("ordered", relationship.isOrdered ? "1" : "0")
                fields.append("modifier", relationship.versionHashModifier ?? "")
            case .fetchedProperty:
                break
            }
        }
        // Indexes and constraints of the whole ancestry, as the store keeps them.
        for index in resolved.indexes.sorted(by: { $0.name < $1.name }) {
            fields.append("index", index.name)
            for element in index.elements {
                fields.append("element", "\(element.propertyName) \(element.isAscending ? "asc" : "desc") \(element.collation.rawValue)")
            }
            // Only covering indexes add fields: the hashes of models without them are unchanged.
            for name in index.storedAttributeNames { fields.append("stored", name) }
        }
        for constraint in resolved.constraints.map({ $0.propertyNames.joined(separator: ",") }).sorted() {
            fields.append("unique", constraint)
        }
        return SHA256.hash(fields.bytes)
    }

    static func modelHash(_ entityHashes: [(String, [UInt8])]) -> [UInt8] {
        var fields = HashFields()
        for (name, hash) in entityHashes.sorted(by: { $0.0 < $1.0 }) {
            fields.append("entity", name)
            fields.append("hash", hash.map { String($0, radix: 16) }.joined())
        }
        return SHA256.hash(fields.bytes)
    }

    /// The model's version hash as lowercase hexadecimal.
    public var versionHashString: String {
        versionHash.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }
}

/// Length-prefixed fields, so that no two different field lists serialise to the same bytes.
private struct HashFields {
    var bytes: [UInt8] = []

    mutating func append(_ label: String, _ value: String) {
        for part in [label, value] {
            let utf8 = Array(part.utf8)
            withUnsafeBytes(of: UInt32(utf8.count).bigEndian) { bytes.append(contentsOf: $0) }
            bytes.append(contentsOf: utf8)
        }
    }
}
