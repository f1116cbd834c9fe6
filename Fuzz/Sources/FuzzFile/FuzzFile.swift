import Foundation
import FuzzSupport
@testable import LMDB

// Damaged store files at the level of LMDB's pages: the input is a list of byte edits — each a page the file's
// tables reach, an offset in it and a byte to put there — applied to a copy of a small LMDB file with every kind of
// page (branch and leaf pages of a three-level table, sorted duplicates in sub-pages and sub-trees, fixed-size
// duplicates, big values on overflow pages, a free list).
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

private let template = makeTemplate()

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
    var image = template.image
    var edits = 0
    while !input.isAtEnd, edits < 16 {
        let page = Int(template.pagesInUse[input.number(below: template.pagesInUse.count)])
        let offset = input.number(below: template.pageSize)
        let at = page * template.pageSize + offset
        guard at < image.count else { continue }
        let value = input.byte()
        // Mostly single-bit flips (what media damage looks like), sometimes a whole byte.
        image[at] = value & 0x80 != 0 ? value : image[at] ^ (1 << (value & 7))
        edits += 1
    }
    let problems = image.withUnsafeBytes { PageWalk.check(image: $0) }
    guard problems.isEmpty else { return 0 }
    readWhole(image)
    return 0
}

/// Opens the image as a file and reads all of it through liblmdb; only errors may come back.
private func readWhole(_ image: [UInt8]) {
    let path = template.folder + "/damaged.lmdb"
    unlink(path)
    unlink(path + "-lock")
    guard FileManager.default.createFile(atPath: path, contents: Data(image)) else { finding("cannot write \(path)") }
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
                var keys: [[UInt8]] = []
                try table.withCursor(in: txn) { cursor in
                    try cursor.forEach { entry in
                        keys.append(Array(entry.key))
                        _ = entry.value.reduce(0, &+)
                        return true
                    }
                }
                for key in keys { _ = try table.value(forKey: key, in: txn) }
                _ = try table.statistics(in: txn)
            }
        }
    } catch {
        // A typed error is an answer.
    }
}
