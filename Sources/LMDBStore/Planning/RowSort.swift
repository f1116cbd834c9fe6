import LMDB
import ObjectGraph

/// A sort the rows' bytes settle, so a top-K over thousands of candidates reads one field of each and makes no view
/// of the rows it drops (``TopRows``): every descriptor is a plain key naming an attribute of each fetched entity
/// whose values order as numbers (integers, Booleans, floating point), as dates, or as strings compared by default
/// (`compare:`). The order is ``FetchSortDescriptor``'s: NULL first, then the values (-0 equal to +0; strings by the
/// bytes of their canonical composition); ties by row key, the order unsorted results come in.
struct RowSort {
    /// How a descriptor's values compare.
    enum Kind: UInt8 {
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
        /// Whether the text is its own canonical composition (``StringFolding/isOwnComposition(_:)``), so its byte
        /// order is its order.
        var textIsStable = true
    }

    /// How two rows' values compare: plain data, so a top-K copies it into its comparisons without retaining anything.
    struct Comparator {
        /// The number of sort keys (at most 32).
        let width: Int
        /// Each key's ``Kind`` in two bits (key `position` at bit `2 * position`).
        private let kindBits: UInt64
        /// Bit `position` set for a descending key.
        private let descendingBits: UInt64
        /// Bit `position` set for a text key (compared by its bytes, not its word).
        private let textBits: UInt64

        init(kinds: [Kind], ascending: [Bool]) {
            width = kinds.count
            kindBits = kinds.enumerated().reduce(0) { $0 | UInt64($1.element.rawValue) << (2 * $1.offset) }
            descendingBits = ascending.enumerated().reduce(0) { $1.element ? $0 : $0 | 1 << $1.offset }
            textBits = kinds.enumerated().reduce(0) { $1.element == .string ? $0 | 1 << $1.offset : $0 }
        }

