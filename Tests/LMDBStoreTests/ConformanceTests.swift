import Foundation
import LMDBStore
import ObjectGraph
import StoreConformance
import Testing

@Suite(.onEveryEngine) struct LMDBStoreConformanceTests {
    @Test func theLMDBStorePassesEveryConformanceCheck() {
        let folder = StoreFolder()
        var counter = 0
        let report = StoreConformance.run { coordinator in
            counter += 1
            try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file("conformance-\(counter).lmdb"))
        }
        #expect(report.checks == StoreConformance.checkNames)
        #expect(report.passed, "\(report)")
    }
}
