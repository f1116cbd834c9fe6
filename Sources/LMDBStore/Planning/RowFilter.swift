import ObjectGraph

/// A predicate compiled against the row format: comparisons of an entity's own numeric and string attributes with
/// constants, and of its to-ones with objects, are answered from the field's bytes — no value decoded, no string
/// made, no row view — and AND, OR and NOT combine them. Any other part of the predicate, and a comparison the bytes
/// cannot settle exactly (a NULL constant in an ordering, non-ASCII text where Unicode equivalence could matter, a
/// value that does not decode), answers "undecided": an AND with a false operand or an OR with a true one is still
/// settled, and otherwise the row is checked by the predicate evaluator as before, so the filter never changes a
/// result, only its cost.
struct RowFilter: Sendable {
    private indirect enum Node: Sendable {
        case constant(Bool)
        case and([Node])
        case or([Node])
        case not(Node)
        /// `slot` numbers the comparisons of the predicate: the attribute's field in a row of tag `t` is
        /// `fields[t * comparisons + slot]`.
        case compare(slot: Int, op: ComparisonOperator, constant: Constant)
        /// ``compare(slot:op:constant:)`` with a constant that holds no storage (a number, a date, a Boolean, NULL):
        /// evaluated row after row without retaining or releasing anything.
        case compareScalar(slot: Int, op: ComparisonOperator, constant: Scalar)
        /// CONTAINS, BEGINSWITH or ENDSWITH of ASCII text (`[c]`: with A–Z folded to a–z, `needle` folded already).
        case match(slot: Int, op: ComparisonOperator, needle: [UInt8], foldsCase: Bool)
        /// A part of the predicate the bytes do not answer: the evaluator decides.
        case undecided

        var isUndecided: Bool {
            if case .undecided = self { true } else { false }
        }

        /// A comparison with `constant`, as ``compareScalar(slot:op:constant:)`` when it holds no storage.
        static func comparison(slot: Int, op: ComparisonOperator, constant: Constant) -> Node {
            if case .scalar(let scalar) = constant { return .compareScalar(slot: slot, op: op, constant: scalar) }
            return .compare(slot: slot, op: op, constant: constant)
        }
    }

    private enum Constant: Sendable {
        case scalar(Scalar)
        /// ASCII text only: its bytes are its characters.
        case ascii([UInt8])
        /// The members of an `IN` collection of integers, of numbers, or of ASCII texts (``TextSet``): one lookup
        /// per row however many members there are.
        case integers(Set<Int64>)
        case doubles(Set<Double>)
        case texts(TextSet)
        /// The rows an object constant is, as a to-one field refers to them (none for an object of another store or
        /// one not yet saved: no stored reference is to it).
        case references(Set<StoredRow.Reference>)
    }

    /// A constant without storage.
    private enum Scalar: Sendable {
        case null
        case integer(Int64)
        case double(Double)
        /// Seconds since the reference date, not NaN.
        case date(Double)
        case boolean(Bool)
    }

    /// ASCII texts looked up by their bytes, borrowed from a row without making a string.
    struct TextSet: Sendable {
        private var buckets: [UInt64: [[UInt8]]] = [:]

        init(_ texts: [[UInt8]]) {
            for text in texts { buckets[text.withUnsafeBytes(Self.hash), default: []].append(text) }
        }

        func contains(_ bytes: UnsafeRawBufferPointer) -> Bool {
            guard let bucket = buckets[Self.hash(bytes)] else { return false }
            return bucket.contains { $0.elementsEqual(bytes) }
        }

        /// FNV-1a 64.
        private static func hash(_ bytes: UnsafeRawBufferPointer) -> UInt64 {
            var hash: UInt64 = 0xCBF2_9CE4_8422_2325
            for byte in bytes { hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01B3 }
            return hash
        }
    }

    private let root: Node
    /// How many comparisons the predicate has (their `slot`s are 0..<comparisons).
    private let comparisons: Int
    /// The field number of each comparison's attribute (-1: the entity has no such field) per entity tag, at
    /// `tag * comparisons + slot` (fields are numbered per entity): names are resolved once, not per row.
    private let fields: [Int]

    /// The compiled predicate, or `nil` when the bytes answer no part of it. Objects compared with to-ones are
    /// found in `layout` when their IDs are of the store named `storeIdentifier`.
    init?(_ predicate: FetchPredicate, entity: String, model: ManagedObjectModel, layout: StoreLayout, storeIdentifier: String) {
        var compiler = Compiler(entity: entity, model: model, layout: layout, storeIdentifier: storeIdentifier)
        let root = compiler.compile(predicate.node)
        if root.isUndecided { return nil }
        let names = compiler.names
        self.root = root
        comparisons = names.count
        fields = layout.entitiesByTag.flatMap { entity in names.map { name in entity?.fieldIndex[name] ?? -1 } }
    }

