import Foundation
import LMDB
import ObjectGraph

extension LMDBIncrementalStore {
    /// Rewrites the store file at `url` in place without its free pages, as SQLite's `VACUUM` does, and returns its
    /// size before and after.
    ///
    /// LMDB never writes a page in place: each save copies the pages it changes and frees the old ones for later
    /// saves, so a large import, update or delete leaves the file at its high-water mark, and random-keyed indexes
    /// filled by many saves keep half-full pages. The compacted file holds each table's pages full and in key order.
    /// The copy is written beside the file and renamed over it, so a crash leaves one whole file or the other.
    /// The ``Options/compactsOnOpen`` option does this as a store opens.
    ///
    /// ```swift
    /// let compaction = try LMDBIncrementalStore.compactStore(at: storeURL)
    /// print("\(compaction.bytesBefore) → \(compaction.bytesAfter) bytes")
    /// ```
    ///
    /// The store must be open nowhere: a process that opens it meanwhile waits and then opens the compacted file.
    ///
    /// - Throws: ``ManagedObjectContextError`` with ``ManagedObjectContextError/Code/storeUnusable`` naming the file,
    ///   its ``ManagedObjectContextError/cause`` the `LMDBError` (e.g. `LMDBError.busy` when the store is open in
    ///   this process or another, `LMDBError.noSpace` when the copy does not fit beside it); the file is then left
    ///   as it was.
    @discardableResult
    public static func compactStore(at url: URL) throws -> Environment.Compaction {
        let compaction: Environment.Compaction?
        do {
            compaction = try KeyValueEngines.compact(at: url.path, options: Environment.Options())
        } catch {
            throw ManagedObjectContextError(.storeUnusable, message: "cannot compact \(url.path): \(error)", underlying: error)
        }
        guard let compaction else {
            throw ManagedObjectContextError(.storeUnusable, message: "cannot compact \(url.path): its engine is not LMDB and keeps no file")
        }
        return compaction
    }
}
