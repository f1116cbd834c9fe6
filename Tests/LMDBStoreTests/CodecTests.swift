import Foundation
import LMDB
@testable import LMDBStore
import ObjectGraph
import TestSupport
import Testing

@Suite struct TupleEncodingTests {
    static let types: [AttributeType] = [.integer64, .double, .float, .decimal, .string, .boolean, .date, .binaryData, .uuid, .uri]

    static func randomValue(_ type: AttributeType, _ random: inout SplitMix64) -> AttributeValue {
        func int() -> Int64 {
            switch random.next() % 4 {
            case 0: Int64(bitPattern: random.next())
            case 1: Int64(bitPattern: random.next()) % 1000
            case 2: [Int64.min, Int64.max, 0, -1, 1][Int(random.next() % 5)]
            default: -Int64(random.next() % 100)
            }
        }
        func double() -> Double {
            switch random.next() % 4 {
            case 0: Double(bitPattern: random.next()).isNaN ? 0 : Double(bitPattern: random.next() & ~(0x7FF << 52) | (UInt64(random.next() % 0x7FE) << 52))
            case 1: Double(int()) / 7
            case 2: [0.0, -0.0, .infinity, -.infinity, .leastNonzeroMagnitude, -.leastNonzeroMagnitude, .greatestFiniteMagnitude][Int(random.next() % 7)]
            default: Double(Int64(bitPattern: random.next()) % 10_000) / 100
            }
        }
        func bytes() -> [UInt8] { (0..<Int(random.next() % 6)).map { _ in [0x00, 0x01, 0x7F, 0x80, 0xFF, 0x61][Int(random.next() % 6)] } }
        switch type {
        case .integer64: return .integer(int())
        case .double: return .double(double())
        case .float: return .float(Float(Double(int() % 100_000) / 8))
        case .decimal:
            let text = "\(random.next() % 2 == 0 ? "-" : "")\(random.next() % 10_000).\(String(random.next() % 1_000_000).reversed().drop(while: { _ in random.next() % 3 == 0 }))"
            return .decimal(Decimal(string: text.hasSuffix(".") ? text + "0" : text) ?? 0)
        case .string:
            let pieces = ["", "a", "b", "ab", "\u{0}", "é", "e\u{301}", "Z", "🙂", "\u{7F}", "zz"]
            return .string((0..<Int(random.next() % 4)).map { _ in pieces[Int(random.next() % UInt64(pieces.count))] }.joined())
        case .boolean: return .boolean(random.next() % 2 == 0)
        case .date: return .date(Date(timeIntervalSinceReferenceDate: double().isFinite ? double() : 0))
        case .binaryData: return .data(Data(bytes()))
        case .uuid: return .uuid(UUID(uuid: (UInt8(random.next() % 3), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, UInt8(random.next() % 256))))
        case .uri: return .uri(URL(string: "https://e.x/" + ["a", "b", "a/b", "%00", "zz"][Int(random.next() % 5)])!)
        default: return .integer(0)
        }
    }

    /// The order the store promises: the evaluator's for numbers, dates, strings (NFC scalar order), bytes, UUIDs.
    static func order(_ lhs: AttributeValue, _ rhs: AttributeValue) -> Int {
        switch (lhs, rhs) {
        case (.string(let a), .string(let b)):
            let (x, y) = (Array(a.precomposedStringWithCanonicalMapping.unicodeScalars.map(\.value)), Array(b.precomposedStringWithCanonicalMapping.unicodeScalars.map(\.value)))
            return x == y ? 0 : x.lexicographicallyPrecedes(y) ? -1 : 1
        case (.boolean(let a), .boolean(let b)): return a == b ? 0 : !a ? -1 : 1
        case (.uuid(let a), .uuid(let b)):
            let (x, y) = (withUnsafeBytes(of: a.uuid) { Array($0) }, withUnsafeBytes(of: b.uuid) { Array($0) })
            return x == y ? 0 : x.lexicographicallyPrecedes(y) ? -1 : 1
        case (.uri(let a), .uri(let b)):
            let (x, y) = (Array(a.absoluteString.utf8), Array(b.absoluteString.utf8))
            return x == y ? 0 : x.lexicographicallyPrecedes(y) ? -1 : 1
        default:
            return FetchSortDescriptor(keyPath: "v").compare(PredicateValue(lhs), PredicateValue(rhs))
        }
    }

