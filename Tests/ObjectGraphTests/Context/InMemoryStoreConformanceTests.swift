import Foundation
import ObjectGraph
import StoreConformance
import Testing

@Suite struct InMemoryStoreConformanceTests {
    @Test func theInMemoryStorePassesEveryConformanceCheck() {
        let report = StoreConformance.run { coordinator in
            try coordinator.addPersistentStore(type: InMemoryStore.storeType)
        }
        #expect(report.checks == StoreConformance.checkNames)
        #expect(report.passed, "\(report)")
    }

    /// A store that forgets every save: the kit must catch it.
    final class ForgetfulStore: IncrementalStore, @unchecked Sendable {
        let inner: InMemoryStore
        init(_ description: PersistentStoreCoordinator.StoreDescription) throws { inner = try InMemoryStore(description: description) }
        var type: String { "Forgetful" }
        var configurationName: String? { nil }
        var url: URL? { nil }
        var metadata: [String: String] { inner.metadata.merging([PersistentStoreMetadataKey.storeType: type]) { _, new in new } }
        func loadMetadata() throws { try inner.loadMetadata() }
        func execute(_ request: PersistentStoreRequest) throws -> PersistentStoreResult {
            if case .save(let save) = request, !save.updatedObjects.isEmpty { return .empty }
            return try inner.execute(request)
        }
        func newValuesForObject(with objectID: ManagedObjectID) throws -> IncrementalStoreNode { try inner.newValuesForObject(with: objectID) }
        func newValue(forRelationship relationship: RelationshipDescription, forObjectWith objectID: ManagedObjectID) throws -> [ManagedObjectID] {
            try inner.newValue(forRelationship: relationship, forObjectWith: objectID)
        }
        func obtainPermanentIDs(for objects: [ObjectReference]) throws -> [ManagedObjectID] { try inner.obtainPermanentIDs(for: objects) }
    }

    @Test func aBrokenStoreFailsTheChecksByName() {
        PersistentStoreCoordinator.registerStoreType("Forgetful") { try ForgetfulStore($0) }
        let report = StoreConformance.run { coordinator in try coordinator.addPersistentStore(type: "Forgetful") }
        #expect(!report.passed)
        #expect(report.failures.map(\.check).contains("updatesAndDeletesPersist"))
        #expect(report.failures.map(\.check).contains("conflictingSavesAreDetected"))
        #expect(!report.failures.map(\.check).contains("everyAttributeTypeRoundTrips"))
    }
}
