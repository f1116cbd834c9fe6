#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A check of an LMDB file's B-tree pages, read without liblmdb.
///
/// liblmdb trusts its pages: a damaged page header, node offset or child page number makes it read out of bounds,
/// trap in an assertion or follow the wrong page. The walk reads the pages a meta page reaches — the free list's
/// tree, the table of tables and every table it names, with their duplicate sub-pages and sub-trees and the first
/// page of every overflow run — and checks each before trusting anything in it:
///
/// - the page number is inside the file's used pages, not a meta page, reached once and not on the free list;
/// - the header names the page, has the expected kind (branch above the tree's depth, leaf at it, overflow for big
///   values) and free-space bounds inside the page;
/// - every node lies inside its page, with flags that fit its tree;
/// - keys ascend in the tree's order inside every page and stay between the separators of the branch above;
/// - each tree's page and entry counts and depth equal its record;
/// - every page is in exactly one tree or on the free list.
///
/// Layouts are LMDB 0.9's on 64-bit machines (native byte order): a 16-byte page header (page number u64, key size
/// of fixed-size duplicates u16, flags u16, lower and upper free-space bounds u16 each — or, for an overflow page,
/// its page count u32), then u16 node offsets; a node is a u32 data size (or, in a branch, the low 32 bits of the
/// child's page number), u16 flags (the child's page number's next 16 bits), u16 key size, the key and the data.
/// A tree's record (`MDB_db`) is 48 bytes: u32 key size of fixed-size duplicates, u16 flags, u16 depth, then u64
/// branch, leaf and overflow page counts, entry count and root page number.
final class PageWalk {
    /// Reads `buffer.count` bytes from the start of page `page`; `false` when the file has fewer.
    typealias Reader = (_ page: UInt64, _ buffer: UnsafeMutableRawBufferPointer) -> Bool

    /// One tree's record (`MDB_db`).
    struct Record {
        static let size = 48
        var fixedKeySize: UInt32
        var flags: UInt16
        var depth: UInt16
        var branchPages: UInt64
        var leafPages: UInt64
        var overflowPages: UInt64
        var entries: UInt64
        var root: UInt64

        init(_ bytes: UnsafeRawBufferPointer, at offset: Int) {
            func load<T: FixedWidthInteger>(_ at: Int, _: T.Type) -> T { bytes.loadUnaligned(fromByteOffset: offset + at, as: T.self) }
            fixedKeySize = load(0, UInt32.self)
            flags = load(4, UInt16.self)
            depth = load(6, UInt16.self)
            branchPages = load(8, UInt64.self)
            leafPages = load(16, UInt64.self)
            overflowPages = load(24, UInt64.self)
            entries = load(32, UInt64.self)
            root = load(40, UInt64.self)
        }
    }

    /// The fields of a meta page the walk starts from.
    struct Meta {
        var pageSize: Int
        var free: Record
        var main: Record
        var lastPage: UInt64
        var transaction: UInt64

        /// The meta page in `page` (at least 152 bytes), or `nil` when it has no LMDB magic or version 1.
        init?(_ page: UnsafeRawBufferPointer) {
            guard page.count >= StoreFile.metaFieldsEnd, page.loadUnaligned(fromByteOffset: 16, as: UInt32.self) == StoreFile.magic,
                  page.loadUnaligned(fromByteOffset: 20, as: UInt32.self) == StoreFile.formatVersion else { return nil }
            free = Record(page, at: 40)
            main = Record(page, at: 88)
            pageSize = Int(free.fixedKeySize)
            lastPage = page.loadUnaligned(fromByteOffset: 136, as: UInt64.self)
            transaction = page.loadUnaligned(fromByteOffset: StoreFile.transactionOffset, as: UInt64.self)
        }
    }

