import Foundation
import LMDBStore
import ObjectGraph
import TestSupport
import Testing
@testable import lmdbstore_test_helper

/// The helper program the tests run as other processes.
func helperPath() -> String {
    URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()
        .appendingPathComponent("lmdbstore-test-helper").path
}

func runHelper(_ arguments: [String]) throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: helperPath())
    process.arguments = arguments
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try process.run()
    let output = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: output, as: UTF8.self))
}

/// Checks a journal store: sound invariants, and for each writer exactly the batches up to its counter, each whole.
func checkJournal(_ coordinator: PersistentStoreCoordinator, _ store: LMDBIncrementalStore, batchSize: Int) throws -> [String: Int64] {
    let problems = try store.verify()
    #expect(problems.isEmpty, "\(problems)")
    let context = ManagedObjectContext(coordinator: coordinator)
    var result: [String: Int64] = [:]
    for counter in try context.fetch(FetchRequest(entityName: "Counter")) {
        let writer = counter.value(forKey: "writer") as! String
        let last = counter.value(forKey: "batch") as! Int64
        result[writer] = last
        let entries = try context.fetch(FetchRequest(entityName: "Entry", predicate: try FetchPredicate(format: "writer == %@", writer)))
        var perBatch: [Int64: Int] = [:]
        for entry in entries { perBatch[entry.value(forKey: "batch") as! Int64, default: 0] += 1 }
        #expect(Set(perBatch.keys) == Set(last >= 0 ? Array(0...last) : []), "\(writer): batches \(perBatch.keys.sorted()) but counter \(last)")
        #expect(perBatch.values.allSatisfy { $0 == batchSize }, "\(writer): a batch is incomplete: \(perBatch)")
    }
    return result
}

@Suite(.serialized) struct ProcessTests {
    @Test func twoProcessesSavingToOneStoreLoseNothing() async throws {
        let folder = StoreFolder()
        let path = folder.file().path
        let (coordinator, store) = try folder.coordinator(journalModel())
        async let child = Task.detached { try runHelper(["journal", path, "child", "40", "5"]) }.value
        let context = ManagedObjectContext(coordinator: coordinator)
        let counter = try context.insertNewObject(forEntityName: "Counter")
        try counter.setValue("parent", forKey: "writer")
        for batch in Int64(0)..<40 {
            for _ in 0..<5 {
                let entry = try context.insertNewObject(forEntityName: "Entry")
                try entry.setValue("parent", forKey: "writer")
                try entry.setValue(batch, forKey: "batch")
                try entry.setValue("p", forKey: "payload")
            }
            try counter.setValue(batch, forKey: "batch")
            try context.save()
        }
        let (status, output) = try await child
        #expect(status == 0, "\(output)")
        let counters = try checkJournal(coordinator, store, batchSize: 5)
        #expect(counters == ["parent": 39, "child": 39])
    }

    @Test func anotherProcessesSaveIsSeenAndAConflictingSaveIsDetected() throws {
        let folder = StoreFolder()
        let path = folder.file().path
        let (coordinator, _) = try folder.coordinator(journalModel())
        let context = ManagedObjectContext(coordinator: coordinator)
        let counter = try context.insertNewObject(forEntityName: "Counter")
        try counter.setValue("shared", forKey: "writer")
        try context.save()
        let (status, output) = try runHelper(["touch", path, counter.objectID.uriRepresentation.absoluteString])
        #expect(status == 0, "\(output)")
        let fresh = ManagedObjectContext(coordinator: coordinator)
        let seen = try fresh.fetch(FetchRequest(entityName: "Counter", predicate: try FetchPredicate(format: "touches == 1")))
        #expect(seen.count == 1, "the other process's save is visible to the next fetch")
        try counter.setValue(Int64(5), forKey: "batch")
        do {
            try context.save()
            Issue.record("a save over another process's change went through")
        } catch let error as ManagedObjectContextError {
            #expect(error.code == .mergeConflict)
        }
    }

