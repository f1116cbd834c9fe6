import Foundation
import LMDB
@testable import LMDBStore
import ObjectGraph
import Testing

/// A store file rewritten without its free pages: `LMDBIncrementalStore.compactStore(at:)` and the `compactOnOpen`
/// option (LMDB only: the in-memory engine keeps no file).
@Suite struct CompactionStoreTests {
    let model = try! ManagedObjectModel {
        EntityDescription("Note") {
            AttributeDescription("title", .string)
            AttributeDescription("rank", .integer64)
            FetchIndexDescription("byRank", elements: [.init("rank")])
        }
    }

    /// Saves 3 000 notes in three saves, then deletes all but every tenth in two more: a file with many free pages.
    /// Returns the titles left by rank.
    private func fill(_ folder: StoreFolder, options: LMDBIncrementalStore.Options = LMDBIncrementalStore.Options()) throws -> [Int64: String] {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file(), options: options.dictionary)
        let context = ManagedObjectContext(coordinator: coordinator)
        var notes: [ManagedObject] = []
        for save in 0..<3 {
            for n in 0..<1_000 {
                let note = try context.insertNewObject(forEntityName: "Note")
                let rank = Int64(save * 1_000 + n)
                try note.setValue("note \(rank) " + String(repeating: "·", count: 200), forKey: "title")
                try note.setValue((rank * 7_919) % 3_000, forKey: "rank")
                notes.append(note)
            }
            try context.save()
        }
        var kept: [Int64: String] = [:]
        for (n, note) in notes.enumerated() {
            if n % 10 == 0 {
                kept[note.value(forKey: "rank") as! Int64] = note.value(forKey: "title") as? String
            } else {
                context.delete(note)
            }
            if n == 1_500 { try context.save() }
        }
        try context.save()
        return kept
    }

    private func contents(_ folder: StoreFolder, options: LMDBIncrementalStore.Options = LMDBIncrementalStore.Options()) throws -> [Int64: String] {
        let coordinator = PersistentStoreCoordinator(managedObjectModel: model)
        try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: folder.file(), options: options.dictionary)
        let context = ManagedObjectContext(coordinator: coordinator)
        let request = FetchRequest(entityName: "Note", predicate: try FetchPredicate(format: "rank >= 0"))
        var found: [Int64: String] = [:]
        for note in try context.fetch(request) {
            found[note.value(forKey: "rank") as! Int64] = note.value(forKey: "title") as? String
        }
        return found
    }

    private func size(_ folder: StoreFolder) -> Int {
        (try? FileManager.default.attributesOfItem(atPath: folder.file().path)[.size] as? Int) ?? 0
    }

    @Test func compactingAClosedStoreShrinksItAndKeepsEveryObject() throws {
        let folder = StoreFolder()
        let kept = try fill(folder)
        let before = size(folder)
        let compaction = try LMDBIncrementalStore.compactStore(at: folder.file())
        #expect(compaction.bytesBefore == before)
        #expect(compaction.bytesAfter < before / 2, "\(compaction)")
        #expect(try contents(folder) == kept)
        #expect(try LMDBIncrementalStore.checkPages(at: folder.file()) == [])
    }

    @Test func aStoreOpenInThisProcessIsNotCompactedAndSaysWhy() throws {
        let folder = StoreFolder()
        _ = try fill(folder)
        let (coordinator, _) = try folder.coordinator(model)
        let before = size(folder)
        let error = #expect(throws: ManagedObjectContextError.self) { try LMDBIncrementalStore.compactStore(at: folder.file()) }
        #expect(error?.code == .storeUnusable)
        #expect((error?.cause as? LMDBError) == .busy)
        #expect(error?.message.contains(folder.file().path) == true)
        #expect(size(folder) == before)
        withExtendedLifetime(coordinator) {}
    }

    @Test func compactOnOpenCompactsAClosedStoreAndOpensOneInUseAsItIs() throws {
        let folder = StoreFolder()
        let kept = try fill(folder)
        let before = size(folder)
        let options = LMDBIncrementalStore.Options(compactsOnOpen: true)
        do {
            // Open in this process: the second open cannot compact and opens the file as it is.
            let (coordinator, _) = try folder.coordinator(model)
            #expect(try contents(folder, options: options) == kept)
            #expect(size(folder) == before)
            withExtendedLifetime(coordinator) {}
        }
        #expect(try contents(folder, options: options) == kept)
        #expect(size(folder) < before / 2)
        // A new store with the option is simply made.
        let fresh = StoreFolder()
        _ = try fill(fresh, options: options)
        // A file that is not a store is refused as without the option, and left as it was.
        let foreign = StoreFolder()
        let text = Data(repeating: 0x41, count: 9_000)
        try text.write(to: foreign.file())
        let error = #expect(throws: ManagedObjectContextError.self) {
            try PersistentStoreCoordinator(managedObjectModel: model)
                .addPersistentStore(type: LMDBIncrementalStore.storeType, at: foreign.file(), options: options.dictionary)
        }
        #expect(error?.message.contains("is not a usable LMDB store") == true, "\(String(describing: error))")
        #expect(try Data(contentsOf: foreign.file()) == text)
    }

    @Test func compactOnOpenIsAStoreOption() throws {
        #expect(try LMDBIncrementalStore.Options(["compactOnOpen": "true"]).compactsOnOpen)
        #expect(try !LMDBIncrementalStore.Options([:]).compactsOnOpen)
        #expect(LMDBIncrementalStore.Options(compactsOnOpen: true).dictionary == ["compactOnOpen": "true"])
        let error = #expect(throws: ManagedObjectContextError.self) { try LMDBIncrementalStore.Options(["compactOnOpen": "sometimes"]) }
        #expect(error?.code == .wrongValueType)
        #expect(error?.message.contains("compactOnOpen") == true)
    }
}
