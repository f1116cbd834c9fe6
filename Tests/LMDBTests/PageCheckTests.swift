import Foundation
@testable import LMDB
import Testing

/// `Environment.checkPages()`: LMDB's B-tree pages read without liblmdb, so that damage liblmdb would trap on or
/// silently follow is named first.
@Suite struct PageCheckTests {
    let directory = TemporaryDirectory()

    /// A file with every kind of page LMDB writes: a three-level table, a table of sorted duplicates (values in
    /// sub-pages and in sub-trees), a table of fixed-size duplicates, big values on overflow pages, and a free list
    /// left by deletes.
    func makeFile(_ name: String = "store.lmdb") throws -> String {
        let path = directory.file(name)
        let environment = try Environment.open(at: path)
        let plain = try environment.openDatabase(named: "plain")
        let sorted = try environment.openDatabase(named: "sorted", options: .dupSort)
        let fixed = try environment.openDatabase(named: "fixed", options: [.dupSort, .dupFixed])
        try environment.write { txn throws in
            for n in 0..<6_000 {
                try plain.put(Array(repeating: UInt8(n % 251), count: 40), forKey: Array("key-\(String(n + 100_000))".utf8), in: txn)
            }
            for n in 0..<3_000 {
                // A few keys with many values (each a sub-tree of its own), many with a few (sub-pages).
                let key = n < 2_000 ? Array("many-\(n % 3)".utf8) : Array("few-\(n % 500)".utf8)
                try sorted.put(Array("value-\(String(n + 100_000))".utf8), forKey: key, in: txn)
                try fixed.put(withUnsafeBytes(of: UInt64(n).bigEndian, Array.init), forKey: Array("set-\(n % 7)".utf8), in: txn)
            }
            for n in 0..<20 {
                try plain.put(Array(repeating: UInt8(n), count: 9_000 + n), forKey: Array("big-\(n)".utf8), in: txn)
            }
        }
        try environment.write { txn throws in
            for n in stride(from: 0, to: 6_000, by: 3) { _ = try plain.delete(key: Array("key-\(String(n + 100_000))".utf8), in: txn) }
            for n in 0..<5 { _ = try plain.delete(key: Array("big-\(n)".utf8), in: txn) }
        }
        return path
    }

    /// The pages of a file, for finding one to damage: number, flags and node count.
    struct Page {
        var number: Int
        var flags: UInt16
        var nodes: Int
    }

    /// The pages of the file in `image` that its tables reach (free pages keep old copies of pages).
    func pages(_ image: [UInt8], pageSize: Int = 4096) -> [Page] {
        image.withUnsafeBytes { PageWalk.pagesInUse(image: $0) }.compactMap { page in
            let start = Int(page) * pageSize
            let number = Int(load(image, start, UInt64.self))
            guard number == page else { return nil }
            let flags = load(image, start + 10, UInt16.self)
            return Page(number: number, flags: flags, nodes: (Int(load(image, start + 12, UInt16.self)) - 16) / 2)
        }
    }