    /// What compiling a predicate needs, and the attribute names its comparisons read, in slot order.
    private struct Compiler {
        let entity: String
        let model: ManagedObjectModel
        let layout: StoreLayout
        let storeIdentifier: String
        var names: [String] = []

        /// `node` compiled; an AND or OR of undecided parts, and NOT of one, is undecided as a whole.
        mutating func compile(_ node: PredicateNode) -> Node {
            switch node {
            case .constant(let value): return .constant(value)
            case .not(let operand):
                let compiled = compile(operand)
                return compiled.isUndecided ? .undecided : .not(compiled)
            case .and(let operands):
                let compiled = operands.map { compile($0) }
                return compiled.allSatisfy(\.isUndecided) ? .undecided : .and(compiled)
            case .or(let operands):
                let compiled = operands.map { compile($0) }
                return compiled.allSatisfy(\.isUndecided) ? .undecided : .or(compiled)
            case .comparison(let comparison):
                return self.comparison(comparison) ?? .undecided
            }
        }

        /// A comparison of one of the entity's attributes or to-ones with a constant, or `nil` for the evaluator.
        private mutating func comparison(_ comparison: ComparisonNode) -> Node? {
            guard comparison.modifier == .direct, case .keyPath(let name) = comparison.lhs, case .constant(let value) = comparison.rhs,
                  !name.contains(".") else { return nil }
            guard let attribute = model.attribute(named: name, in: entity) else { return toOne(name, comparison.op, comparison.options, value) }
            guard !attribute.isTransient else { return nil }
            let op = comparison.op
            if op == .contains || op == .endsWith || (op == .beginsWith && !comparison.options.isEmpty) {
                // [d] and [n] change nothing in ASCII text; [c] folds A–Z.
                guard attribute.type == .string, case .string(let needle) = value, needle.utf8.allSatisfy({ $0 < 0x80 }) else { return nil }
                let foldsCase = comparison.options.contains(.caseInsensitive)
                return .match(slot: slot(name), op: op, needle: needle.utf8.map { foldsCase ? RowFilter.lowered($0) : $0 }, foldsCase: foldsCase)
            }
            guard comparison.options.isEmpty else { return nil }
            if comparison.op == .between {
                // lower <= value <= upper, as two comparisons (a NULL value is between nothing).
                guard case .array(let bounds) = value, bounds.count == 2, !bounds.contains(where: \.isNull),
                      attribute.type != .boolean,
                      let lower = RowFilter.constant(bounds[0], for: attribute.type), let upper = RowFilter.constant(bounds[1], for: attribute.type)
                else { return nil }
                let slot = slot(name)
                return .and([.comparison(slot: slot, op: .greaterThanOrEqual, constant: lower), .comparison(slot: slot, op: .lessThanOrEqual, constant: upper)])
            }
            if comparison.op == .in {
                guard case .array(let elements) = value, let members = RowFilter.members(elements, of: attribute.type) else { return nil }
                return .compare(slot: slot(name), op: .in, constant: members)
            }
            guard let constant = value.isNull ? .scalar(.null) : RowFilter.constant(value, for: attribute.type) else { return nil }
            switch comparison.op {
            case .equal, .notEqual: break
            case .lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual: if case .scalar(.boolean) = constant { return nil }
            case .beginsWith: guard case .ascii = constant else { return nil }
            default: return nil
            }
            return .comparison(slot: slot(name), op: comparison.op, constant: constant)
        }

        /// `toOne == object`, `!=`, `== nil` and `IN` a collection of objects, compared with the field's reference
        /// (entity tag and row key). A reference is trusted to name a row (`verify()` checks that each does).
        private mutating func toOne(_ name: String, _ op: ComparisonOperator, _ options: ComparisonOptions, _ value: PredicateValue) -> Node? {
            guard options.isEmpty, let relationship = model.relationship(named: name, in: entity), !relationship.isToMany,
                  !relationship.isTransient else { return nil }
            switch op {
            case .equal, .notEqual:
                if value.isNull { return .compareScalar(slot: slot(name), op: op, constant: .null) }
                guard let references = references([value]) else { return nil }
                return .compare(slot: slot(name), op: op, constant: .references(references))
            case .in:
                guard case .array(let elements) = value, let references = references(elements) else { return nil }
                return .compare(slot: slot(name), op: .in, constant: .references(references))
            default:
                return nil
            }
        }