    @Test(arguments: types)
    func byteOrderIsValueOrder(type: AttributeType) {
        var random = SplitMix64(seed: UInt64(type.hashValue & 0xFFFF) ^ 0x5EED)
        for trial in 0..<3000 {
            let a = Self.randomValue(type, &random), b = Self.randomValue(type, &random)
            var ka: [UInt8] = [], kb: [UInt8] = []
            TupleEncoding.append(a, to: &ka)
            TupleEncoding.append(b, to: &kb)
            let byteOrder = ka == kb ? 0 : ka.lexicographicallyPrecedes(kb) ? -1 : 1
            #expect(byteOrder == Self.order(a, b), "trial \(trial): \(a) vs \(b) encoded \(ka) vs \(kb)")
        }
    }

    /// Keys of one element decode back to the value (strings as stored: NFC; -0.0 as 0.0), for the types the key
    /// decoder reads; anything that is not exactly one element of the asked type decodes to nothing.
    @Test(arguments: [AttributeType.integer64, .double, .float, .string, .boolean, .date, .uuid])
    func oneElementKeysDecodeBackToTheirValue(type: AttributeType) {
        var random = SplitMix64(seed: UInt64(type.hashValue & 0xFFFF) ^ 0xDEC0)
        for trial in 0..<2000 {
            let value = Self.randomValue(type, &random)
            var key: [UInt8] = []
            TupleEncoding.append(value, to: &key)
            let decoded = key.withUnsafeBytes { TupleEncoding.decodeElement($0, as: type) }
            var expected = value
            if case .string(let text) = value { expected = .string(text.precomposedStringWithCanonicalMapping) }
            if case .double(let number) = value, number == 0 { expected = .double(0) }
            if case .date(let date) = value, date.timeIntervalSinceReferenceDate == 0 { expected = .date(Date(timeIntervalSinceReferenceDate: 0)) }
            #expect(decoded == .some(expected), "trial \(trial): \(value) encoded \(key)")
            // With a byte more, or read as another type, it is not one element of this type.
            #expect((key + [0]).withUnsafeBytes { TupleEncoding.decodeElement($0, as: type) } == nil)
            let other: AttributeType = type == .string ? .integer64 : .string
            #expect(key.withUnsafeBytes { TupleEncoding.decodeElement($0, as: other) } == nil)
        }
        var null: [UInt8] = []
        TupleEncoding.append(nil, to: &null)
        #expect(null.withUnsafeBytes { TupleEncoding.decodeElement($0, as: type) } == .some(nil))
    }

    @Test func cutAndUndecodedElementsDecodeToNothing() {
        var long: [UInt8] = []
        TupleEncoding.append(.string(String(repeating: "x", count: 600)), to: &long)
        let cut = IndexEntries.fit([long])
        #expect(cut.count <= IndexEntries.maxTupleBytes)
        #expect(cut.withUnsafeBytes { TupleEncoding.decodeElement($0, as: .string) } == nil)
        // Cut inside a longer key too, ascending or descending (stored inverted), whatever follows it.
        var age: [UInt8] = []
        TupleEncoding.append(.integer(7), to: &age)
        for inverted in [false, true] {
            let element = inverted ? long.map { ~$0 } : long
            let key = IndexEntries.fit([element, age]) + [0x20]
            #expect(key.withUnsafeBytes { TupleEncoding.decodeElement($0, at: 0, as: .string, inverted: inverted) } == nil, "inverted \(inverted)")
        }
        var decimal: [UInt8] = []
        TupleEncoding.append(.decimal(12.5), to: &decimal)
        #expect(decimal.withUnsafeBytes { TupleEncoding.decodeElement($0, as: .decimal) } == nil)
        let invalidUTF8: [UInt8] = [TupleEncoding.Tag.string, 0xC3, 0x00]
        #expect(invalidUTF8.withUnsafeBytes { TupleEncoding.decodeElement($0, as: .string) } == nil)
        #expect([UInt8]().withUnsafeBytes { TupleEncoding.decodeElement($0, as: .string) } == nil)
    }

