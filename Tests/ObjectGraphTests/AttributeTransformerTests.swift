import Foundation
import Testing
import ObjectGraph

@Suite struct AttributeTransformerTests {
    struct Point: Codable, Sendable, Equatable {
        var x: Double
        var y: Double
    }

    @Test func aRegisteredTransformerRoundTripsItsValues() throws {
        AttributeTransformer.register(AttributeTransformer(name: "test.Point", valueType: Point.self))
        let transformer = try #require(AttributeTransformer.named("test.Point"))
        let data = try transformer.data(from: Point(x: 1, y: -2.5))
        #expect(String(decoding: data, as: UTF8.self) == #"{"x":1,"y":-2.5}"#)
        #expect(try transformer.value(from: data) as? Point == Point(x: 1, y: -2.5))
    }

    @Test func aValueOfTheWrongTypeAndForeignBytesAreClearErrors() throws {
        let transformer = AttributeTransformer(name: "test.Tags", valueType: [String].self)
        do {
            _ = try transformer.data(from: 42)
            Issue.record("an Int was accepted as [String]")
        } catch let error as AttributeTransformerError {
            #expect(error.description == "transformer \"test.Tags\": expected a Array<String>, got a Int")
        }
        #expect(throws: AttributeTransformerError.self) { try transformer.value(from: Data("{".utf8)) }
    }

    @Test func anUnknownNameHasNoTransformer() {
        #expect(AttributeTransformer.named("test.never-registered") == nil)
    }
}
