import Foundation
import TestSupport
import Testing
@testable import ObjectGraph

/// The registry's hash table against a `Dictionary` doing the same: inserts, replacements, removals (which shift
/// entries back), growth and iteration, with IDs that share keys across entities and stores and temporary string IDs.
@Suite struct ObjectTableTests {
    @Test(arguments: [1 as UInt64, 2, 3])
    func randomOperationsAgreeWithADictionary(seed: UInt64) {
        var random = SplitMix64(seed: seed)
        let namespaces = [("Employee", "A"), ("Department", "A"), ("Employee", "B")].map {
            ObjectIDNamespace.shared(entityName: $0.0, storeIdentifier: $0.1)
        }
        // Few distinct keys, so that probes collide, entries are replaced and runs are broken by removals.
        let ids: [ManagedObjectID] = (1...300).flatMap { key in namespaces.map { ManagedObjectID(namespace: $0, referenceObject: .integer(Int64(key))) } }
            + (0..<100).map { _ in ManagedObjectID.temporary(in: .shared(entityName: "Employee", storeIdentifier: nil)) }
        var table = ObjectTable<Int>()
        var model: [ManagedObjectID: Int] = [:]
        for step in 0..<20_000 {
            let id = ids[Int(random.next() % UInt64(ids.count))]
            switch random.next() % 10 {
            case 0..<5:
                table[id] = step
                model[id] = step
            case 5..<8:
                #expect(table.removeValue(forKey: id) == model.removeValue(forKey: id))
            case 8:
                table[id] = nil
                model[id] = nil
            default:
                if step % 5000 == 9 { table.removeAll(); model.removeAll() }
                if step % 700 == 9 { table.reserveCapacity(table.count + 500) }
            }
            #expect(table[id] == model[id])
            #expect(table.count == model.count)
            if step % 1000 == 0 {
                for candidate in ids where table[candidate] != model[candidate] {
                    Issue.record("step \(step): \(candidate) holds \(String(describing: table[candidate])), expected \(String(describing: model[candidate]))")
                }
                #expect(Dictionary(uniqueKeysWithValues: table.map { ($0.key, $0.value) }) == model)
                #expect(table.values.sorted() == model.values.sorted())
            }
        }
    }
}