    /// A row's entries of a compound index (a long string, descending, then an integer) are cut exactly as `fit`
    /// cuts the elements, and a uniqueness constraint over a NULL makes no entry: the save's reused scratch (element
    /// ends overwritten, not emptied, from row to row) must keep each row's own element ends.
    @Test func compoundIndexEntriesAreCutLikeTheirElements() throws {
        let model = try ManagedObjectModel {
            EntityDescription("Note") {
                AttributeDescription("title", .string)
                AttributeDescription("rank", .integer64)
                AttributeDescription("code", .string, isOptional: true)
                FetchIndexDescription("byTitleRank", elements: [FetchIndexElementDescription("title", ascending: false),
                                                                 FetchIndexElementDescription("rank")])
                UniquenessConstraint("code", "rank")
            }
        }
        let layout = StoreLayout(model: model)
        let entity = layout.entity("Note")!
        let tables = Dictionary(uniqueKeysWithValues: (entity.indexTables + entity.uniqueTables).enumerated().map {
            ($1, Database(handle: UInt32($0 + 1), name: $1, options: []))
        })
        let maintainers = EntityMaintainers(entity) { tables[$0] }
        var scratch = EntryScratch()
        for (title, code) in [(String(repeating: "t", count: 700), nil), ("short", "c1"), (String(repeating: "é", count: 400), "c2")] as [(String, String?)] {
            var attributes: [String: AttributeValue] = ["title": .string(title), "rank": .integer(7)]
            if let code { attributes["code"] = .string(code) }
            let row = StoredRow(entity: entity, version: 1, attributes: attributes, toOne: [:])
            var keys: [(table: Int, unique: Bool, key: [UInt8])] = []
            maintainers.forEachEntry(of: row, key: 5, scratch: &scratch) { table, _, key, _, check in
                keys.append((Int(table.handle), check == .keyFree, Array(key)))
            }
            var titleElement: [UInt8] = [], rankElement: [UInt8] = []
            TupleEncoding.append(.string(title), to: &titleElement)
            TupleEncoding.append(.integer(7), to: &rankElement)
            let expected = IndexEntries.fit([titleElement.map { ~$0 }, rankElement])
            #expect(keys.first?.key == expected, "\(title.count) characters")
            #expect(keys.contains { $0.unique } == (code != nil), "no uniqueness entry over a NULL")
        }
    }

    @Test func nullSortsBeforeEveryValue() {
        var null: [UInt8] = []
        TupleEncoding.append(nil, to: &null)
        var random = SplitMix64(seed: 3)
        for type in Self.types {
            var key: [UInt8] = []
            TupleEncoding.append(Self.randomValue(type, &random), to: &key)
            #expect(null.lexicographicallyPrecedes(key), "\(type)")
        }
    }

    @Test func compoundKeysOrderByTheirFirstElementFirst() {
        var a: [UInt8] = [], b: [UInt8] = []
        TupleEncoding.append(.string("a"), to: &a)
        TupleEncoding.append(.integer(999), to: &a)
        TupleEncoding.append(.string("ab"), to: &b)
        TupleEncoding.append(.integer(1), to: &b)
        #expect(a.lexicographicallyPrecedes(b))
    }
}

@Suite struct RowCodecTests {
    let model: ManagedObjectModel = {
        try! ManagedObjectModel {
            EntityDescription("Thing") {
                AttributeDescription("i", .integer64, isOptional: true)
                AttributeDescription("d", .double, isOptional: true)
                AttributeDescription("f", .float, isOptional: true)
                AttributeDescription("m", .decimal, isOptional: true)
                AttributeDescription("s", .string, isOptional: true)
                AttributeDescription("b", .boolean, isOptional: true)
                AttributeDescription("t", .date, isOptional: true)
                AttributeDescription("x", .binaryData, isOptional: true)
                AttributeDescription("u", .uuid, isOptional: true)
                AttributeDescription("r", .uri, isOptional: true)
                RelationshipDescription("next", destination: "Thing")
            }
        }
    }()

    @Test func rowsRoundTripAndFlippedBytesAreCaught() throws {
        let layout = StoreLayout(model: model)
        let entity = layout.entity("Thing")!
        let row = StoredRow(entity: entity, version: 42, attributes: [
            "i": .integer(-123_456_789), "d": .double(-0.5), "f": .float(2.5), "m": .decimal(Decimal(string: "3.14159")!),
            "s": .string("héllo\u{0}"), "b": .boolean(false), "t": .date(Date(timeIntervalSinceReferenceDate: 1e6)),
            "x": .data(Data([9, 8, 7])), "u": .uuid(UUID()), "r": .uri(URL(string: "https://x.y/z")!),
        ], toOne: ["next": StoredRow.Reference(entityTag: entity.tag, key: 77)])
        let blob = RowCodec.encode(row)
        #expect(try blob.withUnsafeBytes { try RowCodec.decode($0, layout: layout) } == row)
        for position in [0, 5, blob.count / 2, blob.count - 1] {
            var corrupted = blob
            corrupted[position] ^= 0x10
            #expect(throws: RowDecodingError.self, "byte \(position)") { try corrupted.withUnsafeBytes { try RowCodec.decode($0, layout: layout) } }
        }
        #expect(throws: RowDecodingError.self) { try blob.prefix(10).withUnsafeBytes { try RowCodec.decode($0, layout: layout) } }
    }
}

extension RowCodecTests {
    /// `blob` with its checksum recomputed: a row whose bytes are wrong but whose checksum agrees.
    static func resealed(_ blob: [UInt8]) -> [UInt8] {
        var body = Array(blob.dropLast(4))
        let crc = body.withUnsafeBytes { CRC32C.checksum($0) }
        withUnsafeBytes(of: crc.bigEndian) { body.append(contentsOf: $0) }
        return body
    }

