import ObjectGraph

/// A sort the rows' bytes settle, so a top-K over thousands of candidates reads one field of each and makes no view
/// of the rows it drops (``TopRows``): every descriptor is a plain key naming an attribute of each fetched entity
/// whose values order as numbers (integers, Booleans, floating point), as dates, or as strings compared by default
/// (`compare:`). The order is ``FetchSortDescriptor``'s: NULL first, then the values (-0 equal to +0; strings by the
/// bytes of their canonical composition); ties by row key, the order unsorted results come in.
struct RowSort {
    /// How a descriptor's values compare.
    enum Kind {
        /// Integers and Booleans (`false` as 0, `true` as 1).
        case integer
        case floatingPoint
        case date
        case string
    }

    /// One descriptor's value in one row.
    struct Value {
        /// 0 for NULL, 1 for NaN (which no save writes), 2 for any other value: NULL sorts first.
        var rank: UInt8 = 0
        /// A number or a date as a word whose unsigned order is the values' order.
        var word: UInt64 = 0
        /// A string's UTF-8 bytes, borrowed from the row (valid for the transaction's life).
        var text = UnsafeRawBufferPointer(start: nil, count: 0)
        /// Whether the text is its own canonical composition (no byte at or above 0xCC), so its byte order is its order.
        var textIsStable = true
    }

    let width: Int
    private let kinds: [Kind]
    private let ascending: [Bool]
    /// `fields[tag * width + position]`: the field of descriptor `position`'s attribute in rows of entity `tag`
    /// (-1 for a tag the fetch does not take).
    private let fields: [Int]

    /// The sort for `descriptors` over the entities of `family`, or `nil` when the rows' bytes cannot settle it: a key
    /// path through a relationship or a function, a to-one, a string compared ignoring case or as the Finder does,
    /// decimals, data, UUIDs and URIs, or an attribute of different kinds in different entities.
    init?(_ descriptors: [FetchSortDescriptor], family: TagSet, layout: StoreLayout) {
        guard !descriptors.isEmpty else { return nil }
        width = descriptors.count
        ascending = descriptors.map(\.ascending)
        var kinds: [Kind?] = Array(repeating: nil, count: width)
        var fields = Array(repeating: -1, count: layout.entitiesByTag.count * width)
        for case let entity? in layout.entitiesByTag where family.contains(entity.tag) {
            for (position, descriptor) in descriptors.enumerated() {
                guard let field = entity.fieldIndex[descriptor.keyPath], let type = entity.fields[field].attributeType,
                      let kind = Self.kind(of: type, comparison: descriptor.comparison) else { return nil }
                if let known = kinds[position], known != kind { return nil }
                kinds[position] = kind
                fields[Int(entity.tag) * width + position] = field
            }
        }
        guard kinds.allSatisfy({ $0 != nil }) else { return nil }
        self.kinds = kinds.map { $0! }
        self.fields = fields
    }

    private static func kind(of type: AttributeType, comparison: FetchSortDescriptor.Comparison) -> Kind? {
        switch type {
        case .integer16, .integer32, .integer64, .boolean: .integer
        case .double, .float: .floatingPoint
        case .date: .date
        case .string: comparison == .default ? .string : nil
        case .decimal, .binaryData, .uuid, .uri, .transformable, .objectID, .undefined: nil
        }
    }

    /// The row's sort values, into `values` (``width`` of them). A field holding another kind of value than its
    /// attribute's is damage.
    func values(of row: EncodedRow, into values: inout [Value]) throws(RowDecodingError) {
        let base = Int(row.entityTag) * width
        for position in 0..<width {
            let field = fields[base + position]
            var value = Value()
            switch (try row.rawField(field), kinds[position]) {
            case (nil, _):
                break
            case (.integer(let number)?, .integer):
                value.rank = 2
                value.word = UInt64(bitPattern: number) ^ (1 << 63)
            case (.boolean(let flag)?, .integer):
                value.rank = 2
                value.word = (flag ? 1 : 0) ^ (1 << 63)
            case (.double(let number)?, .floatingPoint), (.date(let number)?, .date):
                // A save refuses NaN; one in a row written elsewhere sorts as the evaluator puts NaN numbers.
                value.rank = number.isNaN ? 1 : 2
                value.word = number.isNaN ? 0 : Self.orderedWord(number)
            case (.string(let bytes)?, .string):
                value.rank = 2
                value.text = bytes
                value.textIsStable = !bytes.contains { $0 >= 0xCC }
            default:
                throw RowDecodingError(reason: "\(row.entity.fields[field].name) holds a value of another type than its attribute's")
            }
            values[position] = value
        }
    }

    /// A number (not NaN) as a word whose unsigned order is the numbers' order; -0 and +0 give the same word.
    @inline(__always)
    static func orderedWord(_ number: Double) -> UInt64 {
        let bits = (number == 0 ? 0.0 : number).bitPattern
        return bits & (1 << 63) != 0 ? ~bits : bits | (1 << 63)
    }