    // Page flags, node flags and database flags, as LMDB 0.9 writes them.
    private static let branch: UInt16 = 0x01, leaf: UInt16 = 0x02, overflow: UInt16 = 0x04, dirty: UInt16 = 0x10, leaf2: UInt16 = 0x20, subPage: UInt16 = 0x40
    private static let bigData: UInt16 = 0x01, subData: UInt16 = 0x02, dupData: UInt16 = 0x04
    private static let reverseKey: UInt16 = 0x02, dupSort: UInt16 = 0x04, integerKey: UInt16 = 0x08, dupFixed: UInt16 = 0x10,
                       integerDup: UInt16 = 0x20, reverseDup: UInt16 = 0x40
    private static let knownDatabaseFlags: UInt16 = 0x7E
    private static let headerSize = 16, nodeHeaderSize = 8
    private static let noPage = UInt64.max
    /// Deeper trees cannot hold a file's pages: LMDB's cursors stop at 32 levels.
    private static let deepest = 32
    /// The most pages a meta page may count past the end of the file (free pages never written).
    static let unwrittenPageLimit: UInt64 = 1 << 20
    /// Problems past this many are counted, not described.
    static let problemLimit = 100

    /// How a tree's keys (or a duplicate set's values) sort.
    private enum Order {
        case bytes, reversedBytes, integers

        init(flags: UInt16, reverse: UInt16, integer: UInt16) {
            self = flags & integer != 0 ? .integers : flags & reverse != 0 ? .reversedBytes : .bytes
        }

        /// `a` compared with `b`: negative, zero or positive.
        func compare(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Int {
            switch self {
            case .bytes:
                let common = min(a.count, b.count)
                if common > 0, let x = a.baseAddress, let y = b.baseAddress {
                    let result = memcmp(x, y, common)
                    if result != 0 { return Int(result) }
                }
                return a.count - b.count
            case .reversedBytes:
                var i = a.count, j = b.count
                while i > 0, j > 0 {
                    i -= 1; j -= 1
                    if a[i] != b[j] { return Int(a[i]) - Int(b[j]) }
                }
                return a.count - b.count
            case .integers:
                func value(_ x: UnsafeRawBufferPointer) -> UInt64 {
                    x.count == 4 ? UInt64(x.loadUnaligned(as: UInt32.self)) : x.count == 8 ? x.loadUnaligned(as: UInt64.self) : 0
                }
                let (x, y) = (value(a), value(b))
                return x < y ? -1 : x > y ? 1 : 0
            }
        }
    }

    /// What a tree is, for its checks and its messages.
    private struct Tree {
        enum Kind { case free, main, table, duplicates }
        var kind: Kind
        var name: String
        var record: Record
        var order: Order
        /// Counted while walking, compared with the record at the end.
        var branchPages: UInt64 = 0, leafPages: UInt64 = 0, overflowPages: UInt64 = 0, entries: UInt64 = 0
    }

    let pageSize: Int
    /// Pages 0 through `pageCount - 1` are in use (the meta page's last page number plus one).
    let pageCount: UInt64
    private let read: Reader
    private(set) var problems: [String] = []
    private(set) var problemCount = 0
    /// Pages reached from a tree, and pages on the free list, one bit per page.
    private var reached: [UInt64], free: [UInt64]
    /// One page buffer per level of the trees being walked (a parent's keys bound its children while they are
    /// read, and a table's record sits in a page of the table of tables).
    private var buffers: [UnsafeMutableRawBufferPointer] = []
    /// Pages a table reaches that the file does not hold (it was cut short).
    private(set) var pagesPastEnd = 0

    private init(pageSize: Int, pageCount: UInt64, read: @escaping Reader) {
        self.pageSize = pageSize
        self.pageCount = pageCount
        self.read = read
        let words = Int((pageCount + 63) / 64)
        reached = Array(repeating: 0, count: words)
        free = Array(repeating: 0, count: words)
    }

    deinit {
        for buffer in buffers { buffer.deallocate() }
    }

