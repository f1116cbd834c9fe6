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
        sortValue(of: object, isPlainKey: isPlainKey)
    }

    /// Whether the key path is one key (no `.`, no `@` function): the object's own value for it, no expression.
    var isPlainKey: Bool {
        !keyPath.utf8.contains(UInt8(ascii: ".")) && keyPath.utf8.first != UInt8(ascii: "@")
    }

    /// ``sortValue(of:)`` with ``isPlainKey`` worked out once for many objects.
    func sortValue(of object: some KeyValueReadable, isPlainKey: Bool) -> PredicateValue {
        if isPlainKey { return object.predicateValue(forKey: keyPath) }
        return (try? PredicateExpression(node: .keyPath(keyPath)).value(for: object)) ?? .null
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

    /// `objects` sorted by `descriptors` (stable: equal objects keep their order). With `prefix`, only the first
    /// `prefix` objects of that order are returned, found with a bounded heap when they are few: O(n log prefix)
    /// comparisons instead of O(n log n), and the same objects in the same order as a full sort's prefix.
    public static func sorted<Object: KeyValueReadable>(_ objects: [Object], using descriptors: [FetchSortDescriptor], prefix: Int? = nil) -> [Object] {
        let count = objects.count, width = descriptors.count
        let wanted = min(max(prefix ?? count, 0), count)
        guard count > 1, width > 0 else { return Array(objects.prefix(wanted)) }
        // Sort positions, with every sort key computed once into one flat array.
        var keys: [PredicateValue] = []
        keys.reserveCapacity(count * width)
        let plain = descriptors.map(\.isPlainKey)
        for object in objects {
            for (descriptor, isPlainKey) in zip(descriptors, plain) { keys.append(descriptor.sortValue(of: object, isPlainKey: isPlainKey)) }
        }
        // One key of one kind of number (the usual `ORDER BY salary DESC LIMIT 100`): compared as plain numbers, in
        // the order `order(_:_:comparison:)` gives them, without copying a `PredicateValue` per comparison.
        if width == 1, let numbers = Self.uniformNumbers(keys) {
            let ascending = descriptors[0].ascending
            switch numbers {
            case .integers(let values):
                return sortedPositions(count, wanted) { a, b in
                    values[a] != values[b] ? (values[a] < values[b]) == ascending : a < b
                }.map { objects[$0] }
            case .doubles(let values):
                return sortedPositions(count, wanted) { a, b in
                    values[a] != values[b] ? (values[a] < values[b]) == ascending : a < b
                }.map { objects[$0] }
            }
        }
        func precedes(_ a: Int, _ b: Int) -> Bool {
            for position in 0..<width {
                let order = descriptors[position].compare(keys[a * width + position], keys[b * width + position])
                if order != 0 { return order < 0 }
            }
            return a < b  // stable: the earlier object first
        }
        return sortedPositions(count, wanted, by: precedes).map { objects[$0] }
    }

    /// Keys that are all integers, or all floating-point numbers that are not NaN.
    private enum UniformNumbers {
        case integers([Int64])
        case doubles([Double])
    }

    private static func uniformNumbers(_ keys: [PredicateValue]) -> UniformNumbers? {
        switch keys.first {
        case .integer?:
            var values: [Int64] = []
            values.reserveCapacity(keys.count)
            for key in keys {
                guard case .integer(let value) = key else { return nil }
                values.append(value)
            }
            return .integers(values)
        case .double?:
            var values: [Double] = []
            values.reserveCapacity(keys.count)
            for key in keys {
                guard case .double(let value) = key, !value.isNaN else { return nil }
                values.append(value)
            }
            return .doubles(values)
        default:
            return nil
        }
    }

    /// The first `wanted` of positions `0..<count` under the strict total order `precedes`: by a bounded heap when
    /// they are few, by a full sort otherwise.
    private static func sortedPositions(_ count: Int, _ wanted: Int, by precedes: (Int, Int) -> Bool) -> [Int] {
        if wanted < count / 8 {
            return TopK.smallest(wanted, of: count, by: precedes)
        }
        var order = Array(0..<count)
        order.sort(by: precedes)
        return Array(order.prefix(wanted))
    }

    /// A total order on values for sorting, ascending.
    static func order(_ lhs: PredicateValue, _ rhs: PredicateValue, comparison: Comparison) -> Int {
        switch (lhs, rhs) {
        case (.double(let a), .double(let b)) where !a.isNaN && !b.isNaN: return a == b ? 0 : a < b ? -1 : 1
        case (.integer(let a), .integer(let b)): return a == b ? 0 : a < b ? -1 : 1
        case (.null, .null): return 0
        case (.null, _): return -1
        case (_, .null): return 1
        case (.string(let a), .string(let b)):
            let result: ComparisonResult
            switch comparison {
            case .default: return PredicateOrdering.canonicalOrder(a, b)
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

/// The `k` smallest of `count` positions under a strict total order, smallest first, with a bounded max-heap.
enum TopK {
    static func smallest(_ k: Int, of count: Int, by precedes: (Int, Int) -> Bool) -> [Int] {
        var heap = BoundedMaxHeap(capacity: k)
        for position in 0..<count { heap.offer(position, by: precedes) }
        return heap.removeAllSorted(by: precedes)
    }
}

/// The smallest items seen so far under a strict total order, at most `capacity` of them, as a max-heap of item
/// numbers: the one that sorts last is on top, so a new item is compared with it once and either takes its place or
/// is dropped — O(n log k) comparisons for the first k of n. The caller keeps the items; `precedes` orders their
/// numbers.
package struct BoundedMaxHeap {
    package let capacity: Int
    /// The numbers kept, in heap order: `items[0]` sorts last.
    package private(set) var items: [Int] = []

    package init(capacity: Int) {
        self.capacity = max(capacity, 0)
    }

    /// Whether `capacity` items are kept, so a new one must sort before ``items``[0] to be kept.
    package var isFull: Bool { items.count >= capacity }

    /// Keeps `item` if it is among the first `capacity` so far, dropping the one that sorts last when full.
    package mutating func offer(_ item: Int, by precedes: (Int, Int) -> Bool) {
        if !isFull {
            insert(item, by: precedes)
        } else if capacity > 0 && precedes(item, items[0]) {
            replaceLast(with: item, by: precedes)
        }
    }

    /// Adds `item` (the heap must not be full).
    package mutating func insert(_ item: Int, by precedes: (Int, Int) -> Bool) {
        items.append(item)
        var child = items.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard precedes(items[parent], items[child]) else { return }
            items.swapAt(parent, child)
            child = parent
        }
    }

    /// Puts `item` in place of the item that sorts last (the heap must not be empty) — or, when `item` is that
    /// item's number with new contents, puts it where it now belongs.
    package mutating func replaceLast(with item: Int, by precedes: (Int, Int) -> Bool) {
        items[0] = item
        siftDown(before: items.count, by: precedes)
    }

    /// The items kept, first to last, leaving the heap empty: sorted in place by heapsort (about 1.5 n log n
    /// comparisons). A general sort of the heap's order took 1 000 comparisons for 50 items.
    package mutating func removeAllSorted(by precedes: (Int, Int) -> Bool) -> [Int] {
        var end = items.count - 1
        while end > 0 {
            items.swapAt(0, end)
            siftDown(before: end, by: precedes)
            end -= 1
        }
        defer { items = [] }
        return items
    }

    /// Moves the top item down to where it belongs among the first `end` items.
    private mutating func siftDown(before end: Int, by precedes: (Int, Int) -> Bool) {
        var parent = 0
        while true {
            let left = 2 * parent + 1, right = left + 1
            var largest = parent
            if left < end && precedes(items[largest], items[left]) { largest = left }
            if right < end && precedes(items[largest], items[right]) { largest = right }
            if largest == parent { return }
            items.swapAt(parent, largest)
            parent = largest
        }
    }
}