        /// The references a to-one holds to each object of `values`; `nil` when one is not an object.
        private func references(_ values: [PredicateValue]) -> Set<StoredRow.Reference>? {
            var references = Set<StoredRow.Reference>()
            for value in values {
                guard let id = QueryPlanner.objectID(value) else { return nil }
                if id.storeIdentifier == storeIdentifier, let entity = layout.entity(id.entityName),
                   case .integer(let key) = id.referenceObject, key > 0 {
                    references.insert(StoredRow.Reference(entityTag: entity.tag, key: UInt64(key)))
                }
            }
            return references
        }

        /// A new slot reading the field of `name`.
        private mutating func slot(_ name: String) -> Int {
            names.append(name)
            return names.count - 1
        }
    }

    /// A constant compared with an attribute of `type` as the row's bytes hold it, or `nil` when the evaluator must
    /// compare them (another kind, NaN, non-ASCII text).
    private static func constant(_ value: PredicateValue, for type: AttributeType) -> Constant? {
        switch (type, value) {
        case (let type, .integer(let v)) where type.isInteger: return .scalar(.integer(v))
        // An integer beyond 2^53 has no exact double: the evaluator compares it.
        case (.double, .integer(let v)) where v.magnitude <= 1 << 53, (.float, .integer(let v)) where v.magnitude <= 1 << 53: return .scalar(.double(Double(v)))
        case (.double, .double(let v)) where !v.isNaN, (.float, .double(let v)) where !v.isNaN: return .scalar(.double(v))
        case (.string, .string(let v)) where v.utf8.allSatisfy({ $0 < 0x80 }): return .ascii(Array(v.utf8))
        case (.date, .date(let v)) where !v.timeIntervalSinceReferenceDate.isNaN: return .scalar(.date(v.timeIntervalSinceReferenceDate))
        case (.boolean, .boolean(let v)): return .scalar(.boolean(v))
        default: return nil
        }
    }

    /// The members of `attribute IN elements` as a set the bytes can be looked up in: integers for an integer
    /// attribute, numbers for a floating-point one, ASCII texts for a string one; `nil` for any other element (a
    /// NULL, another kind, non-ASCII text), which the evaluator then compares.
    private static func members(_ elements: [PredicateValue], of type: AttributeType) -> Constant? {
        var integers = Set<Int64>(), doubles = Set<Double>(), texts: [[UInt8]] = []
        for element in elements {
            switch element.isNull ? nil : constant(element, for: type) {
            case .scalar(.integer(let value))?: integers.insert(value)
            case .scalar(.double(let value))?: doubles.insert(value)
            case .ascii(let bytes)?: texts.append(bytes)
            default: return nil
            }
        }
        switch type {
        case let type where type.isInteger: return .integers(integers)
        case .double, .float: return .doubles(doubles)
        case .string: return .texts(TextSet(texts))
        default: return nil
        }
    }

    /// Whether `row` matches: `true` or `false` when its bytes settle it, `nil` when the evaluator must decide.
    func matches(_ row: EncodedRow) -> Bool? {
        evaluate(root, row, Int(row.entityTag) * comparisons)
    }

    /// `node` on `row`, whose comparisons' fields start at `fields[base]`.
    private func evaluate(_ node: Node, _ row: EncodedRow, _ base: Int) -> Bool? {
        switch node {
        case .constant(let value):
            return value
        case .not(let operand):
            return evaluate(operand, row, base).map { !$0 }
        case .and(let operands):
            return combine(operands, row, base, deciding: false)
        case .or(let operands):
            return combine(operands, row, base, deciding: true)
        case .match(let slot, let op, let needle, let foldsCase):
            guard let value = field(slot, of: row, base) else { return nil }
            guard let value else { return false }  // NULL contains, begins and ends with nothing
            guard case .string(let text) = value else { return nil }
            return Self.match(text, op, needle, foldsCase: foldsCase)
        case .compareScalar(let slot, let op, let constant):
            guard let value = field(slot, of: row, base) else { return nil }
            return Self.compare(value, op, constant)
        case .compare(let slot, let op, let constant):
            guard let value = field(slot, of: row, base) else { return nil }
            return Self.compare(value, op, constant)
        case .undecided:
            return nil
        }
    }

    /// The field comparison `slot` reads in `row`: `.some(nil)` when the field is NULL, `nil` when the row's entity
    /// has no such field or its value does not decode (the evaluator decides then).
    @inline(__always)
    private func field(_ slot: Int, of row: EncodedRow, _ base: Int) -> RawField?? {
        let field = fields[base + slot]
        guard field >= 0 else { return nil }
        do { return .some(try row.rawField(field)) } catch { return nil }
    }