    /// The problems of the file whose pages `read` returns, walked from `meta`, and the walk (its counts).
    static func check(_ meta: Meta, fileSize: Int, read: @escaping Reader) -> (problems: [String], walk: PageWalk) {
        guard meta.pageSize >= 512, meta.pageSize <= 65536, meta.pageSize & (meta.pageSize - 1) == 0 else {
            return (["the meta page names an impossible page size \(meta.pageSize)"], PageWalk(pageSize: 4096, pageCount: 0, read: read))
        }
        // The file can end before the last page: pages a commit took and freed again are not written.
        guard meta.lastPage >= 1, meta.lastPage < UInt64(fileSize / meta.pageSize) + Self.unwrittenPageLimit else {
            return (["the meta page's last page \(meta.lastPage) is far past the end of the \(fileSize)-byte file"],
                    PageWalk(pageSize: meta.pageSize, pageCount: 0, read: read))
        }
        let walk = PageWalk(pageSize: meta.pageSize, pageCount: meta.lastPage + 1, read: read)
        walk.run(meta)
        var problems = walk.problems
        if walk.problemCount > problems.count { problems.append("… and \(walk.problemCount - problems.count) more problems") }
        return (problems, walk)
    }

    /// A reader of the pages of the open file `descriptor`, whole pages only (a short read past the end is `false`).
    static func fileReader(_ descriptor: Int32, pageSize: Int) -> Reader {
        { page, buffer in
            let (offset, overflow) = Int(clamping: page).multipliedReportingOverflow(by: pageSize)
            guard !overflow, let base = buffer.baseAddress else { return false }
            var done = 0
            while done < buffer.count {
                let count = pread(descriptor, base + done, buffer.count - done, off_t(offset + done))
                if count > 0 { done += count } else if count < 0, errno == EINTR { continue } else { return false }
            }
            return true
        }
    }

    /// The problems of a whole file held in `image`, walked from its newest meta page (as LMDB opens it).
    static func check(image: UnsafeRawBufferPointer) -> [String] {
        walk(image: image).problems
    }

    /// The pages a table or the free list's tree reaches in the file held in `image` (for tests that damage one).
    static func pagesInUse(image: UnsafeRawBufferPointer) -> [UInt64] {
        let walk = walk(image: image).walk
        return (0..<walk.pageCount).filter { walk.isSet(walk.reached, $0) }
    }

    private static func walk(image: UnsafeRawBufferPointer) -> (problems: [String], walk: PageWalk) {
        guard let zero = Meta(image) else { return (["the file has no LMDB meta page at its start"], PageWalk(pageSize: 4096, pageCount: 0) { _, _ in false }) }
        var meta = zero
        if zero.pageSize >= 512, zero.pageSize <= 65536, image.count >= 2 * zero.pageSize,
           let one = Meta(UnsafeRawBufferPointer(rebasing: image[zero.pageSize...])), one.transaction > zero.transaction {
            meta = one
        }
        return check(meta, fileSize: image.count) { page, buffer in
            let (start, overflow) = Int(clamping: page).multipliedReportingOverflow(by: meta.pageSize)
            guard !overflow, start <= image.count - buffer.count else { return false }
            buffer.copyMemory(from: UnsafeRawBufferPointer(rebasing: image[start..<start + buffer.count]))
            return true
        }
    }

    private func problem(_ text: @autoclosure () -> String) {
        problemCount += 1
        if problems.count < Self.problemLimit { problems.append(text()) }
    }

    private func isSet(_ bits: [UInt64], _ page: UInt64) -> Bool { bits[Int(page / 64)] & (1 << (page % 64)) != 0 }

    private func run(_ meta: Meta) {
        if meta.main.flags & ~Self.knownDatabaseFlags != 0 {
            problem("the meta page gives the table of tables unknown flags \(meta.main.flags)")
            return
        }
        // The free list first: its pages are in use, the pages it lists are not.
        var freeTree = Tree(kind: .free, name: "the free list", record: meta.free, order: .integers)
        walkTree(&freeTree, slot: 0)
        var mainTree = Tree(kind: .main, name: "the table of tables", record: meta.main,
                            order: Order(flags: meta.main.flags, reverse: Self.reverseKey, integer: Self.integerKey))
        walkTree(&mainTree, slot: 0)
        guard problemCount == 0 else { return }
        var accounted: UInt64 = 2
        for (usedWord, freeWord) in zip(reached, free) { accounted += UInt64((usedWord | freeWord).nonzeroBitCount) }
        if accounted != pageCount {
            problem("\(pageCount - min(accounted, pageCount)) of the file's \(pageCount) pages are in no table and not on the free list")
        }
    }

