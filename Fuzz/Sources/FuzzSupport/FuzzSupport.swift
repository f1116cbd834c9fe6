import Foundation
import ObjectGraph

#if canImport(Glibc)
import Glibc
#endif

/// Stops the fuzzer on a broken property: prints what broke and aborts, which libFuzzer reports as a crash and keeps
/// the input that caused it.
public func finding(_ message: @autoclosure () -> String) -> Never {
    FileHandle.standardError.write(Data(("FUZZ FINDING: " + message() + "\n").utf8))
    abort()
}

/// Fuzzer bytes read front to back as small decisions: which table, which entry, how many; once they run out every
/// read answers zero, so any input is a whole program.
public struct FuzzBytes {
    private let bytes: [UInt8]
    private var offset = 0

    public init(_ start: UnsafeRawPointer, _ count: Int) {
        bytes = Array(UnsafeRawBufferPointer(start: start, count: count))
    }

    public init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    public var isAtEnd: Bool { offset >= bytes.count }

    public mutating func byte() -> UInt8 {
        guard offset < bytes.count else { return 0 }
        defer { offset += 1 }
        return bytes[offset]
    }

    /// A number in `0..<bound` (0 when `bound` is 0), from one or two bytes.
    public mutating func number(below bound: Int) -> Int {
        guard bound > 1 else { return 0 }
        let raw = bound > 256 ? Int(byte()) << 8 | Int(byte()) : Int(byte())
        return raw % bound
    }

    /// Up to `limit` bytes, their count taken from the input first.
    public mutating func bytes(upTo limit: Int) -> [UInt8] {
        let count = min(number(below: limit + 1), bytes.count - min(offset, bytes.count))
        defer { offset += count }
        return Array(bytes[offset..<(offset + count)])
    }

    /// Whatever is left.
    public mutating func rest() -> [UInt8] {
        defer { offset = bytes.count }
        return offset < bytes.count ? Array(bytes[offset...]) : []
    }
}

/// The model the store targets use: every attribute type, single, compound, descending, case-folded and covering
/// indexes, a uniqueness constraint, to-one, to-many, ordered to-many, many-to-many and one-to-one relationships, and
/// inheritance — so that damage to any kind of table reaches the code that reads it.
public let fuzzModel: ManagedObjectModel = {
    do {
        return try ManagedObjectModel {
            EntityDescription("Sample") {
                AttributeDescription("i16", .integer16, isOptional: true)
                AttributeDescription("i32", .integer32, isOptional: true, isIndexed: true)
                AttributeDescription("i64", .integer64, isOptional: true)
                AttributeDescription("dec", .decimal, isOptional: true)
                AttributeDescription("dbl", .double, isOptional: true)
                AttributeDescription("flt", .float, isOptional: true)
                AttributeDescription("str", .string, isOptional: true)
                AttributeDescription("bool", .boolean, isOptional: true)
                AttributeDescription("date", .date, isOptional: true)
                AttributeDescription("data", .binaryData, isOptional: true)
                AttributeDescription("uuid", .uuid, isOptional: true)
                AttributeDescription("uri", .uri, isOptional: true)
                RelationshipDescription("owner", destination: "Owner", inverse: "samples")
                FetchIndexDescription("byStrFolded", elements: [FetchIndexElementDescription("str", collation: .caseAndDiacriticInsensitive)])
                FetchIndexDescription("byBoolDate", elements: [.ascending("bool"), .descending("date")], storing: ["dbl", "uuid"])
                FetchIndexDescription("byOwnerI64", elements: [.ascending("owner"), .ascending("i64")])
            }
            EntityDescription("Owner") {
                AttributeDescription("name", .string)
                AttributeDescription("rank", .integer32, defaultValue: 0)
                RelationshipDescription("samples", destination: "Sample", inverse: "owner", toMany: true, deleteRule: .cascade)
                RelationshipDescription("queue", destination: "Item", inverse: "queuedBy", ordered: true)
                RelationshipDescription("badge", destination: "Badge", inverse: "holder")
                UniquenessConstraint("name")
            }
            EntityDescription("Item") {
                AttributeDescription("name", .string, isIndexed: true)
                RelationshipDescription("queuedBy", destination: "Owner", inverse: "queue")
                RelationshipDescription("labels", destination: "Label", inverse: "items", toMany: true)
            }
            EntityDescription("Label") {
                AttributeDescription("name", .string)
                RelationshipDescription("items", destination: "Item", inverse: "labels", toMany: true)
            }
            EntityDescription("Badge", isAbstract: true) {
                AttributeDescription("level", .integer16, defaultValue: 0, isIndexed: true)
                RelationshipDescription("holder", destination: "Owner", inverse: "badge")
            }
            EntityDescription("Gold", parent: "Badge") {
                AttributeDescription("carats", .double, defaultValue: 0)
            }
            EntityDescription("Silver", parent: "Badge") {
                AttributeDescription("polish", .string, isOptional: true)
            }
        }
    } catch {
        preconditionFailure("the fuzz model is invalid: \(error)")
    }
}()