    /// AND (`deciding` false) or OR (`deciding` true) of three-valued operands: an operand that is `deciding`
    /// settles it; otherwise it is undecided if any operand was.
    private func combine(_ operands: [Node], _ row: EncodedRow, _ base: Int, deciding: Bool) -> Bool? {
        var undecided = false
        for operand in operands {
            switch evaluate(operand, row, base) {
            case deciding?: return deciding
            case nil: undecided = true
            default: break
            }
        }
        return undecided ? nil : !deciding
    }

    /// Whether `op` holds for two values in this order (negative, zero, positive).
    private static func holds(_ op: ComparisonOperator, order: Int) -> Bool? {
        switch op {
        case .equal: return order == 0
        case .notEqual: return order != 0
        case .lessThan: return order < 0
        case .lessThanOrEqual: return order <= 0
        case .greaterThan: return order > 0
        case .greaterThanOrEqual: return order >= 0
        default: return nil
        }
    }

    /// One comparison on a field's bytes with a constant that holds storage (text, members, objects), with the
    /// evaluator's semantics: NULL is in no collection, equals no text or object, orders against nothing.
    private static func compare(_ value: RawField?, _ op: ComparisonOperator, _ constant: Constant) -> Bool? {
        if case .scalar(let scalar) = constant { return compare(value, op, scalar) }
        if op == .in {
            guard let value else { return false }
            return member(value, of: constant)
        }
        guard let value else { return op == .notEqual }
        switch (value, constant) {
        case (.reference(let reference), .references(let targets)):
            switch op {
            case .equal: return targets.contains(reference)
            case .notEqual: return !targets.contains(reference)
            default: return nil
            }
        case (.string(let text), .ascii(let bytes)):
            return compare(text, op, bytes)
        default:
            return nil
        }
    }

    /// One comparison on a field's bytes with a number, a date, a Boolean or NULL, with the evaluator's semantics:
    /// NULL equals only NULL and orders against nothing; numbers compare as numbers.
    private static func compare(_ value: RawField?, _ op: ComparisonOperator, _ constant: Scalar) -> Bool? {
        guard let value else {
            // A NULL field.
            switch op {
            case .equal: if case .null = constant { return true } else { return false }
            case .notEqual: if case .null = constant { return false } else { return true }
            default: return false
            }
        }
        let order: Int
        switch (value, constant) {
        case (_, .null):
            return op == .notEqual
        case (.integer(let a), .integer(let b)): order = a == b ? 0 : a < b ? -1 : 1
        case (.integer(let a), .double(let b)): order = Double(a) == b ? 0 : Double(a) < b ? -1 : 1
        case (.double(let a), .double(let b)): order = a == b ? 0 : a < b ? -1 : 1
        case (.date(let a), .date(let b)):
            guard !a.isNaN else { return nil }
            order = a == b ? 0 : a < b ? -1 : 1
        case (.boolean(let a), .boolean(let b)): order = a == b ? 0 : a ? 1 : -1
        default:
            return nil
        }
        return holds(op, order: order)
    }

    /// Whether a field's value is one of `members`, compared as the evaluator compares (numbers as numbers; text
    /// that is not ASCII is left to it).
    private static func member(_ value: RawField, of members: Constant) -> Bool? {
        switch (value, members) {
        case (.integer(let a), .integers(let set)): return set.contains(a)
        case (.double(let a), .integers(let set)): return Int64(exactly: a).map(set.contains) ?? false
        case (.integer(let a), .doubles(let set)): return a.magnitude <= 1 << 53 ? set.contains(Double(a)) : nil
        case (.double(let a), .doubles(let set)): return set.contains(a)
        case (.reference(let reference), .references(let targets)): return targets.contains(reference)
        case (.string(let text), .texts(let set)):
            for byte in text where byte >= 0x80 { return nil }
            return set.contains(text)
        default: return nil
        }
    }

    /// A–Z as a–z; every other byte as it is.
    @inline(__always)
    private static func lowered(_ byte: UInt8) -> UInt8 {
        byte &- 0x41 < 26 ? byte | 0x20 : byte
    }