    @Test func killingAWriterAtRandomMomentsNeverLeavesAHalfSave() throws {
        let folder = StoreFolder()
        let path = folder.file().path
        var random = SplitMix64(seed: 2026)
        var completed: Int64 = -1
        let kills = 200
        for round in 0..<kills {
            let process = Process()
            process.executableURL = URL(fileURLWithPath: helperPath())
            process.arguments = ["journal", path, "crash", "1000", "20"]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            // Mostly within the writer's first saves; every 50th round late enough that even a loaded machine (a
            // slow process start) gets some saves through before the kill (not so late that the store grows large
            // and the checks after each kill slow down).
            usleep(round % 50 == 49 ? 150_000 : UInt32(2_000 + random.next() % 30_000))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            #expect(process.terminationReason == .uncaughtSignal || process.terminationStatus == 0, "round \(round)")
            do {  // after every kill
                let (coordinator, store) = try folder.coordinator(journalModel(), "store.lmdb")
                let counters = try checkJournal(coordinator, store, batchSize: 20)
                let last = counters["crash"] ?? -1
                #expect(last >= completed, "committed batches never disappear")
                completed = last
            }
        }
        #expect(completed > 0, "the writer never got a save through")
    }
}

/// The crash test with an expected state (issue 23; RocksDB's `db_crashtest` is the model): writer processes perform
/// varied operations (``CrashWorkload``) and acknowledge each once it has returned; they are killed at random
/// moments, one or two at a time, and after each kill the store must hold, through the public API, exactly the state
/// after every acknowledged operation — or after one more, whose save went through just before the kill — with both
/// sides of every relationship agreeing, `verify()` clean and index answers equal to the expected state's.
///
/// `LMDBSTORE_CRASH_KILLS` sets the number of kills (default 300; a full run is 1 000 or more).
@Suite struct CrashTests {
    @Test func killedWritersLeaveExactlyTheAcknowledgedStatePlusAtMostOneOperation() throws {
        let kills = ProcessInfo.processInfo.environment["LMDBSTORE_CRASH_KILLS"].flatMap(Int.init) ?? 300
        var rounds = CrashRounds(seed: 23)
        for round in 0..<kills {
            try rounds.runWriters(round: round)
            try rounds.check(round: round)
        }
        #expect(rounds.done["a"]! > 5 && rounds.done["b"]! > 5, "the writers got too few operations through: \(rounds.done)")
        print("crash test: \(kills) kills, operations done \(rounds.done), \(rounds.beyondAcknowledged) saved but not yet acknowledged when killed")
    }
}

/// The rounds of a crash test: writer processes (`lmdbstore-test-helper crash`, ``CrashWorkload``) started on one
/// store, killed at a random moment, and the store checked against what they acknowledged.
struct CrashRounds {
    let folder = StoreFolder()
    let writers = ["a", "b"]
    /// Each writer's operations known to be in the store.
    private(set) var done = ["a": 0, "b": 0]
    /// Rounds where a writer's operation was saved but the writer was killed before it could acknowledge it.
    private(set) var beyondAcknowledged = 0
    /// Each writer's expected state after its `done` operations, stepped forward as they grow.
    private var expected = ["a": CrashWorkload.State(), "b": CrashWorkload.State()]
    private var random: SplitMix64

    init(seed: UInt64) {
        random = SplitMix64(seed: seed)
    }

    var path: String { folder.file().path }