    /// The page buffer `slot`: one per level of the trees being walked, from the table of tables down.
    private func buffer(_ slot: Int) -> UnsafeMutableRawBufferPointer {
        while buffers.count <= slot {
            buffers.append(.allocate(byteCount: pageSize, alignment: 16))
        }
        return buffers[slot]
    }

    /// Claims `count` pages from `page` for `tree`: they must be in the file, not meta pages, not yet reached and
    /// not free.
    private func claim(_ page: UInt64, count: UInt64 = 1, for tree: Tree, from place: @autoclosure () -> String) -> Bool {
        guard page >= 2, page < pageCount, count <= pageCount - page else {
            problem("\(tree.name): \(place()) names page \(page)\(count > 1 ? " (and \(count - 1) after it)" : ""), outside the file's pages 2…\(pageCount - 1)")
            return false
        }
        for p in page..<page + count {
            if isSet(reached, p) {
                problem("\(tree.name): \(place()) names page \(p), which is reached from elsewhere too")
                return false
            }
            if isSet(free, p) {
                problem("\(tree.name): \(place()) names page \(p), which is on the free list")
                return false
            }
        }
        for p in page..<page + count { reached[Int(p / 64)] |= 1 << (p % 64) }
        return true
    }

    /// Walks `tree`, reading its pages into the buffers from `slot` on (those below hold the pages that lead to it).
    private func walkTree(_ tree: inout Tree, slot: Int) {
        let record = tree.record
        if record.root == Self.noPage {
            if record.depth != 0 || record.entries != 0 || record.branchPages != 0 || record.leafPages != 0 || record.overflowPages != 0 {
                problem("\(tree.name): its record says it is empty but counts \(record.entries) entries and \(record.leafPages) leaf pages at depth \(record.depth)")
            }
            return
        }
        guard record.depth >= 1, Int(record.depth) <= Self.deepest else {
            problem("\(tree.name): its record names an impossible depth \(record.depth)")
            return
        }
        let before = problemCount
        walkPage(record.root, level: 1, slot: slot, lower: nil, upper: nil, tree: &tree, from: "its record")
        guard problemCount == before else { return }
        if (tree.branchPages, tree.leafPages, tree.overflowPages, tree.entries)
            != (record.branchPages, record.leafPages, record.overflowPages, record.entries) {
            problem("""
                \(tree.name): its record counts \(record.branchPages) branch, \(record.leafPages) leaf and \(record.overflowPages) \
                overflow pages and \(record.entries) entries; its pages hold \(tree.branchPages), \(tree.leafPages), \
                \(tree.overflowPages) and \(tree.entries)
                """)
        }
    }