    /// A row an object reads a value at a time is checked up front (`checkEveryValue`): a quick walk vouches for sound
    /// rows and the full checker names what is wrong with the rest. Over damaged rows sealed with a valid checksum, the
    /// check must refuse exactly the rows that decoding every field refuses.
    @Test func theUpFrontCheckRefusesExactlyTheRowsDecodingRefuses() throws {
        let layout = StoreLayout(model: model)
        let entity = layout.entity("Thing")!
        var random = SplitMix64(seed: 0x5EED_C0DE)
        let rows = [
            StoredRow(entity: entity, version: 3, attributes: [
                "i": .integer(-70_000), "d": .double(1.5), "f": .float(-2), "s": .string("plain text, long enough to matter"),
                "b": .boolean(true), "t": .date(Date(timeIntervalSinceReferenceDate: 5)), "x": .data(Data([0, 0x80, 0xFF])),
                "u": .uuid(UUID()),
            ], toOne: ["next": StoredRow.Reference(entityTag: entity.tag, key: 300)]),
            StoredRow(entity: entity, version: 1, attributes: ["s": .string("é🙂"), "m": .decimal(Decimal(string: "2.5")!), "r": .uri(URL(string: "a:b")!)]),
            StoredRow(entity: entity, version: 9, attributes: ["i": .integer(Int64.max), "s": .string("")]),
        ]
        var refusedByBoth = 0
        for row in rows {
            let sound = RowCodec.encode(row)
            try sound.withUnsafeBytes { try EncodedRow($0, layout: layout, checkingFields: false).checkEveryValue() }
            let table = RowHeader(sound).types
            for _ in 0..<3_000 {
                var damaged = sound
                for _ in 0...(random.next() % 3) {
                    let at = table + Int(random.next() % UInt64(damaged.count - 4 - table))
                    damaged[at] = random.next() % 4 == 0 ? damaged[at] ^ (1 << UInt8(random.next() % 8)) : UInt8(truncatingIfNeeded: random.next())
                }
                let sealed = Self.resealed(damaged)
                sealed.withUnsafeBytes { bytes in
                    guard let encoded = try? EncodedRow(bytes, layout: layout, checkingFields: false) else { return }
                    let checked = Result { () throws(RowDecodingError) in try encoded.checkEveryValue() }
                    let decoded = Result { () throws(RowDecodingError) in try encoded.decoded() }
                    switch (checked, decoded) {
                    case (.success, .success): break
                    case (.failure, .failure): refusedByBoth += 1
                    case (.success, .failure(let error)): Issue.record("the check passed a row decoding refuses (\(error.reason)): \(sealed)")
                    case (.failure(let error), .success): Issue.record("the check refused a row that decodes (\(error.reason)): \(sealed)")
                    }
                }
            }
        }
        #expect(refusedByBoth > 1_000, "the damage should have been refused often")
    }

    @Test func oneFieldReadsTheSameValueAsTheWholeRow() throws {
        let layout = StoreLayout(model: model)
        let entity = layout.entity("Thing")!
        let row = StoredRow(entity: entity, version: 7, attributes: [
            "i": .integer(Int64.min), "d": .double(.infinity), "m": .decimal(Decimal(string: "-0.001")!), "s": .string(""),
            "b": .boolean(true), "u": .uuid(UUID()), "r": .uri(URL(string: "file:///a%20b")!),
        ], toOne: ["next": StoredRow.Reference(entityTag: entity.tag, key: UInt64.max)])
        let blob = RowCodec.encode(row)
        try blob.withUnsafeBytes { bytes in
            let encoded = try EncodedRow(bytes, layout: layout)
            #expect(encoded.version == 7 && encoded.entityTag == entity.tag)
            for field in entity.fields {
                switch try encoded.field(Int(field.id)) {
                case .attribute(let value)?: #expect(row.attribute(Int(field.id)) == value, "\(field.name)")
                case .reference(let reference)?: #expect(row.reference(Int(field.id)) == reference, "\(field.name)")
                case nil: #expect(row.fields[Int(field.id)] == nil, "\(field.name) is absent")
                }
            }
            #expect(try encoded.decoded() == row)
        }
    }

