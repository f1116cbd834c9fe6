import Foundation
import LMDBStore
import ObjectGraph

/// A fresh folder for one test's stores, removed afterwards.
final class StoreFolder {
    let url: URL

    init() {
        url = FileManager.default.temporaryDirectory.appendingPathComponent("lmdbstore-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        LMDBIncrementalStore.register()
    }

    deinit { try? FileManager.default.removeItem(at: url) }

    func file(_ name: String = "store.lmdb") -> URL { url.appendingPathComponent(name) }

    /// A coordinator over `model` with an LMDB store at `name`.
    func coordinator(_ model: ManagedObjectModel, _ name: String = "store.lmdb") throws -> (PersistentStoreCoordinator, LMDBIncrementalStore) {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        let store = try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: file(name)) as! LMDBIncrementalStore
        return (coordinator, store)
    }
}

extension StoreFolder {
    /// An LMDB store over `model` in this folder and an in-memory store beside it, both filled by `load` — the two
    /// sides of a differential test.
    func twinStores(_ model: ManagedObjectModel, _ load: (PersistentStoreCoordinator) throws -> Void) throws
        -> (lmdb: PersistentStoreCoordinator, store: LMDBIncrementalStore, memory: PersistentStoreCoordinator)
    {
        let (lmdb, store) = try coordinator(model)
        let memory = PersistentStoreCoordinator(managedObjectModel: model)
        try memory.addPersistentStore(type: InMemoryStore.storeType)
        try load(lmdb)
        try load(memory)
        return (lmdb, store, memory)
    }
}