    /// Checks one page of `tree` at `level` (the root is level 1) whose keys must be at least `lower` and below
    /// `upper`, then what it points at.
    private func walkPage(_ page: UInt64, level: Int, slot: Int, lower: UnsafeRawBufferPointer?, upper: UnsafeRawBufferPointer?,
                          tree: inout Tree, from place: @autoclosure () -> String) {
        guard claim(page, for: tree, from: place()) else { return }
        let bytes = buffer(slot)
        guard read(page, bytes) else {
            pagesPastEnd += 1
            problem("\(tree.name): page \(page) is past the end of the file")
            return
        }
        let contents = UnsafeRawBufferPointer(bytes)
        let isLeafLevel = level == Int(tree.record.depth)
        let header = contents.loadUnaligned(fromByteOffset: 0, as: UInt64.self)
        guard header == page else {
            problem("\(tree.name): page \(page) has the header of page \(header)")
            return
        }
        let flags = contents.loadUnaligned(fromByteOffset: 10, as: UInt16.self)
        // Fixed-size values sit in leaf pages of their own layout (no nodes); the branches above them have nodes.
        let fixedSize = tree.kind == .duplicates && tree.record.flags & Self.dupFixed != 0 && isLeafLevel
        let expected = isLeafLevel ? (fixedSize ? Self.leaf | Self.leaf2 : Self.leaf) : Self.branch
        guard flags == expected else {
            problem("\(tree.name): page \(page) at level \(level) of \(tree.record.depth) has flags \(flags), not those of a \(isLeafLevel ? "leaf" : "branch") page (\(expected))")
            return
        }
        guard let count = nodeCount(contents, page: page, tree: tree, fixedKeySize: fixedSize ? Int(tree.record.fixedKeySize) : nil) else { return }
        if isLeafLevel { tree.leafPages += 1 } else { tree.branchPages += 1 }

        if fixedSize {
            let size = Int(tree.record.fixedKeySize)
            let pad = Int(contents.loadUnaligned(fromByteOffset: 8, as: UInt16.self))
            guard pad == size else {
                problem("\(tree.name): page \(page) holds \(pad)-byte values; its record says \(size)")
                return
            }
            var previous: UnsafeRawBufferPointer? = nil
            for index in 0..<count {
                let key = UnsafeRawBufferPointer(rebasing: contents[Self.headerSize + index * size..<Self.headerSize + (index + 1) * size])
                guard inOrder(key, after: previous ?? lower, strictly: previous != nil, below: upper, tree: tree, page: page) else { return }
                previous = key
            }
            tree.entries += UInt64(count)
            return
        }

        var previous: UnsafeRawBufferPointer? = nil
        for index in 0..<count {
            guard let node = self.node(contents, index, page: page, tree: tree, isBranch: !isLeafLevel) else { return }
            if isLeafLevel {
                guard inOrder(node.key, after: previous ?? lower, strictly: previous != nil, below: upper, tree: tree, page: page) else { return }
                previous = node.key
                guard leafData(node, in: contents, page: page, slot: slot, tree: &tree) else { return }
            } else {
                // A branch's first key is not used: its child's keys are bounded by the separators around it.
                let low = index == 0 ? lower : node.key
                if index > 0 {
                    guard inOrder(node.key, after: previous ?? lower, strictly: previous != nil, below: upper, tree: tree, page: page) else { return }
                    previous = node.key
                }
                var high = upper
                if index + 1 < count {
                    guard let next = self.node(contents, index + 1, page: page, tree: tree, isBranch: true) else { return }
                    high = next.key
                }
                let before = problemCount
                walkPage(node.child, level: level + 1, slot: slot + 1, lower: low, upper: high, tree: &tree, from: "branch page \(page)")
                if problemCount != before { return }
            }
        }
    }

    /// The number of nodes of a page whose free-space bounds are sound, or `nil` after naming the problem.
    private func nodeCount(_ contents: UnsafeRawBufferPointer, page: UInt64, tree: Tree, fixedKeySize: Int?) -> Int? {
        let lowerBound = Int(contents.loadUnaligned(fromByteOffset: 12, as: UInt16.self))
        let upperBound = Int(contents.loadUnaligned(fromByteOffset: 14, as: UInt16.self))
        guard lowerBound >= Self.headerSize, lowerBound <= upperBound, upperBound <= contents.count, lowerBound % 2 == 0 else {
            problem("\(tree.name): page \(page)'s free space runs from \(lowerBound) to \(upperBound), not inside its \(contents.count) bytes")
            return nil
        }
        let count = (lowerBound - Self.headerSize) / 2
        guard count > 0 else {
            problem("\(tree.name): page \(page) holds no entries")
            return nil
        }
        if let fixedKeySize, fixedKeySize == 0 || Self.headerSize + count * fixedKeySize > contents.count {
            problem("\(tree.name): page \(page) holds \(count) values of \(fixedKeySize) bytes, more than fit in it")
            return nil
        }
        return count
    }

    /// One node of a page.
    private struct Node {
        var flags: UInt16
        var key: UnsafeRawBufferPointer
        /// A leaf's data size, or a branch's child page.
        var size: Int
        var child: UInt64
        /// Where the node's data starts in the page.
        var dataOffset: Int
    }