    /// Strings are checked eight bytes at a time, the last eight overlapping: a byte that is not ASCII is found
    /// wherever it lies, so an object reading a row never gets a string that is not UTF-8, and a valid one reads back.
    @Test func aStringIsCheckedAsUTF8WhereverItsLastNonASCIIByteLies() throws {
        let layout = StoreLayout(model: model)
        let entity = layout.entity("Thing")!
        for length in 0...20 {
            for position in 0..<max(length, 1) {
                // "é" at `position` in ASCII: valid, and read back exactly.
                let text = length == 0 ? "" : String(repeating: "a", count: position) + "é" + String(repeating: "b", count: max(0, length - position - 1))
                let blob = RowCodec.encode(StoredRow(entity: entity, version: 1, attributes: ["s": .string(text)], toOne: [:]))
                try blob.withUnsafeBytes { bytes in
                    let row = try EncodedRow(bytes, layout: layout)
                    try row.checkEveryValue()
                    #expect(try row.attributeValue(Int(entity.fieldIndex["s"]!)) == .string(text))
                }
                guard length > 0 else { continue }
                // A lone 0xFF at `position` in ASCII: not UTF-8, refused by the check every object's row passes.
                var ascii = RowCodec.encode(StoredRow(entity: entity, version: 1, attributes: ["s": .string(String(repeating: "c", count: length))], toOne: [:]))
                ascii[ascii.firstIndex(of: UInt8(ascii: "c"))! + position] = 0xFF
                let sealed = Self.resealed(ascii)
                let error = #expect(throws: RowDecodingError.self, "length \(length), byte \(position)") {
                    try sealed.withUnsafeBytes { try EncodedRow($0, layout: layout, checkingFields: false).checkEveryValue() }
                }
                #expect(error?.reason == "a string in the row is not UTF-8")
            }
        }
    }

    /// Row format 1 (what file formats 1–3 wrote): fields as (number, type, value).
    @Test func aWellSealedRowOfFormatOneWithBadFieldsIsRefusedWhenOpenedOrRead() throws {
        let layout = StoreLayout(model: model)
        let entity = layout.entity("Thing")!
        func blob(_ attributes: [String: AttributeValue]) -> [UInt8] {
            RowCodec.encodeFormatOne(StoredRow(entity: entity, version: 1, attributes: attributes, toOne: [:]), modelHash: 1)
        }
        // A decimal that is not a number: the row's layout is sound, so it opens; reading that field fails, naming it.
        var decimal = blob(["m": .decimal(7), "i": .integer(1)])
        let digit = decimal.firstIndex(of: UInt8(ascii: "7"))!
        decimal[digit] = UInt8(ascii: "x")
        decimal = Self.resealed(decimal)
        try decimal.withUnsafeBytes { bytes in
            let encoded = try EncodedRow(bytes, layout: layout)
            #expect(try encoded.field(Int(entity.fieldIndex["i"]!)).map { if case .attribute(.integer(1)) = $0 { true } else { false } } == true)
            let error = #expect(throws: RowDecodingError.self) { try encoded.field(Int(entity.fieldIndex["m"]!)) }
            #expect(error?.reason == "m holds a malformed decimal")
            #expect(throws: RowDecodingError.self) { try encoded.decoded() }
        }
        // A string that is not UTF-8, an unknown value type, a field number past the entity's: refused on opening.
        var text = blob(["s": .string("ab")])
        text[text.firstIndex(of: UInt8(ascii: "a"))!] = 0xFF
        var type = blob(["i": .integer(3)])
        type[RowCodec.legacyHeaderSize + 2] = 99
        var number = blob(["i": .integer(3)])
        number[RowCodec.legacyHeaderSize + 1] = 200
        for (bad, reason) in [(text, "a string in the row is not UTF-8"), (type, "i has the unknown value type 99"),
                              (number, "the row has field 200; Thing has \(entity.fields.count)")] {
            let sealed = Self.resealed(bad)
            let error = #expect(throws: RowDecodingError.self) { try sealed.withUnsafeBytes { try EncodedRow($0, layout: layout) } }
            #expect(error?.reason == reason)
            #expect(throws: RowDecodingError.self) { try sealed.withUnsafeBytes { try RowCodec.decode($0, layout: layout) } }
        }
        // A value in a to-one's field, or a reference in an attribute's: the row is refused, not read into the wrong slot.
        let next = UInt16(entity.fieldIndex["next"]!), i = UInt16(entity.fieldIndex["i"]!)
        var valueInToOne = blob(["i": .integer(3)])
        valueInToOne[RowCodec.legacyHeaderSize] = UInt8(next >> 8)
        valueInToOne[RowCodec.legacyHeaderSize + 1] = UInt8(next & 0xFF)
        var referenceInAttribute = RowCodec.encodeFormatOne(StoredRow(entity: entity, version: 1, attributes: [:],
                                                             toOne: ["next": StoredRow.Reference(entityTag: entity.tag, key: 5)]),
                                                   modelHash: 1)
        referenceInAttribute[RowCodec.legacyHeaderSize] = UInt8(i >> 8)
        referenceInAttribute[RowCodec.legacyHeaderSize + 1] = UInt8(i & 0xFF)
        for (bad, reason) in [(valueInToOne, "the row's field next holds an integer, which Thing.next cannot hold (it is a to-one relationship)"),
                              (referenceInAttribute, "the row's field i holds a reference, which Thing.i cannot hold (its type is Integer 64)")] {
            let sealed = Self.resealed(bad)
            let error = #expect(throws: RowDecodingError.self) { try sealed.withUnsafeBytes { try RowCodec.decode($0, layout: layout) } }
            #expect(error?.reason == reason)
        }
        // A field held twice (found by fuzzing): read alone it gave the first value, decoded whole the second.
        let once = blob(["i": .integer(3)])
        let field = Array(once[RowCodec.legacyHeaderSize..<(once.count - 4)])
        var twice = Array(once[..<RowCodec.legacyHeaderSize]) + field + field.dropLast() + [field.last! &+ 2] + [0, 0, 0, 0]
        twice[RowCodec.legacyHeaderSize - 1] = 2
        let sealed = Self.resealed(twice)
        let error = #expect(throws: RowDecodingError.self) { try sealed.withUnsafeBytes { try EncodedRow($0, layout: layout) } }
        #expect(error?.reason == "the row holds field \(i) after field \(i); fields must ascend")
        #expect(throws: RowDecodingError.self) { try sealed.withUnsafeBytes { try RowCodec.decode($0, layout: layout) } }
    }
}

