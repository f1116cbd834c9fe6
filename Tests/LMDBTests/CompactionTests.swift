import Foundation
@testable import LMDB
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// `Environment.compact(at:options:)`: a store rewritten in place without its free pages.
@Suite struct CompactionTests {
    let directory = TemporaryDirectory()

    /// Fills `path` with `count` entries in "shared", then deletes every fifth one kept, in several transactions, so
    /// the file holds many free pages; ends on an even transaction number (see the waiting-process test). Returns
    /// the entries left and the last transaction's number.
    private func makeStoreWithFreePages(_ path: String, options: Environment.Options = Environment.Options(),
                                        count: Int = 4_000) throws -> (entries: [[UInt8]: [UInt8]], transaction: Int) {
        let environment = try Environment.open(at: path, options: options)
        let db = try environment.openDatabase(named: "shared")
        var entries: [[UInt8]: [UInt8]] = [:]
        for batch in 0..<8 {
            try environment.write { transaction in
                for n in stride(from: batch, to: count, by: 8) {
                    let key = [UInt8](utf8: "key-\(n)"), value = [UInt8](repeating: UInt8(n % 251), count: 300)
                    try db.put(value, forKey: key, in: transaction)
                    entries[key] = value
                }
            }
        }
        for batch in 0..<4 {
            try environment.write { transaction in
                for n in stride(from: batch, to: count, by: 4) where n % 5 != 0 {
                    _ = try db.delete(key: [UInt8](utf8: "key-\(n)"), in: transaction)
                    entries[[UInt8](utf8: "key-\(n)")] = nil
                }
            }
        }
        if try environment.info().lastTransactionID % 2 == 1 {
            try environment.write { try db.put([1], forKey: [UInt8](utf8: "parity"), in: $0) }
            entries[[UInt8](utf8: "parity")] = [1]
        }
        #expect(try environment.freePageCount() > 100)
        return (entries, try environment.info().lastTransactionID)
    }

    private func contents(of environment: Environment) throws -> [[UInt8]: [UInt8]] {
        let db = try environment.openDatabase(named: "shared")
        return try environment.read { transaction in
            var found: [[UInt8]: [UInt8]] = [:]
            try db.withCursor(in: transaction) { cursor in
                var entry = try cursor.first()
                while let current = entry {
                    found[current.keyBytes] = current.valueBytes
                    entry = try cursor.next()
                }
            }
            return found
        }
    }

    @Test func leavesFreePagesOutKeepsEveryEntryAndTheTransactionNumbers() throws {
        let path = directory.file("store.lmdb")
        let (entries, transaction) = try makeStoreWithFreePages(path)
        let compaction = try Environment.compact(at: path)
        #expect(compaction.bytesAfter < compaction.bytesBefore / 2, "\(compaction)")
        #expect(StoreFile.size(of: path) == compaction.bytesAfter)
        #expect(!FileManager.default.fileExists(atPath: path + ".compacting"))

        do {
            let environment = try Environment.open(at: path)
            #expect(try contents(of: environment) == entries)
            #expect(try environment.freePageCount() == 0)
            #expect(try environment.info().lastTransactionID == transaction)
            #expect(try environment.checkPages() == [])
            let db = try environment.openDatabase(named: "shared")
            try environment.write { try db.put([7], forKey: [UInt8](utf8: "after"), in: $0) }
        }
        let environment = try Environment.open(at: path)
        var expected = entries
        expected[[UInt8](utf8: "after")] = [7]
        #expect(try contents(of: environment) == expected)
        #expect(try environment.info().lastTransactionID == transaction + 1)
    }

    @Test func aDirectoryStoreIsCompactedInPlace() throws {
        let path = directory.file("folder-store")
        let options = Environment.Options { $0.layout = .directory }
        let (entries, _) = try makeStoreWithFreePages(path, options: options)
        let asAFile = #expect(throws: LMDBError.self) { try Environment.compact(at: path) }
        #expect(asAFile == .invalidArgument)
        #expect(asAFile?.message?.contains("directory layout") == true)
        let compaction = try Environment.compact(at: path, options: options)
        #expect(compaction.bytesAfter < compaction.bytesBefore / 2)
        #expect(try contents(of: Environment.open(at: path, options: options)) == entries)
    }

