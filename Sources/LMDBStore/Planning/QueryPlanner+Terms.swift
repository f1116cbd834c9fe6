import Foundation
import LMDB
import ObjectGraph

/// From predicates to key ranges: normalisation for planning, the comparisons an index can answer, and their
/// ranges in the tuple encoding.
extension QueryPlanner {
    /// The predicate with NOT moved inward as far as the answers stay the same, and ANDs flattened — only for
    /// choosing access paths (rows are still checked against the request's own predicate). De Morgan's laws;
    /// `NOT NOT x` is `x`; `NOT a == v` is `a != v` and `NOT a != v` is `a == v` (NULL included); `NOT a < v` is
    /// `a >= v` (and so on) only for an attribute that cannot be NULL compared with a non-NULL constant, since NULL
    /// orders against nothing. Any other negation stays as it is.
    static func normalized(_ node: PredicateNode, entity: String, model: ManagedObjectModel, negated: Bool = false) -> PredicateNode {
        switch node {
        case .constant(let value):
            return .constant(value != negated)
        case .not(let operand):
            return normalized(operand, entity: entity, model: model, negated: !negated)
        case .and(let operands), .or(let operands):
            let isAnd: Bool
            if case .and = node { isAnd = !negated } else { isAnd = negated }
            // Constants fold: TRUE drops out of an AND and decides an OR, FALSE the other way round.
            var flat: [PredicateNode] = []
            for operand in operands {
                let inner = normalized(operand, entity: entity, model: model, negated: negated)
                switch (inner, isAnd) {
                case (.constant(let value), _):
                    if value != isAnd { return .constant(value) }
                case (.and(let nested), true), (.or(let nested), false): flat += nested
                default: flat.append(inner)
                }
            }
            if flat.count == 1 { return flat[0] }
            return flat.isEmpty ? .constant(isAnd) : isAnd ? .and(flat) : .or(flat)
        case .comparison(let comparison):
            guard negated else { return node }
            return negation(of: comparison, entity: entity, model: model).map(PredicateNode.comparison) ?? .not(node)
        }
    }

    /// The comparison that is true exactly when `comparison` is false, when there is a simple one.
    private static func negation(of comparison: ComparisonNode, entity: String, model: ManagedObjectModel) -> ComparisonNode? {
        guard comparison.modifier == .direct, comparison.options.isEmpty else { return nil }
        var negated = comparison
        switch comparison.op {
        case .equal: negated.op = .notEqual
        case .notEqual: negated.op = .equal
        case .lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual:
            let path: String, constant: PredicateValue
            switch (comparison.lhs, comparison.rhs) {
            case (.keyPath(let key), .constant(let value)), (.constant(let value), .keyPath(let key)):
                path = key
                constant = value
            default:
                return nil
            }
            guard !constant.isNull, !path.contains("."), let attribute = model.attribute(named: path, in: entity),
                  !attribute.isOptional, !attribute.isTransient else { return nil }
            switch comparison.op {
            case .lessThan: negated.op = .greaterThanOrEqual
            case .lessThanOrEqual: negated.op = .greaterThan
            case .greaterThan: negated.op = .lessThanOrEqual
            default: negated.op = .lessThan
            }
        default:
            return nil
        }
        return negated
    }

    /// The ID of a managed object or object ID constant; `nil` for any other value.
    static func objectID(_ value: PredicateValue) -> ManagedObjectID? {
        guard case .object(let object) = value else { return nil }
        return object.wrappedObjectID ?? (object.base as? ManagedObject)?.objectID
    }

