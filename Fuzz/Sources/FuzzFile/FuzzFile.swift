import Foundation
import FuzzSupport
@testable import LMDB

// Damaged store files at the level of LMDB's pages: the input is a list of byte edits — each a page the file's
// tables reach, an offset in it and a byte to put there — applied to a small LMDB file with every kind of page
// (branch and leaf pages of a three-level table, sorted duplicates in sub-pages and sub-trees, fixed-size
// duplicates, big values on overflow pages, a free list), and undone after the input.
//
// The page walk (`Environment.checkPages()`) must name damage or pass, without a trap. Where it passes, liblmdb
// must be able to read the whole file — every table, every entry, every duplicate, every key looked up again —
// without a trap or an assertion: what the walk lets through, LMDB can follow. (A changed value or a key changed
// within its order may still pass; that is damage for the store's own checks.)

private struct Template {
    let folder: String
    let image: [UInt8]
    let pagesInUse: [UInt64]
    let pageSize = 4096
}

/// The damaged copy, kept between inputs: each input's edits are made in place and undone after it, in memory and
/// in the file liblmdb opens, so that an input costs its edits, not a copy of the whole file.
private final class Damaged: @unchecked Sendable {
    let image: UnsafeMutableRawBufferPointer
    let path: String
    let descriptor: Int32

    init(_ template: Template) {
        let image = UnsafeMutableRawBufferPointer.allocate(byteCount: template.image.count, alignment: 16)
        template.image.withUnsafeBytes { image.copyMemory(from: $0) }
        self.image = image
        path = template.folder + "/damaged.lmdb"
        descriptor = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0, pwrite(descriptor, image.baseAddress, image.count, 0) == image.count else {
            fatalError("cannot write \(path)")
        }
    }

    /// Writes the pages `pages` of the image to the file.
    func writePages(_ pages: Set<Int>, pageSize: Int) {
        for page in pages {
            let start = page * pageSize, count = min(pageSize, image.count - start)
            guard pwrite(descriptor, image.baseAddress! + start, count, off_t(start)) == count else { finding("cannot write \(path)") }
        }
    }
}

private let template = makeTemplate()
private let damaged = Damaged(template)

private func makeTemplate() -> Template {
    let folder = (FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()) + "/lmdbstore-fuzz-file-\(getpid())"
    try? FileManager.default.removeItem(atPath: folder)
    try! FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    atexit { try? FileManager.default.removeItem(atPath: (FileManager.default.fileExists(atPath: "/dev/shm") ? "/dev/shm" : NSTemporaryDirectory()) + "/lmdbstore-fuzz-file-\(getpid())") }
    let path = folder + "/template.lmdb"
    do {
        let environment = try Environment.open(at: path)
        let plain = try environment.openDatabase(named: "plain")
        let sorted = try environment.openDatabase(named: "sorted", options: .dupSort)
        let fixed = try environment.openDatabase(named: "fixed", options: [.dupSort, .dupFixed])
        try environment.write { txn throws in
            for n in 0..<1_500 {
                try plain.put(Array(repeating: UInt8(n % 251), count: 24), forKey: Array("key-\(n + 10_000)".utf8), in: txn)
            }
            for n in 0..<900 {
                let key = n < 600 ? Array("many-\(n % 2)".utf8) : Array("few-\(n % 100)".utf8)
                try sorted.put(Array("v\(n + 10_000)".utf8), forKey: key, in: txn)
                try fixed.put(withUnsafeBytes(of: UInt64(n).bigEndian, Array.init), forKey: Array("set-\(n % 3)".utf8), in: txn)
            }
            for n in 0..<4 { try plain.put(Array(repeating: UInt8(n), count: 5_000 + n), forKey: Array("big-\(n)".utf8), in: txn) }
        }
        try environment.write { txn throws in
            for n in stride(from: 0, to: 1_500, by: 4) { _ = try plain.delete(key: Array("key-\(n + 10_000)".utf8), in: txn) }
            _ = try plain.delete(key: Array("big-0".utf8), in: txn)
        }
    } catch {
        fatalError("cannot make the template file: \(error)")
    }
    let image = [UInt8](FileManager.default.contents(atPath: path)!)
    let pages = image.withUnsafeBytes { PageWalk.pagesInUse(image: $0) } + [0, 1]
    precondition(image.withUnsafeBytes { PageWalk.check(image: $0) } == [], "the template file checks clean")
    return Template(folder: folder, image: image, pagesInUse: pages)
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFile(_ start: UnsafeRawPointer, _ count: Int) -> CInt {
    var input = FuzzBytes(start, count)
    var undo: [(at: Int, byte: UInt8)] = []
    undo.reserveCapacity(16)
    while !input.isAtEnd, undo.count < 16 {
        let page = Int(template.pagesInUse[input.number(below: template.pagesInUse.count)])
        let offset = input.number(below: template.pageSize)
        let at = page * template.pageSize + offset
        guard at < damaged.image.count else { continue }
        let value = input.byte(), old = damaged.image[at]
        // Mostly single-bit flips (what media damage looks like), sometimes a whole byte.
        damaged.image[at] = value & 0x80 != 0 ? value : old ^ (1 << (value & 7))
        undo.append((at, old))
    }
    let passes = PageWalk.check(image: UnsafeRawBufferPointer(damaged.image)).isEmpty
    let pages = Set(undo.map { $0.at / template.pageSize })
    if passes {
        damaged.writePages(pages, pageSize: template.pageSize)
        readWhole(damaged.path)
    }
    for (at, byte) in undo.reversed() { damaged.image[at] = byte }
    if passes { damaged.writePages(pages, pageSize: template.pageSize) }
    return 0
}

/// Opens the file at `path` and reads all of it through liblmdb; only errors may come back.
private func readWhole(_ path: String) {
    do {
        let environment = try Environment.open(at: path, options: .init { $0.isReadOnly = true })
        var names: [String] = []
        let main = try environment.openDatabase(named: nil, create: false)
        try environment.read { txn in
            try main.withCursor(in: txn) { cursor in
                try cursor.forEach { entry in
                    names.append(String(decoding: entry.key, as: UTF8.self))
                    return true
                }
            }
        }
        for name in names {
            guard let table = try? environment.openDatabase(named: name, options: name == "plain" ? [] : name == "sorted" ? .dupSort : [.dupSort, .dupFixed], create: false) else { continue }
            try environment.read { txn in
                // Each key looked up again while the scan stands on it (the bytes are borrowed from the map, valid
                // for the transaction): no copy of the table, so that an input costs LMDB's work, not allocations.
                var sum: UInt8 = 0
                try table.withCursor(in: txn) { cursor in
                    try cursor.forEach { entry in
                        sum &+= entry.value.reduce(0, &+)
                        sum &+= try table.withValue(forKey: entry.key, in: txn) { $0.first ?? 0 } ?? 0
                        return true
                    }
                }
                blackHole(sum)
                _ = try table.statistics(in: txn)
            }
        }
    } catch {
        // A typed error is an answer.
    }
}

@inline(never)
private func blackHole(_ value: UInt8) {
    if value == 0x5A, getenv("LMDBSTORE_FUZZ_NEVER") != nil { print(value) }
}