    /// A process opening the store during the compaction waits for LMDB's lock, then opens the new file without
    /// rereading the lock file: the copy must continue the old file's transaction numbers (the store ends on an
    /// even one, so a copy numbered from 1 would show that process the empty meta page 0).
    @Test func aProcessThatWaitedOpensTheCompactedFileAndItsWritesStay() throws {
        let path = directory.file("store.lmdb")
        let (entries, _) = try makeStoreWithFreePages(path)
        let child = Process()
        child.executableURL = URL(fileURLWithPath: try testHelperPath())
        child.arguments = ["write", path, "child", "20"]
        let output = Pipe()
        child.standardOutput = output
        child.standardError = output
        _ = try Environment.compact(at: path, options: Environment.Options()) {
            try child.run()
            usleep(700_000)  // The child is started and waits for the lock.
            #expect(child.isRunning)
        }
        child.waitUntilExit()
        let said = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(child.terminationStatus == 0, "helper said: \(said)")

        let environment = try Environment.open(at: path)
        var expected = entries
        for n in 0..<20 { expected[[UInt8](utf8: "child-\(n)")] = Array(String(n).utf8) }
        #expect(try contents(of: environment) == expected)
        #expect(try environment.checkPages() == [])
    }

    /// An open in this process while the compaction runs waits for it, then opens the compacted file.
    @Test func anOpenInThisProcessMeanwhileWaitsAndOpensTheCompactedFile() throws {
        let path = directory.file("store.lmdb")
        let (entries, transaction) = try makeStoreWithFreePages(path)
        let opened = Locked<Environment?>(nil)
        let done = DispatchSemaphore(value: 0)
        let compaction = try Environment.compact(at: path, options: Environment.Options()) {
            Thread.detachNewThread {
                let environment = try? Environment.open(at: path)
                opened.withLock { $0 = environment }
                done.signal()
            }
            usleep(300_000)
            #expect(opened.withLock { $0 } == nil)
        }
        done.wait()
        let environment = try #require(opened.withLock { $0 })
        #expect(StoreFile.size(of: environment.dataPath) == compaction.bytesAfter)
        #expect(try contents(of: environment) == entries)
        #expect(try environment.info().lastTransactionID == transaction)
        let db = try environment.openDatabase(named: "shared")
        try environment.write { try db.put([9], forKey: [UInt8](utf8: "meanwhile"), in: $0) }
    }

    /// A compaction killed at any moment leaves the old file or the new one, whole: the store opens with every
    /// entry, and the next compaction clears the copy a killed one left.
    @Test func aCompactionKilledAtAnyMomentLeavesTheStoreWhole() throws {
        let path = directory.file("store.lmdb")
        let (entries, _) = try makeStoreWithFreePages(path, count: 12_000)
        var generator = SystemRandomNumberGenerator()
        var killedMidway = 0
        for _ in 0..<12 {
            let child = Process()
            child.executableURL = URL(fileURLWithPath: try testHelperPath())
            child.arguments = ["compact", path, "1000"]
            let output = Pipe()
            child.standardOutput = output
            try child.run()
            var line: [UInt8] = []
            while let byte = try output.fileHandleForReading.read(upToCount: 1)?.first, byte != UInt8(ascii: "\n") { line.append(byte) }
            usleep(UInt32.random(in: 1_000...60_000, using: &generator))
            kill(child.processIdentifier, SIGKILL)
            child.waitUntilExit()
            if child.terminationReason == .uncaughtSignal { killedMidway += 1 }
            let environment = try Environment.open(at: path)
            #expect(try contents(of: environment) == entries)
            #expect(try environment.checkPages() == [])
        }
        #expect(killedMidway > 0)
        _ = try Environment.compact(at: path)
        #expect(!FileManager.default.fileExists(atPath: path + ".compacting"))
        #expect(try contents(of: Environment.open(at: path)) == entries)
    }