    /// The object IDs of `SELF == x` / `x == SELF` / `SELF IN {…}` when every `x` is a managed object or an object ID.
    static func selfObjects(_ node: PredicateNode) -> [ManagedObjectID]? {
        guard case .comparison(let comparison) = node, comparison.modifier == .direct, comparison.options.isEmpty else { return nil }
        let constant: PredicateValue
        switch (comparison.lhs, comparison.op, comparison.rhs) {
        case (.evaluatedObject, .equal, .constant(let value)), (.constant(let value), .equal, .evaluatedObject),
             (.evaluatedObject, .in, .constant(let value)):
            constant = value
        default:
            return nil
        }
        switch constant {
        case .array(let elements) where comparison.op == .in:
            let ids = elements.compactMap(objectID)
            // However many: reading n rows by key never costs more than comparing each row with n objects.
            return ids.count == elements.count ? ids : nil
        case let single where comparison.op == .equal:
            return objectID(single).map { [$0] }
        default:
            return nil
        }
    }

    /// `ids` without repeats, in ID order (`<`: by entity and store, then by key). IDs of one entity and store with
    /// integer keys — what a lookup of many objects almost always is — are ordered by their keys as plain integers,
    /// not by comparing IDs: 50 000 of them sort in a few milliseconds.
    static func keyOrdered(_ ids: [ManagedObjectID]) -> [ManagedObjectID] {
        guard let first = ids.first else { return [] }
        var keyed: [(key: Int64, index: Int)] = []
        keyed.reserveCapacity(ids.count)
        for (index, id) in ids.enumerated() {
            guard id.hasNamespace(of: first), let key = id.integerKey else { return Array(Set(ids)).sorted() }
            keyed.append((key, index))
        }
        keyed.sort { $0.key < $1.key }
        var ordered: [ManagedObjectID] = []
        ordered.reserveCapacity(keyed.count)
        var previous: Int64?
        for (key, index) in keyed where key != previous {
            ordered.append(ids[index])
            previous = key
        }
        return ordered
    }

    /// A comparison `attribute op constant` (or `constant op attribute`) on a plain attribute of the entity.
    static func term(_ node: PredicateNode, entity: String, model: ManagedObjectModel) -> Term? {
        if case .or(let operands) = node {
            // `a == 1 OR a == 2` is `a IN {1, 2}`.
            let terms = operands.compactMap { term($0, entity: entity, model: model) }
            guard terms.count == operands.count, let first = terms.first,
                  terms.allSatisfy({ $0.keyPath == first.keyPath && $0.collation == first.collation && ($0.op == .equal || $0.op == .in) })
            else { return nil }
            return Term(keyPath: first.keyPath, op: .in, values: terms.flatMap(\.values), collation: first.collation, fallbacks: first.fallbacks)
        }
        guard case .comparison(let comparison) = node, comparison.modifier == .direct else { return nil }
        // `[c]` and `[cd]` can use an index folded the same way (its keys are the folded strings); `[d]` alone only
        // a `[cd]` one, for `==` and `IN`, as a superset.
        let collation: FetchIndexElementDescription.Collation
        switch comparison.options {
        case []: collation = .binary
        case [.caseInsensitive]: collation = .caseInsensitive
        case [.caseInsensitive, .diacriticInsensitive], [.diacriticInsensitive]: collation = .caseAndDiacriticInsensitive
        default: return nil
        }
        if comparison.options == [.diacriticInsensitive], comparison.op != .equal, comparison.op != .in { return nil }
        var op = comparison.op
        let keyPath: String
        let constant: PredicateValue
        switch (comparison.lhs, comparison.rhs) {
        case (.keyPath(let path), .constant(let value)):
            keyPath = path
            constant = value
        case (.constant(let value), .keyPath(let path)):
            keyPath = path
            constant = value
            switch op {
            case .lessThan: op = .greaterThan
            case .lessThanOrEqual: op = .greaterThanOrEqual
            case .greaterThan: op = .lessThan
            case .greaterThanOrEqual: op = .lessThanOrEqual
            case .equal: break
            default: return nil
            }
        default:
            return nil
        }
        guard !keyPath.contains("."), let attribute = model.attribute(named: keyPath, in: entity), !attribute.isTransient,
              collation == .binary || attribute.type == .string else { return nil }
        guard var term = binaryTerm(keyPath, op, constant, attribute) else { return nil }
        let equalities = term.op == .equal || term.op == .in
        if collation != .binary {
            term = Term(keyPath: keyPath, op: term.op, values: term.values.map { IndexEntries.folded($0, collation) ?? $0 }, collation: collation)
        }
        if attribute.type == .string, equalities {
            switch collation {
            case .binary: term.fallbacks = [.caseInsensitive, .caseAndDiacriticInsensitive]
            case .caseInsensitive: term.fallbacks = [.caseAndDiacriticInsensitive]
            default: break
            }
        }
        return term
    }

