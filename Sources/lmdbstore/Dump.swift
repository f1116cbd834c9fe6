import ArgumentParser
import Foundation
import LMDBStore
import ObjectGraph

/// `lmdbstore dump STORE OUTPUT`: every object of a store, relationships included, as a JSON store file or a CSV
/// store folder (`Docs/ATOMIC-STORES.md`), which `lmdbstore import STORE OUTPUT` reads back.
struct Dump: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Write every object of a store, relationships included, as a JSON store file or a CSV store folder.",
        discussion: """
            The output is the atomic stores' format (Docs/ATOMIC-STORES.md): other programs read it, JSONStore and \
            CSVStore open it with the same model, and `lmdbstore import STORE OUTPUT` loads it into a store. The \
            objects get keys 1, 2, … per entity hierarchy, so their URIs are not the store's. A dump holds the \
            whole store in memory while it is written, as an atomic store does.
            """)

    @Argument(help: "The store file.")
    var store: String

    @Argument(help: "The file (JSON) or folder (CSV) to write; it must not exist.")
    var output: String

    @Option(help: "json or csv (default: json for a name ending in .json, else csv).")
    var format: OutputFormat?

    func validate() throws {
        try OutputFormat.check(format, command: "dump", .json, .csv)
    }

    func run() throws {
        let (_, source) = try openStore(store)
        guard !FileManager.default.fileExists(atPath: output) else { throw ToolError("\(output) already exists: give a new file or folder") }
        let kind = format ?? (output.lowercased().hasSuffix(".json") ? .json : .csv)
        let coordinator = PersistentStoreCoordinator(managedObjectModel: source.model)
        let written = try coordinator.addPersistentStore(type: kind == .json ? JSONStore.storeType : CSVStore.storeType,
                                                         at: URL(fileURLWithPath: output))
        let count = try copyObjects(from: source, into: ManagedObjectContext(coordinator: coordinator))
        try coordinator.removePersistentStore(written)
        emit("dumped \(count) object\(count == 1 ? "" : "s") of \(store) to \(output)")
    }
}

/// Copies every object `source` fetches into `destination` (contexts over the same model) and saves it: each
/// object with its stored attributes, then each relationship from the side a copy writes (``isWrittenSide(_:of:in:)``),
/// so each link is set once and ordered to-manys keep their order. Returns how many objects were copied.
func copyObjects(from source: ManagedObjectContext, into destination: ManagedObjectContext) throws -> Int {
    let model = source.model
    let bar = ProgressLine()
    defer { bar.finish() }
    var copies: [ManagedObjectID: ManagedObject] = [:]
    var originals: [ManagedObject] = []
    for entity in model.entities where !entity.isAbstract {
        var request = FetchRequest(entityName: entity.name)
        request.includesSubentities = false
        request.returnsObjectsAsFaults = false
        let attributes = model.allProperties(of: entity.name).compactMap { property -> String? in
            if case .attribute(let attribute) = property, !attribute.isTransient { attribute.name } else { nil }
        }
        for object in try source.fetch(request) {
            let copy = try destination.insertNewObject(forEntityName: entity.name)
            for name in attributes { try copy.setValue(object.value(forKey: name), forKey: name) }
            copies[object.objectID] = copy
            originals.append(object)
        }
        bar.show("copying: \(originals.count) objects read (\(entity.name) done)")
    }
    for object in originals {
        let copy = copies[object.objectID]!
        for case .relationship(let relationship) in model.allProperties(of: object.entityName)
        where isWrittenSide(relationship, of: object.entityName, in: model) {
            if !relationship.isToMany {
                let target = (object.value(forKey: relationship.name) as? ManagedObject).flatMap { copies[$0.objectID] }
                if target != nil { try copy.setValue(target, forKey: relationship.name) }
            } else {
                let members = object.relatedObjects(forKey: relationship.name).compactMap { copies[$0.objectID] }
                if !members.isEmpty { try copy.setValue(relationship.isOrdered ? members as Any : Set(members) as Any, forKey: relationship.name) }
            }
        }
    }
    bar.show("copying: saving \(originals.count) objects")
    try destination.save()
    return originals.count
}
