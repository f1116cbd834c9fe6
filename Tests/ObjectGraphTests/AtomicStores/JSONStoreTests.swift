import Foundation
@testable import ObjectGraph
import StoreConformance
import Testing

@Suite struct JSONStoreTests {
    @Test func theJSONStorePassesEveryConformanceCheck() {
        let report = StoreConformance.runAtomicStore { coordinator, url in
            try coordinator.addPersistentStore(type: JSONStore.storeType, at: url)
        }
        #expect(report.checks == StoreConformance.checkNames + StoreConformance.atomicStoreCheckNames)
        #expect(report.passed, "\(report)")
    }
}