    /// The term for `keyPath op constant` when the constant converts exactly to the attribute's stored type.
    private static func binaryTerm(_ keyPath: String, _ op: ComparisonOperator, _ constant: PredicateValue, _ attribute: AttributeDescription) -> Term? {
        switch op {
        case .equal, .lessThan, .lessThanOrEqual, .greaterThan, .greaterThanOrEqual:
            guard let value = indexValue(constant, attribute.type) else { return nil }
            return Term(keyPath: keyPath, op: op, values: [value])
        case .between:
            guard case .array(let bounds) = constant, bounds.count == 2,
                  let low = indexValue(bounds[0], attribute.type), let high = indexValue(bounds[1], attribute.type) else { return nil }
            return Term(keyPath: keyPath, op: op, values: [low, high])
        case .in:
            guard case .array(let elements) = constant, !elements.isEmpty, elements.count <= 1000 else { return nil }
            let values = elements.compactMap { indexValue($0, attribute.type) }
            guard values.count == elements.count else { return nil }
            return Term(keyPath: keyPath, op: .in, values: values)
        case .beginsWith:
            guard attribute.type == .string, case .string(let prefix) = constant, !prefix.isEmpty, prefix.utf8.count < 200 else { return nil }
            return Term(keyPath: keyPath, op: op, values: [.string(prefix)])
        default:
            return nil
        }
    }

    /// A constant as the attribute type's stored value, when it converts exactly (else the index cannot be used).
    /// A NaN never does: no row holds one, and the evaluator orders it below every value, which no key range of
    /// the index expresses.
    static func indexValue(_ value: PredicateValue, _ type: AttributeType) -> AttributeValue? {
        guard let converted = exactIndexValue(value, type), !converted.isNaN else { return nil }
        return converted
    }

    private static func exactIndexValue(_ value: PredicateValue, _ type: AttributeType) -> AttributeValue? {
        switch (value, type) {
        case (.integer(let v), _) where type.isInteger: return .integer(v)
        case (.boolean(let v), _) where type.isInteger: return .integer(v ? 1 : 0)
        case (.double(let v), _) where type.isInteger: return Int64(exactly: v).map(AttributeValue.integer)
        case (.integer(let v), .double), (.integer(let v), .float): return Double(exactly: v).map(AttributeValue.double)
        case (.double(let v), .double), (.double(let v), .float): return v.isNaN ? nil : .double(v)
        case (.boolean(let v), .boolean): return .boolean(v)
        case (.integer(let v), .boolean) where v == 0 || v == 1: return .boolean(v == 1)
        case (.string(let v), .string) where v.utf8.count < 200: return .string(v)
        case (.date(let v), .date): return .date(v)
        case (.uuid(let v), .uuid): return .uuid(v)
        case (.decimal(let v), .decimal): return .decimal(v)
        case (.integer(let v), .decimal): return .decimal(Decimal(v))
        default: return nil
        }
    }

