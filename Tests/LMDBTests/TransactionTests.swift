import Foundation
import LMDB
import Testing

@Suite struct TransactionTests {
    let directory = TemporaryDirectory()

    struct Abandon: Error {}

    @Test func aThrowingWriteBodyCommitsNothing() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        try environment.write { try db.put([1], forKey: [UInt8](utf8: "kept"), in: $0) }
        #expect(throws: Abandon.self) {
            try environment.write { txn throws in
                try db.put([2], forKey: [UInt8](utf8: "kept"), in: txn)
                try db.put([3], forKey: [UInt8](utf8: "new"), in: txn)
                try db.delete(key: [UInt8](utf8: "kept"), in: txn)
                throw Abandon()
            }
        }
        try environment.read { txn throws in
            #expect(try db.value(forKey: [UInt8](utf8: "kept"), in: txn) == [1])
            #expect(try db.value(forKey: [UInt8](utf8: "new"), in: txn) == nil)
        }
    }

    /// The begin/end pair the store's key-value seam reads with: a snapshot until it ends, its handle pooled and
    /// reused afterwards, and the transaction dead once ended.
    @Test func aReadBegunAndEndedByHandSeesItsSnapshotUntilItEnds() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        try environment.write { try db.put([1], forKey: [1], in: $0) }
        for round in 0..<3 {
            let reader = try environment.beginRead()
            #expect(reader.isReadOnly && reader.isActive)
            try environment.write { try db.put([UInt8(round + 2)], forKey: [1], in: $0) }
            #expect(try db.value(forKey: [1], in: reader) == [UInt8(round + 1)], "the reader keeps the snapshot it began with")
            reader.endRead()
            #expect(!reader.isActive)
        }
        try environment.read { txn throws in #expect(try db.value(forKey: [1], in: txn) == [4]) }
    }

    @Test func writeReturnsTheBodysResultAndReadsSeeTheCommit() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        let id = try environment.write { txn throws in
            try db.put([1], forKey: [1], in: txn)
            return txn.id
        }
        #expect(try environment.info().lastTransactionID == id)
        try environment.read { txn throws in #expect(try db.value(forKey: [1], in: txn) == [1]) }
    }

    @Test func aNestedWriteOnTheSameThreadIsRejectedInsteadOfDeadlocking() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        try environment.write { outer throws in
            try db.put([1], forKey: [1], in: outer)
            do {
                try environment.write { inner throws in try db.put([2], forKey: [2], in: inner) }
                Issue.record("a nested write transaction was allowed")
            } catch let error as LMDBError {
                #expect(error == .wouldDeadlock)
                #expect(error.description.contains("already open on this thread"))
            }
        }
        try environment.read { txn throws in
            #expect(try db.value(forKey: [1], in: txn) == [1])
            #expect(try db.value(forKey: [2], in: txn) == nil)
        }
    }

    @Test func aReadInsideAWriteSeesOnlyCommittedData() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        try environment.write { txn throws in
            try db.put([1], forKey: [1], in: txn)
            let seenFromRead = try environment.read { try db.value(forKey: [1], in: $0) }
            #expect(seenFromRead == nil)
        }
    }

    @Test func reusedReadTransactionsSeeEachNewCommit() throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "counter")
        for n: UInt8 in 0..<50 {
            try environment.write { try db.put([n], forKey: [0], in: $0) }
            let seen = try environment.read { try db.value(forKey: [0], in: $0) }
            #expect(seen == [n])
        }
    }

    @Test func aReadSnapshotIgnoresLaterCommits() async throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        try environment.write { try db.put([1], forKey: [0], in: $0) }
        try environment.read { txn throws in
            let writer = Thread { try? environment.write { try db.put([2], forKey: [0], in: $0) } }
            writer.start()
            while try environment.read({ try db.value(forKey: [0], in: $0) }) != [2] { usleep(1000) }
            #expect(try db.value(forKey: [0], in: txn) == [1])
        }
    }

    @Test func manyThreadsReadWhileOneWrites() async throws {
        let environment = try directory.openStore()
        let db = try environment.openDatabase(named: "d")
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for n in UInt16(0)..<300 { try environment.write { try db.put(bigEndianKey(n), forKey: bigEndianKey(n), in: $0) } }
            }
            for _ in 0..<4 {
                group.addTask {
                    for _ in 0..<300 {
                        try environment.read { txn throws in
                            // Every snapshot holds a prefix 0..<k of the keys, each mapped to itself.
                            let stats = try db.statistics(in: txn)
                            if stats.entries > 0 {
                                let last = bigEndianKey(UInt16(stats.entries - 1))
                                #expect(try db.value(forKey: last, in: txn) == last)
                            }
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        try environment.read { txn throws in #expect(try db.statistics(in: txn).entries == 300) }
    }

    @Test func writingToAReadOnlyStoreIsRefused() throws {
        let path = directory.file("ro.lmdb")
        do {
            let environment = try Environment.open(at: path)
            _ = try environment.openDatabase(named: "d")
        }
        let readOnly = try Environment.open(at: path, options: .init { $0.isReadOnly = true })
        #expect(throws: LMDBError.permissionDenied) { try readOnly.write { _ in } }
        let db = try readOnly.openDatabase(named: "d")
        try readOnly.read { txn throws in #expect(try db.statistics(in: txn).entries == 0) }
    }

    @Test func usingATransactionAfterItsClosureIsAPreconditionFailure() async {
        await #expect(processExitsWith: .failure) {
            let directory = TemporaryDirectory()
            let environment = try Environment.open(at: directory.file("escape.lmdb"))
            // The trap ends the process before `directory` is removed; an open file outlives its name.
            try FileManager.default.removeItem(atPath: directory.path)
            var escaped: Transaction?
            try environment.read { escaped = $0 }
            _ = escaped?.id
        }
    }

    @Test func usingACursorAfterItsClosureIsAPreconditionFailure() async {
        await #expect(processExitsWith: .failure) {
            let directory = TemporaryDirectory()
            let environment = try Environment.open(at: directory.file("escape.lmdb"))
            let db = try environment.openDatabase(named: "d")
            try FileManager.default.removeItem(atPath: directory.path)
            var escaped: Cursor?
            try environment.read { txn throws in try db.withCursor(in: txn) { escaped = $0 } }
            _ = try escaped?.first()
        }
    }
}