    /// The order of two rows' values (`width` each, from `a` and `b`): negative when the first sorts first.
    @inline(__always)
    func order(_ a: UnsafeBufferPointer<Value>, _ b: UnsafeBufferPointer<Value>) -> Int {
        for position in 0..<width {
            let x = a[position], y = b[position]
            var order: Int
            if x.rank != y.rank {
                order = x.rank < y.rank ? -1 : 1
            } else if x.rank < 2 {
                order = 0
            } else if kinds[position] != .string {
                order = x.word == y.word ? 0 : x.word < y.word ? -1 : 1
            } else {
                order = Self.textOrder(x, y)
            }
            if order != 0 { return ascending[position] ? order : -order }
        }
        return 0
    }

    /// Two strings' order: by their bytes when both are their own canonical composition, else as
    /// ``FetchSortDescriptor`` orders them.
    private static func textOrder(_ x: Value, _ y: Value) -> Int {
        if x.textIsStable && y.textIsStable {
            let common = min(x.text.count, y.text.count)
            for index in 0..<common where x.text[index] != y.text[index] { return x.text[index] < y.text[index] ? -1 : 1 }
            return x.text.count == y.text.count ? 0 : x.text.count < y.text.count ? -1 : 1
        }
        return FetchSortDescriptor(keyPath: "", ascending: true)
            .compare(.string(String(decoding: x.text, as: UTF8.self)), .string(String(decoding: y.text, as: UTF8.self)))
    }
}

/// The first `capacity` matching rows of a fetch in ``RowSort``'s order, kept in a bounded heap while the rows go by:
/// a row that sorts after all of them is dropped after one comparison, and the rows kept are the ones a full sort
/// puts first, in the same order.
struct TopRows {
    let sort: RowSort
    /// The kept rows' slots.
    private var heap: BoundedMaxHeap
    /// The values of the row being offered (the first `sort.width`), then those of each kept row by slot.
    private var values: [RowSort.Value]
    private var rows: [(candidate: Candidate, row: EncodedRow)] = []
    /// The row key of the row being offered.
    private var offeredKey: UInt64 = 0

    init(_ sort: RowSort, capacity: Int) {
        self.sort = sort
        heap = BoundedMaxHeap(capacity: capacity)
        values = Array(repeating: RowSort.Value(), count: sort.width)
    }

    /// Keeps the row if it is among the first `capacity` so far.
    mutating func offer(_ candidate: Candidate, _ row: EncodedRow) throws(RowDecodingError) {
        guard heap.capacity > 0 else { return }
        try sort.values(of: row, into: &values)
        offeredKey = candidate.key
        let width = sort.width, slot: Int
        if !heap.isFull {
            slot = rows.count
            rows.append((candidate, row))
            for position in 0..<width { values.append(values[position]) }
        } else if precedes(-1, heap.items[0]) {
            // The offered row takes the slot of the kept row that sorts last.
            slot = heap.items[0]
            rows[slot] = (candidate, row)
            for position in 0..<width { values[(slot + 1) * width + position] = values[position] }
        } else {
            return
        }
        reorder { heap, precedes in heap.isFull ? heap.replaceLast(with: slot, by: precedes) : heap.insert(slot, by: precedes) }
    }

    /// The kept rows, first to last.
    mutating func sorted() -> [(candidate: Candidate, row: EncodedRow)] {
        var order = heap.items
        order.sort { precedes($0, $1) }
        return order.map { rows[$0] }
    }

    /// Calls `change` with the heap, taken out of `self` so that its order can read the rows in place.
    private mutating func reorder(_ change: (inout BoundedMaxHeap, (Int, Int) -> Bool) -> Void) {
        var taken = BoundedMaxHeap(capacity: 0)
        swap(&taken, &heap)
        change(&taken) { precedes($0, $1) }
        swap(&taken, &heap)
    }

    /// Whether the row in slot `a` sorts before the one in slot `b` (slot -1: the row being offered), ties by row key.
    /// (`mutating` though it changes nothing: it then reads the rows in place, where a non-mutating call from the
    /// mutating ones copied `self` — retaining each of its arrays — once per row offered.)
    @inline(__always)
    private mutating func precedes(_ a: Int, _ b: Int) -> Bool {
        let width = sort.width
        let order = values.withUnsafeBufferPointer { all in
            sort.order(UnsafeBufferPointer(rebasing: all[(a + 1) * width ..< (a + 2) * width]),
                       UnsafeBufferPointer(rebasing: all[(b + 1) * width ..< (b + 2) * width]))
        }
        return order != 0 ? order < 0 : (a < 0 ? offeredKey : rows[a].candidate.key) < rows[b].candidate.key
    }
}