    /// Starts the round's writers — every third round both at once, otherwise each in turn — with
    /// `environment(writer)` added to theirs and their store opened with the store option `"durability"`, and kills
    /// them at random moments: mostly within the first saves after a process starts; every 25th round later, so
    /// that a loaded machine (a slow start) still gets operations through. Writers that `stopThemselves` (the
    /// power-loss recorder's `LMDBSTORE_POWER_LOSS_STOP`) are waited for instead, and killed only after 30 s.
    ///
    /// - Returns: the writers by process ID.
    @discardableResult
    mutating func runWriters(round: Int, durability: String = "full", stopThemselves: Bool = false,
                             environment: (String) -> [String: String] = { _ in [:] }) throws -> [Int32: String]
    {
        let running = round % 3 == 2 ? writers : [writers[round % 2]]
        let processes = try running.map { writer in
            let process = Process()
            process.executableURL = URL(fileURLWithPath: helperPath())
            process.arguments = ["crash", path, acknowledgements(writer), writer, String(done[writer]! + 1), durability]
            process.environment = ProcessInfo.processInfo.environment.merging(environment(writer)) { $1 }
            process.standardOutput = FileHandle.nullDevice
            let errors = Pipe()
            process.standardError = errors
            try process.run()
            return (process, errors)
        }
        for (process, _) in processes {
            if stopThemselves {
                let deadline = Date().addingTimeInterval(30)
                while process.isRunning && Date() < deadline { usleep(2_000) }
            } else {
                usleep(round % 25 == 24 ? 200_000 : UInt32(5_000 + random.next() % 40_000))
            }
            kill(process.processIdentifier, SIGKILL)
        }
        for (process, errors) in processes {
            process.waitUntilExit()
            let message = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            try #require(process.terminationReason == .uncaughtSignal, "round \(round): the writer stopped by itself: \(message)")
        }
        return Dictionary(uniqueKeysWithValues: zip(processes.map(\.0.processIdentifier), running))
    }

    /// Checks the store's pages, opens it and checks that it holds, for each writer, exactly the state after its acknowledged
    /// operations or after one more, with `verify()` clean, both sides of every relationship agreeing and index
    /// answers equal to the expected state's. An operation saved but not acknowledged is acknowledged here, so that
    /// the next writer goes on after it.
    ///
    /// - Throws: ``CrashCheckFailure`` naming the round and what differs; the store's error when it cannot open.
    mutating func check(round: Int) throws {
        // The pages first, without liblmdb: a store damaged by a power cut it was not promised to survive must be
        // seen as damaged, not read through. (A writer killed before it created the store leaves no file.)
        if FileManager.default.fileExists(atPath: path) {
            let pages = try LMDBIncrementalStore.checkPages(at: folder.file())
            try require(pages.isEmpty, "round \(round): the page walk found \(pages)")
        }
        let (coordinator, store) = try folder.coordinator(CrashWorkload.model, "store.lmdb")
        let problems = try store.verify()
        try require(problems.isEmpty, "round \(round): verify() found \(problems)")
        for writer in writers {
            let acknowledged = try lastAcknowledged(writer)
            try require(acknowledged >= done[writer]!, "round \(round): \(writer)'s acknowledgements went back")
            let (state, sides) = try CrashWorkload.read(writer: writer, coordinator: coordinator)
            try require(sides.isEmpty, "round \(round): \(sides)")
            let afterAcknowledged = advance(writer, to: acknowledged)
            if state == afterAcknowledged {
                expected[writer] = afterAcknowledged
                done[writer] = acknowledged
            } else {
                var afterOneMore = afterAcknowledged
                CrashWorkload.apply(CrashWorkload.operation(acknowledged + 1, writer: writer, after: afterAcknowledged), to: &afterOneMore)
                try require(state == afterOneMore,
                            "round \(round): \(writer) acknowledged \(acknowledged) operations; the store holds\n\(state)\nexpected\n\(afterAcknowledged)")
                expected[writer] = afterOneMore
                done[writer] = acknowledged + 1
                beyondAcknowledged += 1
                try appendAcknowledgement(writer, acknowledged + 1)
            }
            try checkIndexes(writer, expected[writer]!, coordinator, round)
        }
    }

    private func advance(_ writer: String, to count: Int) -> CrashWorkload.State {
        var state = expected[writer]!
        for number in stride(from: done[writer]! + 1, through: count, by: 1) {
            CrashWorkload.apply(CrashWorkload.operation(number, writer: writer, after: state), to: &state)
        }
        return state
    }

