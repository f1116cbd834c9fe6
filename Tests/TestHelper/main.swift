// A second OS process for the tests: writes to a store while the test process does, or gets killed mid-write.
//
//   lmdbstore-test-helper write <path> <prefix> <count>
//     Opens the single-file store at <path> and commits <count> write transactions, each putting
//     "<prefix>-<n>" → "<n>" into the database "shared". Prints "done <count>" and exits 0.
//
//   lmdbstore-test-helper journal <path> <writer> <batches> <batch size>
//     Opens the LMDB object store at <path> (journalModel) and saves <batches> batches: each save inserts
//     <batch size> entries of the next batch number and sets the writer's counter to it. Prints "done" at the end.
//
//   lmdbstore-test-helper touch <path> <object URI>
//     Increments the "touches" of one counter object and saves.
//
//   lmdbstore-test-helper batch <path>
//     Runs batch requests on the LMDB object store at <path> (journalModel): inserts entries 0…4 of writer "child",
//     sets the payload of writer "batch"'s entries below batch 10 to "updated", deletes its entries from batch 20 on.
//     Prints "done".
//
//   lmdbstore-test-helper migrate <path> <rows per transaction>
//     Opens the LMDB object store at <path>, written with migrationModel(version: 1), with version 2 and automatic
//     lightweight migration, <rows per transaction> rows a write. Prints "opening" just before it opens the store and
//     "done" once it is open.
//
//   lmdbstore-test-helper crash <path> <acknowledgements> <writer> <first operation> [<durability>]
//     Opens the LMDB object store at <path> (CrashWorkload.model; the store option "durability", full unless
//     given) and performs <writer>'s operations from <first operation> on, the state before it replayed in memory;
//     appends each operation's number to the file <acknowledgements> (and syncs it) once its save or batch request
//     has returned. Runs until killed.
//
//   lmdbstore-test-helper hostile <case> <folder>
//     Runs one case of HostileCases (bad input from a hostile trial) in a fresh folder; prints "ok: …" and exits 0
//     when the outcome is the documented one, "wrong: …" and exits 1 when not.
//
//   lmdbstore-test-helper compact <path> <times>
//     Compacts the single-file store at <path> in place <times> times over (for a test that kills it meanwhile).
//     Prints "compacting" first and "done" at the end.
//
//   lmdbstore-test-helper read-concurrently <path> <threads> <idle seconds>
//     Opens the single-file store at <path>, holds <threads> read transactions open at once, then prints
//     "ready <n>" (the reader slots this process holds once they are done), stays idle, prints "idle <n>" and exits.
import Foundation
import LMDB
import LMDBStore
import ObjectGraph

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

func fail(_ message: String) -> Never {
    let bytes = Array("lmdbstore-test-helper: \(message)\n".utf8)
    _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    exit(2)
}

/// Prints a line at once (unbuffered), for a test that reads it while this process goes on.
func say(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
}

let arguments = CommandLine.arguments
guard arguments.count >= 2 else { fail("usage: lmdbstore-test-helper write <path> <prefix> <count>") }

switch arguments[1] {
case "write":
    guard arguments.count == 5, let count = Int(arguments[4]) else { fail("usage: write <path> <prefix> <count>") }
    let path = arguments[2], prefix = arguments[3]
    do {
        let environment = try Environment.open(at: path)
        let database = try environment.openDatabase(named: "shared")
        for n in 0..<count {
            try environment.write { transaction in
                try database.put(Array(String(n).utf8), forKey: Array("\(prefix)-\(n)".utf8), in: transaction)
            }
        }
        print("done \(count)")
    } catch {
        fail("\(error)")
    }
case "journal":
    guard arguments.count == 6, let batches = Int(arguments[4]), let size = Int(arguments[5]) else {
        fail("usage: journal <path> <writer> <batches> <batch size>")
    }
    do {
        LMDBIncrementalStore.register()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: journalModel())
        try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: URL(fileURLWithPath: arguments[2]))
        let writer = arguments[3]
        let context = ManagedObjectContext(coordinator: coordinator)
        let existing = try context.fetch(FetchRequest(entityName: "Counter", predicate: try FetchPredicate(format: "writer == %@", writer)))
        var counter = try existing.first ?? {
            let counter = try context.insertNewObject(forEntityName: "Counter")
            try counter.setValue(writer, forKey: "writer")
            return counter
        }()
        let start = (counter.value(forKey: "batch") as? Int64 ?? -1) + 1
        for batch in start..<start + Int64(batches) {
            for n in 0..<size {
                let entry = try context.insertNewObject(forEntityName: "Entry")
                try entry.setValue(writer, forKey: "writer")
                try entry.setValue(batch, forKey: "batch")
                try entry.setValue(String(repeating: "x", count: 20 + n % 50), forKey: "payload")
            }
            try counter.setValue(batch, forKey: "batch")
            try context.save()
            context.reset()
            counter = context.object(with: counter.objectID)
        }
        print("done")
    } catch {
        fail("\(error)")
    }
case "migrate":
    guard arguments.count == 4, let batch = Int(arguments[3]) else { fail("usage: migrate <path> <rows per transaction>") }
    do {
        LMDBIncrementalStore.register()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: migrationModel(version: 2))
        let options = LMDBIncrementalStore.Options(migratesAutomatically: true, infersMappingModel: true, migrationBatchSize: batch)
        say("opening")
        try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: URL(fileURLWithPath: arguments[2]), options: options.dictionary)
        say("done")
    } catch {
        fail("\(error)")
    }