extension RowCodecTests {
    /// Row formats 2 and 3: a type byte and an offset per field number, then the values. Damage a checksum cannot
    /// see (a row sealed again after it was changed) is refused with the reason, when the row is opened or the field
    /// read.
    @Test(arguments: [2, 3] as [UInt8])
    func aWellSealedRowWithABadFieldTableIsRefused(format: UInt8) throws {
        let layout = StoreLayout(model: model)
        let entity = layout.entity("Thing")!
        let i = Int(entity.fieldIndex["i"]!), s = Int(entity.fieldIndex["s"]!), next = Int(entity.fieldIndex["next"]!)
        let row = StoredRow(entity: entity, version: 1, attributes: ["i": .integer(3), "s": .string("ab")],
                            toOne: ["next": StoredRow.Reference(entityTag: entity.tag, key: 9)])
        let good = format == 3 ? RowCodec.encode(row) : RowCodec.encodeFormatTwo(row, modelHash: 1)
        let header = RowHeader(good)
        #expect(good[0] == format && header.offsetWidth == (format == 3 ? 1 : 2))
        let slots = header.fields, types = header.types, offsets = header.offsets, width = header.offsetWidth
        func damaged(_ change: (inout [UInt8]) -> Void) -> [UInt8] {
            var bytes = good
            change(&bytes)
            return Self.resealed(bytes)
        }
        let cases: [(String, [UInt8], String)] = [
            ("unknown type", damaged { $0[types + i] = 99 }, "i has the unknown value type 99"),
            ("value in a to-one", damaged { $0[types + next] = RowCodec.ValueType.integer }, "the row's field next holds an integer, which Thing.next cannot hold (it is a to-one relationship)"),
            ("reference in an attribute", damaged { $0[types + i] = RowCodec.ValueType.reference }, "the row's field i holds a reference, which Thing.i cannot hold (its type is Integer 64)"),
            ("integer in a string attribute", damaged { $0[types + s] = RowCodec.ValueType.integer },
             "the row's field s holds an integer, which Thing.s cannot hold (its type is String)"),
            ("date in an integer attribute", damaged { $0[types + i] = RowCodec.ValueType.date },
             "the row's field i holds a date, which Thing.i cannot hold (its type is Integer 64)"),
            ("offset off its value", damaged { $0[offsets + width * s + width - 1] &+= 1 }, "the row's field table does not point at the value of s"),
            // The field count: format 2's high byte, format 3's one-byte varint (just before the types).
            ("more fields than the entity", damaged { $0[format == 3 ? types - 1 : 20] = 0x7F },
             "the row has \(format == 3 ? 0x7F : 0x7F00 | slots) fields; Thing has \(entity.fields.count)"),
            ("unknown flags", damaged { $0[1] = 0x80 }, "the row has flags 128, which this LMDBStore does not know"),
            ("newer row format", damaged { $0[0] = 4 }, "the row has format version 4; this LMDBStore reads 1 to 3"),
        ] + (format == 3 ? [
            ("offsets of no known width", damaged { $0[1] = 3 }, "the row has flags 3, which this LMDBStore does not know"),
            ("a version that does not end", damaged { for at in 4..<($0.count - 4) { $0[at] = 0xFF } }, "a number in the row is too long"),
        ] : [])
        for (what, bad, reason) in cases {
            let error = #expect(throws: RowDecodingError.self, "\(what)") { try bad.withUnsafeBytes { try EncodedRow($0, layout: layout) } }
            #expect(error?.reason == reason, "\(what)")
            #expect(throws: RowDecodingError.self, "\(what)") { try bad.withUnsafeBytes { try RowCodec.decode($0, layout: layout) } }
        }
        // A value of another type than its attribute's, opened without checking the fields (as a scan does): each
        // lazy read of the field refuses it, naming the field — never an integer handed out as a string's value.
        let integerInString = damaged { $0[types + s] = RowCodec.ValueType.integer }
        try integerInString.withUnsafeBytes { bytes in
            let row = try EncodedRow(bytes, layout: layout, checkingFields: false)
            let reads: [() throws -> Void] = [{ _ = try row.field(s) }, { _ = try row.rawField(s) }, { _ = try row.attributeValue(s) }, { _ = try row.holdsField(s) }]
            for read in reads {
                let error = #expect(throws: RowDecodingError.self) { try read() }
                #expect(error?.reason == "the row's field s holds an integer, which Thing.s cannot hold (its type is String)")
            }
            #expect(try row.field(i) == .attribute(.integer(3)), "the fields the damage does not reach still read")
        }
        // An offset past the end: opened without checking the fields (as a scan does), the field's read refuses it.
        let past = damaged { $0[offsets + width * s] = 0xFF }
        try past.withUnsafeBytes { bytes in
            let row = try EncodedRow(bytes, layout: layout, checkingFields: false)
            let error = #expect(throws: RowDecodingError.self) { try row.field(s) }
            #expect(error?.reason == "s's value starts past the row's end")
            #expect(try row.field(i) == .attribute(.integer(3)), "the fields the damage does not reach still read")
        }
    }