    func load<T: FixedWidthInteger>(_ image: [UInt8], _ at: Int, _: T.Type) -> T {
        image.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: at, as: T.self) }
    }

    func store<T: FixedWidthInteger>(_ value: T, _ image: inout [UInt8], _ at: Int) {
        image.withUnsafeMutableBytes { $0.storeBytes(of: value, toByteOffset: at, as: T.self) }
    }

    /// The problems `checkPages()` names in a copy of the file at `path` changed by `damage`.
    func problems(afterDamaging path: String, _ damage: (inout [UInt8]) -> Void) throws -> [String] {
        var image = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        damage(&image)
        let copy = directory.file("damaged-\(UUID().uuidString).lmdb")
        try Data(image).write(to: URL(fileURLWithPath: copy))
        return try Environment.open(at: copy, options: .init { $0.isReadOnly = true }).checkPages()
    }

    @Test func everyKindOfPageOfASoundFileChecksClean() throws {
        let path = try makeFile()
        let environment = try Environment.open(at: path)
        #expect(try environment.checkPages() == [])
        let image = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        let kinds = Set(pages(image).map(\.flags))
        // Branch, leaf, overflow and fixed-size duplicate leaf pages are all there to be checked.
        #expect(kinds.isSuperset(of: [0x01, 0x02, 0x04, 0x22]), "\(kinds)")
        #expect(try environment.freePageCount() > 0, "the deletes left free pages")
    }

    @Test func aChildPageNumberOutsideTheFileIsNamed() throws {
        let path = try makeFile()
        let found = try problems(afterDamaging: path) { image in
            let branch = pages(image).first { $0.flags == 0x01 }!
            let start = branch.number * 4096
            let node = start + Int(load(image, start + 16 + 2, UInt16.self))
            store(UInt16(0xFFFF), &image, node + 2)
        }
        #expect(found.contains { $0.contains("outside the file's pages") }, "\(found)")
    }

    @Test func aChildPageReachedTwiceIsNamed() throws {
        let path = try makeFile()
        let found = try problems(afterDamaging: path) { image in
            let branch = pages(image).first { $0.flags == 0x01 && $0.nodes >= 3 }!
            let start = branch.number * 4096
            let first = start + Int(load(image, start + 16, UInt16.self)), second = start + Int(load(image, start + 18, UInt16.self))
            store(load(image, first, UInt16.self), &image, second)
            store(load(image, first + 2, UInt16.self), &image, second + 2)
        }
        #expect(found.contains { $0.contains("reached from elsewhere too") }, "\(found)")
    }

    @Test func aNodeOffsetOutsideItsPageIsNamed() throws {
        let path = try makeFile()
        let found = try problems(afterDamaging: path) { image in
            let leaf = pages(image).first { $0.flags == 0x02 }!
            store(UInt16(4094), &image, leaf.number * 4096 + 16)
        }
        #expect(found.contains { $0.contains("places entry 0 at 4094") }, "\(found)")
    }

    @Test func keysOutOfOrderAreNamed() throws {
        let path = try makeFile()
        let found = try problems(afterDamaging: path) { image in
            // A leaf of "plain": its first key made to sort after the second.
            let leaf = pages(image).first { page in
                guard page.flags == 0x02, page.nodes >= 2 else { return false }
                let node = page.number * 4096 + Int(load(image, page.number * 4096 + 16, UInt16.self))
                return image[node + 8..<node + 12].elementsEqual("key-".utf8)
            }!
            let node = leaf.number * 4096 + Int(load(image, leaf.number * 4096 + 16, UInt16.self))
            image[node + 8] = 0xFF
        }
        #expect(found.contains { $0.contains("keys are out of order") || $0.contains("next separator") }, "\(found)")
    }

    /// Found by FuzzFile: one bit flipped in the record of a key's sub-tree of values gave it the sorted-duplicates
    /// flag, which liblmdb trusts and dereferences a null sub-cursor for (a segmentation fault on reading the table).
    @Test(arguments: [UInt16(0x04), 0x08, 0x40])
    func aSubTreeRecordWithFlagsLMDBNeverWritesIsNamed(_ flag: UInt16) throws {
        let path = try makeFile()
        let found = try problems(afterDamaging: path) { image in
            // A node of "fixed" whose values are in a sub-tree (node flags: sub-data and duplicates): its record's
            // flags (at 4 in the record after the key) get one more.
            var subTree: Int?
            for page in pages(image) where page.flags == 0x02 && subTree == nil {
                for index in 0..<page.nodes {
                    let node: Int = page.number * 4096 + Int(load(image, page.number * 4096 + 16 + 2 * index, UInt16.self))
                    if load(image, node + 4, UInt16.self) == 0x06 && image[node + 8..<node + 12].elementsEqual("set-".utf8) {
                        subTree = node
                        break
                    }
                }
            }
            let node = subTree!
            let flags = node + 8 + Int(load(image, node + 6, UInt16.self)) + 4
            #expect(load(image, flags, UInt16.self) == 0x10, "LMDB gives a sub-tree of fixed-size values the fixed-size flag alone")
            store(load(image, flags, UInt16.self) | flag, &image, flags)
        }
        #expect(found.contains { $0.contains("sub-tree of values whose record has flags") }, "\(found)")
    }

    @Test func aPageOfTheWrongKindIsNamed() throws {
        let path = try makeFile()
        let found = try problems(afterDamaging: path) { image in
            let leaf = pages(image).first { $0.flags == 0x02 }!
            store(UInt16(0x01), &image, leaf.number * 4096 + 10)
        }
        #expect(found.contains { $0.contains("not those of a leaf page") }, "\(found)")
    }

    @Test func aTableRecordWhoseCountsDisagreeWithItsPagesIsNamed() throws {
        let path = try makeFile()
        let found = try problems(afterDamaging: path) { image in
            // The record of "sorted" in the table of tables: its entry count (at 32 in the 48-byte record) raised.
            let name = Array("sorted".utf8)
            let at = image.indices.first { image[$0..<min($0 + name.count, image.count)].elementsEqual(name) && load(image, $0 - 4, UInt16.self) == 0x02 }!
            let entries = at + name.count + 32
            store(load(image, entries, UInt64.self) + 1, &image, entries)
        }
        #expect(found.contains { $0.contains("table 'sorted': its record counts") }, "\(found)")
    }

    @Test func aFreeListNamingAPageInUseIsNamed() throws {
        let path = try makeFile()
        let found = try problems(afterDamaging: path) { image in
            // The newest meta page's free-list root, then the first page number of its first entry's list.
            let newest = load(image, 144, UInt64.self) > load(image, 4096 + 144, UInt64.self) ? 0 : 4096
            let root = Int(load(image, newest + 40 + 40, UInt64.self))
            let mainRoot = load(image, newest + 88 + 40, UInt64.self)
            let node = root * 4096 + Int(load(image, root * 4096 + 16, UInt16.self))
            let keySize = Int(load(image, node + 6, UInt16.self))
            store(mainRoot, &image, node + 8 + keySize + 8)
        }
        #expect(found.contains { $0.contains("as free, but it is in use") || $0.contains("which is on the free list") }, "\(found)")
    }

    @Test func aPageThatIsInNoTableAndNotFreeIsNamed() throws {
        let path = try makeFile()
        let found = try problems(afterDamaging: path) { image in
            // The newest meta page claims one more page than the file uses; the file gets that page, empty.
            let newest = load(image, 144, UInt64.self) > load(image, 4096 + 144, UInt64.self) ? 0 : 4096
            let last = load(image, newest + 136, UInt64.self)
            store(last + 1, &image, newest + 136)
            if image.count < Int(last + 2) * 4096 { image += [UInt8](repeating: 0, count: Int(last + 2) * 4096 - image.count) }
        }
        #expect(found.count == 1 && found[0].hasPrefix("1 of the file's") && found[0].hasSuffix("pages are in no table and not on the free list"), "\(found)")
    }

    @Test func checkingBesideAWriterSeesOneSnapshotAndNoDamage() async throws {
        let path = try makeFile()
        let environment = try Environment.open(at: path)
        let plain = try environment.openDatabase(named: "plain")
        let done = DoneFlag()
        let writer = Task.detached {
            defer { done.set() }
            for round in 0..<200 {
                try environment.write { txn throws in
                    for n in 0..<50 { try plain.put(Array(repeating: UInt8(round % 256), count: 300), forKey: Array("w-\(round)-\(n)".utf8), in: txn) }
                    if round > 0 { for n in 0..<50 { _ = try plain.delete(key: Array("w-\(round - 1)-\(n)".utf8), in: txn) } }
                }
            }
        }
        var checks = 0
        repeat {
            let problems = try environment.checkPages()
            #expect(problems == [])
            checks += 1
        } while !done.isSet
        try await writer.value
        #expect(try environment.checkPages() == [])
        #expect(checks > 1, "the checks overlapped the writes")
    }
}

/// A flag one task sets and another polls.
private final class DoneFlag: @unchecked Sendable {
    private let lock = NSLock()
    private var value = false
    var isSet: Bool { lock.withLock { value } }
    func set() { lock.withLock { value = true } }
}
