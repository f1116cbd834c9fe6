import Foundation
import Testing
@testable import ObjectGraph

/// Typed keys read and write attributes without boxing values as `Any`; these tests hold that path to the results of
/// the general one (`value(forKey:)`, `setValue(_:forKey:)`) for every attribute type and every conforming Swift type.
@Suite struct TypedKeyTests {
    static let types: [AttributeType] = [.integer16, .integer32, .integer64, .double, .float, .decimal, .string, .boolean, .date,
                                         .binaryData, .uuid, .uri, .objectID]

    let model = try! ManagedObjectModel(entities: [EntityDescription("Bag", properties: TypedKeyTests.types.map {
        .attribute(AttributeDescription("a\($0.coreDataName.replacingOccurrences(of: " ", with: ""))", $0, isOptional: true))
    })])

    func name(_ type: AttributeType) -> String { "a" + type.coreDataName.replacingOccurrences(of: " ", with: "") }

    /// One value of each conforming type, including ones that fit some attribute types only.
    static var samples: [any AttributeValueConvertible] { [
        Int16(-7), Int32(70_000), Int64(1 << 40), Int(123), Int(1 << 60), Double(2.5), Double(1e300), Float(0.25), Decimal(string: "1.5")!,
        "text", true, Date(timeIntervalSinceReferenceDate: 12), Data([1, 2]), UUID(), URL(string: "https://example.com/a")!,
    ] }

    /// Reads `key` through the typed path and the general one.
    func readBoth<Value: AttributeValueConvertible & Equatable>(_ object: ManagedObject, _ key: String, as _: Value.Type) -> (Value?, Value?) {
        (object[AttributeKey<Value>(key)], object.value(forKey: key).flatMap { Value.fromAttributeValue(anyValue: $0) })
    }

    func readsAgree(_ object: ManagedObject, _ key: String) -> Bool {
        func same<Value: AttributeValueConvertible & Equatable>(_ type: Value.Type) -> Bool { let (a, b) = readBoth(object, key, as: type); return a == b }
        return same(Int16.self) && same(Int32.self) && same(Int64.self) && same(Int.self) && same(Double.self) && same(Float.self)
            && same(Decimal.self) && same(String.self) && same(Bool.self) && same(Date.self) && same(Data.self) && same(UUID.self)
            && same(URL.self) && same(ManagedObjectID.self)
    }

    @Test func theDirectPathAgreesWithTheGeneralOneForEveryTypeAndValue() throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        try coordinator.addPersistentStore(type: InMemoryStore.storeType)
        let context = ManagedObjectContext(coordinator: coordinator)
        let direct = try context.insertNewObject(forEntityName: "Bag")
        let general = try context.insertNewObject(forEntityName: "Bag")
        for type in Self.types {
            let key = name(type)
            #expect(readsAgree(direct, key), "\(key) is NULL")
            for sample in Self.samples {
                // The general path decides whether the value fits; where it does, the typed key stores the same value.
                let fits = (try? general.setValue(sample, forKey: key)) != nil
                guard fits else { continue }
                func set<Value: AttributeValueConvertible>(_ value: Value) { direct[AttributeKey<Value>(key)] = value }
                set(sample)
                #expect(direct.value(forKey: key).map { "\($0)" } == general.value(forKey: key).map { "\($0)" }, "\(key) set to \(sample)")
                #expect(readsAgree(direct, key), "\(key) holding \(sample)")
            }
            func clear<Value: AttributeValueConvertible>(_: Value.Type) { direct[AttributeKey<Value>(key)] = nil }
            clear(String.self)
            #expect(direct.value(forKey: key) == nil)
        }
    }

    @Test func aTypedWriteIsAChangeOnlyWhenTheValueDiffers() throws {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        try coordinator.addPersistentStore(type: InMemoryStore.storeType)
        let context = ManagedObjectContext(coordinator: coordinator)
        let bag = try context.insertNewObject(forEntityName: "Bag")
        bag[AttributeKey<String>("aString")] = "one"
        bag[AttributeKey<Int>("aInteger16")] = 12
        try context.save()
        bag[AttributeKey<String>("aString")] = "one"
        bag[AttributeKey<Int16>("aInteger16")] = 12
        #expect(!bag.hasChanges, "writing the values it holds changed the object")
        bag[AttributeKey<Int64>("aInteger16")] = 13
        #expect(bag.changedValues.keys.sorted() == ["aInteger16"] && bag[AttributeKey<Int16>("aInteger16")] == 13)
        // An Integer 16 attribute reads as Int16 and Int, not as Int32 or Int64 (as through `value(forKey:)`).
        #expect(bag[AttributeKey<Int32>("aInteger16")] == nil && bag[AttributeKey<Int>("aInteger16")] == 13)
    }
}