    @Test func refusesAStoreOpenInThisProcess() throws {
        let path = directory.file("store.lmdb")
        let (entries, _) = try makeStoreWithFreePages(path)
        let environment = try Environment.open(at: path)
        let size = StoreFile.size(of: path)
        let error = #expect(throws: LMDBError.self) { try Environment.compact(at: path) }
        #expect(error == .busy)
        #expect(error?.message?.contains("open in this process") == true)
        #expect(StoreFile.size(of: path) == size)
        #expect(try contents(of: environment) == entries)
    }

    @Test func refusesAStoreAnotherProcessHasOpen() throws {
        let path = directory.file("store.lmdb")
        let (entries, _) = try makeStoreWithFreePages(path)
        let size = StoreFile.size(of: path)
        let child = Process()
        child.executableURL = URL(fileURLWithPath: try testHelperPath())
        child.arguments = ["read-concurrently", path, "1", "2"]
        let output = Pipe()
        child.standardOutput = output
        try child.run()
        defer { if child.isRunning { child.terminate() } }
        var line: [UInt8] = []
        while let byte = try output.fileHandleForReading.read(upToCount: 1)?.first, byte != UInt8(ascii: "\n") { line.append(byte) }
        #expect(String(decoding: line, as: UTF8.self).hasPrefix("ready"))

        let error = #expect(throws: LMDBError.self) { try Environment.compact(at: path) }
        #expect(error == .busy)
        #expect(error?.message?.contains("another process") == true)
        #expect(StoreFile.size(of: path) == size)
        #expect(!FileManager.default.fileExists(atPath: path + ".compacting"))
        child.waitUntilExit()
        #expect(try contents(of: Environment.open(at: path)) == entries)
    }

    @Test func refusesWhatIsNotASoundStoreAndLeavesItAlone() throws {
        let missing = directory.file("missing.lmdb")
        #expect(throws: LMDBError.noSuchFile) { try Environment.compact(at: missing) }
        #expect(!FileManager.default.fileExists(atPath: missing))

        let foreign = directory.file("notes.txt")
        let text = Data(repeating: 0x41, count: 20_000)
        try text.write(to: URL(fileURLWithPath: foreign))
        #expect(throws: LMDBError.invalid) { try Environment.compact(at: foreign) }
        #expect(try Data(contentsOf: URL(fileURLWithPath: foreign)) == text)
        #expect(!FileManager.default.fileExists(atPath: foreign + ".compacting"))
        #expect(!FileManager.default.fileExists(atPath: foreign + "-lock"))
    }

    @Test func refusesAFileWithOtherHardLinks() throws {
        let path = directory.file("store.lmdb")
        _ = try makeStoreWithFreePages(path, count: 400)
        let size = StoreFile.size(of: path)
        #expect(link(path, directory.file("other-name.lmdb")) == 0)
        let error = #expect(throws: LMDBError.self) { try Environment.compact(at: path) }
        #expect(error == .incompatible)
        #expect(error?.message?.contains("hard links") == true)
        #expect(StoreFile.size(of: path) == size)
    }

    @Test func aCopyLeftByACrashedCompactionIsReplacedAndAMissingLockFileMade() throws {
        let path = directory.file("store.lmdb")
        let (entries, transaction) = try makeStoreWithFreePages(path, count: 1_000)
        try Data("half a copy".utf8).write(to: URL(fileURLWithPath: path + ".compacting"))
        #expect(unlink(path + "-lock") == 0)
        _ = try Environment.compact(at: path)
        #expect(!FileManager.default.fileExists(atPath: path + ".compacting"))
        let environment = try Environment.open(at: path)
        #expect(try contents(of: environment) == entries)
        #expect(try environment.info().lastTransactionID == transaction)
    }
}