    /// Every row format decodes to the same row. Formats 2 and 3 leave trailing NULL fields out of the table and
    /// find a value-less field (a Boolean) at the very end; format 3 gives its offsets the fewest bytes that hold the
    /// last one (one, two or four) and its version and field count as varints, format 2 switches to four-byte
    /// offsets past 64 KiB of values.
    @Test func everyRowFormatReadsTheSameAndEachHandlesItsEdges() throws {
        let layout = StoreLayout(model: model)
        let entity = layout.entity("Thing")!
        let big = String(repeating: "x", count: 70_000)
        let date = RowField.attribute(.date(Date(timeIntervalSinceReferenceDate: 1)))
        let rows = [
            StoredRow(entity: entity, version: 3, attributes: ["i": .integer(5)], toOne: [:]),
            StoredRow(entity: entity, version: 3, attributes: ["b": .boolean(true)], toOne: [:]),
            StoredRow(entity: entity, version: 3, attributes: ["s": .string(big), "b": .boolean(false), "r": .uri(URL(string: "https://a.b")!)],
                      toOne: ["next": StoredRow.Reference(entityTag: entity.tag, key: 1 << 40)]),
            StoredRow(entity: entity, version: 3, attributes: [:], toOne: [:]),
            // A date after a long string: the last offset needs four bytes, then two; a version of three varint bytes.
            StoredRow(entity: entity, version: 1 << 20, attributes: ["s": .string(big), "t": .date(Date(timeIntervalSinceReferenceDate: 1))], toOne: [:]),
            StoredRow(entity: entity, version: 3, attributes: ["s": .string(String(big.prefix(300))), "t": .date(Date(timeIntervalSinceReferenceDate: 1))], toOne: [:]),
        ]
        #expect(rows[4].fields[Int(entity.fieldIndex["t"]!)] == date)
        for row in rows {
            for blob in [RowCodec.encode(row), RowCodec.encodeFormatTwo(row, modelHash: 1), RowCodec.encodeFormatOne(row, modelHash: 1)] {
                try blob.withUnsafeBytes { bytes in
                    let encoded = try EncodedRow(bytes, layout: layout)
                    #expect(encoded.version == row.version, "format \(blob[0])")
                    #expect(try encoded.decoded() == row, "format \(blob[0])")
                    for field in entity.fields {
                        let expected = row.fields[Int(field.id)]
                        #expect(try encoded.field(Int(field.id)) == expected, "format \(blob[0]), field \(field.name)")
                    }
                }
            }
        }
        let trailing = RowHeader(RowCodec.encode(rows[0]))
        #expect(trailing.format == 3 && trailing.fields == Int(entity.fieldIndex["i"]!) + 1, "the table ends at the last field that holds a value")
        #expect(RowCodec.encode(rows[3]).count == RowCodec.minimumSize, "an empty row: format, flags, tag, version, count, checksum")
        #expect(RowHeader(RowCodec.encode(rows[2])).offsetWidth == 1, "a long last value needs no wide offsets")
        #expect(RowHeader(RowCodec.encode(rows[4])).offsetWidth == 4 && RowHeader(RowCodec.encode(rows[4])).version == 1 << 20)
        #expect(RowHeader(RowCodec.encode(rows[5])).offsetWidth == 2)
        #expect(RowHeader(RowCodec.encodeFormatTwo(rows[2], modelHash: 1)).offsetWidth == 4)
        // The field table as Docs/FORMAT.md gives it, for each width of offsets: a NULL field has type 0 and offset
        // 0, each value's offset is where it starts among the values, which follow one another to the checksum.
        let small = StoredRow(entity: entity, version: 3, attributes: ["s": .string("ab"), "i": .integer(-3)], toOne: [:])
        for (blob, width) in [(RowCodec.encode(rows[4]), 4), (RowCodec.encode(rows[5]), 2), (RowCodec.encode(small), 1),
                              (RowCodec.encodeFormatTwo(rows[2], modelHash: 1), 4), (RowCodec.encodeFormatTwo(small, modelHash: 1), 2)] {
            let header = RowHeader(blob)
            #expect(header.offsetWidth == width)
            var expectedStart = 0
            for id in 0..<header.fields {
                let at = header.offsets + id * width
                let offset = blob[at..<(at + width)].reduce(0) { $0 << 8 | Int($1) }
                guard blob[header.types + id] != 0 else {
                    #expect(offset == 0, "NULL field \(id)")
                    continue
                }
                #expect(offset == expectedStart, "field \(id)")
                // The value's size: a row holding only this field, less its header, field table and checksum.
                let row = try blob.withUnsafeBytes { try RowCodec.decode($0, layout: layout) }
                var alone = StoredRow(entityTag: row.entityTag, version: 3, fields: ContiguousArray(repeating: nil, count: row.fields.count))
                alone.fields[id] = row.fields[id]
                let single = RowCodec.encode(alone)
                expectedStart += single.count - 4 - RowHeader(single).values
            }
            #expect(header.values + expectedStart == blob.count - 4, "the values end where the checksum starts")
        }
    }
}

