import Foundation
@testable import ObjectGraph
import StoreConformance
import Testing

@Suite struct CSVStoreTests {
    @Test func theCSVStorePassesEveryConformanceCheck() {
        let report = StoreConformance.runAtomicStore { coordinator, url in
            try coordinator.addPersistentStore(type: CSVStore.storeType, at: url)
        }
        #expect(report.checks == StoreConformance.checkNames + StoreConformance.atomicStoreCheckNames)
        #expect(report.passed, "\(report)")
    }
}