case "crash":
    guard arguments.count == 6 || arguments.count == 7, let first = Int(arguments[5]), first >= 1 else {
        fail("usage: crash <path> <acknowledgements> <writer> <first operation> [<durability>]")
    }
    let writer = arguments[4]
    do {
        LMDBIncrementalStore.register()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: CrashWorkload.model)
        try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: URL(fileURLWithPath: arguments[2]),
                                           options: ["durability": arguments.count == 7 ? arguments[6] : "full"])
        let acknowledgements = open(arguments[3], O_WRONLY | O_APPEND | O_CREAT, 0o644)
        guard acknowledgements >= 0 else { fail("cannot open \(arguments[3])") }
        var state = CrashWorkload.replay(first - 1, writer: writer)
        for number in first... {
            let operation = CrashWorkload.operation(number, writer: writer, after: state)
            try CrashWorkload.perform(operation, coordinator: coordinator, writer: writer)
            CrashWorkload.apply(operation, to: &state)
            let line = Array("\(number)\n".utf8)
            guard line.withUnsafeBytes({ write(acknowledgements, $0.baseAddress, $0.count) }) == line.count, fsync(acknowledgements) == 0 else {
                fail("cannot write \(arguments[3])")
            }
        }
    } catch {
        fail("\(error)")
    }
case "touch":
    guard arguments.count == 4, let uri = URL(string: arguments[3]) else { fail("usage: touch <path> <object URI>") }
    do {
        LMDBIncrementalStore.register()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: journalModel())
        try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: URL(fileURLWithPath: arguments[2]))
        let context = ManagedObjectContext(coordinator: coordinator)
        let counter = try context.existingObject(with: try coordinator.managedObjectID(forURIRepresentation: uri))
        try counter.setValue((counter.value(forKey: "touches") as? Int64 ?? 0) + 1, forKey: "touches")
        try context.save()
        print("done")
    } catch {
        fail("\(error)")
    }
case "batch":
    guard arguments.count == 3 else { fail("usage: batch <path>") }
    do {
        LMDBIncrementalStore.register()
        let coordinator = PersistentStoreCoordinator(managedObjectModel: journalModel())
        try coordinator.addPersistentStore(type: LMDBIncrementalStore.storeType, at: URL(fileURLWithPath: arguments[2]))
        let context = ManagedObjectContext(coordinator: coordinator)
        let rows: [[String: BatchValue]] = (0..<5).map { ["writer": "child", "batch": .attribute(.integer(Int64($0))), "payload": "c"] }
        _ = try context.execute(BatchInsertRequest(entityName: "Entry", objects: rows))
        _ = try context.execute(BatchUpdateRequest(entityName: "Entry", predicate: try FetchPredicate(format: "writer == 'batch' AND batch < 10"),
                                                   propertiesToUpdate: ["payload": .constant(.string("updated"))]))
        _ = try context.execute(BatchDeleteRequest(fetchRequest: FetchRequest(entityName: "Entry",
                                                                              predicate: try FetchPredicate(format: "writer == 'batch' AND batch >= 20"))))
        print("done")
    } catch {
        fail("\(error)")
    }
case "read-concurrently":
    guard arguments.count == 5, let threads = Int(arguments[3]), let idle = Double(arguments[4]) else {
        fail("usage: read-concurrently <path> <threads> <idle seconds>")
    }
    do {
        let environment = try Environment.open(at: arguments[2])
        func slotsHeld() -> Int { environment.readerSlots().filter { $0.processID == getpid() }.count }
        let allOpen = DispatchGroup()
        let release = DispatchSemaphore(value: 0)
        let finished = DispatchGroup()
        let failures = Locked(0)
        for _ in 0..<threads {
            allOpen.enter()
            finished.enter()
            Thread.detachNewThread {
                do {
                    try environment.read { _ in
                        allOpen.leave()
                        release.wait()
                    }
                } catch {
                    failures.add()
                    allOpen.leave()
                }
                finished.leave()
            }
        }
        allOpen.wait()
        for _ in 0..<threads { release.signal() }
        finished.wait()
        guard failures.value == 0 else { fail("\(failures.value) reads failed") }
        say("ready \(slotsHeld())")
        usleep(UInt32(idle * 1_000_000))
        say("idle \(slotsHeld())")
    } catch {
        fail("\(error)")
    }
case "hostile":
    guard arguments.count == 4 else { fail("usage: hostile <case> <folder>") }
    HostileCases.run(arguments[2], folder: URL(fileURLWithPath: arguments[3]))
case "compact":
    guard arguments.count == 4, let times = Int(arguments[3]) else { fail("usage: compact <path> <times>") }
    do {
        say("compacting")
        for _ in 0..<times { _ = try Environment.compact(at: arguments[2]) }
        say("done")
    } catch {
        fail("\(error)")
    }
default:
    fail("unknown command \(arguments[1])")
}

/// A counter shared between threads.
final class Locked: @unchecked Sendable {
    private let lock = NSLock()
    private var count: Int
    init(_ count: Int) { self.count = count }
    func add() { lock.withLock { count += 1 } }
    var value: Int { lock.withLock { count } }
}