    /// CONTAINS, BEGINSWITH or ENDSWITH of an ASCII `needle` in text from the row, bytes compared (`foldsCase`:
    /// A–Z folded). Only ASCII text without a carriage return is settled: in it every character is one byte, while
    /// elsewhere a character can span bytes ("\r\n", a letter and its accents) or equal ASCII text canonically.
    ///
    /// This runs on every row of a scan, so both passes go eight bytes at a time: the check that the text is ASCII
    /// without a carriage return, and the search for where the needle's first byte (either case, when folding a
    /// letter) occurs — only there are the other bytes compared.
    private static func match(_ text: UnsafeRawBufferPointer, _ op: ComparisonOperator, _ needle: [UInt8], foldsCase: Bool) -> Bool? {
        guard isPlainASCII(text) else { return nil }
        let count = needle.count
        guard count <= text.count else { return false }
        guard count > 0 else { return true }
        return needle.withUnsafeBufferPointer { needle in
            foldsCase ? find(needle, in: text, op, folding: true, lowered) : find(needle, in: text, op, folding: false) { $0 }
        }
    }

    private static let ones: UInt64 = 0x0101_0101_0101_0101
    private static let highBits: UInt64 = 0x8080_8080_8080_8080

    /// Whether some byte of `word` is zero (may also flag a byte above a zero byte: callers check each flagged word
    /// byte by byte).
    @inline(__always)
    private static func hasZeroByte(_ word: UInt64) -> Bool {
        (word &- ones) & ~word & highBits != 0
    }

    /// Whether every byte of `text` is ASCII and none is a carriage return.
    @inline(__always)
    private static func isPlainASCII(_ text: UnsafeRawBufferPointer) -> Bool {
        var offset = 0
        let count = text.count
        while offset + 8 <= count {
            let word = text.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
            if word & highBits != 0 || hasZeroByte(word ^ (0x0D &* ones)) { return false }
            offset += 8
        }
        while offset < count {
            if text[offset] >= 0x80 || text[offset] == 0x0D { return false }
            offset += 1
        }
        return true
    }

    /// Whether `needle` (not empty, no longer than `text`) begins, ends or is contained in `text` (by `op`), each
    /// byte of the text passed through `fold` first (`folding`: `fold` lowers A–Z).
    @inline(__always)
    private static func find(_ needle: UnsafeBufferPointer<UInt8>, in text: UnsafeRawBufferPointer, _ op: ComparisonOperator,
                             folding: Bool, _ fold: (UInt8) -> UInt8) -> Bool {
        let count = needle.count
        @inline(__always) func matches(at start: Int) -> Bool {
            var offset = 0
            while offset < count {
                if fold(text[start + offset]) != needle[offset] { return false }
                offset += 1
            }
            return true
        }
        switch op {
        case .beginsWith: return matches(at: 0)
        case .endsWith: return matches(at: text.count - count)
        default:
            let first = needle[0], last = text.count - count
            // Setting bit 5 of every byte maps A–Z onto a–z, so one comparison finds the first letter in either case
            // (and nothing else: a byte with bit 5 set equal to a lowercase letter is that letter or its capital).
            let caseBit: UInt64 = folding && first &- 0x61 < 26 ? 0x20 &* ones : 0
            let pattern = UInt64(first) &* ones
            var start = 0
            while start + 8 <= last + 1 {
                let word = text.loadUnaligned(fromByteOffset: start, as: UInt64.self) | caseBit
                if hasZeroByte(word ^ pattern) {
                    for position in start..<start + 8 where fold(text[position]) == first && matches(at: position) { return true }
                }
                start += 8
            }
            while start <= last {
                if fold(text[start]) == first && matches(at: start) { return true }
                start += 1
            }
            return false
        }
    }

    /// Text (UTF-8 bytes from the row) against ASCII bytes. Equal bytes are equal strings; where the text is ASCII
    /// too, byte order is string order. A non-ASCII byte where it matters could be part of a character that is
    /// canonically equivalent to ASCII text, so that is left to the evaluator.
    private static func compare(_ text: UnsafeRawBufferPointer, _ op: ComparisonOperator, _ ascii: [UInt8]) -> Bool? {
        var position = 0
        while position < text.count, position < ascii.count, text[position] == ascii[position] { position += 1 }
        if op == .beginsWith {
            if position == ascii.count {
                // Every byte of the prefix matched; a combining mark after it (or "\n" after a final "\r": one
                // character) would change the last character.
                if position == text.count { return true }
                return text[position] < 0x80 && !(text[position] == 0x0A && ascii.last == 0x0D) ? true : nil
            }
            return position == text.count || text[position] < 0x80 ? false : nil
        }
        let order: Int
        if position == text.count && position == ascii.count {
            order = 0
        } else {
            // The rest of the text must be ASCII for byte order (and inequality) to be string order.
            for index in position..<text.count where text[index] >= 0x80 { return nil }
            if position == text.count { order = -1 } else if position == ascii.count { order = 1 } else { order = text[position] < ascii[position] ? -1 : 1 }
        }
        return holds(op, order: order)
    }
}
