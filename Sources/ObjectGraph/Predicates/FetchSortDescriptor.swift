import Foundation

/// How a fetch orders its results by one key path (Core Data's `NSSortDescriptor`, named so that it does not clash
/// with Foundation's `SortDescriptor`).
///
/// Ordering follows Core Data's: NULL sorts before every value in ascending order (after, descending); integers,
/// floating-point numbers, decimals and Booleans sort together as numbers; dates by time; values of kinds that
/// cannot be compared sort by kind, so the order is always total.
public struct FetchSortDescriptor: Sendable, Hashable, CustomStringConvertible {
    /// How strings are compared.
    public enum Comparison: String, Sendable, Hashable {
        /// By Unicode scalar values (`compare:`).
        case `default`
        /// Ignoring case (`caseInsensitiveCompare:`).
        case caseInsensitive
        /// As the Finder sorts names: case-insensitive, digits as numbers (`localizedStandardCompare:`).
        case localizedStandard
    }

    /// The key path whose values are compared.
    public var keyPath: String
    /// Whether smaller values come first.
    public var ascending: Bool
    /// How strings are compared.
    public var comparison: Comparison

    /// Creates a sort descriptor.
    public init(keyPath: String, ascending: Bool = true, comparison: Comparison = .default) {
        self.keyPath = keyPath
        self.ascending = ascending
        self.comparison = comparison
    }

    /// `name ascending` / `age descending (caseInsensitive)`.
    public var description: String {
        keyPath + (ascending ? " ascending" : " descending") + (comparison == .default ? "" : " (\(comparison.rawValue))")
    }

    /// The value the descriptor sorts `object` by (NULL when the key path cannot be followed).
    public func sortValue(of object: some KeyValueReadable) -> PredicateValue {
        (try? PredicateExpression(node: .keyPath(keyPath)).value(for: object)) ?? .null
    }

    /// The order of two values under this descriptor: negative when `lhs` comes first.
    public func compare(_ lhs: PredicateValue, _ rhs: PredicateValue) -> Int {
        let order = Self.order(lhs, rhs, comparison: comparison)
        return ascending ? order : -order
    }

    /// The order of two objects under `descriptors`, the first deciding unless it finds them equal.
    public static func compare(_ lhs: some KeyValueReadable, _ rhs: some KeyValueReadable, using descriptors: [FetchSortDescriptor]) -> Int {
        for descriptor in descriptors {
            let order = descriptor.compare(descriptor.sortValue(of: lhs), descriptor.sortValue(of: rhs))
            if order != 0 { return order }
        }
        return 0
    }

    /// `objects` sorted by `descriptors` (stable: equal objects keep their order).
    public static func sorted<Object: KeyValueReadable>(_ objects: [Object], using descriptors: [FetchSortDescriptor]) -> [Object] {
        let keyed = objects.enumerated().map { entry in
            (offset: entry.offset, object: entry.element, keys: descriptors.map { $0.sortValue(of: entry.element) })
        }
        return keyed.sorted { a, b in
            for (index, descriptor) in descriptors.enumerated() {
                let order = descriptor.compare(a.keys[index], b.keys[index])
                if order != 0 { return order < 0 }
            }
            return a.offset < b.offset
        }.map { $0.object }
    }

    /// A total order on values for sorting, ascending.
    static func order(_ lhs: PredicateValue, _ rhs: PredicateValue, comparison: Comparison) -> Int {
        switch (lhs, rhs) {
        case (.null, .null): return 0
        case (.null, _): return -1
        case (_, .null): return 1
        case (.string(let a), .string(let b)):
            let result: ComparisonResult
            switch comparison {
            case .default: return a == b ? 0 : a < b ? -1 : 1
            case .caseInsensitive: result = a.caseInsensitiveCompare(b)
            case .localizedStandard: result = a.localizedStandardCompare(b)
            }
            return result == .orderedAscending ? -1 : result == .orderedDescending ? 1 : 0
        default:
            if let order = PredicateOrdering.order(lhs, rhs, options: []) { return order }
            let (a, b) = (kindRank(lhs), kindRank(rhs))
            return a == b ? 0 : a < b ? -1 : 1
        }
    }

    private static func kindRank(_ value: PredicateValue) -> Int {
        switch value {
        case .null: 0
        case .boolean, .integer, .double, .decimal: 1
        case .string: 2
        case .date: 3
        case .data: 4
        case .uuid: 5
        case .uri: 6
        case .array: 7
        case .dictionary: 8
        case .object: 9
        }
    }
}
