import Foundation
@testable import ObjectGraph
import StoreConformance
import Testing

/// An atomic store that records every call the framework makes, and keeps its "file" in a shared dictionary.
final class RecordingStore: AtomicStore, @unchecked Sendable {
    static let type = "Recording"
    nonisolated(unsafe) static var files: [URL: (metadata: [String: String], records: [(String, Int64, [String: AttributeValue], [String: [Int64]])])] = [:]
    nonisolated(unsafe) static var calls: [String] = []
    nonisolated(unsafe) static var failNextSave = false
    static let lock = NSLock()

    static func register() {
        PersistentStoreCoordinator.registerStoreType(type) { try RecordingStore(description: $0, type: RecordingStore.type) }
    }

    static func take() -> [String] { lock.withLock { defer { calls = [] }; return calls } }
    private func record(_ call: String) { Self.lock.withLock { Self.calls.append(call) } }
    private static func name(_ id: ManagedObjectID) -> String { "\(id.entityName) \(id.referenceObject)" }

    override func isEmptyLocation() throws -> Bool {
        record("isEmptyLocation")
        return Self.lock.withLock { Self.files[fileURL] == nil }
    }

    override func prepareNewStore() throws { record("prepareNewStore") }

    override func load() throws {
        record("load")
        let file = Self.lock.withLock { Self.files[fileURL]! }
        metadata.merge(file.metadata) { _, stored in stored }
        try checkMetadata()
        var nodes: [Int64: AtomicStoreCacheNode] = [:]
        for (entity, key, attributes, _) in file.records {
            nodes[key] = AtomicStoreCacheNode(objectID: objectID(forEntityName: entity, withReferenceObject: .integer(key)), attributes: attributes)
        }
        for (_, key, _, relationships) in file.records {
            for (name, targets) in relationships { nodes[key]!.setDestinations(targets.map { nodes[$0]! }, forRelationship: name) }
        }
        addCacheNodes(nodes.values)
    }

    override func save() throws {
        record("save")
        if Self.lock.withLock({ defer { Self.failNextSave = false }; return Self.failNextSave }) {
            throw StoreFileError(.io, url: fileURL, reason: "the disk is full")
        }
        let records = cacheNodes.map { node -> (String, Int64, [String: AttributeValue], [String: [Int64]]) in
            guard case .integer(let key) = node.objectID.referenceObject else { fatalError() }
            return (node.objectID.entityName, key, node.attributes, node.toMany.mapValues { $0.map { id in
                guard case .integer(let key) = id.referenceObject else { fatalError() }
                return key
            } })
        }
        let metadata = self.metadata
        Self.lock.withLock { Self.files[fileURL] = (metadata, records) }
    }

    override func newReferenceObject(for object: ObjectReference) -> ReferenceObject {
        let reference = super.newReferenceObject(for: object)
        record("newReferenceObject(\(object.entityName)) = \(reference)")
        return reference
    }

    override func newCacheNode(for object: ObjectChange) -> AtomicStoreCacheNode {
        record("newCacheNode(\(Self.name(object.objectID)))")
        return super.newCacheNode(for: object)
    }

    override func updateCacheNode(_ node: AtomicStoreCacheNode, from object: ObjectChange) {
        record("updateCacheNode(\(Self.name(node.objectID)))")
        super.updateCacheNode(node, from: object)
    }

    override func willRemoveCacheNodes(_ nodes: [AtomicStoreCacheNode]) {
        record("willRemoveCacheNodes(\(nodes.map { Self.name($0.objectID) }.joined(separator: ", ")))")
    }

    override func willRemoveFromPersistentStoreCoordinator(_ coordinator: PersistentStoreCoordinator?) {
        record("willRemoveFromPersistentStoreCoordinator")
    }
}

/// The lifecycle runs in Core Data's documented order; these tests share the recording store's call log, so they
/// run one at a time.
@Suite(.serialized) struct AtomicStoreLifecycleTests {
    init() { RecordingStore.register() }

