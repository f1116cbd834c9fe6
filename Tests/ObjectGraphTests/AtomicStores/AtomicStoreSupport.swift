import Foundation
@testable import ObjectGraph
import StoreConformance
import Testing

/// A temporary folder, removed when the value goes away.
final class ScratchFolder {
    let url: URL

    init() {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("atomic-\(UUID().uuidString)")
        try! FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    func path(_ name: String) -> URL { url.appendingPathComponent(name) }

    @discardableResult
    func write(_ text: String, to name: String) -> URL {
        let file = path(name)
        try! FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try! Data(text.utf8).write(to: file)
        return file
    }

    /// Every file in the folder (recursively, hidden ones too) with its bytes.
    func snapshot() -> [String: Data] {
        var result: [String: Data] = [:]
        let enumerator = FileManager.default.enumerator(at: url, includingPropertiesForKeys: nil)!
        for case let file as URL in enumerator {
            if let data = try? Data(contentsOf: file) { result[file.path.replacingOccurrences(of: url.path, with: "")] = data }
        }
        return result
    }
}

/// A coordinator over the conformance kit's model with one store of `type` at `url`.
func atomicCoordinator(_ type: String, at url: URL) throws -> (PersistentStoreCoordinator, AtomicStore) {
    let coordinator = PersistentStoreCoordinator(managedObjectModel: StoreConformance.model)
    let store = try coordinator.addPersistentStore(type: type, at: url)
    return (coordinator, store as! AtomicStore)
}

/// Adding a store at `url` fails with a ``StoreFileError`` of this kind; returns it for more checks.
@discardableResult
func expectFileError(_ type: String, at url: URL, _ kind: StoreFileError.Kind, sourceLocation: SourceLocation = #_sourceLocation) -> StoreFileError? {
    do {
        _ = try atomicCoordinator(type, at: url)
        Issue.record("opening \(url.lastPathComponent) succeeded", sourceLocation: sourceLocation)
    } catch let error as StoreFileError {
        #expect(error.kind == kind, "\(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("expected a StoreFileError, got \(error)", sourceLocation: sourceLocation)
    }
    return nil
}

/// Saves a small graph: an owner with three items (two queued), a label on the second item, a sample.
@discardableResult
func saveSmallGraph(_ coordinator: PersistentStoreCoordinator) throws -> (owner: ManagedObject, items: [ManagedObject], label: ManagedObject) {
    let context = ManagedObjectContext(coordinator: coordinator)
    let owner = try context.insertNewObject(forEntityName: "Owner")
    try owner.setValue("Ann, \"the\" owner", forKey: "name")
    let items = try (0..<3).map { n -> ManagedObject in
        let item = try context.insertNewObject(forEntityName: "Item")
        try item.setValue("item \(n)", forKey: "name")
        try item.setValue(Int32(n), forKey: "rank")
        try item.setValue(owner, forKey: "owner")
        return item
    }
    try owner.setValue([items[2], items[0]], forKey: "queue")
    let label = try context.insertNewObject(forEntityName: "Label")
    try label.setValue("", forKey: "name")
    try items[1].setValue([label], forKey: "labels")
    try context.save()
    return (owner, items, label)
}