@Suite struct CRC32CTests {
    /// The bit-at-a-time definition, to check the table-driven one against.
    func reference(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 != 0 ? (crc >> 1) ^ 0x82F6_3B78 : crc >> 1 }
        }
        return ~crc
    }

    @Test func matchesTheStandardCheckValues() {
        // RFC 3720 (iSCSI) gives these for CRC-32C.
        #expect(Array("123456789".utf8).withUnsafeBytes { CRC32C.checksum($0) } == 0xE306_9283)
        #expect([UInt8](repeating: 0, count: 32).withUnsafeBytes { CRC32C.checksum($0) } == 0x8A91_36AA)
        #expect([UInt8](repeating: 0xFF, count: 32).withUnsafeBytes { CRC32C.checksum($0) } == 0x62A8_AB43)
        #expect([UInt8]().withUnsafeBytes { CRC32C.checksum($0) } == 0)
    }

    @Test func eightBytesAtATimeEqualsBitAtATime() {
        var random = SplitMix64(seed: 8)
        for length in 0..<300 {
            let bytes = (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            // Unaligned starts too: the fast path loads unaligned words.
            let padded = [0x55] + bytes
            #expect(padded.withUnsafeBytes { CRC32C.checksum(UnsafeRawBufferPointer(rebasing: $0[1...])) } == reference(bytes), "length \(length)")
            // The table the store falls back to without the CPU's instruction gives the same.
            #expect(padded.withUnsafeBytes { CRC32C.softwareChecksum(UnsafeRawBufferPointer(rebasing: $0[1...])) } == reference(bytes), "length \(length)")
        }
    }

    /// This development machine (x86-64) has the instruction: the store's rows are checked with it here.
    @Test(.enabled(if: hostHasCRC32CInstruction())) func theCPUsInstructionIsUsedWhereItExists() {
        #expect(CRC32C.usesHardware)
    }
}

/// Whether the test host's CPU has a CRC-32C instruction the store should be using (read from /proc/cpuinfo on
/// Linux x86-64; elsewhere not asserted).
func hostHasCRC32CInstruction() -> Bool {
    #if os(Linux) && arch(x86_64)
    guard let info = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8) else { return false }
    return info.split(separator: "\n").contains { $0.hasPrefix("flags") && $0.split(separator: " ").contains("sse4_2") }
    #else
    return false
    #endif
}