        /// The kind of key `position`.
        @inline(__always)
        func kind(at position: Int) -> Kind {
            Kind(rawValue: UInt8(truncatingIfNeeded: kindBits >> (2 * position)) & 3)!
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
                } else if textBits >> position & 1 == 0 {
                    order = x.word == y.word ? 0 : x.word < y.word ? -1 : 1
                } else {
                    order = RowSort.textOrder(x, y)
                }
                if order != 0 { return descendingBits >> position & 1 == 0 ? order : -order }
            }
            return 0
        }
    }

    /// The most sort keys a sort of row bytes takes (each key's kind is two bits of one word); more go to the general sort.
    static let maximumWidth = 32

    let comparator: Comparator
    var width: Int { comparator.width }
    /// `fields[tag * width + position]`: the field of descriptor `position`'s attribute in rows of entity `tag`
    /// (-1 for a tag the fetch does not take).
    private let fields: [Int]

    /// The sort for `descriptors` over the entities of `family`, or `nil` when the rows' bytes cannot settle it: a key
    /// path through a relationship or a function, a to-one, a string compared ignoring case or as the Finder does,
    /// decimals, data, UUIDs and URIs, or an attribute of different kinds in different entities.
    init?(_ descriptors: [FetchSortDescriptor], family: TagSet, layout: StoreLayout) {
        guard !descriptors.isEmpty, descriptors.count <= Self.maximumWidth else { return nil }
        let width = descriptors.count
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
        comparator = Comparator(kinds: kinds.map { $0! }, ascending: descriptors.map(\.ascending))
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
            switch (try row.rawField(field), comparator.kind(at: position)) {
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
                value.textIsStable = StringFolding.isOwnComposition(bytes)
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

    /// Two strings' order: by their bytes when both are their own canonical composition, else as
    /// ``FetchSortDescriptor`` orders them.
    fileprivate static func textOrder(_ x: Value, _ y: Value) -> Int {
        if x.textIsStable && y.textIsStable {
            let common = min(x.text.count, y.text.count)
            for index in 0..<common where x.text[index] != y.text[index] { return x.text[index] < y.text[index] ? -1 : 1 }
            return x.text.count == y.text.count ? 0 : x.text.count < y.text.count ? -1 : 1
        }
        return FetchSortDescriptor(keyPath: "", ascending: true)
            .compare(.string(String(decoding: x.text, as: UTF8.self)), .string(String(decoding: y.text, as: UTF8.self)))
    }
}

/// Where a ``RowSort``'s keys are in the entries of an index range whose entries hold them all (``QueryPlan/IndexRange/sortsOnEntries``),
/// so a top-K reads them from the entry's bytes as it reads them from a row's: a key element (the elements before it
/// stepped over by their tags), or a covering index's stored value (at its fixed offset in the value). Every element
/// and value read is of fixed size; the words are the ones ``RowSort`` makes of a row's values — the key encoding
/// already orders integers, Booleans and numbers that way, -0 as +0.
struct EntrySortPlaces {
    private struct Place {
        /// In the key (an element's position) or in the value (a stored value's byte offset).
        let inKey: Bool
        let index: Int
    }
    private let places: [Place]
    /// The kinds of the sort keys.
    private let comparator: RowSort.Comparator
    /// Whether each key element up to the last a sort key is stored inverted (a descending element); empty when no
    /// sort key is in the key.
    private let invertedElements: [Bool]

    /// The places of `descriptors`' keys in `range`'s entries, or `nil` when one is neither a stored attribute nor a
    /// binary key element.
    init?(_ sort: RowSort, descriptors: [FetchSortDescriptor], range: QueryPlan.IndexRange) {
        var offsets: [Int] = []
        var offset = IndexEntries.referenceSize
        for element in range.stored {
            offsets.append(offset)
            offset += IndexEntries.storedWidth(element.type)
        }
        var places: [Place] = []
        for descriptor in descriptors {
            if let stored = range.stored.firstIndex(where: { $0.name == descriptor.keyPath }) {
                places.append(Place(inKey: false, index: offsets[stored]))
            } else if let element = range.elements.firstIndex(where: { $0.propertyName == descriptor.keyPath && $0.collation == .binary }) {
                places.append(Place(inKey: true, index: element))
            } else {
                return nil
            }
        }
        self.places = places
        comparator = sort.comparator
        let lastElement = places.filter(\.inKey).map(\.index).max() ?? -1
        invertedElements = range.elements.prefix(lastElement + 1).map { !$0.isAscending }
    }

    /// The entry's sort values, into `values` (``RowSort/width`` of them); false when the entry's bytes are not the
    /// elements and values its index declares (a damaged entry).
    @inline(__always)
    func values(of entry: CursorEntry, into values: inout [RowSort.Value]) -> Bool {
        var offset = 0
        for (element, inverted) in invertedElements.enumerated() {
            guard let (tag, value, end) = Self.read(entry.key, at: offset, inverted: inverted) else { return false }
            for (position, place) in places.enumerated() where place.inKey && place.index == element {
                guard Self.fits(tag, comparator.kind(at: position)) else { return false }
                values[position] = value
            }
            offset = end
        }
        for (position, place) in places.enumerated() where !place.inKey {
            guard let (tag, value, _) = Self.read(entry.value, at: place.index, inverted: false),
                  Self.fits(tag, comparator.kind(at: position)) else { return false }
            values[position] = value
        }
        return true
    }

    /// Whether an element with `tag` holds a value of `kind` (NULL holds any).
    private static func fits(_ tag: UInt8, _ kind: RowSort.Kind) -> Bool {
        switch (tag, kind) {
        case (TupleEncoding.Tag.null, _): true
        case (TupleEncoding.Tag.integer, .integer), (TupleEncoding.Tag.boolean, .integer): true
        case (TupleEncoding.Tag.double, .floatingPoint), (TupleEncoding.Tag.date, .date): true
        default: false
        }
    }

    /// The fixed-size element at `start` (its bytes inverted when `inverted`): its tag, its sort value (for the
    /// kinds a sort reads; a UUID is only stepped over), and where it ends; `nil` when it is no such element.
    @inline(__always)
    private static func read(_ bytes: UnsafeRawBufferPointer, at start: Int, inverted: Bool) -> (tag: UInt8, value: RowSort.Value, end: Int)? {
        let mask: UInt8 = inverted ? 0xFF : 0
        guard start < bytes.count else { return nil }
        let tag = bytes[start] ^ mask
        func word() -> UInt64 {
            var word: UInt64 = 0
            for index in start + 1...start + 8 { word = word << 8 | UInt64(bytes[index] ^ mask) }
            return word
        }
        switch tag {
        case TupleEncoding.Tag.null:
            return (tag, RowSort.Value(), start + 1)
        case TupleEncoding.Tag.integer where bytes.count - start > 8:
            return (tag, RowSort.Value(rank: 2, word: word()), start + 9)
        case TupleEncoding.Tag.boolean where bytes.count - start > 1 && bytes[start + 1] ^ mask <= 1:
            return (tag, RowSort.Value(rank: 2, word: UInt64(bytes[start + 1] ^ mask) ^ (1 << 63)), start + 2)
        case TupleEncoding.Tag.double where bytes.count - start > 8, TupleEncoding.Tag.date where bytes.count - start > 8:
            // The key's word for a number is RowSort's (-0 stored as +0); NaN, which no save writes, ranks as RowSort's.
            let word = word()
            let number = Double(bitPattern: word & (1 << 63) != 0 ? word ^ (1 << 63) : ~word)
            return (tag, number.isNaN ? RowSort.Value(rank: 1) : RowSort.Value(rank: 2, word: word), start + 9)
        case TupleEncoding.Tag.uuid where bytes.count - start > 16:
            return (tag, RowSort.Value(), start + 17)
        default:
            return nil
        }
    }
}

/// The first `capacity` matches of a fetch in ``RowSort``'s order, kept in a bounded heap while they go by — with
/// what the caller keeps of each (`Kept`: the row, or nothing when the values came from index entries): a match that
/// sorts after all of them is dropped after one comparison, and those kept are the ones a full sort puts first, in
/// the same order.
struct TopRows<Kept> {
    let comparator: RowSort.Comparator
    /// The kept rows' slots.
    private var heap: BoundedMaxHeap
    /// The values of the row being offered (the first `comparator.width`), then those of each kept row by slot.
    private var values: [RowSort.Value]
    private var rows: [(candidate: Candidate, kept: Kept)] = []
    /// The row key of the row being offered.
    private var offeredKey: UInt64 = 0

    init(_ sort: RowSort, capacity: Int) {
        comparator = sort.comparator
        heap = BoundedMaxHeap(capacity: capacity)
        values = Array(repeating: RowSort.Value(), count: comparator.width)
    }

    /// Keeps the candidate (and `kept`) if it is among the first `capacity` so far, its sort values put in the first
    /// ``RowSort/width`` of the array `fill` is given.
    @inline(__always)
    mutating func offer<Failure: Error>(_ candidate: Candidate, _ kept: Kept,
                                        values fill: (inout [RowSort.Value]) throws(Failure) -> Void) throws(Failure) {
        guard heap.capacity > 0 else { return }
        try fill(&values)
        offeredKey = candidate.key
        let width = comparator.width, slot: Int
        if !heap.isFull {
            slot = rows.count
            rows.append((candidate, kept))
            for position in 0..<width { values.append(values[position]) }
        } else if precedes(-1, heap.items[0]) {
            // The offered row takes the slot of the kept row that sorts last.
            slot = heap.items[0]
            rows[slot] = (candidate, kept)
            for position in 0..<width { values[(slot + 1) * width + position] = values[position] }
        } else {
            return
        }
        reorder { heap, precedes in heap.isFull ? heap.replaceLast(with: slot, by: precedes) : heap.insert(slot, by: precedes) }
    }

    /// The kept rows, first to last; the heap is emptied (sorted in place).
    mutating func sorted() -> [(candidate: Candidate, kept: Kept)] {
        var order: [Int] = []
        reorder { heap, precedes in order = heap.removeAllSorted(by: precedes) }
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
        let width = comparator.width, comparator = comparator
        let order = values.withUnsafeBufferPointer { all in
            comparator.order(UnsafeBufferPointer(rebasing: all[(a + 1) * width ..< (a + 2) * width]),
                       UnsafeBufferPointer(rebasing: all[(b + 1) * width ..< (b + 2) * width]))
        }
        return order != 0 ? order < 0 : (a < 0 ? offeredKey : rows[a].candidate.key) < rows[b].candidate.key
    }
}