    /// The key range all terms on one attribute allow, intersected; `nil` when a term cannot be expressed.
    static func range(for terms: [Term]) -> (ranges: [KeyRange], text: String)? {
        if terms.count == 1, terms[0].op == .in {
            // One exact range per distinct value, in key order.
            var distinct = Set<[UInt8]>()
            for value in terms[0].values {
                var key: [UInt8] = []
                TupleEncoding.append(value, to: &key)
                distinct.insert(key)
            }
            let keys = distinct.sorted { $0.lexicographicallyPrecedes($1) }
            let values = terms[0].values.map { PredicateValue($0).format }
            return (keys.map { KeyRange.prefix($0) }, "{" + values.joined(separator: ", ") + "}")
        }
        guard let single = singleRange(for: terms) else { return nil }
        return ([single.range], single.text)
    }

    static func singleRange(for terms: [Term]) -> (range: KeyRange, text: String)? {
        var lower: [UInt8]?      // inclusive
        var upper: [UInt8]?      // exclusive
        var lowText = "-inf", highText = "+inf", lowBracket = "(", highBracket = ")"
        func encoded(_ value: AttributeValue) -> [UInt8] {
            var bytes: [UInt8] = []
            TupleEncoding.append(value, to: &bytes)
            return bytes
        }
        func successor(_ bytes: [UInt8]) -> [UInt8]? {
            if case .exclusive(let key)? = KeyRange.prefix(bytes).upper { return key }
            return nil
        }
        func raise(_ candidate: [UInt8], _ text: String, _ bracket: String) {
            if lower == nil || lower!.lexicographicallyPrecedes(candidate) { lower = candidate; lowText = text; lowBracket = bracket }
        }
        func reduce(_ candidate: [UInt8], _ text: String, _ bracket: String) {
            if upper == nil || candidate.lexicographicallyPrecedes(upper!) { upper = candidate; highText = text; highBracket = bracket }
        }
        for term in terms {
            let first = encoded(term.values[0])
            let tag = [first[0]]
            let text = PredicateValue(term.values[0]).format
            // Every bound stays within the attribute's type tag, so NULL (tag 0x00) never enters a range.
            raise(tag, "-inf", "(")
            if let next = successor(tag) { reduce(next, "+inf", ")") }
            switch term.op {
            case .equal:
                raise(first, text, "[")
                guard let next = successor(first) else { return nil }
                reduce(next, text, "]")
            case .greaterThanOrEqual: raise(first, text, "[")
            case .greaterThan:
                if case .string = term.values[0] {
                    // A longer string that continues with a NUL ("Ann\0x", NUL escaped as 0x00 0xFF) sorts between the
                    // value's own keys and their successor: start at the value; the row check drops equal ones.
                    raise(first, text, "(")
                } else {
                    guard let next = successor(first) else { return nil }
                    raise(next, text, "(")
                }
            case .lessThan: reduce(first, text, ")")
            case .lessThanOrEqual:
                guard let next = successor(first) else { return nil }
                reduce(next, text, "]")
            case .between:
                raise(first, text, "[")
                guard let next = successor(encoded(term.values[1])) else { return nil }
                reduce(next, PredicateValue(term.values[1]).format, "]")
            case .beginsWith:
                guard case .string(let prefix) = term.values[0] else { return nil }
                var bytes: [UInt8] = [tag[0]]
                for byte in StringFolding.composed(prefix).utf8 {
                    bytes.append(byte)
                    if byte == 0 { bytes.append(0xFF) }
                }
                raise(bytes, text, "[")
                guard let next = successor(bytes) else { return nil }
                reduce(next, text + "…", ")")
            default:
                return nil
            }
        }
        let range = KeyRange(lower: lower.map(KeyRange.Bound.inclusive), upper: upper.map(KeyRange.Bound.exclusive))
        return (range, "\(lowBracket)\(lowText), \(highText)\(highBracket)")
    }

    /// Whether an index key of this type always holds the whole value (fixed-size encodings), so index order is the
    /// value order; strings, URIs and bytes over the key limit are cut and digested.
    static func keysAreNeverCut(_ type: AttributeType?) -> Bool {
        guard let type else { return false }
        return ![.string, .uri, .binaryData, .transformable, .objectID].contains(type)
    }
}