    @Test func callsComeInTheDocumentedOrder() throws {
        let url = URL(fileURLWithPath: "/recording/\(UUID().uuidString)")
        _ = RecordingStore.take()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: StoreConformance.model)
        let store = try coordinator.addPersistentStore(type: RecordingStore.type, at: url)
        #expect(RecordingStore.take() == ["isEmptyLocation", "prepareNewStore"])
        #expect(UUID(uuidString: store.identifier) != nil, "the metadata is not valid right after the store is added")

        let context = ManagedObjectContext(coordinator: coordinator)
        let first = try context.insertNewObject(forEntityName: "Label"), second = try context.insertNewObject(forEntityName: "Label")
        try first.setValue("a", forKey: "name")
        try second.setValue("b", forKey: "name")
        try context.save()
        #expect(RecordingStore.take() == ["newReferenceObject(Label) = 1", "newReferenceObject(Label) = 2",
                                          "newCacheNode(Label 1)", "newCacheNode(Label 2)", "save"])

        try first.setValue("A", forKey: "name")
        context.delete(second)
        try context.save()
        #expect(RecordingStore.take() == ["updateCacheNode(Label 1)", "willRemoveCacheNodes(Label 2)", "save"])

        try coordinator.removePersistentStore(store)
        #expect(RecordingStore.take() == ["willRemoveFromPersistentStoreCoordinator"])

        let again = PersistentStoreCoordinator(managedObjectModel: StoreConformance.model)
        let reloaded = try again.addPersistentStore(type: RecordingStore.type, at: url)
        #expect(RecordingStore.take() == ["isEmptyLocation", "load"])
        #expect(reloaded.identifier == store.identifier)
        let reader = ManagedObjectContext(coordinator: again)
        let labels = try reader.fetch(FetchRequest(entityName: "Label"))
        #expect(labels.map(\.objectID) == [first.objectID])
        #expect(labels.first?.value(forKey: "name") as? String == "A")
        // A new object after the reload does not get a reference object that was used before.
        #expect(try (reloaded as! AtomicStore).obtainPermanentIDs(for: [ObjectReference(objectID: first.objectID, entityName: "Label")])
                    .first?.referenceObject == .integer(3))
    }

    @Test func aFailedWritePutsTheNodesBack() throws {
        let url = URL(fileURLWithPath: "/recording/\(UUID().uuidString)")
        let coordinator = PersistentStoreCoordinator(managedObjectModel: StoreConformance.model)
        try coordinator.addPersistentStore(type: RecordingStore.type, at: url)
        let context = ManagedObjectContext(coordinator: coordinator)
        let kept = try context.insertNewObject(forEntityName: "Label"), doomed = try context.insertNewObject(forEntityName: "Label")
        try kept.setValue("kept", forKey: "name")
        try doomed.setValue("doomed", forKey: "name")
        try context.save()

        RecordingStore.lock.withLock { RecordingStore.failNextSave = true }
        try kept.setValue("changed", forKey: "name")
        context.delete(doomed)
        let added = try context.insertNewObject(forEntityName: "Label")
        try added.setValue("added", forKey: "name")
        #expect(throws: StoreFileError.self) { try context.save() }

        let fresh = ManagedObjectContext(coordinator: coordinator)
        let names = try fresh.fetch(FetchRequest(entityName: "Label", sortDescriptors: [FetchSortDescriptor(keyPath: "name")]))
            .map { $0.value(forKey: "name") as? String }
        #expect(names == ["doomed", "kept"], "the store's nodes changed although its file was not written")
        // The same changes save once the disk is back.
        try context.save()
        #expect(try ManagedObjectContext(coordinator: coordinator).count(for: FetchRequest(entityName: "Label")) == 2)
    }

    @Test func aStoreThatDoesNotOverrideLoadSaysSo() throws {
        PersistentStoreCoordinator.registerStoreType("Bare") { try AtomicStore(description: $0, type: "Bare") }
        let folder = ScratchFolder()
        let url = folder.write("something", to: "bare.store")
        let coordinator = PersistentStoreCoordinator(managedObjectModel: StoreConformance.model)
        #expect { try coordinator.addPersistentStore(type: "Bare", at: url) } throws: { error in
            "\(error)".contains("does not override AtomicStore.load()")
        }
    }
}