    /// The path of `writer`'s acknowledgements file.
    func acknowledgements(_ writer: String) -> String {
        folder.url.appendingPathComponent("acknowledged-\(writer)").path
    }

    private func lastAcknowledged(_ writer: String) throws -> Int {
        guard let data = FileManager.default.contents(atPath: acknowledgements(writer)) else { return 0 }
        // A line is whole once it ends in a newline; the writer may have been killed inside the write of the last.
        let lines = String(decoding: data, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).dropLast()
        return lines.last.flatMap { Int($0) } ?? 0
    }

    /// Drops `writer`'s acknowledgements after `number` (those it made after a simulated power cut).
    func keepAcknowledgements(of writer: String, through number: Int) throws {
        let path = acknowledgements(writer)
        guard let data = FileManager.default.contents(atPath: path) else { return }
        let kept = String(decoding: data, as: UTF8.self).split(separator: "\n").filter { Int($0).map { $0 <= number } ?? false }
        try Data(kept.map { "\($0)\n" }.joined().utf8).write(to: URL(fileURLWithPath: path))
    }

    private func appendAcknowledgement(_ writer: String, _ number: Int) throws {
        let path = acknowledgements(writer)
        var text = String(decoding: FileManager.default.contents(atPath: path) ?? Data(), as: UTF8.self)
        if !text.isEmpty, !text.hasSuffix("\n") { text += "\n" }
        try Data((text + "\(number)\n").utf8).write(to: URL(fileURLWithPath: path))
    }

    /// Fetches that use the store's indexes (writer and rank, title, the to-one's table, the many-to-many's tables)
    /// find exactly the objects the expected state says.
    private func checkIndexes(_ writer: String, _ state: CrashWorkload.State, _ coordinator: PersistentStoreCoordinator, _ round: Int) throws {
        let context = ManagedObjectContext(coordinator: coordinator)
        func uids(_ entity: String, _ format: String, _ arguments: [any PredicateArgument]) throws -> Set<String> {
            let found = try context.fetch(FetchRequest(entityName: entity, predicate: try FetchPredicate(format: format, argumentArray: arguments)))
            return Set(found.map { $0.value(forKey: "uid") as! String })
        }
        let rank: Int64 = 50
        try require(try uids("Note", "writer == %@ AND rank >= %@", [writer, rank]) == Set(state.notes.filter { $0.value.rank >= rank }.keys),
                    "round \(round): the index on writer and rank disagrees")
        try require(try uids("Note", "title BEGINSWITH 't1' AND writer == %@", [writer]) == Set(state.notes.filter { $0.value.title.hasPrefix("t1") }.keys),
                    "round \(round): the index on title disagrees")
        try require(try context.count(for: FetchRequest(entityName: "Note", predicate: try FetchPredicate(format: "writer == %@", writer))) == state.notes.count,
                    "round \(round): the count disagrees")
        if let folderUID = state.folders.keys.min() {
            let folder = try context.fetch(FetchRequest(entityName: "Folder", predicate: try FetchPredicate(format: "uid == %@", folderUID)))[0]
            try require(try uids("Note", "folder == %@", [folder]) == Set(state.notes.filter { $0.value.folder == folderUID }.keys),
                        "round \(round): the to-one's table disagrees")
        }
        if let tagUID = state.tags.keys.min() {
            let tag = try context.fetch(FetchRequest(entityName: "Tag", predicate: try FetchPredicate(format: "uid == %@", tagUID)))[0]
            try require(try uids("Note", "ANY tags == %@", [tag]) == Set(state.notes.filter { $0.value.tags.contains(tagUID) }.keys),
                        "round \(round): the many-to-many's tables disagree")
        }
    }

    private func require(_ condition: Bool, _ message: @autoclosure () -> String) throws {
        if !condition { throw CrashCheckFailure(description: message()) }
    }
}

/// A store that does not hold what a crash test's writers acknowledged.
struct CrashCheckFailure: Error, CustomStringConvertible {
    let description: String
}

