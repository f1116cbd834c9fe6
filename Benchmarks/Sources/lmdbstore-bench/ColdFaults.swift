import Foundation
import GRDB
import ObjectGraph

/// Point faults on a cold cache. Before each system is opened, the kernel is asked to write back and then drop its
/// files' pages from the page cache (`fsync`, then `posix_fadvise(POSIX_FADV_DONTNEED)`, which drops the clean pages
/// no process maps — and nothing maps them, as both systems are closed at that point). Then random rows are
/// faulted, each for the first time, up to 2 000 of them within the budget: the first faults read every level of
/// the B-tree from disk, later ones mostly the leaf.
struct ColdFaults {
    let dataset: Dataset
    let lmdbURL: URL
    let grdbURL: URL
    let lmdbOptions: [String: String]
    let grdbDurability: String
    let budget: Double

    static let maximum = 2_000
    static let name = "point fault by random ID (cold)"

    /// The n-th key of the walk: distinct for the first `maximum` steps (2 654 435 761 is prime).
    func key(_ n: Int) -> Int { 1 + Int(UInt64(truncatingIfNeeded: (n + 7) &* 2_654_435_761) % UInt64(dataset.employees)) }

    func run() throws -> [Measurement] {
        var results: [Measurement] = []
        do {
            evict([lmdbURL])
            let lmdb = try LMDBSide(url: lmdbURL, options: lmdbOptions)
            let context = ManagedObjectContext(coordinator: lmdb.coordinator)
            results.append(measure(Self.name, "LMDBStore", objects: dataset.employees, budget: budget, maximum: Self.maximum) { n in
                _ = context.object(with: lmdb.id("Employee", key(n))).value(forKey: "name")
            })
        }
        do {
            evict([grdbURL, URL(fileURLWithPath: grdbURL.path + "-wal")])
            let grdb = try GRDBSide(url: grdbURL, durability: grdbDurability)
            results.append(try grdb.queue.read { db in
                let select = try db.cachedStatement(sql: "SELECT * FROM employee WHERE id = ?")
                return try measure(Self.name, "GRDB", objects: dataset.employees, budget: budget, maximum: Self.maximum) { n in
                    _ = try Row.fetchOne(select, arguments: [key(n)])?["name"] as String?
                }
            })
        }
        do {
            evict([lmdbURL])
            let lmdb = try LMDBSide(url: lmdbURL, options: lmdbOptions)
            let raw = RawSide(store: lmdb.store)
            results.append(try measure(Self.name, "raw LMDB", objects: dataset.employees, budget: budget, maximum: Self.maximum) { n in
                _ = try raw.pointRead(key(n))
            })
        }
        return results
    }

    /// Writes back, then drops, the files' pages from the kernel's page cache.
    private func evict(_ urls: [URL]) {
        for url in urls {
            let descriptor = open(url.path, O_RDONLY)
            guard descriptor >= 0 else { continue }
            fsync(descriptor)
            _ = posix_fadvise(descriptor, 0, 0, Int32(POSIX_FADV_DONTNEED))
            close(descriptor)
        }
    }
}