    /// Node `index` of a page, checked to lie inside it, or `nil` after naming the problem.
    private func node(_ contents: UnsafeRawBufferPointer, _ index: Int, page: UInt64, tree: Tree, isBranch: Bool) -> Node? {
        let upperBound = Int(contents.loadUnaligned(fromByteOffset: 14, as: UInt16.self))
        let offset = Int(contents.loadUnaligned(fromByteOffset: Self.headerSize + 2 * index, as: UInt16.self))
        guard offset >= upperBound, offset <= contents.count - Self.nodeHeaderSize else {
            problem("\(tree.name): page \(page) places entry \(index) at \(offset), outside its \(upperBound)…\(contents.count) nodes")
            return nil
        }
        let low = UInt64(contents.loadUnaligned(fromByteOffset: offset, as: UInt16.self))
        let high = UInt64(contents.loadUnaligned(fromByteOffset: offset + 2, as: UInt16.self))
        let flags = contents.loadUnaligned(fromByteOffset: offset + 4, as: UInt16.self)
        let keySize = Int(contents.loadUnaligned(fromByteOffset: offset + 6, as: UInt16.self))
        let keyStart = offset + Self.nodeHeaderSize
        guard keySize <= contents.count - keyStart else {
            problem("\(tree.name): page \(page) entry \(index)'s \(keySize)-byte key runs past the page")
            return nil
        }
        let key = UnsafeRawBufferPointer(rebasing: contents[keyStart..<keyStart + keySize])
        if isBranch {
            return Node(flags: 0, key: key, size: 0, child: low | high << 16 | UInt64(flags) << 32, dataOffset: keyStart + keySize)
        }
        return Node(flags: flags, key: key, size: Int(low | high << 16), child: 0, dataOffset: keyStart + keySize)
    }

    /// Whether `key` sorts after `previous` (or at it, when not `strictly`) and before `upper`; names the problem
    /// when not.
    private func inOrder(_ key: UnsafeRawBufferPointer, after previous: UnsafeRawBufferPointer?, strictly: Bool,
                         below upper: UnsafeRawBufferPointer?, tree: Tree, page: UInt64) -> Bool {
        if tree.order == .integers, key.count != 4, key.count != 8 {
            problem("\(tree.name): page \(page) holds a \(key.count)-byte key in a table of integer keys")
            return false
        }
        if let previous {
            let order = tree.order.compare(previous, key)
            if order > 0 || (strictly && order == 0) {
                problem("\(tree.name): page \(page)'s keys are out of order")
                return false
            }
        }
        if let upper, tree.order.compare(key, upper) >= 0 {
            problem("\(tree.name): page \(page) holds a key at or past its branch's next separator")
            return false
        }
        return true
    }

    /// Checks a leaf node's data: inline, on overflow pages, a table's record, or a key's duplicate values.
    private func leafData(_ node: Node, in contents: UnsafeRawBufferPointer, page: UInt64, slot: Int, tree: inout Tree) -> Bool {
        let isDuplicates = tree.record.flags & Self.dupSort != 0
        let allowed: [UInt16] = switch tree.kind {
        case .free: [0, Self.bigData]
        case .main: [0, Self.bigData, Self.subData]
        case .table: isDuplicates ? [0, Self.dupData, Self.dupData | Self.subData] : [0, Self.bigData]
        case .duplicates: [0]
        }
        guard allowed.contains(node.flags) else {
            problem("\(tree.name): page \(page) holds an entry with node flags \(node.flags), impossible in this table")
            return false
        }
        if tree.kind == .duplicates {
            guard node.size == 0 else {
                problem("\(tree.name): page \(page) holds a duplicate value with \(node.size) bytes of data")
                return false
            }
            tree.entries += 1
            return true
        }
        let inlineSize = node.flags & Self.bigData != 0 ? 8 : node.size
        guard inlineSize <= contents.count - node.dataOffset else {
            problem("\(tree.name): page \(page) holds \(inlineSize) bytes of an entry's data past the page's end")
            return false
        }
        let data = UnsafeRawBufferPointer(rebasing: contents[node.dataOffset..<node.dataOffset + inlineSize])
        if node.flags & Self.bigData != 0 {
            return overflowRun(at: data.loadUnaligned(as: UInt64.self), size: node.size, page: page, tree: &tree)
        }
        if tree.kind == .free {
            tree.entries += 1
            return freePages(data, page: page, tree: tree)
        }
        if node.flags & Self.subData != 0 || node.flags & Self.dupData != 0 {
            return nested(node, data: data, page: page, slot: slot, tree: &tree)
        }
        tree.entries += 1
        return true
    }