@Suite struct RemoteChangeTests {
    @Test func anotherProcessesChangesAreMergedByID() throws {
        let folder = StoreFolder()
        let path = folder.file().path
        let (coordinator, store) = try folder.coordinator(journalModel())
        let context = ManagedObjectContext(coordinator: coordinator)
        let counters = try ["a", "b"].map { name -> ManagedObject in
            let counter = try context.insertNewObject(forEntityName: "Counter")
            try counter.setValue(name, forKey: "writer")
            return counter
        }
        try context.save()
        var token = try store.currentChangeToken()
        #expect(counters[0].value(forKey: "touches") as? Int64 == 0)
        let (status, output) = try runHelper(["touch", path, counters[0].objectID.uriRepresentation.absoluteString])
        #expect(status == 0, "\(output)")
        #expect(try store.currentChangeToken() > token, "a cheap check sees that something changed")
        let merged = try context.mergeRemoteChanges(from: store, since: &token)
        #expect(merged == ContextChanges(updated: [counters[0].objectID]))
        #expect(counters[0].value(forKey: "touches") as? Int64 == 1)
        #expect(token == (try store.currentChangeToken()))
        #expect(try context.mergeRemoteChanges(from: store, since: &token).isEmpty)
    }

    @Test func anotherProcessesBatchRequestsAreMergedByID() throws {
        let folder = StoreFolder()
        let (coordinator, store) = try folder.coordinator(journalModel())
        let live = ManagedObjectContext(coordinator: coordinator)
        let rows: [[String: BatchValue]] = (0..<30).map { ["writer": "batch", "batch": .attribute(.integer(Int64($0))), "payload": "p"] }
        _ = try live.execute(BatchInsertRequest(entityName: "Entry", objects: rows))
        let entries = try live.fetch(FetchRequest(entityName: "Entry"))
        let byBatch = Dictionary(uniqueKeysWithValues: entries.map { ($0.value(forKey: "batch") as! Int64, $0) })
        #expect(byBatch[3]?.value(forKey: "payload") as? String == "p")
        var token = try store.currentChangeToken()
        let (status, output) = try runHelper(["batch", folder.file().path])
        #expect(status == 0, "\(output)")
        // The other process's batches are in the change log: what they inserted, updated and deleted, by ID.
        let merged = try live.mergeRemoteChanges(from: store, since: &token)
        #expect(merged.inserted.count == 5 && merged.inserted.allSatisfy { $0.entityName == "Entry" })
        #expect(merged.updated == Set((0..<10).map { byBatch[Int64($0)]!.objectID }))
        #expect(merged.deleted == Set((20..<30).map { byBatch[Int64($0)]!.objectID }))
        #expect(byBatch[3]?.value(forKey: "payload") as? String == "updated")
        #expect(byBatch[25]?.isDeleted == true && byBatch[15]?.value(forKey: "payload") as? String == "p")
        #expect(try live.count(for: FetchRequest(entityName: "Entry", predicate: try FetchPredicate(format: "writer == 'child'"))) == 5)
        #expect(try store.verify() == [])
    }

    /// A store with one counter (`writer` "shared", `touches` 0), and a context that has loaded it.
    private func storeWithLoadedCounter(_ folder: StoreFolder) throws -> (PersistentStoreCoordinator, ManagedObjectContext, ManagedObject) {
        let (coordinator, _) = try folder.coordinator(journalModel())
        let context = ManagedObjectContext(coordinator: coordinator)
        let counter = try context.insertNewObject(forEntityName: "Counter")
        try counter.setValue("shared", forKey: "writer")
        try context.save()
        let reader = ManagedObjectContext(coordinator: coordinator)
        let loaded = try #require(try reader.fetch(FetchRequest(entityName: "Counter")).first)
        #expect(loaded.value(forKey: "touches") as? Int64 == 0)
        return (coordinator, reader, loaded)
    }

    private func touchInAnotherProcess(_ folder: StoreFolder, _ object: ManagedObject) throws {
        let (status, output) = try runHelper(["touch", folder.file().path, object.objectID.uriRepresentation.absoluteString])
        #expect(status == 0, "\(output)")
    }

    @Test func aNewContextsFetchShowsWhatAnotherProcessSaved() throws {
        let folder = StoreFolder()
        let (coordinator, reader, loaded) = try storeWithLoadedCounter(folder)
        defer { withExtendedLifetime(reader) {} }  // the first reader keeps the row cached in the coordinator
        try touchInAnotherProcess(folder, loaded)

        let byName = ManagedObjectContext(coordinator: coordinator)
        let found = try byName.fetch(FetchRequest(entityName: "Counter", predicate: try FetchPredicate(format: "writer == 'shared'")))
        #expect(found.first?.value(forKey: "touches") as? Int64 == 1, "a new fetch shows the store's current row, not the cached one")

        let byNewValue = ManagedObjectContext(coordinator: coordinator)
        let matched = try byNewValue.fetch(FetchRequest(entityName: "Counter", predicate: try FetchPredicate(format: "touches == 1")))
        #expect(matched.count == 1)
        #expect(matched.first?.value(forKey: "touches") as? Int64 == 1, "an object matched on a value shows that value")

        let unfaulted = ManagedObjectContext(coordinator: coordinator)
        let rows = try unfaulted.fetch(FetchRequest(entityName: "Counter").with { $0.returnsObjectsAsFaults = false })
        #expect(rows.first?.value(forKey: "touches") as? Int64 == 1)
    }

    @Test func aFetchRefreshesARegisteredObjectWithoutChanges() throws {
        let folder = StoreFolder()
        let (_, reader, loaded) = try storeWithLoadedCounter(folder)
        try touchInAnotherProcess(folder, loaded)
        #expect(loaded.value(forKey: "touches") as? Int64 == 0, "nothing changes under an object until it is fetched again")

        let again = try reader.fetch(FetchRequest(entityName: "Counter"))
        #expect(again.first === loaded, "the context keeps one object per ID")
        #expect(loaded.value(forKey: "touches") as? Int64 == 1, "the fetch brought the object up to the store's row")
        #expect(!loaded.hasChanges)

        try touchInAnotherProcess(folder, loaded)
        _ = try reader.fetch(FetchRequest(entityName: "Counter").with { $0.returnsObjectsAsFaults = false })
        #expect(loaded.value(forKey: "touches") as? Int64 == 2, "also when the fetch hands over rows")
    }

    @Test func aContextsOwnSaveLeavesWhatItSavedLoaded() throws {
        let folder = StoreFolder()
        let (_, reader, loaded) = try storeWithLoadedCounter(folder)
        try loaded.setValue(Int64(3), forKey: "batch")
        try reader.save()
        _ = try reader.fetch(FetchRequest(entityName: "Counter"))
        #expect(!loaded.isFault, "only this process saved: the cached row is the saved one, nothing to reload")
        #expect(loaded.value(forKey: "batch") as? Int64 == 3)

        try touchInAnotherProcess(folder, loaded)
        _ = try reader.fetch(FetchRequest(entityName: "Counter"))
        #expect(loaded.value(forKey: "touches") as? Int64 == 1 && loaded.value(forKey: "batch") as? Int64 == 3,
                "another process's save is still picked up after one of this context's own")
    }

    @Test func aFetchKeepsUnsavedChangesAndTheSaveStillConflicts() throws {
        let folder = StoreFolder()
        let (_, reader, loaded) = try storeWithLoadedCounter(folder)
        try loaded.setValue(Int64(7), forKey: "batch")
        try touchInAnotherProcess(folder, loaded)

        _ = try reader.fetch(FetchRequest(entityName: "Counter"))
        #expect(loaded.value(forKey: "batch") as? Int64 == 7, "a fetch never throws away unsaved changes")
        #expect(loaded.hasChanges)
        #expect(throws: ManagedObjectContextError.self, "the save meets the other process's change as a conflict") { try reader.save() }
    }
}