    /// The overflow pages of a big value of `size` bytes, starting at `first`.
    private func overflowRun(at first: UInt64, size: Int, page: UInt64, tree: inout Tree) -> Bool {
        let pages = UInt64((Self.headerSize - 1 + size) / pageSize + 1)
        guard claim(first, count: pages, for: tree, from: "a big value of page \(page)") else { return false }
        let header = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.headerSize, alignment: 8)
        defer { header.deallocate() }
        guard read(first, header) else {
            pagesPastEnd += 1
            problem("\(tree.name): overflow page \(first) is past the end of the file")
            return false
        }
        let named = header.loadUnaligned(fromByteOffset: 0, as: UInt64.self)
        let flags = header.loadUnaligned(fromByteOffset: 10, as: UInt16.self)
        let count = header.loadUnaligned(fromByteOffset: 12, as: UInt32.self)
        guard named == first, flags == Self.overflow, UInt64(count) == pages else {
            problem("\(tree.name): overflow page \(first) has the header of page \(named) with flags \(flags) and \(count) pages, not an overflow run of \(pages) pages")
            return false
        }
        tree.overflowPages += pages
        tree.entries += 1
        if tree.kind == .free {
            // A free-list entry this big is read whole: its pages are marked free. (A 256 MiB entry lists 32 million
            // pages; a damaged size must not make the walk allocate gigabytes.)
            guard Int(pages) <= (1 << 28) / pageSize else {
                problem("\(tree.name): overflow page \(first) starts a \(pages)-page list of free pages, more than a free list holds")
                return false
            }
            let bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(pages) * pageSize, alignment: 16)
            defer { bytes.deallocate() }
            guard read(first, bytes) else {
                pagesPastEnd += 1
                problem("\(tree.name): overflow pages \(first)… are past the end of the file")
                return false
            }
            return freePages(UnsafeRawBufferPointer(rebasing: bytes[Self.headerSize..<Self.headerSize + size]), page: first, tree: tree)
        }
        return true
    }

    /// Marks the pages a free-list entry names (a u64 count, then that many page numbers) as free.
    private func freePages(_ data: UnsafeRawBufferPointer, page: UInt64, tree: Tree) -> Bool {
        guard data.count >= 8, data.count % 8 == 0 else {
            problem("\(tree.name): page \(page) holds a \(data.count)-byte list of free pages")
            return false
        }
        let count = data.loadUnaligned(as: UInt64.self)
        guard count == UInt64(data.count / 8 - 1) else {
            problem("\(tree.name): page \(page) holds a list of \(data.count / 8 - 1) free pages that says it has \(count)")
            return false
        }
        for index in 0..<Int(count) {
            let free = data.loadUnaligned(fromByteOffset: 8 * (index + 1), as: UInt64.self)
            guard free >= 2, free < pageCount else {
                problem("\(tree.name): page \(page) lists page \(free) as free, outside the file's pages 2…\(pageCount - 1)")
                return false
            }
            guard !isSet(reached, free), !isSet(self.free, free) else {
                problem("\(tree.name): page \(page) lists page \(free) as free, but it is \(isSet(reached, free) ? "in use" : "listed twice")")
                return false
            }
            self.free[Int(free / 64)] |= 1 << (free % 64)
        }
        return true
    }

    /// A table named in the table of tables, or a key's duplicate values: in a sub-page or a sub-tree of its own.
    private func nested(_ node: Node, data: UnsafeRawBufferPointer, page: UInt64, slot: Int, tree: inout Tree) -> Bool {
        if node.flags & Self.subData != 0 {
            guard data.count == Record.size else {
                problem("\(tree.name): page \(page) holds a \(data.count)-byte table record, not \(Record.size) bytes")
                return false
            }
            let record = Record(data, at: 0)
            let before = problemCount
            if tree.kind == .main {
                tree.entries += 1
                guard record.flags & ~Self.knownDatabaseFlags == 0 else {
                    problem("\(tree.name): the record of table \(name(node.key)) names unknown flags \(record.flags)")
                    return false
                }
                var table = Tree(kind: .table, name: "table \(name(node.key))", record: record,
                                 order: Order(flags: record.flags, reverse: Self.reverseKey, integer: Self.integerKey))
                walkTree(&table, slot: slot + 1)
            } else {
                guard record.root != Self.noPage else {
                    problem("\(tree.name): page \(page) holds a key whose sub-tree of values is empty")
                    return false
                }
                // liblmdb reads a key's values with a cursor set up from this record, trusting its flags: a sorted-
                // duplicates flag here makes it look for a third level of cursor that does not exist (a null
                // dereference), an integer or fixed-size flag changes how every value is read. LMDB writes exactly
                // these: fixed-size values (their size in the record) as integers when the table's are; else none.
                let fixed = tree.record.flags & Self.dupFixed != 0
                let expectedFlags = fixed ? Self.dupFixed | (tree.record.flags & Self.integerDup != 0 ? Self.integerKey : 0) : 0
                guard record.flags == expectedFlags, fixed || record.fixedKeySize == 0 else {
                    problem("\(tree.name): page \(page) holds a sub-tree of values whose record has flags \(record.flags) and value size \(record.fixedKeySize), not flags \(expectedFlags)\(fixed ? "" : " and size 0")")
                    return false
                }
                var values = Tree(kind: .duplicates, name: tree.name, record: record,
                                  order: Order(flags: tree.record.flags, reverse: Self.reverseDup, integer: Self.integerDup))
                values.record.flags = tree.record.flags
                walkTree(&values, slot: slot + 1)
                tree.entries += values.entries
            }
            return problemCount == before
        }
        // A sub-page: a leaf page image inside the node, holding the key's values as keys without data.
        let fixed = tree.record.flags & Self.dupFixed != 0
        guard data.count >= Self.headerSize else {
            problem("\(tree.name): page \(page) holds a \(data.count)-byte set of values, smaller than a page header")
            return false
        }
        // LMDB marks sub-pages dirty too.
        let flags = data.loadUnaligned(fromByteOffset: 10, as: UInt16.self) & ~Self.dirty
        let expected = Self.leaf | Self.subPage | (fixed ? Self.leaf2 : 0)
        guard flags == expected else {
            problem("\(tree.name): page \(page) holds a set of values with page flags \(flags), not \(expected)")
            return false
        }
        let fixedKeySize = fixed ? Int(data.loadUnaligned(fromByteOffset: 8, as: UInt16.self)) : nil
        guard let count = nodeCount(data, page: page, tree: tree, fixedKeySize: fixedKeySize) else { return false }
        let order = Order(flags: tree.record.flags, reverse: Self.reverseDup, integer: Self.integerDup)
        let values = Tree(kind: .duplicates, name: tree.name, record: tree.record, order: order)
        var previous: UnsafeRawBufferPointer? = nil
        for index in 0..<count {
            let value: UnsafeRawBufferPointer
            if let fixedKeySize {
                value = UnsafeRawBufferPointer(rebasing: data[Self.headerSize + index * fixedKeySize..<Self.headerSize + (index + 1) * fixedKeySize])
            } else {
                guard let valueNode = self.node(data, index, page: page, tree: tree, isBranch: false) else { return false }
                guard valueNode.flags == 0, valueNode.size == 0 else {
                    problem("\(tree.name): page \(page) holds a duplicate value with flags \(valueNode.flags) and \(valueNode.size) bytes of data")
                    return false
                }
                value = valueNode.key
            }
            guard inOrder(value, after: previous, strictly: true, below: nil, tree: values, page: page) else { return false }
            previous = value
        }
        tree.entries += UInt64(count)
        return true
    }

    private func name(_ key: UnsafeRawBufferPointer) -> String {
        "'" + String(decoding: key, as: UTF8.self) + "'"
    }
}

